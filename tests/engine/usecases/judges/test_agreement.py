"""`agreement`: the judges of a run's citations set against each other and against human
labels. The numbers are engine.statistics.agreement's (tested against the libraries in
tests/engine/statistics/test_agreement_stats.py); here, that the use case hands them the right verdicts: kappa equals
statsmodels' cohens_kappa on the same pairs, raw agreement equals the judge_agreement view's, NULL
verdicts are left out and counted, and the PPI rate is built from the right three sets."""

from __future__ import annotations

import csv
import io
import json
import random

import pytest

from tests.support.helpers import cli, copy_store, rows
from tests.support.judged_store import LLM, NLI, build, cited

HUMAN_ITEMS = 8  # the human labels every cited document of the first 8 answers (of 12)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The judged store plus human labels by 'ann' on part of what the model judges judged."""
    tmp = tmp_path_factory.mktemp("agree")
    path = tmp / "judged.duckdb"
    info = build(path)
    rng = random.Random(3)
    human = {}
    lines = ["item_id,experiment,mode,position,label"]
    for i, item in enumerate(info["items"][:HUMAN_ITEMS]):
        for p in cited(i):
            said = info["llm"][(item, p)] == "attributable"
            label = said if rng.random() < 0.8 else not said
            human[(item, p)] = "attributable" if label else "not_attributable"
            lines.append(f"{item},pilot,vanilla,{p},{human[(item, p)]}")
    labels = tmp / "ann.csv"
    labels.write_text("\n".join(lines) + "\n")
    assert cli("import-labels", str(labels), "--judge", "ann", "--db", str(path)) == 0
    return path, {**info, "ann": human}


@pytest.fixture
def store(built, tmp_path):
    path, info = built
    return copy_store(path, tmp_path / "s.duckdb"), info


def as_binary(verdicts: dict) -> dict:
    return {k: ("attributable" if v == "attributable" else "not_attributable")
            for k, v in verdicts.items() if v != "unparsed"}


def run_json(db, *args: str, capsys) -> dict:
    assert cli("agreement", "--db", str(db), "--format", "json", *args) == 0
    return json.loads(capsys.readouterr().out)


def test_kappa_equals_statsmodels_on_the_same_pairs(store, capsys):
    from statsmodels.stats.inter_rater import cohens_kappa

    db, info = store
    got = run_json(db, "--experiment", "pilot", capsys=capsys)
    judges = {j["judge"]: j for j in got["judges"]}
    assert judges[LLM]["n_null"] == 2 and judges[LLM]["n_verdicts"] == 36 - 2
    assert judges[NLI]["kind"] == "nli" and judges["ann"]["kind"] == "human"
    verdicts = {"ann": info["ann"], LLM: as_binary(info["llm"]), NLI: as_binary(info["nli"])}
    cats = ("attributable", "not_attributable")
    pairs = {(p["judge_a"], p["judge_b"]): p["agreement"] for p in got["pairs"]}
    assert set(pairs) == {("ann", LLM), ("ann", NLI), (LLM, NLI)}
    for (a, b), found in pairs.items():
        both = sorted(verdicts[a].keys() & verdicts[b].keys())
        table = [[sum(verdicts[a][c] == x and verdicts[b][c] == y for c in both) for y in cats] for x in cats]
        assert found["n"] == len(both) and found["confusion"] == table
        assert found["kappa"] == pytest.approx(cohens_kappa(table).kappa, abs=1e-12)
    assert got["panel"]["n_judges"] == 3 and got["panel"]["n_items"] == 36


def test_raw_agreement_equals_the_judge_agreement_view(store):
    from engine.api import AgreementRequest, agreement

    db, _ = store
    result = agreement(AgreementRequest(db, experiment="exp"))
    view = {(a, b): (n, raw) for a, b, n, raw in rows(db, "SELECT judge_a, judge_b, n, raw_agreement FROM judge_agreement")}
    assert len(view) == len(result.pairs) == 3
    for p in result.pairs:
        n, raw = view[(p.judge_a, p.judge_b)]
        assert p.agreement.n == n and p.agreement.raw_agreement == pytest.approx(float(raw), abs=1e-12)


def test_against_human_and_the_ppi_rate_use_the_right_citations(store):
    from engine.api import AgreementRequest, agreement

    db, info = store
    result = agreement(AgreementRequest(db, runs=(info["run"],), judges=(LLM, "ann")))
    assert [j.judge for j in result.judges] == [LLM, "ann"]
    llm, ann = as_binary(info["llm"]), info["ann"]
    both = sorted(llm.keys() & ann.keys())
    (row,) = result.against_human
    assert (row.judge, row.human, row.scores.n) == (LLM, "ann", len(both))
    assert row.scores.accuracy.k == sum(llm[c] == ann[c] for c in both)
    (ppi,) = result.ppi
    rest = sorted(llm.keys() - ann.keys())
    assert (ppi.rate.n_labelled, ppi.rate.n_unlabelled) == (len(both), len(rest))
    y = [ann[c] == "attributable" for c in both]
    f = [llm[c] == "attributable" for c in both]
    judged_rest = [llm[c] == "attributable" for c in rest]
    expected = sum(judged_rest) / len(rest) + (sum(y) - sum(f)) / len(both)
    assert ppi.rate.estimate == pytest.approx(expected, abs=1e-12)


def test_text_names_each_test_and_csv_holds_the_pairs(store, capsys):
    db, info = store
    assert cli("agreement", "--db", str(db), "--runs", info["run"]) == 0
    text = capsys.readouterr().out
    for name in ("statsmodels cohens_kappa", "statsmodels fleiss_kappa", "krippendorff package",
                 "statsmodels proportion_confint", "prediction-powered inference"):
        assert name in text
    assert cli("agreement", "--db", str(db), "--experiment", "exp", "--format", "csv") == 0
    table = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [(r["judge_a"], r["judge_b"]) for r in table] == [("ann", LLM), ("ann", NLI), (LLM, NLI)]


def test_one_judge_and_unknown_names_say_why(store, capsys):
    db, info = store
    got = run_json(db, "--experiment", "exp", "--judge", NLI, capsys=capsys)
    assert got["pairs"] == [] and got["panel"]["undefined"] == "fewer than two judges"
    for args, says in ((("--experiment", "nope"), "unknown experiment 'nope'"),
                       (("--runs", "nope"), "unknown run 'nope'"),
                       (("--experiment", "exp", "--judge", "bob"), "unknown judge 'bob'"),
                       ((), "give --experiment or --runs")):
        assert cli("agreement", "--db", str(db), *args) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and says in err, err


def test_a_judge_with_no_usable_verdict_sits_out_of_the_panel(store, capsys):
    from engine.usecases.judges.agreement import AgreementRequest, agreement
    from store.db import connect

    db, _ = store
    before = agreement(AgreementRequest(db=db, experiment="pilot"))
    assert before.panel_left_out == () and before.panel_note() == ""
    with connect(db) as conn:
        conn.execute("UPDATE verifications SET class = 'unparsed' WHERE judge_model = ?", [NLI])
    after = agreement(AgreementRequest(db=db, experiment="pilot"))
    assert after.panel_left_out == (NLI,) and after.panel.n_judges == before.panel.n_judges - 1
    # Its empty column would have left no item that every judge judged.
    assert after.panel.fleiss_kappa is not None
    assert after.panel_note().startswith(f"left out of the panel, no usable verdict: {NLI} (")
    assert cli("agreement", "--db", str(db), "--experiment", "pilot") == 0
    assert after.panel_note() in capsys.readouterr().out
