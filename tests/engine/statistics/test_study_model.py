"""One model of label bias across a study: the per-configuration label effect and the
interaction test against statsmodels run directly, the refusals, a small coverage simulation, and
`why-cited --study NAME` end to end on a study of imported answers."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from statsmodels.discrete.conditional_models import ConditionalLogit

from engine.errors import UserError
from engine.statistics.study_model import fit_study_model
from engine.statistics.study_simulation import StudyTruth, simulate_study, study_coverage
from tests.support.helpers import cli, rows, write_jsonl

AXES = ["model", "order"]


@pytest.fixture(scope="module")
def study() -> pd.DataFrame:
    return simulate_study(StudyTruth(n_items=80, label_sd=0.3), np.random.default_rng(11))


def _statsmodels(frame: pd.DataFrame):
    """statsmodels' ConditionalLogit on the same columns, and the cluster-robust (by item) sandwich
    built from its own Hessian and per-answer scores (G / (G - 1), as statsmodels' cluster covariance)."""
    config = "model=" + frame["model"] + ", order=" + frame["order"]
    configs = list(dict.fromkeys(config))
    a = (frame["label_side"] == "A").to_numpy(float)
    nuisance = {"relevant": frame["relevant"].to_numpy(float),
                "position[middle]": (frame["position_group"] == "middle").to_numpy(float),
                "position[last]": (frame["position_group"] == "last").to_numpy(float)}
    columns = {f"{name}:{c}": x * (config == c).to_numpy(float)  # relevance and position per configuration
               for name, x in nuisance.items() for c in configs}
    columns["label[A]"] = a
    for c in configs[1:]:
        columns[f"label[A]:{c}"] = a * (config == c).to_numpy(float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # statsmodels drops the uninformative answers, and says so
        model = ConditionalLogit(frame["cited"].to_numpy(float), np.column_stack(list(columns.values())),
                                 groups=frame["answer"].to_numpy())
        result = model.fit(method="newton", maxiter=100, disp=False)
    b = np.asarray(result.params)
    bread = np.linalg.inv(-model.hessian(b))
    per = frame.groupby("answer", sort=False)["cited"].agg(["sum", "size"])
    informative = [g for g in per.index if 0 < per.loc[g, "sum"] < per.loc[g, "size"]]
    assert len(informative) == model._n_groups
    item_of = dict(zip(frame["answer"], frame["item"], strict=True))
    scores: dict[str, np.ndarray] = {}
    for g, name in enumerate(informative):
        scores[item_of[name]] = scores.get(item_of[name], 0) + model.score_grp(g, b)
    s = np.array(list(scores.values()))
    n = len(s)
    sandwich = bread @ (s.T @ s * n / (n - 1)) @ bread
    return result, sandwich, list(columns)


def test_the_per_configuration_effect_is_statsmodels_conditional_logit_with_the_item_sandwich(study):
    fit = fit_study_model(study, AXES)
    result, sandwich, names = _statsmodels(study)
    assert list(fit.terms) == names
    b = np.asarray(result.params)
    assert np.allclose(fit.params, b, rtol=1e-7, atol=1e-9)
    first = names.index("label[A]")
    for i, e in enumerate(fit.configurations):
        row = np.zeros(len(b))
        row[first] = 1.0
        if i:
            row[first + i] = 1.0
        assert e.log_odds == pytest.approx(row @ b, rel=1e-7, abs=1e-9)
        assert e.se == pytest.approx(math.sqrt(row @ sandwich @ row), rel=1e-5)
        assert e.se_model == pytest.approx(math.sqrt(row @ np.asarray(result.cov_params()) @ row), rel=1e-5)
        assert (e.ci_low, e.ci_high) == pytest.approx((e.log_odds - 1.959963984540054 * e.se,
                                                       e.log_odds + 1.959963984540054 * e.se), rel=1e-12)
        assert e.odds_ratio == pytest.approx(math.exp(e.log_odds))
    assert [e.configuration for e in fit.configurations] == [
        "model=m1, order=ranked", "model=m1, order=reversed", "model=m2, order=ranked", "model=m2, order=reversed"]


def test_the_interaction_wald_test_is_statsmodels_wald_test(study):
    fit = fit_study_model(study, AXES)
    result, sandwich, names = _statsmodels(study)
    r = np.zeros((3, len(names)))
    r[:, names.index("label[A]") + 1:] = np.eye(3)
    theirs = result.wald_test(r, cov_p=sandwich, scalar=True)
    assert fit.interaction is not None and fit.interaction.df == 3
    assert fit.interaction.chi2 == pytest.approx(float(theirs.statistic), rel=1e-5)
    assert fit.interaction.p == pytest.approx(float(theirs.pvalue), rel=1e-4)
    # Per axis: the label effect does not depend on order = m1 and m2 each equal between the orders.
    order = next(t for t in fit.per_axis if "on order" in t.hypothesis)
    first = names.index("label[A]")
    ro = np.zeros((2, len(names)))
    ro[0, first + 1] = 1.0  # m1 reversed - m1 ranked
    ro[1, first + 3], ro[1, first + 2] = 1.0, -1.0  # m2 reversed - m2 ranked
    theirs = result.wald_test(ro, cov_p=sandwich, scalar=True)
    assert order.df == 2 and order.chi2 == pytest.approx(float(theirs.statistic), rel=1e-5)


def test_relevance_and_position_are_fitted_per_configuration():
    # Two models that weigh relevance differently (OR 2 against 10) with equal label effects: one
    # relevance coefficient shared by both misfits each, and the misfit leaks into the label
    # effects (the joint test rejected 13% at 5% nominal; scripts/study_model_coverage.py).
    truth = StudyTruth(axes=(("model", ("m1", "m2")),), label=(math.log(1.5),) * 2,
                       relevant_by=(math.log(2.0), math.log(10.0)), n_items=400)
    fit = fit_study_model(simulate_study(truth, np.random.default_rng(5)), ["model"])
    by = dict(zip(fit.terms, fit.params, strict=True))
    assert set(fit.terms) == {f"{t}:model={m}" for t in ("relevant", "position[middle]", "position[last]")
                              for m in ("m1", "m2")} | {"label[A]", "label[A]:model=m2"}
    assert by["relevant:model=m1"] == pytest.approx(math.log(2.0), abs=0.35)
    assert by["relevant:model=m2"] == pytest.approx(math.log(10.0), abs=0.5)


def test_a_separation_names_its_configuration_level_and_answers(study):
    # No answer of model m2 in the ranked order cites the document shown last: position[last]
    # separates there, and only there; the note says where, which way and in how many answers.
    there = ((study["model"] == "m2") & (study["order"] == "ranked")).to_numpy()
    separated = study.assign(cited=study["cited"] & ((study["position_group"] != "last") | ~there))
    fit = fit_study_model(separated, AXES)
    note = next(n for n in fit.notes if "separation" in n)
    answers = separated[there].groupby("answer")["cited"].sum()
    informative = int(answers.between(1, 4).sum())  # every answer shows a last document
    assert note.startswith("'position[last]' in configuration model=m2, order=ranked, being shown last (against "
                           f"first): in each of {informative:,} of the {fit.n_informative:,} informative answers "
                           "(those whose documents differ in it), the answer cites no document with it while leaving "
                           "one without it uncited: its odds ratio is 0")
    assert len(fit.configurations) == 4
    # The label separating in one configuration is refused, saying where and which way.
    label_a = (study["label_side"] == "A").to_numpy()
    with pytest.raises(UserError, match=r"^the label separates cited from uncited documents: 'label\[A\]' in "
                                        r"configuration model=m2, order=ranked, label A \(against label B\): in each of "
                                        r"[0-9,]+ of the [0-9,]+ informative answers .* its odds ratio is infinite"):
        fit_study_model(study.assign(cited=study["cited"] & (label_a | ~there)), AXES)


def test_pairwise_differences_are_holm_corrected_and_say_so(study):
    from statsmodels.stats.multitest import multipletests

    from engine.statistics.stats import holm

    fit = fit_study_model(study, AXES)
    assert fit.correction == "Holm" and len(fit.pairwise) == 6
    reject, want, _, _ = multipletests([d.p for d in fit.pairwise], alpha=0.05, method="holm")
    assert [d.p_adjusted for d in fit.pairwise] == pytest.approx(list(want), rel=1e-12)
    assert [d.reject for d in fit.pairwise] == list(reject)
    ps = np.random.default_rng(0).uniform(0, 0.2, size=15).tolist() + [0.01, 0.01, 0.9]
    assert holm(ps) == pytest.approx(list(multipletests(ps, method="holm")[1]), rel=1e-12)
    by = {e.configuration: e.log_odds for e in fit.configurations}
    assert all(d.difference == pytest.approx(by[d.b] - by[d.a]) for d in fit.pairwise)


def test_an_axis_with_one_level_is_no_axis(study):
    one = study[study["order"] == "ranked"]
    fit = fit_study_model(one, AXES)
    assert fit.axes == ("model",) and fit.dropped_axes == (("order", "one level (ranked): not an axis"),)
    assert len(fit.configurations) == 2 and fit.interaction is not None and fit.interaction.df == 1
    single = fit_study_model(one[one["model"] == "m1"], AXES)
    assert [c.configuration for c in single.configurations] == ["all"] and single.axes == ()
    assert single.interaction is None and single.pairwise == () and len(single.dropped_axes) == 2


def test_what_cannot_be_estimated_is_refused_in_one_line_naming_it(study):
    silent = study.assign(cited=False)
    with pytest.raises(UserError, match="^no citing answers"):
        fit_study_model(silent, AXES)
    # One item in a configuration.
    keep = (study["model"] != "m2") | (study["order"] != "reversed") | (study["item"] == "q0")
    with pytest.raises(UserError, match=r"^configuration model=m2, order=reversed has one item \(q0\)"):
        fit_study_model(study[keep], AXES)
    # The label does not vary within any answer of a configuration (vanilla answers).
    vanilla = study.copy()
    mine = ((vanilla["model"] == "m1") & (vanilla["order"] == "reversed")).to_numpy()
    vanilla.loc[mine, "label_side"] = None
    with pytest.raises(UserError, match="label does not vary .* configuration model=m1, order=reversed"):
        fit_study_model(vanilla, AXES)
    # Base answers alone: the label moves with relevance.
    base_only = study[(study["mode"] == "base") | (study["model"] == "m1")]
    with pytest.raises(UserError, match="configuration model=m2, order=ranked the label moves with relevance"):
        fit_study_model(base_only, AXES)
    for message in ("no citing answers", "has one item", "does not vary", "moves with relevance"):
        assert "\n" not in message


def test_the_intervals_cover_the_known_effects_in_a_small_simulation():
    # 60 studies of 40 items (item intercepts and a label slope shared across the configurations):
    # each 95% interval's coverage within a wide band (binomial SD at 60 draws: 2.8 points); the full
    # table, 200 draws, is scripts/study_model_coverage.py's (docs/figures.md).
    coverage = study_coverage(StudyTruth(n_items=40, label_sd=0.3), draws=60, seed=33)
    print("\n".join(f"{what}: truth {t:+.3f}, median {m:+.3f}, robust {r:.1%}, model {mb:.1%}"
                    for what, t, m, r, mb in coverage.rows))
    assert len(coverage.rows) == 4 + 6
    for what, truth, median, robust, _ in coverage.rows:
        assert robust >= 0.85, what
        assert abs(median - truth) < 0.25, what
    assert coverage.interaction_rejection > 0.2  # the effects differ: the joint test sees it (size 5%)


# ---------------------------------------------------------------- end to end


def _store_study(tmp: Path, frame: pd.DataFrame) -> Path:
    """Import each model's base and cf answers as one experiment (gender: 'a woman' / 'a man') and
    group them as the study 'grid' whose grid lists model (two levels), metadata and top_k (one)."""
    from store.db import connect

    first = frame[(frame["model"] == "m1") & (frame["mode"] == "base")].sort_values(["item", "position"])
    items = [{"id": item, "question": f"question {item}", "answers": ["gold"],
              "documents": [{"id": f"{item}-d{p}", "text": f"document {p} of {item}", "relevant": bool(r)}
                            for p, r in zip(d["position"], d["relevant"], strict=True)]}
             for item, d in first.groupby("item", sort=False)]
    dataset = write_jsonl(tmp / "sim.jsonl", items)
    db = tmp / "study.duckdb"
    ids = []
    for model in ("m1", "m2"):
        join: list[str] = []
        for mode in ("base", "cf"):
            part = frame[(frame["model"] == model) & (frame["mode"] == mode)].sort_values(["item", "position"])
            answers = [{"item_id": item, "answer": "It is gold" + "".join(
                f" [{p}]" for p in d.loc[d["cited"], "position"]) + "."} for item, d in part.groupby("item", sort=False)]
            path = write_jsonl(tmp / f"{model}-{mode}.jsonl", answers)
            assert cli("import", "--dataset", str(dataset), "--answers", str(path), "--mode", mode, "--metadata",
                       "gender", "--name", model, "--db", str(db), *join) == 0
            if not join:
                ids.append(rows(db, "SELECT experiment_id FROM runs WHERE model = ?", [model])[0][0])
                join = ["--experiment", ids[-1]]
    with connect(db) as conn:
        conn.execute("INSERT INTO studies VALUES ('grid', now(), ?)",
                     [json.dumps({"model": ["m1", "m2"], "metadata": ["gender"], "top_k": [5]})])
        for i, experiment in enumerate(ids):
            conn.execute("INSERT INTO study_experiments VALUES ('grid', ?, ?)", [experiment, i])
    return db


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    truth = StudyTruth(axes=(("model", ("m1", "m2")),), label=(math.log(2.0), 0.0), n_items=40)
    frame = simulate_study(truth, np.random.default_rng(5))
    return _store_study(tmp_path_factory.mktemp("study"), frame), frame


def test_why_cited_study_on_the_stored_answers_equals_the_fit_of_the_simulated_frame(stored, capsys):
    from engine.api import StudyEffectsRequest, why_cited_study

    db, frame = stored
    result = why_cited_study(StudyEffectsRequest("grid"), db)
    direct = fit_study_model(frame, ["model"])
    assert [e.configuration for e in result.fit.configurations] == ["model=m1", "model=m2"]
    for got, want in zip(result.fit.configurations, direct.configurations, strict=True):
        assert (got.label_a, got.label_b) == ("a woman", "a man")
        assert got.log_odds == pytest.approx(want.log_odds, rel=1e-9)
        assert got.se == pytest.approx(want.se, rel=1e-9)
    assert dict(result.fit.dropped_axes) == {"metadata": "one level (gender) in the study's grid: not an axis",
                                             "top_k": "one level (5) in the study's grid: not an axis"}
    assert result.saved is None and rows(db, "SELECT count(*) FROM study_label_effects") == [(0,)]
    assert list(result.effects()["configuration"]) == ["model=m1", "model=m2"]

    assert cli("why-cited", "--study", "grid", "--db", str(db), "--save") == 0
    out = capsys.readouterr().out
    assert "model=m1" in out and "Wald test: the label effect is the same in every configuration" in out
    assert "df = 1" in out and "Holm-corrected" in out and "not an axis: top_k" in out
    assert "saved 2 rows to the table study_label_effects" in out
    stored_rows = rows(db, "SELECT configuration, log_odds, se, interaction_df FROM study_label_effects "
                           "WHERE study = 'grid' AND modes = 'all' ORDER BY configuration")
    assert [(c, df) for c, _, _, df in stored_rows] == [("model=m1", 1), ("model=m2", 1)]
    assert stored_rows[0][1] == pytest.approx(direct.configurations[0].log_odds, rel=1e-9)
    # A second save replaces the study's rows.
    assert cli("why-cited", "--study", "grid", "--db", str(db), "--save", "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["saved"] == 2 and len(data["configurations"]) == 2
    assert rows(db, "SELECT count(*) FROM study_label_effects") == [(2,)]


@pytest.mark.parametrize("args, message", [
    (("--study", "nope"), "no study 'nope'"),
    (("--study", "grid", "--mode", "base"), "study 'grid': in configuration model=m1 the label moves with relevance"),
    (("--study", "grid", "--interaction", "label:relevant"), "--interaction applies to the pooled choice model"),
    (("--experiment", "x", "--save"), "--save keeps the study model's effects"),
])
def test_bad_study_requests_are_refused_in_one_line(stored, capsys, args, message):
    db, _ = stored
    assert cli("why-cited", *args, "--db", str(db)) != 0
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


def test_pooled_keeps_the_choice_model_of_the_study(stored, capsys):
    db, _ = stored
    assert cli("why-cited", "--study", "grid", "--pooled", "--db", str(db)) == 0
    assert "citation choice model over 2 experiments" in capsys.readouterr().out


def test_the_study_model_reads_the_store_a_chunk_of_runs_at_a_time(stored):
    """The study's answers come from store.queries.decision_code_chunks (numbers, never the
    decision rows' text: 5.9 GB at a million answers) folded into patterns (every row
    at once was ~17 GB at ten million answers); the fit equals the simulated frame's, and a read
    one run at a time gives the same fit as one read of every run."""
    from engine.statistics.study_model import fit_study_answers
    from engine.usecases.study.effects import StudyEffectsRequest, read_study_answers, study_answers

    db, frame = stored
    answers, experiments, axes, _ = study_answers(StudyEffectsRequest("grid"), db)
    assert len(experiments) == 2 and axes == ["model"]
    assert answers.patterns.n_answers == frame["answer"].nunique()
    assert answers.item_names is not None and set(answers.item_names) == set(frame["item"])
    whole = fit_study_answers(answers)
    assert whole.params == pytest.approx(fit_study_model(frame, ["model"]).params, rel=1e-9)
    # Read a run at a time (the smallest chunk), the same fit.
    one_run, _ = read_study_answers(StudyEffectsRequest("grid"), db, chunk_decisions=1)
    assert fit_study_answers(one_run) == whole


def _identified_by_least_squares(nuisance, label_a, cfg, answers, k):
    """The check as it was before every within-answer column at once, numpy's lstsq."""
    from engine.statistics.study_checks import TOL as _TOL
    from engine.statistics.study_checks import within as _within

    cols = [label_a] + [label_a * (cfg == i) for i in range(1, k)]
    basis = np.column_stack([_within(c, answers) for c in cols])
    kept, notes = [], []
    for name, column in nuisance.items():
        x = _within(column, answers)
        if np.abs(x).max() <= _TOL * max(1.0, float(np.abs(column).max())):
            notes.append(name)
            continue
        coef, *_ = np.linalg.lstsq(basis, x, rcond=None)
        if np.linalg.norm(x - basis @ coef) <= 1e-7 * np.linalg.norm(x):
            notes.append(name)
            continue
        kept.append(name)
        basis = np.column_stack([basis, x])
    return kept, notes


def test_the_identification_check_keeps_what_least_squares_keeps(study):
    """_identified_nuisance works per configuration and by Gram-Schmidt (the stacked
    columns were 1.8 GB at a million answers); it keeps and drops what lstsq over all of them did:
    columns fixed by the label columns, by kept nuisance columns or by both, and constant ones."""
    from engine.statistics.study_answers import configuration_names
    from engine.statistics.study_checks import identified_nuisance as _identified_nuisance

    answers = study["answer"].to_numpy()
    cfg = configuration_names(study, AXES).codes.astype(np.int64)
    k = int(cfg.max()) + 1
    label_a = (study["label_side"] == "A").to_numpy(float)
    relevant = study["relevant"].to_numpy(float)
    middle = (study["position_group"] == "middle").to_numpy(float)
    rng = np.random.default_rng(3)
    nuisance = {
        "relevant": relevant, "position[middle]": middle,
        "copy of relevant": relevant.copy(),                          # fixed by a kept column
        "label in configuration 1": label_a * (cfg == 1),             # fixed by the label columns
        "relevant - 2 label + middle": relevant - 2 * label_a + middle,  # fixed by both
        "configuration": cfg.astype(float),                           # one value within each answer
        "noise": rng.random(len(study)),                              # identified
    }
    got = _identified_nuisance(nuisance, {n: max(1.0, float(np.abs(c).max())) for n, c in nuisance.items()},
                               label_a, cfg, answers)
    want_kept, want_dropped = _identified_by_least_squares(nuisance, label_a, cfg, answers, k)
    assert got[0] == want_kept == ["relevant", "position[middle]", "noise"]
    assert [note.split(":")[0] for note in got[1]] == want_dropped


def test_the_identification_check_weighs_each_pattern_by_its_answers(study):
    """The study model checks each distinct (pattern, configuration) once, weighted by how many
    answers it stands for: the same columns are kept and dropped as on every answer's rows."""
    from engine.statistics.study_answers import configuration_names
    from engine.statistics.study_checks import identified_nuisance

    answers = pd.factorize(study["answer"])[0]
    cfg = configuration_names(study, AXES).codes.astype(np.int64)
    label_a = (study["label_side"] == "A").to_numpy(float)
    relevant = study["relevant"].to_numpy(float)
    middle = (study["position_group"] == "middle").to_numpy(float)
    nuisance = {"relevant": relevant, "position[middle]": middle, "copy": relevant.copy(),
                "mix": relevant - 2 * label_a + middle, "configuration": cfg.astype(float),
                "noise": np.random.default_rng(3).random(len(study))}
    scales = {n: max(1.0, float(np.abs(c).max())) for n, c in nuisance.items()}
    # Every answer copied 1, 2 or 3 times as answers of their own, against each once with that weight.
    copies = np.random.default_rng(4).integers(1, 4, size=answers.max() + 1)
    rows = np.repeat(np.arange(len(study)), copies[answers])
    copy_of = np.concatenate([np.arange(copies[a]) for a in answers])
    expanded = identified_nuisance({n: c[rows] for n, c in nuisance.items()}, scales, label_a[rows], cfg[rows],
                                   answers[rows] * 3 + copy_of)
    weighted = identified_nuisance(nuisance, scales, label_a, cfg, answers, copies[answers].astype(float))
    assert weighted == expanded
    assert weighted[0] == ["relevant", "position[middle]", "noise"]


def test_vanilla_runs_take_their_experiments_configuration_whichever_chunk_reads_them(stored, tmp_path):
    """A vanilla run has no metadata type of its own: it takes the levels of its experiment's first
    labelled run, which the chunked read may meet only in a later chunk (vanilla comes first in
    mode order). With every experiment's vanilla answers added, the configurations are still the
    models', and a read one run at a time gives the fit of one read of every run."""
    import shutil

    from engine.statistics.study_model import fit_study_answers
    from engine.usecases.study.effects import StudyEffectsRequest, read_study_answers

    source, frame = stored
    db = tmp_path / "with-vanilla.duckdb"
    shutil.copy(source, db)
    for experiment, model in rows(db, "SELECT DISTINCT experiment_id, model FROM runs ORDER BY model"):
        part = frame[(frame["model"] == model) & (frame["mode"] == "base")]
        answers = [{"item_id": item, "answer": "It is gold" + "".join(f" [{p}]" for p in d.loc[d["cited"], "position"])}
                   for item, d in part.groupby("item", sort=False)]
        dataset = rows(db, "SELECT dataset FROM runs WHERE experiment_id = ? LIMIT 1", [experiment])[0][0]
        path = write_jsonl(tmp_path / f"{model}-vanilla.jsonl", answers)
        assert cli("import", "--dataset", dataset, "--answers", str(path), "--mode", "vanilla", "--name", model,
                   "--experiment", experiment, "--db", str(db)) == 0
    assert rows(db, "SELECT count(*) FROM runs WHERE rag_mode = 'vanilla'") == [(2,)]
    request = StudyEffectsRequest("grid")
    whole, _ = read_study_answers(request, db)
    one_run, _ = read_study_answers(request, db, chunk_decisions=1)
    fit = fit_study_answers(whole)
    assert [c.configuration for c in fit.configurations] == ["model=m1", "model=m2"]
    assert fit.n_answers == 3 * frame["answer"].nunique() // 2
    assert fit_study_answers(one_run) == fit
