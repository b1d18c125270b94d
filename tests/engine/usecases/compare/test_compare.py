"""`compare`: every paired statistic against scipy and statsmodels, the store reads
against query_metrics and the compare_runs macro (store/views.sql), the use case and the CLI end to end on
stores written through the store's own writer (RunStore), with the edge cases: identical runs,
disjoint items, one item, all ties, a run still running, two datasets.

statsmodels is a test dependency only (requirements-dev.in): the product computes everything with
scipy, and statsmodels is the independent check where it has the test.
"""

from __future__ import annotations

import json
import math
import random
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

from engine.__main__ import main
from engine.commands._field_words import cli_message
from engine.errors import UserError
from engine.prompting.citations import parse_citations
from engine.prompting.prompts import METADATA_TYPES, PromptConfig
from engine.statistics import compare_stats as cs
from engine.statistics.flips import CitationFlips, citation_flips, em_flips
from engine.statistics.stats import holm
from engine.types import Citation, Document, Generation, Item, RunSpec
from engine.usecases.compare.compare import CompareRequest, Margins, compare, parse_margins
from store.db import connect
from store.queries import metrics_for_run
from store.queries.compare import METRIC_COLUMNS, read_paired, resolve_side
from store.run_store import RunStore


def _data(seed: int, n: int = 40) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.random(n)
    return a, np.clip(a + rng.normal(0.05, 0.2, n), 0, 1)


# ---------------------------------------------------------------- statistics


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_paired_t_matches_scipy(seed):
    a, b = _data(seed)
    res = cs.paired_t(a, b)
    ref = scipy.stats.ttest_rel(b, a)
    assert (res.statistic, res.p) == pytest.approx((ref.statistic, ref.pvalue), rel=1e-12)


@pytest.mark.parametrize("seed", [0, 3])
def test_bootstrap_interval_is_scipys_paired_bootstrap(seed):
    a, b = _data(seed, 57)
    low, high = cs.bootstrap_diff_ci(a, b, n_resamples=1500, seed=seed)
    ref = scipy.stats.bootstrap((b - a,), np.mean, n_resamples=1500, batch=500, method="percentile",
                                rng=np.random.default_rng(seed)).confidence_interval
    assert (low, high) == pytest.approx((ref.low, ref.high), rel=1e-10)
    paired = scipy.stats.bootstrap((b, a), lambda y, x, axis: np.mean(y - x, axis=axis), paired=True,
                                   vectorized=True, n_resamples=1500, batch=500, method="percentile",
                                   rng=np.random.default_rng(seed)).confidence_interval
    assert (low, high) == pytest.approx((paired.low, paired.high), rel=1e-10)


@pytest.mark.parametrize("seed", [0, 1])
def test_permutation_matches_scipy(seed):
    a, b = _data(seed, 30)
    res = cs.paired_permutation(a, b, n_resamples=2000, seed=seed)
    ref = scipy.stats.permutation_test((b, a), lambda y, x, axis: np.mean(y - x, axis=axis), vectorized=True,
                                       permutation_type="samples", n_resamples=2000, rng=np.random.default_rng(seed))
    assert res.p == pytest.approx(ref.pvalue, rel=1e-12)
    assert res.statistic == pytest.approx(np.mean(b - a))


def test_permutation_is_exact_for_few_items():
    # 6 items: 64 sign patterns, all enumerated; differences 1..6 all positive: only the
    # all-plus and all-minus patterns are as extreme, p = 2/64.
    a = np.zeros(6)
    b = np.arange(1.0, 7.0)
    assert cs.paired_permutation(a, b).p == pytest.approx(2 / 64)


def test_mcnemar_hand_table_and_binomtest():
    # A right / B wrong: 2 items, A wrong / B right: 9, both right 20, both wrong 5.
    a = np.array([1] * 2 + [0] * 9 + [1] * 20 + [0] * 5, dtype=float)
    b = np.array([0] * 2 + [1] * 9 + [1] * 20 + [0] * 5, dtype=float)
    res = cs.mcnemar_exact(a, b)
    assert res.statistic == 9
    assert res.p == pytest.approx(scipy.stats.binomtest(9, 11, 0.5).pvalue, rel=1e-12)
    # By hand: 2 * P(X <= 2), X ~ Bin(11, 1/2) = 2 * (1 + 11 + 55) / 2048.
    assert res.p == pytest.approx(2 * 67 / 2048, rel=1e-12)
    flips = em_flips(a, b)
    assert (flips.right_to_wrong, flips.wrong_to_right, flips.n) == (2, 9, 36)


