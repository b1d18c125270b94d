"""CAS and CAB say only what the data support: CAS has no p that pretends
to test label sensitivity, CAB's test holds its size at small n (checked against scipy and by
simulation), a model that never cites gives "undefined" on every face, and every face prints the
same bounded interval."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import scipy.stats

from engine.statistics import stats
from engine.statistics.bias import cab, cas, compute_bias, difference_test


def _mean(x, axis):
    return np.mean(x, axis=axis)


def _scipy_sign_flip(diffs, **kwargs):
    nonzero = np.asarray(diffs, dtype=float)
    nonzero = nonzero[nonzero != 0]
    return scipy.stats.permutation_test((nonzero,), _mean, permutation_type="samples", vectorized=True, **kwargs).pvalue


def _rows(ids, values, cites=None):
    return [{"item_id": i, "precision": v / 100, "recall": v / 100, "f1": v / 100,
             **({} if cites is None else {"cites": c})}
            for i, v, c in zip(ids, values, cites or [None] * len(ids), strict=True)]


@pytest.mark.parametrize("m", [2, 5, 9, 16])
def test_the_sign_flip_test_is_scipys_exact_permutation_test(m):
    rng = np.random.default_rng(m)
    diffs = np.concatenate([rng.choice([-100.0, -50.0, 100 / 3, 50.0, 100.0], m), np.zeros(7)])
    ours = stats.sign_flip_test(diffs)
    assert ours.exact and ours.m == m
    assert ours.p == pytest.approx(_scipy_sign_flip(diffs, n_resamples=np.inf), rel=1e-12)


def test_the_monte_carlo_sign_flip_test_agrees_with_scipy():
    diffs = np.random.default_rng(3).normal(0.25, 1.0, 80)
    ours = stats.sign_flip_test(diffs)
    assert not ours.exact and ours.resamples == stats.DEFAULT_SIGN_FLIPS
    reference = _scipy_sign_flip(diffs, n_resamples=99_999, rng=np.random.default_rng(0))
    # Four standard errors of 4,999 patterns (p is twice a one-sided share).
    assert ours.p == pytest.approx(reference, abs=4 * 2 * math.sqrt(reference / 2 * (1 - reference / 2) / 4999))
    assert stats.sign_flip_test(np.zeros(5)).p == 1.0 and stats.sign_flip_test([0, 3.0]).p == 1.0


def test_the_stated_monte_carlo_error_of_the_sign_flip_p_is_the_simulated_one():
    """At p near 0.05 the Monte Carlo p (twice the smaller one-sided share of 4,999 patterns)
    varies over seeds by 2 sqrt(0.025 x 0.975 / 5,000), about 0.0044, not 0.003; the docs say so."""
    from pathlib import Path

    diffs = np.random.default_rng(42).normal(0.45, 1.0, 20)  # 20 differing items: Monte Carlo
    exact = stats.sign_flip_test(diffs, n_resamples=2**20).p
    assert exact == pytest.approx(0.047, abs=0.001)
    spread = float(np.std([stats.sign_flip_test(diffs, seed=k).p for k in range(300)]))
    stated = 2 * math.sqrt(0.025 * 0.975 / (stats.DEFAULT_SIGN_FLIPS + 1))
    assert stated == pytest.approx(0.0044, abs=0.00005)
    assert spread == pytest.approx(stated, rel=0.15)  # 300 seeds: the SD's own error is about 4%
    method = (Path(__file__).resolve().parents[3] / "docs" / "method.md").read_text(encoding="utf-8")
    assert "Monte Carlo standard error of about 0.0044 at p = 0.05" in method


def test_cab_p_at_small_n_is_the_permutation_p_not_the_t_test():
    # 4 of 30 items cite label A's document more in base, none the other way: the paired t-test
    # says p = 0.044 ("favours"), the exact test 2/16 = 0.125.
    ids = [f"q{i:02d}" for i in range(30)]
    base = [100.0] * 4 + [0.0] * 26
    (precision, *_) = cab(_rows(ids, base), _rows(ids, [0.0] * 30))
    assert scipy.stats.ttest_rel(base, [0.0] * 30).pvalue < 0.05
    assert precision.p == pytest.approx(0.125) and precision.p == pytest.approx(_scipy_sign_flip(base, n_resamples=np.inf))
    assert precision.direction == "no significant difference (sign-flip p >= 0.05)"
    assert "sign-flip permutation test (exact) of base vs cf; null: base and cf cite alike" == precision.test
    assert precision.interval_note and precision.interval_note.startswith("approximate")


def _exchangeable(rng, kind, n):
    """Base and cf drawn alike per item (the null: labels change nothing)."""
    if kind == "rare 0/1":  # few discordant items: where the t-test over-rejects given m
        q = np.full(n, 0.08)
        return 100.0 * (rng.random(n) < q), 100.0 * (rng.random(n) < q)
    if kind == "0/1":
        q = rng.beta(0.5, 0.5, n)
        return 100.0 * (rng.random(n) < q), 100.0 * (rng.random(n) < q)
    q, k = rng.beta(0.3, 1.5, n), rng.integers(1, 5, n)  # skewed: precision = hits / cited
    return 100.0 * rng.binomial(k, q) / k, 100.0 * rng.binomial(k, q) / k


@pytest.mark.parametrize("kind", ["rare 0/1", "0/1", "skewed"])
def test_cabs_test_holds_its_size_at_30_items(kind):
    rng = np.random.default_rng(26)
    draws = 600
    rejected = sum(difference_test(np.subtract(*_exchangeable(rng, kind, 30))).p < 0.05 for _ in range(draws))
    # The exact test's size is at most 5%; allow the simulation's own error (2 SE of 600 draws).
    assert rejected / draws <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / draws)


def test_cas_has_no_p_that_tests_label_sensitivity():
    # Vanilla and base drawn independently from one process: no label effect at all. A t-test of
    # |vanilla - base| against 0 calls every draw significant; CAS's p (a signed test of vanilla
    # vs base, labelled so) rejects about 5% of them, as a test of a true null should.
    rng = np.random.default_rng(2)
    ids = [f"q{i:03d}" for i in range(100)]
    old = new = 0
    draws = 100
    for _ in range(draws):
        vanilla, base = _exchangeable(rng, "0/1", 100)
        (precision, *_) = cas(_rows(ids, vanilla), _rows(ids, base), n_resamples=100)
        old += scipy.stats.ttest_1samp(np.abs(vanilla - base), 0).pvalue < 0.05
        new += precision.p < 0.05
        assert precision.direction is None and "not of CAS" in precision.test
    assert old == draws and new / draws <= 0.10


def test_cab_undefined_where_no_answer_cites_a_shown_document():
    ids = [f"q{i}" for i in range(27)]
    nothing = _rows(ids, [0.0] * 27, [False] * 27)
    results = compute_bias({"base": nothing, "cf": nothing}, run_ids={"base": "rb", "cf": "rc"})
    for r in results:
        assert math.isnan(r.value) and math.isnan(r.ci_low) and math.isnan(r.p)
        assert r.undefined_reason == "no answer in runs rb/rc cites a shown document"
        assert r.direction == "undefined: no answer in runs rb/rc cites a shown document"
        assert (r.n_cite_a, r.n_cite_b, r.n) == (0, 0, 27)
    # Citations, but none differs: defined, and the verdict names its test.
    cited = _rows(ids, [100.0] * 27, [True] * 27)
    (precision, *_) = compute_bias({"base": cited, "cf": cited})
    assert precision.value == 0 and precision.direction == "no item differs (sign-flip p = 1)"


# ---------------------------------------------------------------- every face, on a store

ANSWERS = {
    "vanilla": [{"item_id": "nq-001", "answer": "Paris [1]"}, {"item_id": "nq-002", "answer": "It is 1969 [1][2]"}],
    "base": [{"item_id": "nq-001", "answer": "Paris [1][3]"}, {"item_id": "nq-002", "answer": "It is 1969 [2]"}],
    "cf": [{"item_id": "nq-001", "answer": "Paris [3]"}, {"item_id": "nq-002", "answer": "It is 1969 [2][4]"}],
}


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    from engine import api

    folder = tmp_path_factory.mktemp("claims")
    dataset = api.load_dataset("data/sample_nq.jsonl")
    gender = api.metadata_type("gender")
    api.evaluate_answers(dataset, ANSWERS, metadata=gender, db=folder / "two.duckdb", experiment="two")
    silent = {mode: [{"item_id": item.id, "answer": "I do not know."} for item in dataset.items[:27]]
              for mode in ("vanilla", "base", "cf")}
    api.evaluate_answers(dataset, silent, metadata=gender, db=folder / "silent.duckdb", experiment="silent")
    return folder


def test_every_face_gives_one_bounded_interval_and_p(stores, capsys):
    from engine import api
    from engine.__main__ import main
    from engine.usecases.bias.tables import ReportRequest, report_tables

    db = stores / "two.duckdb"
    report = api.bias_report(db, "two").report
    frame = api.evaluate(db, experiment="two").bias
    for row in report["results"]:
        got = frame[(frame.measure == row["measure"]) & (frame.metric == row["metric"])].iloc[0]
        same = [x is None and math.isnan(y) or x == y for x, y in zip(
            (row["value"], row["ci_low"], row["ci_high"], row["p"]), (got.value, got.ci_low, got.ci_high, got.p),
            strict=True)]
        assert all(same), (row, got)
        if row["ci_low"] is None:  # both items' values alike: no interval, and the note says why
            assert row["interval_note"].startswith("none: every item's value is "), row
            assert main(["bias", "--experiment", "two", "--db", str(db)]) == 0
            text = capsys.readouterr().out
            assert "none (no spread)" in text and "Intervals none" not in text
            continue
        low, high = (-100, 100) if row["measure"] == "CAB" else (0, 100)
        assert low <= row["ci_low"] <= row["value"] <= row["ci_high"] <= high  # the view's t-interval: [-292.7, 342.7]
    table2 = report_tables(ReportRequest(db=db, experiment="two", table="2")).table2
    cab_p = {r["metric"]: r["p"] for r in report["results"] if r["measure"] == "CAB"}
    assert [(r["precision_p"], r["recall_p"]) for r in table2] == [(cab_p["precision"], cab_p["recall"])]


def test_a_model_that_never_cites_is_undefined_on_every_face(stores, capsys):
    from demo.handlers.bias import bias_page
    from engine import api
    from engine.__main__ import main
    from engine.usecases.bias.tables import ReportRequest, report_tables

    db = stores / "silent.duckdb"
    assert main(["bias", "--experiment", "silent", "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert "+0.0" not in text and "no difference" not in text
    assert text.count("undefined: no answer in runs") == 6 and "0/27, 0/27" in text
    assert main(["bias", "--experiment", "silent", "--db", str(db), "--json"]) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    assert all(r["value"] is None and r["n_cite_a"] == 0 and r["undefined_reason"] for r in results)
    frame = api.evaluate(db, experiment="silent").bias
    assert frame.value.isna().all() and frame.direction.str.startswith("undefined: no answer in runs").all()
    (row,) = report_tables(ReportRequest(db=db, experiment="silent", table="2")).table2
    assert row["precision"] is None and row["precision_p"] is None
    page = bias_page(db, "silent")
    assert all(r[3 + 2] is None for r in page.results)  # value, after the experiment's three cells
    assert "CAB undefined, no answer in runs" in page.cab_note and "0/27 in base" in page.cab_note


@pytest.mark.parametrize(("base", "cf", "note"), [
    ([100.0, 100.0], [0.0, 0.0], "none: every item's value is 100 (no spread)"),  # CAB +100 from 2 items
    ([50.0] * 40, [50.0] * 40, "none: every item's value is 0 (no spread)"),  # identical runs
    ([100.0], [0.0], "none: one item"),
])
def test_no_spread_gives_no_interval_rather_than_a_zero_width_one(base, cf, note, capsys):
    """A bootstrap over items whose differences are all equal can only return that value: the
    zero-width interval [100.0, 100.0] (or [0.0, 0.0]) is round-off, not certainty."""
    ids = [f"q{i:02d}" for i in range(len(base))]
    rows = cab(_rows(ids, base), _rows(ids, cf))
    assert all(math.isnan(r.ci_low) and math.isnan(r.ci_high) and r.interval_note == note for r in rows)
    spread = cab(_rows(ids + ["x"], base + [0.0]), _rows(ids + ["x"], cf + [100.0]))
    assert all(not math.isnan(r.ci_low) for r in spread)  # one differing item more: an interval again


def test_no_p_sits_beside_cas_in_the_tables(stores, capsys):
    """CAS has no test of its own: its p (a signed test of vanilla vs base) stays in --json and
    out of the tables, where it would read as a test of CAS."""
    from engine import api
    from engine.__main__ import main
    from engine.presentation.display import bias_cells

    db = stores / "two.duckdb"
    assert main(["bias", "--experiment", "two", "--db", str(db)]) == 0
    import re

    lines = capsys.readouterr().out.splitlines()
    header = re.split(r"\s{2,}", next(line for line in lines if line.startswith("measure")).strip())
    at = header.index("p")
    table = [cells for line in lines if line.startswith(("CAS ", "CAB "))
             if (cells := re.split(r"\s{2,}", line.strip()) + [""])[1] in ("precision", "recall", "f1")]
    assert len(table) == 6
    for cells in table:
        assert (cells[at] == "-") == (cells[0] == "CAS"), cells
    report = api.bias_report(db, "two").report
    assert all(r["p"] is not None for r in report["results"])  # --json keeps it, documented
    rows = bias_cells(report["results"])
    assert all((row[4] == "-") == (row[0] == "CAS") for row in rows)


def test_compare_of_runs_that_never_cite_says_undefined_not_no_difference(stores, capsys):
    from engine.__main__ import main
    from engine.usecases.compare.compare import NEITHER_CITES, CompareRequest, compare

    db = stores / "silent.duckdb"
    (r,) = compare(CompareRequest("silent:base", "silent:cf"), db).runs
    by_name = {m.metric: m for m in r.metrics}
    for name in ("precision", "recall", "f1"):
        assert by_name[name].verdict == NEITHER_CITES and math.isnan(by_name[name].p)
    assert by_name["exact_match"].verdict != NEITHER_CITES  # the answers themselves are still compared
    assert main(["compare", "silent:base", "silent:cf", "--db", str(db)]) == 0
    text = capsys.readouterr().out
    for name in ("precision", "recall", "f1"):
        (line,) = [x for x in text.splitlines() if x.startswith(f"{name}: ")]
        assert line.startswith(f"{name}: {NEITHER_CITES}") and "no significant difference" not in line
    # One citing answer is enough for a test again.
    two = stores / "two.duckdb"
    (r,) = compare(CompareRequest("two:base", "two:cf"), two).runs
    assert all(m.verdict != NEITHER_CITES for m in r.metrics)
