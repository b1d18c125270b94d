"""Table 1's citation precision of a run none of whose answers cites a shown document is
undefined, with its reason, in every face (`report` markdown, csv and json, the app's Bias tab):
each answer's precision divides by what it cites, so such a run averages nothing but the 0 an
answer without a citation is given. A run whose answers cite only non-relevant documents has a
precision, and it is 0.

The store is written through RunStore, as `run` writes it: 4 items, 3 documents each, [1] relevant.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.__main__ import main
from engine.prompting.prompts import METADATA_TYPES, PromptConfig
from engine.types import Citation, Document, Generation, Item, RunSpec
from store import RunStore

SHA = "sha-uncited"
ITEMS = [Item(f"q{i}", f"Question {i}?", (f"answer {i}",),
              tuple(Document(f"q{i}-d{j}", f"text {j}", j == 0) for j in range(3))) for i in range(4)]
# Per mode, the document each answer cites (None: no citation at all; 7: a number beyond the
# three shown, which cites no shown document either).
CITED = {"vanilla": (1, 1, 2, 2), "base": (None, None, None, 7), "cf": (2, 3, 2, 3)}


def _answers(cited: tuple[int | None, ...]) -> list[Generation]:
    out = []
    for item, n in zip(ITEMS, cited, strict=True):
        shown = tuple(d.id for d in item.documents)
        marks = () if n is None else (Citation(0, n, shown[n - 1] if n <= len(shown) else None, n == 1, 0.5),)
        out.append(Generation(item.id, "p", "an answer" + ("" if n is None else f" [{n}]"), shown, "stop", 5, (),
                              marks))
    return out


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("uncited") / "s.duckdb"
    store = RunStore(path, timeout_s=10)
    store.put_items(SHA, ITEMS)
    for mode, cited in CITED.items():
        prompt = PromptConfig(mode=mode, metadata=METADATA_TYPES["gender"]).to_dict()
        config = {"prompt": prompt, "generation": {"do_sample": False, "max_new_tokens": 32, "seed": 0}}
        store.start_run(RunSpec(f"u-{mode}", "u", f"h-{mode}", "org/m", None, "none", "float32", "cpu",
                                "/srv/data/u.jsonl", SHA, "gender", mode, 0, "v1", None, {}, config, len(ITEMS)))
        store.write_batch(f"u-{mode}", _answers(cited))
        store.finish_run(f"u-{mode}", "complete")
    return path


def _report(db: Path, capsys, *args: str) -> str:
    assert main(["report", "--db", str(db), "--table", "1", *args]) == 0
    return capsys.readouterr().out


def test_a_run_that_cites_nothing_has_no_precision_in_table_1(db, capsys):
    text = _report(db, capsys)
    rows = {line.split("|")[2].strip(): line for line in text.splitlines() if line.startswith("| org/m")}
    assert set(rows) == {"-", "Woman", "Man"}
    # base: no answer cites a shown document (three cite nothing, one cites [7] of three shown).
    assert "| undefined: no answer cites a shown document |" in rows["Woman"]
    # cf cites only non-relevant documents: a precision of 0, which is a value.
    assert "| 0.0 |" in rows["Man"] and "undefined" not in rows["Man"]
    assert "| 50.0 |" in rows["-"]
    table = {r["run_id"]: r for r in json.loads(_report(db, capsys, "--format", "json"))["table1"]}
    assert table["u-base"]["precision"] is None
    assert table["u-base"]["precision_undefined"] == "no answer cites a shown document"
    assert (table["u-cf"]["precision"], table["u-cf"]["precision_undefined"]) == (0.0, None)
    assert "undefined: no answer cites a shown document" in _report(db, capsys, "--format", "csv")


def test_the_bias_tab_says_the_same(db):
    from engine.usecases.bias.tables import experiment_tables

    rows1, _ = experiment_tables(db, ["u"])
    by_run = {r["run_id"]: r for r in rows1}
    assert by_run["u-base"]["precision"] is None and by_run["u-base"]["precision_undefined"]
    assert by_run["u-cf"]["precision"] == 0.0