def test_mcnemar_matches_statsmodels():
    from statsmodels.stats.contingency_tables import mcnemar
    rng = np.random.default_rng(5)
    for _ in range(5):
        a = (rng.random(60) < 0.5).astype(float)
        b = (rng.random(60) < 0.6).astype(float)
        table = [[np.sum((a == 1) & (b == 1)), np.sum((a == 1) & (b == 0))],
                 [np.sum((a == 0) & (b == 1)), np.sum((a == 0) & (b == 0))]]
        assert cs.mcnemar_exact(a, b).p == pytest.approx(mcnemar(table, exact=True).pvalue, rel=1e-12)


def test_holm_hand_table():
    # m = 4, sorted 0.01, 0.02, 0.03, 0.5: 0.04, 0.06, 0.06 (monotone), 0.5; NaN stays out.
    assert holm([0.03, 0.01, math.nan, 0.5, 0.02]) == pytest.approx([0.06, 0.04, math.nan, 0.5, 0.06], nan_ok=True)


def test_holm_matches_statsmodels():
    from statsmodels.stats.multitest import multipletests
    p = np.random.default_rng(3).random(9) ** 3
    assert holm(p) == pytest.approx(multipletests(p, method="holm")[1].tolist(), rel=1e-12)


@pytest.mark.parametrize("margin", [0.02, 0.1])
def test_tost_matches_one_sided_scipy_tests(margin):
    a, b = _data(7, 80)
    eq = cs.tost_paired(a, b, margin)
    d = b - a
    low = scipy.stats.ttest_1samp(d - (-margin), 0, alternative="greater").pvalue
    high = scipy.stats.ttest_1samp(d - margin, 0, alternative="less").pvalue
    assert (eq.p_lower, eq.p_upper, eq.p) == pytest.approx((low, high, max(low, high)), rel=1e-12)


def test_tost_matches_statsmodels():
    from statsmodels.stats.weightstats import ttost_paired
    a, b = _data(8, 80)
    for margin in (0.01, 0.05, 0.2):
        p, lower, upper = ttost_paired(b, a, -margin, margin)
        eq = cs.tost_paired(a, b, margin)
        assert (eq.p, eq.p_lower, eq.p_upper) == pytest.approx((p, lower[1], upper[1]), rel=1e-10)


def test_power_against_noncentral_t_and_statsmodels():
    # The solved effect gives 80% power (by the noncentral t, computed here independently).
    for n in (5, 30, 400):
        mdd = cs.min_detectable_difference(2.0, n)
        df, nc = n - 1, mdd / 2.0 * math.sqrt(n)
        crit = scipy.stats.t.ppf(0.975, df)
        power = 1 - scipy.stats.nct.cdf(crit, df, nc) + scipy.stats.nct.cdf(-crit, df, nc)
        assert power == pytest.approx(0.8, abs=1e-9)
    from statsmodels.stats.power import TTestPower
    for n in (5, 30, 400):
        effect = TTestPower().solve_power(effect_size=None, nobs=n, alpha=0.05, power=0.8, alternative="two-sided")
        assert cs.min_detectable_difference(2.0, n) == pytest.approx(2.0 * effect, rel=1e-6)
        assert cs.paired_power(0.4, n) == pytest.approx(TTestPower().power(0.4, n, 0.05), rel=1e-9)


