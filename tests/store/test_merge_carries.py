"""`engine merge` carries the rest: the explanations and verifications of the runs it
copies (and of those the target holds already), and the studies grouping their experiments;
once only, with the merge's own refusals, all or nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.__main__ import main
from store import RunStore, connect
from store.merge import MergeRefused, merge_stores
from tests.store.test_export_merge import add_run, digest, rows
from tests.support.helpers import copy_store

ALL = {  # table -> its rows in a canonical order, for comparing stores
    "explanations": "SELECT * EXCLUDE (created_utc) FROM explanations ORDER BY ALL",
    "verifications": "SELECT * EXCLUDE (created_utc) FROM verifications ORDER BY ALL",
    "studies": "SELECT name, axes_json FROM studies ORDER BY ALL",
    "study_experiments": "SELECT * FROM study_experiments ORDER BY ALL",
}


def explain(db: Path, run_id: str, item_id: str, *, model: str = "org/model", prompt: str = "Prompt 5",
            text: str = "I cited [2] as it was written by a woman.") -> None:
    from engine.judges.explain import mentioned_documents, mentioned_labels
    from engine.types import Explanation
    from store.explanation_store import ExplanationStore

    ExplanationStore(db, timeout_s=10).write_batch([Explanation(
        run_id, item_id, model, prompt, text, 7, "stop", (), mentioned_documents(text, 2),
        mentioned_labels(text, "a woman", "a man", "gender"))])


def verify(db: Path, run_id: str, item_id: str, raw: str, *, judge: str = "judge/j", prompt: str = "claim") -> None:
    from engine.judges.verify import parse_class
    from engine.types import Verification
    from store.verification_store import VerificationStore

    VerificationStore(db, timeout_s=10).write_batch([Verification(
        run_id, item_id, 0, 2, f"{item_id}-d2", judge, prompt, raw, parse_class(raw), 0.5, 0.25, 0.25)])


def study(db: Path, name: str, experiments: list[str], axes: dict | None = None) -> None:
    writer = RunStore(db, timeout_s=10)
    for position, experiment in enumerate(experiments):
        writer.record_study(name, axes or {"metadata": ["gender"]}, experiment, position)


def table(db: Path, name: str, where: str = "") -> list[tuple]:
    sql = ALL[name]
    if where:
        sql = sql.replace(" ORDER BY", f" WHERE {where} ORDER BY")
    return rows(db, sql)


@pytest.fixture
def two(two_built, tmp_path):
    """The module's two stores, copied: each test merges its own."""
    return tuple(copy_store(built, tmp_path / built.name) for built in two_built)


@pytest.fixture(scope="module")
def two_built(tmp_path_factory):
    """A target holding run t-base (one explanation of it), and a source with t-base too, a new
    complete experiment, a failed run, their explanations and verifications, and two studies."""
    tmp_path = tmp_path_factory.mktemp("two")
    target, source = tmp_path / "target.duckdb", tmp_path / "source.duckdb"
    add_run(target, "t-base", "exp-t", "base")
    explain(target, "t-base", "q1")
    for db in (source,):
        add_run(db, "t-base", "exp-t", "base")
        add_run(db, "s-van", "exp-s", "vanilla")
        add_run(db, "s-base", "exp-s", "base")
        add_run(db, "s-cf", "exp-s", "cf", status="failed")
        add_run(db, "u-base", "exp-u", "base", status="running")
    explain(source, "t-base", "q0")  # of a run the target holds already: comes along
    explain(source, "t-base", "q1")  # the target has this one: kept, not doubled
    explain(source, "s-base", "q0")
    explain(source, "s-base", "q0", model="other/explainer", text="Document [1] holds it.")
    explain(source, "s-cf", "q0")  # of a failed run: stays behind with it
    verify(source, "s-base", "q0", "Attributable.")
    verify(source, "s-base", "q1", "contradictory")
    verify(source, "t-base", "q2", "no idea")
    study(source, "grid", ["exp-s", "exp-t"], {"metadata": ["gender"], "top_k": [2, 3]})
    study(source, "later", ["exp-u"])  # its one experiment holds no complete run: not copied
    return target, source


