"""`python -m engine why-cited` and engine.usecases.bias.why_cited end to end: simulated citation
choices are imported as answers, read back through the citation_decisions view, and fitted; the
fit equals engine.statistics.choice_model's on the simulated frame itself."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from engine.statistics.choice_model import fit_choice_model
from engine.statistics.choice_simulation import ChoiceTruth, SimulationSettings, simulate_choices
from engine.statistics.suppression import suppression_rates
from tests.support.helpers import cli, rows, write_jsonl

N_ITEMS = 150


def store_simulated(tmp, frame):
    """Import a simulated frame's base and cf answers (labels 'a woman' / 'a man', gender) as one
    experiment; (db, experiment id)."""
    frame = frame.sort_values(["condition", "item", "position"])
    base = frame[frame["condition"] == "base"]
    items = []
    for item, docs in base.groupby("item", sort=False):
        items.append({"id": item, "question": f"question {item}", "answers": ["gold"],
                      "documents": [{"id": f"{item}-d{p}", "text": f"document {p} of {item}", "relevant": bool(r)}
                                    for p, r in zip(docs["position"], docs["relevant"], strict=True)]})
    dataset = write_jsonl(tmp / "sim.jsonl", items)
    db = tmp / "why.duckdb"
    for mode in ("base", "cf"):
        answers = []
        for item, docs in frame[frame["condition"] == mode].groupby("item", sort=False):
            cited = docs.loc[docs["cited"], "position"].tolist()
            answers.append({"item_id": item, "answer": "It is gold" + "".join(f" [{p}]" for p in cited) + "."})
        path = write_jsonl(tmp / f"{mode}.jsonl", answers)
        extra = ["--experiment", rows(db, "SELECT experiment_id FROM runs")[0][0]] if mode == "cf" else []
        assert cli("import", "--dataset", str(dataset), "--answers", str(path), "--mode", mode, "--metadata", "gender",
                   "--name", "simulated", "--db", str(db), *extra) == 0
    experiment = rows(db, "SELECT DISTINCT experiment_id FROM runs")
    assert len(experiment) == 1
    return db, experiment[0][0]


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """A store holding the simulated base and cf answers as one experiment, and the simulation."""
    settings = SimulationSettings(n_items=N_ITEMS, label_a="a woman", label_b="a man")
    sim = simulate_choices(settings, ChoiceTruth(), np.random.default_rng(3))
    db, experiment = store_simulated(tmp_path_factory.mktemp("why"), sim.frame)
    return db, experiment, sim


def test_the_stored_answers_fit_exactly_as_the_simulated_frame(imported):
    from engine.api import WhyCitedRequest, why_cited

    db, experiment, sim = imported
    result = why_cited(WhyCitedRequest(experiments=(experiment,)), db)
    direct = fit_choice_model(sim.frame, label_reference="a man")
    assert [e.term for e in result.fit.effects] == [e.term for e in direct.effects]
    # Rows reach statsmodels in another order (the store's), so Newton stops ~1e-8 apart.
    for got, want in zip(result.fit.effects, direct.effects, strict=True):
        assert got.coef == pytest.approx(want.coef, rel=1e-6)
        assert got.se == pytest.approx(want.se, rel=1e-6)
        assert (got.ci_low, got.ci_high, got.p) == pytest.approx((want.ci_low, want.ci_high, want.p), rel=1e-6)
    assert result.fit.n_answers == 2 * N_ITEMS and result.fit.label_reference == "a man"
    label = next(e for e in result.fit.effects if "a woman" in e.term)
    assert "multiplies the odds" in label.sentence and "a woman" in label.sentence
    # Suppression per condition (experiment:mode) and the paired McNemar test, as on the frame.
    want = suppression_rates(sim.frame)
    assert [r.silent for r in result.suppression.rates] == [r.silent for r in want.rates]
    assert [r.condition for r in result.suppression.rates] == [f"{experiment}:base", f"{experiment}:cf"]
    assert result.suppression.mcnemar_p == pytest.approx(want.mcnemar_p)
    assert result.suppression.chi2_p == pytest.approx(want.chi2_p)
    assert result.effects()["odds_ratio"].tolist() == pytest.approx([e.odds_ratio for e in direct.effects])


def test_read_a_run_at_a_time_the_fit_and_the_rates_are_the_same(imported, monkeypatch):
    """why_cited reads the decision rows a chunk of runs at a time (ten million answers'
    rows held 16 GB at once). A chunk of one run each gives the same numbers as one chunk of all,
    and the chunks in order are decision_codes' rows."""
    from engine.api import WhyCitedRequest, why_cited
    from engine.usecases.bias import why_cited as module
    from store.queries.decisions import decision_code_chunks, decision_codes

    db, experiment, _ = imported
    whole = why_cited(WhyCitedRequest(experiments=(experiment,)), db)
    monkeypatch.setattr(module, "CHUNK_DECISIONS", 1)  # every run a chunk of its own
    chunked = why_cited(WhyCitedRequest(experiments=(experiment,)), db)
    assert chunked == whole
    pieces = list(decision_code_chunks(db, [experiment], max_rows=1))
    assert len(pieces) == 2  # the base and the cf run
    one = decision_codes(db, [experiment])
    for column in one.rows:
        if column == "label":  # each chunk's codes are into its own labels
            got = np.concatenate([np.array([*p.labels, None], dtype=object)[p.rows["label"]] for p in pieces])
            want = np.array([*one.labels, None], dtype=object)[one.rows["label"]]
        else:
            got, want = np.concatenate([p.rows[column] for p in pieces]), one.rows[column]
        assert np.array_equal(got, want), column


