"""The Bias page as a use case (engine.usecases.bias.page): typed, each reference
resolved once, explanation_rates read once; the app's tab and engine.api.bias_page show the
same numbers. The store is tests/demo/handlers/test_app_bias.py's, with its explanations and verifications."""

from __future__ import annotations

import math
from dataclasses import astuple
from pathlib import Path

import pytest

from demo.handlers import bias as handler
from engine import api
from engine.errors import UserError
from engine.presentation.formatting import formatted_tables
from engine.usecases.bias import page as usecase
from engine.usecases.bias.tables import experiment_tables
from tests.demo.handlers.test_app_bias import _add_beyond, build_store

TEXT, CHOSEN = "exp-gender, exp-hai", ["exp-race", "gender, study"]


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = build_store(tmp_path_factory.mktemp("bias_page") / "bias.duckdb")
    _add_beyond(path)
    return path


def _same(a: object, b: object) -> bool:
    """Equal, NaN included (an undefined interval of the smoke model)."""
    return repr(a) == repr(b) or a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def test_the_typed_page_is_what_the_tab_shows(db):
    usecase.clear_cache()
    shown = handler.bias_page(db, TEXT, CHOSEN, resamples=200)
    page = usecase.bias_page(db, ["exp-gender", "exp-hai", "exp-race", "gender, study"], resamples=200)
    assert page.experiment_ids == shown.experiment_ids == ("exp-gender", "exp-hai", "exp-race")
    # The page holds the tables' rows as `report` reads them; the tab prints them as `report` does.
    rows1, rows2 = experiment_tables(db, page.experiment_ids)
    assert (list(page.tables.table1), list(page.tables.table2)) == (rows1, rows2) and rows1 and rows2
    table1, table2 = formatted_tables(rows1, rows2)
    assert (table1, table2) == (shown.table1, shown.table2)
    results = [[e.experiment_id, e.model, e.metadata_type or "-", *(getattr(r, c) for c in handler.RESULT_COLUMNS)]
               for e in page.experiments for r in e.results]
    assert repr(results) == repr(shown.results)
    assert [[e.experiment_id, *astuple(c)] for e in page.experiments for c in e.confidence] == [
        [row[0], *row[3:]] for row in shown.confidence]
    assert [astuple(v) for v in page.cab] == [astuple(b) for b in shown.cab_bars]
    assert page.probabilities == shown.probability_boxes
    # exp-hai has no cf run: no CAB, and no label B box; the notes say so.
    assert [(n.experiment_id, n.text) for n in page.cab_notes] == [
        ("exp-hai", "no CAB yet (it needs complete base and cf runs; it has vanilla, base).")]
    assert "exp-hai: no complete cf run yet" in shown.probability_note
    assert [(s.experiment_id, s.rag_mode, s.explainer_model, s.n_explanations, s.label_share)
            for s in page.shares.explanations] == [(r[0], r[3], r[5], r[6], r[8]) for r in shown.explanation_shares]
    assert [astuple(s)[3:] for s in page.shares.verifications] == [tuple(r[5:]) for r in shown.verification_shares]
    assert page.shares.explanations and page.shares.verifications


def test_the_page_numbers_are_engine_bias_numbers(db):
    page = usecase.bias_page(db, ["exp-gender", "exp-race"], resamples=200)
    for experiment in page.experiments:
        report = api.bias_report(db, experiment.experiment_id, resamples=200).report
        assert experiment == usecase.experiment_bias(report)
        assert dict(experiment.runs) == report["runs"]
        assert all(_same(getattr(row, k), v) for row, want in zip(experiment.results, report["results"], strict=True)
                   for k, v in want.items())


def test_a_notebook_gets_the_same_page_through_the_api(db):
    shown = handler.bias_page(db, "exp-gender, exp-race", resamples=200)
    page = api.bias_page(db, ["exp-gender", "exp-race"], resamples=200)
    assert isinstance(page, api.BiasPage) and isinstance(page.experiments[0], api.ExperimentBias)
    assert [astuple(v) for v in page.cab] == [astuple(b) for b in shown.cab_bars]
    assert [list(row) for row in page.table2] == shown.table2
    assert isinstance(page, usecase.BiasPage) and page == api.bias_page(db, ["exp-gender", "exp-race"], resamples=200)
    table1, table2 = formatted_tables(list(page.tables.table1), list(page.tables.table2))
    assert ([list(row) for row in page.table1], [list(row) for row in page.table2]) == (table1, table2)
    assert page.dataset == "bias_data.jsonl (sha-bias)" and f"Dataset: {handler.markdown_text(page.dataset)}." in shown.summary
    assert (page.table2_notes, page.has_settings) == ((), False)
    assert [r.value for e in page.experiments for r in e.results] == [row[5] for row in shown.results]
    with pytest.raises(UserError, match="has complete runs for base only"):
        api.bias_page(db, ["exp-base"])
    assert api.bias_page(db, ["exp-base", "exp-gender"], resamples=100).skipped[0].experiment_id == "exp-base"


def test_each_reference_is_resolved_once_and_explanations_read_once(db, monkeypatch):
    import store.queries as queries
    import store.queries.session as session

    calls: dict[str, list] = {"resolve": [], "explain": []}
    resolve, explain = session.resolve_experiment, queries.explanation_rates

    def counted_resolve(conn, reference):
        calls["resolve"].append(reference)
        return resolve(conn, reference)

    def counted_explain(conn, run_ids):
        calls["explain"].append(tuple(run_ids))
        return explain(conn, run_ids)

    monkeypatch.setattr(session, "resolve_experiment", counted_resolve)  # a request's lookups: its ReadSession
    monkeypatch.setattr(queries, "explanation_rates", counted_explain)
    usecase.clear_cache()  # nothing kept: every read happens now
    page = handler.bias_page(db, TEXT, CHOSEN, resamples=300)
    assert sorted(calls["resolve"]) == sorted({"exp-gender, exp-hai", "exp-gender", "exp-hai", "exp-race",
                                               "gender, study"})
    assert page.experiment_ids == ("exp-gender", "exp-hai", "exp-race")
    assert calls["explain"] == [("exp-gender-vanilla", "exp-gender-base", "exp-gender-cf", "exp-hai-vanilla",
                                   "exp-hai-base", "exp-race-vanilla", "exp-race-base", "exp-race-cf")]