def test_all_ties_one_item_and_identical_without_warnings():
    # With no spread there is no interval, TOST or detectable difference for a
    # continuous metric (each says why); a 0/1 metric keeps its exact bounds.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        same = np.array([0.5, 0.2, 1.0, 0.0])
        m = cs.compare_metric(cs.METRICS["f1"], same, same, margin=1.0)
        assert (m.diff, m.p) == (0.0, 1.0) and math.isnan(m.ci_low) and m.ci_undefined == cs.NO_SPREAD
        assert math.isnan(m.p_t) and m.min_detectable is None and m.min_detectable_undefined == cs.NO_SPREAD
        assert m.equivalence.undefined == cs.NO_SPREAD and math.isnan(m.equivalence.p)
        assert m.verdict == "no significant difference; equivalence undefined: every paired difference is equal"
        em = (same > 0.4).astype(float)
        m = cs.compare_metric(cs.METRICS["exact_match"], em, em, margin=1.0)
        assert (m.diff, m.p, m.discordant) == (0.0, 1.0, 0) and m.verdict == "inconclusive"
        assert m.ci_low < -50 and m.ci_high > 50  # 0 of 4 discordant bounds nothing much
        assert m.min_detectable is None and "no discordant pair" in m.min_detectable_undefined
        # A constant shift on 4 items: the permutation p is 2/16 (all signs alike), not "different".
        m = cs.compare_metric(cs.METRICS["f1"], same * 0, same * 0 + 0.1, margin=1.0)
        assert m.p == pytest.approx(2 / 16) and m.test == cs.PERMUTATION and math.isnan(m.p_t)
        assert m.verdict.startswith("no significant difference; equivalence undefined")
        one = cs.compare_metric(cs.METRICS["f1"], [0.2], [0.7], margin=1.0)
        assert one.n == 1 and one.diff == pytest.approx(50) and math.isnan(one.p) and one.verdict == "too few items"
        assert one.min_detectable is None and math.isnan(one.p_t)
        results = cs.compare_metrics({"f1": np.array([0.3])}, {"f1": np.array([0.3])}, ["f1"])
        assert math.isnan(results[0].p_holm)


def test_compare_metrics_holm_and_missing_values():
    a, b = _data(11, 50)
    a_em, b_em = (a > 0.5).astype(float), (b > 0.5).astype(float)
    a_em[:5] = np.nan  # no gold answers: left out of exact match only
    results = cs.compare_metrics({"f1": a, "exact_match": a_em}, {"f1": b, "exact_match": b_em}, ["f1", "exact_match"],
                                 n_resamples=500)
    f1, em = results
    assert (f1.n, em.n) == (50, 45)
    assert f1.test == cs.PERMUTATION and em.test == cs.MCNEMAR and em.p_t is None and em.t is None
    assert f1.p_t == pytest.approx(scipy.stats.ttest_rel(b, a).pvalue, rel=1e-12)
    assert [f1.p_holm, em.p_holm] == pytest.approx(holm([f1.p, em.p]))
    assert f1.diff == pytest.approx(100 * np.mean(b - a)) and f1.mean_a == pytest.approx(100 * a.mean())


def test_citation_flips_hand_made():
    flips = citation_flips([
        (("d1", "d2", "d3"), ("d1", "d2"), ("d2", "d3"), ("d1", "d3")),  # A only d1 (rel), B only d3 (rel)
        (("d4", "d5"), ("d4", "d9"), ("d5",), ()),  # d9 not shown in both: not counted
    ])
    assert flips == CitationFlips(1, 1, 1, 1, 5)


# ---------------------------------------------------------------- a store


def _items(rng: random.Random, n: int, prefix: str = "q") -> list[Item]:
    items = []
    for i in range(n):
        k = rng.randint(3, 5)
        relevant = set(rng.sample(range(k), rng.randint(1, 2)))
        docs = tuple(Document(f"{prefix}{i}-d{j}", f"text {j}", j in relevant, f"t{j}") for j in range(k))
        items.append(Item(f"{prefix}{i}", f"question {i}", (f"answer{i}",) if i % 9 else (), docs))
    return items


def _generation(rng: random.Random, item: Item, good: float) -> Generation:
    shown = list(item.documents)
    numbers = [p + 1 for p, d in enumerate(shown) if d.relevant and rng.random() < good]
    numbers += [p + 1 for p, d in enumerate(shown) if not d.relevant and rng.random() > good]
    gold = item.answers[0] if item.answers and rng.random() < good else "nothing"
    answer = f"{gold} " + "".join(f"[{n}]" for n in numbers)
    citations = tuple(Citation(i, n, shown[n - 1].id, shown[n - 1].relevant, rng.random())
                      for i, n in enumerate(parse_citations(answer)))
    return Generation(item.id, "prompt", answer, tuple(d.id for d in shown), "stop", 10, (), citations)


