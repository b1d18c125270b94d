"""The choice model's fit at scale: equal strata fitted once as patterns, equal to
statsmodels' ConditionalLogit (coefficients and standard errors to 1e-6) on data sets where
statsmodels converges, Newton with step halving where plain Newton diverges, a fit stopped short
says so, and why-cited's rows read as numbers (no column of Python strings)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from statsmodels.discrete.conditional_models import ConditionalLogit

from engine.statistics.choice_fit import _complement, _newton, fit_conditional_logit, strata
from engine.statistics.choice_simulation import ChoiceTruth, SimulationSettings, simulate_choices


def _discrete(seed: int, answers: int, shown: int, max_cited: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """0/1 and position covariates (as the battery's), answers citing 1..max_cited documents by
    a logit with known effects: many answers share their rows, so they make few patterns."""
    rng = np.random.default_rng(seed)
    position = np.tile(np.arange(1, shown + 1, dtype=float), answers)
    relevant = (rng.random(answers * shown) < 0.3).astype(float)
    label = (rng.random(answers * shown) < 0.5).astype(float)
    x = np.column_stack([relevant, label, position])
    eta = x @ np.array([1.2, 0.4, -0.1]) + rng.gumbel(size=len(x))
    y = np.zeros(len(x))
    for a in range(answers):
        rows = slice(a * shown, (a + 1) * shown)
        k = rng.integers(1, max_cited + 1)
        y[rows][np.argsort(-eta[rows])[:k]] = 1.0
    return y, x, np.repeat(np.arange(answers), shown)


def _statsmodels(y, x, groups):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ConditionalLogit(y, x, groups=groups).fit(method="newton", maxiter=100, disp=False)


@pytest.mark.parametrize("seed, answers, shown, max_cited", [(1, 400, 4, 1), (2, 300, 5, 2), (3, 250, 6, 3),
                                                             (4, 600, 3, 2)])
def test_the_fit_equals_statsmodels_where_statsmodels_converges(seed, answers, shown, max_cited):
    y, x, groups = _discrete(seed, answers, shown, max_cited)
    want = _statsmodels(y, x, groups)
    # statsmodels converged: finite, and its score is zero there
    assert np.isfinite(want.params).all() and np.abs(want.model.score(want.params)).max() < 1e-6
    got = fit_conditional_logit(y, x, groups)
    assert got.converged and not got.separations
    assert got.params == pytest.approx(want.params, rel=1e-6, abs=1e-9)
    assert got.bse == pytest.approx(want.bse, rel=1e-6)
    assert got.llf == pytest.approx(want.llf, rel=1e-10)
    # float32 rows (what the choice model passes: exact for 0/1 and positions) fit the same
    same = fit_conditional_logit(y, x.astype(np.float32), groups)
    assert same.params == pytest.approx(got.params, rel=1e-12, abs=1e-14)


def test_equal_strata_are_one_pattern_and_the_scores_still_cluster_by_stratum():
    y, x, groups = _discrete(5, 2000, 4, 2)
    blocks = strata(y, x, groups)
    answers = sum(len(s.pattern) for s in blocks)
    patterns = sum(len(s.x) for s in blocks)
    assert answers == 2000 - sum(1 for g in range(2000) if y[groups == g].sum() in (0, 4))
    assert patterns < answers / 2  # the work per Newton step is the patterns'
    assert sum(float(s.count.sum()) for s in blocks) == answers
    # The sandwich sums each cluster's own scores: with clusters of 10 answers it is not the model-based one.
    fit = fit_conditional_logit(y, x, groups, groups // 10)
    assert fit.n_clusters == 200 and not np.allclose(fit.bse_cluster, fit.bse, rtol=1e-3)
    by_answer = fit_conditional_logit(y, x, groups)
    assert by_answer.n_clusters == answers


def _ten_shown() -> pd.DataFrame:
    settings = SimulationSettings(n_items=30, n_shown=10, relevant_counts=(1,))
    truth = ChoiceTruth(relevant=math.log(4), label=math.log(2), nothing=-20)
    return simulate_choices(settings, truth, np.random.default_rng(0)).frame


def test_where_plain_newton_diverges_step_halving_converges_and_a_fit_stopped_short_says_so():
    f = _ten_shown()
    x = np.column_stack([f["relevant"].to_numpy(float), (f["label"] == "A").to_numpy(float)])
    y, groups = f["cited"].to_numpy(float), f["answer"].to_numpy()
    assert np.isnan(_statsmodels(y, x, groups).params).all()  # plain Newton from zero: NaN
    fit = fit_conditional_logit(y, x, groups)
    assert fit.converged and np.isfinite(fit.params).all()
    # Converged means the check holds: the gradient is zero at the estimate.
    blocks = strata(y, x, groups)
    from engine.statistics.choice_fit import _pieces

    assert np.abs(_pieces(blocks, fit.params)[1]).max() < 1e-6
    # Two steps are not enough from zero: the fit says it did not converge.
    _, converged, iterations = _newton(blocks, _complement(np.zeros((2, 0)), 2), max_iter=2)
    assert not converged and iterations == 2


def test_a_fit_that_did_not_converge_prints_a_warning_not_a_bare_verdict(monkeypatch):
    import engine.statistics.choice_fit as choice_fit
    from engine.commands.why_cited import format_text
    from engine.statistics.choice_model import fit_choice_model
    from engine.statistics.suppression import suppression_rates
    from engine.usecases.bias.why_cited import WhyCitedResult

    f = _ten_shown()
    real = choice_fit._newton
    monkeypatch.setattr(choice_fit, "_newton", lambda blocks, basis, max_iter=100: real(blocks, basis, max_iter=2))
    fit = fit_choice_model(f, label_reference="B")
    assert not fit.converged
    text = format_text(WhyCitedResult(("e",), 1, fit, suppression_rates(f)))
    assert "warning: the fit did not converge" in text


def test_why_cited_reads_numbers_not_text(tmp_path):
    from engine.usecases.bias.why_cited import WhyCitedRequest, chosen_answers
    from store.queries.decisions import decision_codes
    from tests.engine.usecases.bias.test_why_cited import store_simulated

    sim = simulate_choices(SimulationSettings(n_items=40, label_a="a woman", label_b="a man"), ChoiceTruth(),
                           np.random.default_rng(3))
    db, experiment = store_simulated(tmp_path, sim.frame)
    coded = decision_codes(db, [experiment])
    assert len(coded) == len(sim.frame)
    for name, column in coded.rows.items():
        assert column.dtype.kind in "biu", (name, column.dtype)  # integers and booleans only
    assert set(coded.labels) == {"a woman", "a man"}
    chosen = chosen_answers(WhyCitedRequest(experiments=(experiment,)), db)
    assert chosen.experiment_ids == (experiment,)
    assert set(chosen.labels) == {"a woman", "a man"}
    for column in (chosen.condition, chosen.item, chosen.silent, *(a for s in chosen.patterns.shapes
                                                                  for a in (s.rows, s.pattern, s.chosen, s.cluster))):
        assert column.dtype.kind in "biuf", column.dtype  # numbers only: no answer's text is made


def test_a_coded_design_fits_as_its_rows_and_the_separation_rows_do_not_depend_on_the_chunk(monkeypatch):
    """CodedDesign (each row a code into a table of distinct rows: the study model's 38 columns
    took 1.5 GB at a million answers) gives the fit of the rows it stands for; the separation
    programme's distinct differences, made chunk by chunk, are those of one chunk."""
    from engine.statistics import choice_fit
    from engine.statistics.choice_fit import CodedDesign, _differences

    y, x, groups = _discrete(5, 3_000, 5, 2)
    table, codes = np.unique(x, axis=0, return_inverse=True)
    dense = fit_conditional_logit(y, x, groups)
    coded = fit_conditional_logit(y, CodedDesign(codes.ravel(), table), groups)
    assert np.allclose(coded.params, dense.params, rtol=1e-10, atol=0)
    assert np.allclose(coded.cov_cluster, dense.cov_cluster, rtol=1e-8, atol=0)
    whole = _differences(strata(y, x, groups))
    monkeypatch.setattr(choice_fit, "_CHUNK", 64)  # a few patterns a chunk
    chunked = _differences(strata(y, x, groups))
    assert whole[0].shape[0] > 10
    assert np.array_equal(whole[0], chunked[0]) and np.array_equal(whole[1], chunked[1])


@pytest.mark.parametrize("per_run", [True, False], ids=["run by run", "in one statement"])
def test_the_decision_codes_decode_to_the_decision_rows(tmp_path, monkeypatch, per_run):
    """Each code of store.queries.decision_codes names the row's experiment, run, mode, item and
    label in the lists it returns (item codes in item id order, labels sorted, -1 for none): the
    rows decoded are citation_decisions' rows, in the model's order, whether the rows were read
    run by run (a few runs of a big store) or in one statement."""
    from store.queries import decisions
    from store.queries.decisions import POSITION_GROUPS, decision_codes, decision_frame
    from tests.demo.handlers.test_app_bias import build_store

    monkeypatch.setattr(decisions, "_CITATIONS_PER_ROW_RUN_BY_RUN", 0 if per_run else 10**12)
    db = build_store(tmp_path / "s.duckdb")
    ids = ["exp-race", "exp-gender", "exp-hai"]  # not sorted: codes follow the order given
    coded = decision_codes(db, ids)
    frame = decision_frame(db, ids)
    assert len(coded) == len(frame) > 300 and len(coded.run_ids) == 8
    items = sorted(set(frame["item_id"]))
    c = coded.rows
    decoded = pd.DataFrame({
        "experiment_id": np.asarray(coded.experiment_ids, dtype=object)[c["experiment"]],
        "run_id": np.asarray(coded.run_ids, dtype=object)[c["run"]],
        "mode": np.asarray(coded.modes, dtype=object)[c["mode"]],
        "item_id": np.asarray(items, dtype=object)[c["item"]],
        "position": c["position"].astype(int),
        "position_group": np.asarray(POSITION_GROUPS, dtype=object)[c["position_group"]],
        "label": [coded.labels[k] if k >= 0 else "(none)" for k in c["label"]],
        "cited": c["cited"], "relevant": c["relevant"]})
    assert list(coded.labels) == sorted(set(frame["label"].dropna())) and (c["label"] == -1).any()
    want = frame[list(decoded.columns)].copy()
    want["label"] = [v if isinstance(v, str) else "(none)" for v in want["label"]]
    want["relevant"] = want["relevant"].fillna(False).astype(bool)
    want["cited"] = want["cited"].fillna(False).astype(bool)
    want["position"] = want["position"].astype(int)
    rank = {e: k for k, e in enumerate(ids)}
    for f in (decoded, want):
        f["_e"] = f["experiment_id"].map(rank)
        f["_m"] = f["mode"].map({m: k for k, m in enumerate(coded.modes)})
    want = want.sort_values(["_e", "_m", "run_id", "item_id", "position"], kind="stable").reset_index(drop=True)
    pd.testing.assert_frame_equal(decoded.reset_index(drop=True), want, check_dtype=False)


@pytest.mark.parametrize("per_run", [True, False], ids=["run by run", "in one statement"])
def test_every_decision_row_is_read_past_a_row_group(tmp_path, monkeypatch, per_run):
    """More decision rows than a DuckDB row group (122,880): every one is read, run by run or in
    one statement (an INSERT of that many rows into a temporary table of a read-only connection
    lost them to scans in DuckDB 2.0)."""
    from store.db import connect
    from store.queries import decisions
    from tests.support.helpers import load_script

    monkeypatch.setattr(decisions, "_CITATIONS_PER_ROW_RUN_BY_RUN", 0 if per_run else 10**12)
    built = load_script("bench_app").build_store(tmp_path / "big.duckdb", n_items=5_000, n_runs=3)
    with connect(built.path, read_only=True) as conn:
        (want,) = conn.execute("SELECT count(*) FROM citation_decisions").fetchall()[0]
    coded = decisions.decision_codes(built.path, [built.experiment_id])
    assert len(coded) == want == 150_000
    assert len(np.unique(coded.rows["item"])) == 5_000 and coded.rows["cited"].sum() > 10_000