def test_explanations_verifications_and_studies_come_along_once(two, capsys):
    target, source = two
    before = digest(source)
    assert main(["merge", "--from", str(source), "--db", str(target)]) == 0
    out = capsys.readouterr().out
    assert ("also copied: 3 explanations, 3 verifications, 1 study new, 2 study memberships new\n") in out
    carried = "run_id IN ('t-base', 's-van', 's-base')"
    assert table(target, "explanations") == table(source, "explanations", carried)
    assert table(target, "verifications") == table(source, "verifications")
    assert table(target, "studies") == table(source, "studies", "name = 'grid'")
    assert table(target, "study_experiments") == [("grid", "exp-s", 0), ("grid", "exp-t", 1)]
    # The views read the copies as the source's.
    for view in ("explanation_rates", "verification_shares", "explanation_mentions"):
        assert rows(target, f"SELECT * FROM {view} ORDER BY ALL") == rows(
            source, f"SELECT * FROM {view} WHERE {carried} ORDER BY ALL")
    # `report --study` and `list --studies` see the merged study.
    assert main(["list", "--studies", "--db", str(target)]) == 0
    assert "grid" in capsys.readouterr().out
    assert digest(source) == before

    # Again: nothing new, and nothing said about it.
    counts = {name: table(target, name) for name in ALL}
    result = merge_stores(target, source)
    assert (result.merged, result.n_explanations, result.n_verifications, result.n_studies_new,
            result.n_study_experiments, result.n_left_out) == ((), 0, 0, 0, 0, 0)
    assert {name: table(target, name) for name in ALL} == counts
    assert main(["merge", "--from", str(source), "--db", str(target)]) == 0
    assert "also copied" not in capsys.readouterr().out


def test_an_explanation_held_with_another_prompt_refuses_the_merge(two):
    target, source = two
    explain(target, "t-base", "q0", prompt="Prompt 5, an older wording")
    verify(target, "t-base", "q2", "no idea", prompt="another claim")
    before = digest(target)
    with pytest.raises(MergeRefused) as refused:
        merge_stores(target, source)
    assert str(refused.value) == (
        "merge refused, nothing written: run t-base: the explanation of item 'q0' by org/model exists in the target "
        "with another prompt; run t-base: the verification of item 'q2', sentence 0, document [2] by judge/j exists "
        "in the target with another prompt")
    assert digest(target) == before


def test_what_explains_an_answer_the_target_holds_otherwise_is_left_out(two, capsys):
    target, source = two
    with connect(target) as conn:  # the target's t-base answered q0 otherwise
        conn.execute("UPDATE generations SET answer = 'Someone else [1].' WHERE run_id = 't-base' AND item_id = 'q0'")
    result = merge_stores(target, source)
    assert (result.n_explanations, result.n_verifications, result.n_left_out) == (2, 3, 1)
    assert rows(target, "SELECT count(*) FROM explanations WHERE run_id = 't-base' AND item_id = 'q0'") == [(0,)]


def test_a_study_the_target_has_keeps_its_axes_and_gains_the_memberships(two):
    target, source = two
    study(target, "grid", ["exp-t"], {"model": ["mine"]})
    result = merge_stores(target, source)
    assert (result.n_studies_new, result.n_study_experiments) == (0, 1)
    assert table(target, "studies") == [("grid", '{"model": ["mine"]}')]
    assert table(target, "study_experiments") == [("grid", "exp-s", 0), ("grid", "exp-t", 0)]


def test_a_moved_run_brings_its_explanations_but_leaves_its_study(tmp_path):
    target, source = tmp_path / "t.duckdb", tmp_path / "s.duckdb"
    add_run(target, "t-cf", "shared", "cf")
    add_run(source, "s-cf", "shared", "cf")  # its mode is taken in `shared`: it moves to shared~s-cf
    explain(source, "s-cf", "q0")
    study(source, "grid", ["shared"])
    result = merge_stores(target, source)
    assert result.moved[0].to_experiment == "shared~s-cf"
    assert (result.n_explanations, result.n_studies_new, result.n_study_experiments) == (1, 0, 0)
    assert rows(target, "SELECT run_id FROM explanations") == [("s-cf",)]