def _spec(run_id: str, experiment: str, mode: str, sha: str, n: int, model: str = "model-x") -> RunSpec:
    meta = METADATA_TYPES["gender"]
    return RunSpec(run_id, experiment, f"hash-{run_id}", model, None, "none", "float32", "cpu", "data.jsonl",
                   sha, "gender", mode, 0, "v1", None, {}, {"prompt": PromptConfig(mode=mode, metadata=meta).to_dict()}, n)


def _write(store: RunStore, run_id: str, experiment: str, mode: str, sha: str, gens: list[Generation],
           finish: bool = True, model: str = "model-x", planned: int | None = None) -> None:
    store.start_run(_spec(run_id, experiment, mode, sha, planned or len(gens), model))
    store.write_batch(run_id, gens)
    if finish:
        store.finish_run(run_id, "complete")


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return build_store(tmp_path_factory.mktemp("compare") / "c.duckdb")


def build_store(path: Path) -> Path:
    """Two 3-mode experiments and runs for the edge cases, written through RunStore."""
    rng = random.Random(17)
    store = RunStore(path)
    items = _items(rng, 40)
    store.put_items("sha1", items)
    extra = _items(rng, 5, prefix="z")
    store.put_items("sha1", extra)
    store.put_items("sha2", items)
    # Two experiments of three modes each: e1 cites well, e2 less well; e2's base misses 4 items.
    for exp, good, model in (("e1", 0.8, "model-x"), ("e2", 0.55, "model-y")):
        for mode in ("vanilla", "base", "cf"):
            chosen = items[:36] if (exp, mode) == ("e2", "base") else items
            _write(store, f"{exp}-{mode}", exp, mode, "sha1", [_generation(rng, it, good) for it in chosen], model=model)
    same = [_generation(rng, it, 0.7) for it in items]
    _write(store, "same-1", "s1", "base", "sha1", same)
    _write(store, "same-2", "s2", "base", "sha1", same)
    _write(store, "running", "r", "base", "sha1", [_generation(rng, it, 0.6) for it in items[:12]], finish=False,
           planned=40)
    _write(store, "disjoint", "d", "base", "sha1", [_generation(rng, it, 0.6) for it in extra])
    _write(store, "one", "o", "base", "sha1", [_generation(rng, items[3], 0.6)])
    _write(store, "other-data", "od", "base", "sha2", [_generation(rng, it, 0.6) for it in items[:20]])
    return path


def test_read_paired_is_query_metrics(db):
    side_a, side_b = resolve_side(db, "e1:base"), resolve_side(db, "e2-base")
    assert side_a.kind == "mode" and side_b.kind == "run"
    paired = read_paired(db, (side_a.runs["base"], side_b.runs["base"]))
    assert len(paired.item_ids) == 36 and paired.left_out == (4, 0)
    for run, values in zip(paired.runs, paired.metrics, strict=True):
        frame = metrics_for_run(db, run.run_id).set_index("item_id").loc[list(paired.item_ids)]
        for name in ("precision", "recall", "f1", "exact_match", "squad_em", "answer_recall", "n_citations"):
            assert values[name] == pytest.approx(frame[name].astype(float).to_numpy(), nan_ok=True)
        assert values["cites_nothing"] == pytest.approx((frame["n_citations"] == 0).astype(float).to_numpy())
    with connect(db, read_only=True) as conn:
        probs = dict(conn.execute("SELECT item_id, avg(probability) FROM citations WHERE run_id = 'e1-base' "
                                  "GROUP BY item_id").fetchall())
    expected = [probs.get(i, math.nan) for i in paired.item_ids]
    assert paired.metrics[0]["mean_probability"] == pytest.approx(expected, nan_ok=True)
    assert tuple(METRIC_COLUMNS) == cs.DEFAULT_METRICS