def test_the_chunked_read_drops_its_code_tables_and_puts_the_default_memory_limit_back(imported):
    """The read makes two small code tables for the whole request (runs and items, none a chunk)
    and drops them after. It lowers DuckDB's memory limit while it reads, and puts the default back
    exactly: the setting reads back rounded, and SET with that text lowered the process's limit a
    little on every call (18.8 -> 18.7 GiB)."""
    import store.queries.decisions as decisions
    from store.db import connect

    db, experiment, _ = imported
    with connect(db, read_only=True) as conn:
        limit = conn.execute("SELECT current_setting('memory_limit')").fetchone()[0]  # the default
        temporary = "SELECT count(*) FROM duckdb_tables() WHERE temporary"
        seen = [(len(chunk), conn.execute(temporary).fetchone()[0])
                for chunk in decisions.decision_code_chunks(conn, [experiment], max_rows=1)]
        assert len(seen) == 2 and all(rows > 0 and tables == 2 for rows, tables in seen), seen
        assert conn.execute(temporary).fetchone()[0] == 0
        assert conn.execute("SELECT current_setting('memory_limit')").fetchone()[0] == limit


def test_a_read_that_fails_inside_the_chunks_shows_its_own_error(imported, monkeypatch):
    """A statement that fails aborts the read transaction, which then refuses the clean-up too: the
    error seen is the one that failed (at 10M answers an out-of-memory error was hidden behind
    "Current transaction is aborted")."""
    import duckdb

    import store.queries.decisions as decisions

    db, experiment, _ = imported

    def failing(conn, *args):
        conn.execute("SELECT * FROM no_such_table")

    monkeypatch.setattr(decisions, "_coded_rows", failing)
    with pytest.raises(duckdb.CatalogException, match="no_such_table"):
        list(decisions.decision_code_chunks(db, [experiment]))


def test_a_label_the_list_misses_is_refused_not_read_as_no_label(imported, monkeypatch):
    """Labels are coded by their place in a list read where the view takes them; a label outside
    that list fails loudly instead of turning into "no label" (which would change the fit)."""
    import store.queries.decisions as decisions

    db, experiment, _ = imported
    assert set(decisions.decision_codes(db, [experiment]).labels) == {"a woman", "a man"}
    monkeypatch.setattr(decisions, "_LABELS_SQL", "SELECT ['a woman'] WHERE $chunk IS NOT NULL")  # 'a man' left out of the list
    with pytest.raises(RuntimeError, match="no longer reads where the view does"):
        decisions.decision_codes(db, [experiment])


def test_one_mode_alone_cannot_separate_label_from_relevance_and_says_so(imported):
    from engine.api import WhyCitedRequest, why_cited

    db, experiment, _ = imported
    result = why_cited(WhyCitedRequest(experiments=(experiment,), modes=("base",)), db)
    terms = [e.term for e in result.fit.effects]
    assert "relevant" in terms and not any("a woman" in t for t in terms)
    assert any("label" in term for term, _ in result.fit.dropped)


