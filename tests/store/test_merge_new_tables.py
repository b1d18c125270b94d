"""`engine merge` and the tables of document_use comes along with its runs, for the
answers the target holds as the source does, once only; a study's fitted label effects
(study_label_effects) never do, and the output names the studies to refit. And every table of
the store is either carried by merge or named here as deliberately not carried."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.__main__ import main
from store import connect
from store.merge import merge_stores
from tests.store.test_export_merge import add_run, rows
from tests.store.test_merge_carries import study
from tests.support.helpers import copy_store, digest

USE = "SELECT * EXCLUDE (created_utc) FROM document_use ORDER BY ALL"
EFFECTS = "SELECT * FROM study_label_effects ORDER BY ALL"
REFIT = "study effects not carried: refit with `python -m engine why-cited --study {} --save`"


def add_use(db: Path, run_id: str, item_id: str, positions: tuple[int, ...] = (1, 2), *,
            model: str = "org/model", necessity: float = 1.5) -> None:
    """document_use rows as `python -m engine used` writes them (that command needs a model)."""
    with connect(db) as conn:
        for position in positions:
            conn.execute(
                "INSERT INTO document_use VALUES (?, ?, ?, ?, -3.0, ?, -3.25, ?, -0.25, ?, now()::TIMESTAMP)",
                [run_id, item_id, position, model, -3.0 - necessity, necessity, position == 2])


def add_effects(db: Path, name: str) -> None:
    """A study's saved fit, as `why-cited --study NAME --save` writes it (one configuration)."""
    with connect(db) as conn:
        conn.execute(
            "INSERT INTO study_label_effects VALUES (?, 'all', 'top_k=2', '{\"top_k\": 2}', 'Woman', 'Man', 3, 3, "
            "0.5, 0.25, 0.01, 0.99, 1.65, 1.01, 2.69, 0.04, NULL, NULL, NULL, TIMESTAMP '2026-01-02 03:04:05')",
            [name])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A target holding run t-base; a source with t-base too, a complete experiment exp-s (its cf
    run failed), document_use rows of each, and a study `grid` over exp-s and exp-t with its fit."""
    tmp_path = tmp_path_factory.mktemp("new_tables")
    target, source = tmp_path / "target.duckdb", tmp_path / "source.duckdb"
    add_run(target, "t-base", "exp-t", "base")
    add_run(source, "t-base", "exp-t", "base")
    add_run(source, "s-van", "exp-s", "vanilla")
    add_run(source, "s-base", "exp-s", "base")
    add_run(source, "s-cf", "exp-s", "cf", status="failed")
    add_use(source, "t-base", "q0")  # of a run the target holds already: comes along
    add_use(source, "s-base", "q0")
    add_use(source, "s-base", "q1", (1, 2, 3), model="other/reader")
    add_use(source, "s-cf", "q0")  # of a failed run: stays behind with it
    study(source, "grid", ["exp-s", "exp-t"], {"metadata": ["gender"], "top_k": [2, 3]})
    add_effects(source, "grid")
    return target, source


@pytest.fixture
def two(built, tmp_path):
    """The module's two stores, copied: each test merges its own."""
    return tuple(copy_store(db, tmp_path / db.name) for db in built)


def test_document_use_comes_along_once_and_study_effects_never(two, capsys):
    target, source = two
    before = digest(source)
    assert main(["merge", "--from", str(source), "--db", str(target)]) == 0
    out = capsys.readouterr().out
    assert "also copied: 7 document-use rows (`python -m engine used`)\n" in out
    assert REFIT.format("grid") in out
    assert rows(target, USE) == rows(source, USE.replace(" ORDER", " WHERE run_id <> 's-cf' ORDER"))
    # The view reads the copies as the source's.
    use_view = "SELECT * FROM citation_use WHERE run_id <> 's-cf' ORDER BY ALL"
    assert rows(target, use_view) == rows(source, use_view)
    assert rows(target, EFFECTS) == []  # not carried: a fit over the whole study
    assert digest(source) == before

    # Again: nothing new; the source's fit is still not in the target, so the line stays.
    held = rows(target, USE)
    result = merge_stores(target, source)
    assert (result.n_document_use, result.n_left_out, result.refit) == (0, 0, ("grid",))
    assert rows(target, USE) == held
    # Once the target holds its own fit of the unchanged study, nothing is said.
    add_effects(target, "grid")
    assert merge_stores(target, source).refit == ()


def test_document_use_of_an_answer_the_target_holds_otherwise_is_left_out(two, capsys):
    target, source = two
    with connect(target) as conn:  # the target's t-base answered q0 otherwise
        conn.execute("UPDATE generations SET answer = 'Someone else [1].' WHERE run_id = 't-base' AND item_id = 'q0'")
    result = merge_stores(target, source)
    assert (result.n_document_use, result.n_left_out) == (5, 2)
    assert rows(target, "SELECT count(*) FROM document_use WHERE run_id = 't-base'") == [(0,)]
    assert rows(target, "SELECT count(*) FROM document_use WHERE run_id = 's-base'") == [(5,)]


def test_a_row_the_target_holds_is_kept_and_refuses_nothing(two):
    target, source = two
    add_use(target, "t-base", "q0", (1,), necessity=1.25)  # the same answer read on another machine
    result = merge_stores(target, source)
    assert result.n_document_use == 6
    assert rows(target, "SELECT position, necessity FROM document_use WHERE run_id = 't-base' ORDER BY ALL") == [
        (1, 1.25), (2, 1.5)]


def test_a_fit_the_target_holds_of_a_study_the_merge_changes_is_named(two, capsys):
    target, source = two
    study(target, "grid", ["exp-t"], {"model": ["mine"]})
    add_effects(target, "grid")
    fit = rows(target, EFFECTS)
    assert main(["merge", "--from", str(source), "--db", str(target)]) == 0
    assert REFIT.format("grid") in capsys.readouterr().out  # grid gained exp-s: the target's fit is stale
    assert rows(target, EFFECTS) == fit  # kept as it is, for the refit to replace


# Every table of a fresh store, and what merge does with it. A migration that adds a table must
# add it to one of the two, so that merge is decided for it and not forgotten.
CARRIED = {  # copied, or recomputed in the target, by store/merge.py (and store_scores it calls)
    "runs", "experiments", "items", "generations", "citations", "explanations", "verifications",
    "judge_label_verdicts", "judges", "judge_labels", "studies", "study_experiments", "citation_propensities", "document_use",
    "run_scores", "run_metric_rows", "bias_rows", "item_metric_rows", "item_metric_runs",  # caches: recomputed for each merged run
    "answer_metrics", "answer_metric_runs",  # kept from each merged run's recomputed item rows
}
NOT_CARRIED = {
    "schema_migrations": "the target's own schema version",
    "run_owners": "the process generating a running run; merge copies complete runs only",
    "derived_values": "a cache keyed by each experiment's signature, recomputed on read",
    "study_label_effects": "a fit over a whole study: refit in the merged store (the output says so)",
}


def test_every_table_is_carried_or_named_as_not_carried(tmp_path):
    with connect(tmp_path / "fresh.duckdb") as conn:
        tables = {row[0] for row in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert not CARRIED & NOT_CARRIED.keys()
    assert tables == CARRIED | NOT_CARRIED.keys(), "decide whether merge carries each new table"
    code = "".join((Path(__file__).resolve().parents[2] / "store" / name).read_text()
                   for name in ("merge.py", "run_scores.py", "kept_metrics.py", "answer_metrics.py"))
    assert [name for name in sorted(CARRIED) if name not in code] == []