def test_kept_item_metrics_are_what_the_view_computes(db, tmp_path):
    """The writer keeps each complete run's per-item metrics (item_metric_rows); a read
    uses them only while they are all there and the run's content is what they were kept from,
    else computes them: the same arrays either way, to the bit. A running run has none kept."""
    import shutil

    copy = tmp_path / "c.duckdb"
    shutil.copyfile(db, copy)
    with connect(copy, read_only=True) as conn:
        kept = dict(conn.execute("SELECT run_id, count(*) FROM item_metric_rows GROUP BY run_id").fetchall())
    assert kept["e1-base"] == 40 and kept["e2-base"] == 36 and "running" not in kept
    runs = (resolve_side(copy, "e1-base").runs["base"], resolve_side(copy, "e2-base").runs["base"])
    from_kept = read_paired(copy, runs)
    with connect(copy) as conn:  # one kept row missing: e1-base's kept rows are not used
        conn.execute("DELETE FROM item_metric_rows WHERE run_id = 'e1-base' AND item_id = 'q0'")
        conn.execute("UPDATE item_metric_rows SET f1 = -1 WHERE run_id = 'e1-base'")
        conn.execute("DELETE FROM item_metric_rows WHERE run_id = 'e2-base'")
    computed = read_paired(copy, runs)
    assert from_kept.item_ids == computed.item_ids and from_kept.left_out == computed.left_out
    for got, want in zip(from_kept.metrics, computed.metrics, strict=True):
        for name in METRIC_COLUMNS:
            assert np.array_equal(got[name], want[name], equal_nan=True), name
    running = read_paired(copy, (resolve_side(copy, "e1-base").runs["base"], resolve_side(copy, "running").runs["base"]))
    assert len(running.item_ids) == 12


def test_view_sql_matches_read(db):
    # Every store has the view and the macro (store/views.sql, applied with migration 012).
    with connect(db) as conn:
        cursor = conn.execute("SELECT * FROM compare_runs('e1-base', 'e2-base')")
        names = [d[0] for d in cursor.description]
        rows = cursor.fetchall()
    paired = read_paired(db, (resolve_side(db, "e1-base").runs["base"], resolve_side(db, "e2-base").runs["base"]))
    assert [r[0] for r in rows] == list(paired.item_ids)
    for name in METRIC_COLUMNS:
        got_a = [np.nan if r[names.index(f"{name}_a")] is None else r[names.index(f"{name}_a")] for r in rows]
        got_d = [np.nan if r[names.index(f"{name}_diff")] is None else r[names.index(f"{name}_diff")] for r in rows]
        assert got_a == pytest.approx(paired.metrics[0][name], nan_ok=True)
        assert got_d == pytest.approx(paired.metrics[1][name] - paired.metrics[0][name], nan_ok=True)


def test_compare_two_runs_end_to_end(db):
    result = compare(CompareRequest("e1:base", "e2:base", resamples=500, permutations=999), db)
    (r,) = result.runs
    assert r.title == "base" and (r.pairing.n_paired, r.pairing.only_a, r.pairing.only_b) == (36, 4, 0)
    f1 = next(m for m in r.metrics if m.metric == "f1")
    items = r.items
    assert f1.diff == pytest.approx(items["f1_diff"].mean())
    assert f1.p_t == pytest.approx(scipy.stats.ttest_rel(items["f1_b"], items["f1_a"]).pvalue, rel=1e-9)
    perm = scipy.stats.permutation_test((items["f1_b"].to_numpy(), items["f1_a"].to_numpy()),
                                        lambda y, x, axis: np.mean(y - x, axis=axis), vectorized=True,
                                        permutation_type="samples", n_resamples=999, rng=np.random.default_rng(0))
    assert f1.test == cs.PERMUTATION and f1.p == pytest.approx(perm.pvalue, rel=1e-12)
    assert [m.p_holm for m in r.metrics] == pytest.approx(holm([m.p for m in r.metrics]))
    assert list(items["f1_diff"].abs()) == sorted(items["f1_diff"].abs(), reverse=True)
    em = r.em_flips
    a_em, b_em = items["exact_match_a"], items["exact_match_b"]
    assert em.right_to_wrong == int(((a_em == 100) & (b_em == 0)).sum())
    table = result.table()
    assert set(table["metric"]) == set(cs.DEFAULT_METRICS) and "p_holm" in table
    assert set(result.items()["run_a"]) == {"e1-base"}
    json.dumps(result.as_dict())  # JSON-ready