def test_the_cli_prints_the_effects_in_words_and_the_suppression_rates(imported, capsys):
    db, experiment, _ = imported
    assert cli("why-cited", "--experiment", experiment, "--db", str(db), "--interaction", "label:relevant") == 0
    out = capsys.readouterr().out
    assert "odds ratio" in out and "multiplies the odds of citing a document" in out
    assert "suppression" in out and "exact McNemar test" in out and "chi-square" in out
    assert "every informative answer cites one document" in out and "robust 95% CI (by item)" in out
    assert "cluster-robust (sandwich) by item" in out and "did not converge" not in out
    assert cli("why-cited", "--experiment", experiment, "--db", str(db), "--json", "--position", "number") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["experiments"] == [experiment] and data["fit"]["position"] == "number"
    assert {e["term"] for e in data["fit"]["effects"]} >= {"relevant"}
    assert len(data["suppression"]["rates"]) == 2
    assert data["multi_citation"]["answers_citing_several"] == 0 and data["fit"]["cluster"] == "item"
    assert all(e["robust_ci_low"] > 0 for e in data["fit"]["effects"])


@pytest.mark.parametrize(("ratio", "shown"), [
    (1.4, "1.40"), (1.37, "1.37"), (0.5, "0.500"), (0.000123, "0.000123"), (2.0, "2.00"), (100.0, "100"),
    (999.4, "999"), (999.6, "1.00e+03"), (12_345.6, "1.23e+04"), (float("nan"), "-"), (None, "-"),
])
def test_odds_ratios_are_shown_in_three_digits_with_their_zeros(ratio, shown):
    # "1.4" beside "1.37" read as a less precise number; the CLI and the app share this formatter.
    from engine.presentation.formatting import format_ratio

    assert format_ratio(ratio) == shown


def test_a_small_well_posed_study_of_imported_answers_is_fitted(tmp_path, capsys):
    # 30 items x base/cf, ten documents each, one citation per answer. The old
    # fit (statsmodels' Newton, no step control) ended in NaN and printed "did not converge".
    settings = SimulationSettings(n_items=30, n_shown=10, relevant_counts=(1,), label_a="a woman", label_b="a man")
    truth = ChoiceTruth(relevant=math.log(4), label=math.log(2), nothing=-20)
    sim = simulate_choices(settings, truth, np.random.default_rng(0))
    db, experiment = store_simulated(tmp_path, sim.frame)
    assert cli("why-cited", "--experiment", experiment, "--db", str(db)) == 0
    out = capsys.readouterr().out
    assert "did not converge" not in out and "separated" not in out
    label = next(line for line in out.splitlines() if line.startswith("label[a woman]"))
    want = fit_choice_model(sim.frame, label_reference="a man").effect("label[a woman]")
    assert f"{want.odds_ratio:.3g}" in label and math.isfinite(want.se)


def test_answers_citing_several_documents_are_counted_and_their_model_said(tmp_path, capsys):
    settings = SimulationSettings(n_items=40, cites="top", n_cited=(0.5, 0.5), label_a="a woman", label_b="a man")
    sim = simulate_choices(settings, ChoiceTruth(), np.random.default_rng(8))
    db, experiment = store_simulated(tmp_path, sim.frame)
    fit = fit_choice_model(sim.frame, label_reference="a man")
    assert fit.n_multi > 0
    assert cli("why-cited", "--experiment", experiment, "--db", str(db)) == 0
    out = capsys.readouterr().out
    assert f"{fit.n_multi:,} of the {fit.n_informative:,} informative answers cite several documents" in out
    assert "k-of-n conditional logit" in out and "picks its top k" in out
    assert cli("why-cited", "--experiment", experiment, "--db", str(db), "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["multi_citation"]["answers_citing_several"] == fit.n_multi
    assert [list(c) for c in fit.cited_counts] == data["fit"]["cited_counts"]


@pytest.mark.parametrize("args, message", [
    ((), "give --experiment (repeatable) or --study"),
    (("--experiment", "nope"), "no experiment 'nope'"),
    (("--study", "nope"), "no study 'nope'"),
    (("--experiment", "EXP", "--interaction", "label:colour"), "colour"),
    (("--experiment", "EXP", "--mode", "sideways"), "unknown mode 'sideways'"),
    (("--experiment", "EXP", "--reference", "a cat"), "no shown document carries the label 'a cat'"),
    (("--experiment", "EXP", "--mode", "vanilla"), "no stored answers in mode vanilla"),
])
def test_bad_requests_are_refused_in_one_line(imported, capsys, args, message):
    db, experiment, _ = imported
    args = tuple(experiment if a == "EXP" else a for a in args)
    assert cli("why-cited", "--db", str(db), *args) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err and not captured.out
