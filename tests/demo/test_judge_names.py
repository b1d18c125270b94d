"""Judge names are the operator's. A Space visitor's uploaded labels go under a name carrying who
gave them (`visitor <tag>: <name>`, demo.visitors.labels_judge), so a visitor can neither take a
model judge's name before the model judges nor add labels to another person's; and a model judge
never writes under a name the store gives a person (engine.usecases.judges.verify_nli.check_judge_name,
store.verification_store). Real stores (tests/support/judged_store.py), the Judges tab's handler, the CLI."""

from __future__ import annotations

import pytest

from demo.handlers import judges as h
from demo.settings import AppSettings
from engine.errors import UserError
from tests.support.helpers import cli, copy_store, rows
from tests.support.judged_store import LLM, build, cited, dump

VISITOR_A, VISITOR_B = "client:203.0.113.7", "client:198.51.100.9"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("judge-names")
    path = tmp / "judged.duckdb"
    return path, build(path)


@pytest.fixture
def store(built, tmp_path):
    path, info = built
    return copy_store(path, tmp_path / "s.duckdb"), info


def labels_file(folder, info, name: str, label: str = "attributable", items: int = 2):
    lines = ["item_id,experiment,mode,position,label"]
    lines += [f"{item},pilot,vanilla,{p},{label}" for i, item in enumerate(info["items"][:items]) for p in cited(i)]
    path = folder / name
    path.write_text("\n".join(lines) + "\n")
    return path


def judges(db) -> dict[str, tuple[str, int]]:
    """judge -> (kind, labels stored)."""
    return {j: (k, n) for j, k, n in rows(db, "SELECT j.judge, j.kind, count(l.judge) FROM judges j LEFT JOIN "
                                              "judge_labels l USING (judge) GROUP BY ALL")}


def test_a_visitors_labels_go_under_a_name_that_carries_who_gave_them(store, tmp_path):
    db, info = store
    operator, space = AppSettings(db), AppSettings(db, operator_view=False)
    ann = labels_file(tmp_path, info, "ann.csv")
    assert "stored as judge 'ann'" in h.import_labels_file(operator, str(ann), "ann", owner="operator-session")
    # A visitor names ann, with other labels: they go under the visitor's own name, not into ann's.
    other = labels_file(tmp_path, info, "other.csv", "not_attributable")
    line_a = h.import_labels_file(space, str(other), "ann", owner=VISITOR_A)
    stored_a = line_a.split("stored as judge '")[1].split("'")[0]
    assert stored_a.startswith("visitor ") and stored_a.endswith(": ann") and stored_a != "ann"
    # The same visitor again: the same name (stored already); another visitor: a name of its own.
    assert f"labels of judge '{stored_a}' were stored already" in h.import_labels_file(space, str(other), "ann",
                                                                                         owner=VISITOR_A)
    line_b = h.import_labels_file(space, str(other), "ann", owner=VISITOR_B)
    stored_b = line_b.split("stored as judge '")[1].split("'")[0]
    assert stored_b.endswith(": ann") and stored_b not in ("ann", stored_a)
    # A model judge's name, before that model has judged: the visitor's own name again.
    line_model = h.import_labels_file(space, str(other), "smoke", owner=VISITOR_A)
    assert line_model.split("stored as judge '")[1].startswith(stored_a.replace(": ann", ": smoke"))
    names = judges(db)
    assert names["ann"] == ("human", 6) and names[stored_a] == names[stored_b] == ("human", 6)
    assert "smoke" not in names
    assert not any("203.0.113.7" in name or "198.51.100.9" in name for name in names)


def test_a_visitors_name_is_checked_as_typed_and_named_in_its_own_words(store, tmp_path):
    db, info = store
    space = AppSettings(db, operator_view=False)
    before = dump(db)
    upload = labels_file(tmp_path, info, "x.csv")
    with pytest.raises(UserError, match=r"^the judge's name holds U\+0430 \(cyrillic small letter a\) at character 1,"):
        h.import_labels_file(space, str(upload), "\u0430nn", owner=VISITOR_A)
    with pytest.raises(UserError, match="^the judge's name is 482 characters long"):
        h.import_labels_file(space, str(upload), "x" * 482, owner=VISITOR_A)
    assert dump(db) == before


def test_a_model_judge_never_writes_under_a_persons_name(store, tmp_path, capsys):
    db, info = store
    labels = labels_file(tmp_path, info, "smoke.csv")
    # The operator's own labels under a model's name (or a store from before visitors' names).
    from engine.generation.model_choice import SMOKE_LABEL  # the smoke model's judge name

    assert cli("import-labels", "--db", str(db), str(labels), "--judge", SMOKE_LABEL) == 0
    capsys.readouterr()
    before = dump(db)
    for judge in (["--model", "smoke"], ["--judge", "llm:smoke"]):
        assert cli("verify", "--experiment", "pilot", *judge, "--device", "cpu", "--db", str(db)) == 2
        err = capsys.readouterr().err.strip()
        assert err == (f"error: judge '{SMOKE_LABEL}' is a human judge in this store (a person's imported labels): "
                       "the llm judge's verdicts cannot go under its name"), err
    assert dump(db) == before
    # The store refuses it too, in the batch's transaction: nothing of the batch is written.
    from engine.types import Verification
    from store.verification_store import JudgeRow, VerificationStore

    item, position = info["items"][0], cited(0)[0]
    verdict = Verification(run_id=info["run"], item_id=item, sentence_index=0, position=position, doc_id="d",
                           judge_model=SMOKE_LABEL, prompt="p", raw_output="r", label="attributable",
                           p_attributable=None, p_extrapolatory=None, p_contradictory=None)
    with pytest.raises(UserError, match=r"^judge 'smoke \(tiny random Llama\)' is a human judge in this store"):
        VerificationStore(db).write_batch([verdict], JudgeRow(SMOKE_LABEL, "llm", "smoke", "attrscore", "{}"))
    assert dump(db) == before
    # A model judge already stored keeps its name from people: the operator's import is refused.
    assert cli("import-labels", "--db", str(db), str(labels), "--judge", LLM) == 2
    assert f"--judge '{LLM}' is an llm judge" in capsys.readouterr().err