def test_compare_experiments_mode_by_mode_and_bias(db):
    result = compare(CompareRequest("e1", "e2", metrics=("f1", "exact_match"), resamples=300, permutations=499), db)
    assert [r.title for r in result.runs] == ["vanilla", "base", "cf"]
    measures = {b.measure: b for b in result.bias}
    assert set(measures) == {"CAS", "CAB"}
    cab = measures["CAB"]
    assert cab.pairing.n_paired == 36
    # Difference of per-item differences, against a direct computation on the stored metrics.
    f = {run: metrics_for_run(db, run).set_index("item_id")["f1"] for run in ("e1-base", "e1-cf", "e2-base", "e2-cf")}
    ids = list(cab.items["item_id"])
    da = (f["e1-base"] - f["e1-cf"]).loc[ids].to_numpy()
    db_ = (f["e2-base"] - f["e2-cf"]).loc[ids].to_numpy()
    m = next(x for x in cab.metrics if x.metric == "CAB_f1")
    assert m.diff == pytest.approx(100 * np.mean(db_ - da))
    assert m.p_t == pytest.approx(scipy.stats.ttest_rel(db_, da).pvalue, rel=1e-9)
    cas = next(x for x in measures["CAS"].metrics if x.metric == "CAS_f1")
    assert cas.mean_a >= 0 and cas.mean_b >= 0


def test_identical_runs_are_not_called_equivalent(db):
    # Identical runs have no spread; "equivalent within 1" would claim evidence there is
    # none of. Continuous metrics: undefined; 0/1 metrics: the exact bound of 0 of 40 discordant
    # (about +-9 points) does not fit within 1.
    result = compare(CompareRequest("same-1", "same-2", margins=Margins(1.0), resamples=200), db)
    (r,) = result.runs
    for m in r.metrics:
        assert m.diff == 0 and m.p == 1.0 and not m.verdict.startswith("equivalent"), m
        assert m.min_detectable is None and m.min_detectable_undefined, m
        if m.equivalence is not None and not METRICS_BINARY.get(m.metric):
            assert m.equivalence.undefined == cs.NO_SPREAD
    assert r.em_flips.right_to_wrong == r.em_flips.wrong_to_right == 0
    assert r.citation_flips.a_only_relevant + r.citation_flips.b_only_nonrelevant == 0
    assert any(n.startswith("n_citations: no equivalence margin (the plain margin is in points") for n in r.notes)


METRICS_BINARY = {name: spec.binary for name, spec in cs.METRICS.items()}


def test_refusals(db):
    with pytest.raises(UserError, match="nothing to pair"):
        compare(CompareRequest("e1-base", "disjoint"), db)
    with pytest.raises(UserError, match="different datasets.*; pair_by_id pairs them anyway$") as caught:
        compare(CompareRequest("e1-base", "other-data"), db)  # the Python API's name of the argument
    assert cli_message(caught.value).endswith("; --pair-by-id pairs them anyway")  # the CLI's option
    with pytest.raises(UserError, match="neither a run id nor an experiment"):
        compare(CompareRequest("e1-base", "nope"), db)
    with pytest.raises(UserError, match="unknown metric"):
        compare(CompareRequest("e1-base", "e2-base", metrics=("f2",)), db)
    with pytest.raises(UserError, match="positive"):
        compare(CompareRequest("e1-base", "e2-base", margins=Margins(-1.0)), db)
    with pytest.raises(UserError, match="names no cf run"):
        compare(CompareRequest("e1-base", "r:cf"), db)
    paired = compare(CompareRequest("e1-base", "other-data", pair_by_id=True, resamples=200), db).runs[0]
    assert paired.pairing.pair_by_id and paired.pairing.n_paired == 20


def test_one_item_and_a_running_run(db):
    (one,) = compare(CompareRequest("e1-base", "one", resamples=200), db).runs
    assert one.pairing.n_paired == 1 and all(m.verdict == "too few items" for m in one.metrics)
    (run,) = compare(CompareRequest("e1-base", "running", resamples=200), db).runs
    assert run.pairing.n_paired == 12 and run.pairing.only_a == 28
    assert any("running" in n and "12 of 40" in n for n in run.notes)
    # A run against an experiment: the experiment's run of the same mode.
    (mixed,) = compare(CompareRequest("e2", "same-1", metrics=("f1", "mean_probability"), resamples=200), db).runs
    assert mixed.title == "base" and mixed.run_a.run_id == "e2-base" and mixed.run_b.run_id == "same-1"


def test_cli_text_json_csv_and_errors(db, capsys):
    assert main(["compare", "e1:base", "e2:base", "--db", str(db), "--resamples", "200", "--items", "3",
                 "--equivalence-margin", "2", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "paired 36 items by id; left out: 4 only in A, 0 only in B" in out
    assert "f1: " in out and "paired t-test p" in out and "Holm p" in out and "exact McNemar p" in out
    assert "paired permutation p" in out and "approximate below 300 items" in out and "(exact)" in out
    assert "TOST (paired t) within +-2" in out and "exact TOST (discordant pairs) within +-2" in out
    assert "n_citations: no equivalence margin (the plain margin is in points" in out
    assert "detectable at 80% power" in out and "exact match flips" in out and "citation flips" in out
    assert "items that differ most in f1" in out
    assert main(["compare", "e1", "e2", "--db", str(db), "--metric", "f1,precision", "--json", "--resamples", "200"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["comparison"] for r in data["runs"]] == ["vanilla", "base", "cf"]
    assert {b["measure"] for b in data["bias"]} == {"CAS", "CAB"}
    assert [m["metric"] for m in data["runs"][0]["metrics"]] == ["f1", "precision"]
    assert main(["compare", "same-1", "same-2", "--db", str(db), "--format", "csv", "--metric", "f1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "comparison,run_a,run_b,item_id,f1_a,f1_b,f1_diff,changes_on_rerun" and len(lines) == 41
    for bad in (["e1-base", "disjoint"], ["e1-base", "e2-base", "--items", "-1"], ["e1-base", "e2-base", "--metric", "x"],
                ["e1-base", "e2-base", "--resamples", "5"]):
        assert main(["compare", *bad, "--db", str(db)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_cli_text_is_the_table_and_one_short_verdict_line_per_metric(db, capsys):
    # Every table row came again as a long sentence; now one short line per metric names
    # its verdict and the test(s) behind it, and --explain gives the sentences.
    argv = ["compare", "e1:base", "e2:base", "--db", str(db), "--resamples", "200", "--items", "0", "--margin", "2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    result = compare(CompareRequest("e1:base", "e2:base", margins=Margins(2.0), resamples=200), db)
    (r,) = result.runs
    lines = out.splitlines()
    for m in r.metrics:
        (line,) = [x for x in lines if x.startswith(f"{m.metric}: ")]
        assert line.startswith(f"{m.metric}: {m.verdict} ({m.test}, Holm p "), line
        if m.equivalence is not None:
            assert f"; {m.equivalence.method} within +-2, Holm p " in line, line
        assert len(line) <= 120, line
    assert "is detectable at 80% power (" not in out and "paired t-test p" not in out  # the sentences
    # 35: the tables, a verdict line per metric, the flips and the footer, whose last line says
    # once that no rerun tells the flips from engine noise.
    assert max(len(x) for x in lines) <= 130 and len(lines) <= 35, out
    assert lines[-1].startswith("flips: changes on a rerun too: unknown, no rerun"), out
    assert "--explain" in out
    assert main([*argv, "--explain"]) == 0
    explained = capsys.readouterr().out
    assert "is detectable at 80% power (" in explained and "paired t-test p" in explained
    for m in r.metrics:
        assert sum(x.startswith(f"{m.metric}: ") for x in explained.splitlines()) == 1


def test_metrics_with_too_few_items_share_one_line(db, capsys):
    assert main(["compare", "e1-base", "one", "--db", str(db), "--resamples", "200", "--items", "0"]) == 0
    out = capsys.readouterr().out
    assert "precision, recall, f1, exact_match, squad_em, answer_recall, n_citations, cites_nothing, mean_probability: " \
           "too few items (fewer than 2 paired; no test)" in out.splitlines()


def test_margin_notes_are_one_short_line(db):
    (r,) = compare(CompareRequest("e1:base", "e2:base", margins=parse_margins("CAB_f1=3"), resamples=200), db).runs
    assert r.notes == ("no equivalence test here: the margins name only CAB_f1",)
    (r,) = compare(CompareRequest("e1:base", "e2:base", margins=parse_margins("f1=3,recall=2"), resamples=200), db).runs
    assert r.notes == ("equivalence tested only for the metrics given a margin: recall, f1",)


def test_the_reads_bench_runs_and_finds_the_same_arrays(db):
    """scripts/bench_compare_reads.py (docs/figures.md's compare reads at 1M) on a small store."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "scripts/bench_compare_reads.py", str(db), "e1-base", "e2-base"],
                          capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[4])
    assert done.returncode == 0, done.stderr
    assert "36 paired items; the same arrays: True" in done.stdout

