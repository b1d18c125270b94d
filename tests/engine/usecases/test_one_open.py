"""The Query, Runs and Compare tabs read what a request needs through as few opens of the store as
the request has steps, and a run's end keeps the Bias page's values in one read and one write: an
open (DuckDB's instance, the lock, the schema check) costs more than any of their reads, the tabs
ask on every click, and a run ends once per mode."""

from __future__ import annotations

import pytest

import store.db
from engine.usecases.bias.kept import after_run
from engine.usecases.compare.compare import CompareRequest, compare
from engine.usecases.compare.sides import item_of_runs
from engine.usecases.runs.items import item_detail, item_ids
from engine.usecases.runs.listing import experiments_page
from tests.support.bias_store import add_experiment, add_run, biased


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("one-open") / "s.duckdb"
    base, cf = biased(4, 1)
    add_experiment(path, "exp", "m", base, cf, vanilla=[(2,)] * 4)
    add_run(path, "exp-base-again", "exp-again", "base", "m", base, rerun_of="exp")  # a rerun to mark against
    return path


@pytest.fixture
def opens(monkeypatch):
    """How many times the store's file is opened (store.db opens every connection through this)."""
    counted = [0]
    real = store.db._open_migrated

    def counting(*args, **kwargs):
        counted[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(store.db, "_open_migrated", counting)
    return counted


def test_an_item_with_its_explanations_use_and_rerun_marks_is_one_open(db, opens):
    lookup = item_detail(db, "exp", "q001", with_explanations=True, with_use=True)
    assert lookup.detail is not None and [m.mode for m in lookup.detail.modes] == ["vanilla", "base", "cf"]
    assert [m.reruns for m in lookup.reruns] == [0, 1, 0]  # the rerun was read in the same open
    assert opens[0] == 1


def test_an_unknown_item_is_one_open_too(db, opens):
    assert item_detail(db, "exp", "nope").known_experiment
    assert not item_detail(db, "nope", "q001").known_experiment
    assert opens[0] == 2


def test_the_items_of_an_experiment_are_one_open(db, opens):
    assert item_ids(db, "exp", changed="base_cf").item_ids == ("q000",)  # cf cites another document there
    assert opens[0] == 1


def test_a_page_of_experiments_with_their_studies_is_one_open(db, opens):
    page = experiments_page(db, 0, 10)
    assert [e.experiment_id for e in page.page.experiments] == ["exp"]  # a rerun is listed with what it reruns
    assert opens[0] == 1


def test_one_item_of_two_runs_side_by_side_is_one_open(db, opens):
    sides = item_of_runs(db, ["exp-base", "exp-cf"], "q000")
    assert [s.mode.cited_doc_ids for s in sides] == [{"q000-d2"}, {"q000-d1"}]  # base cites the relevant one
    assert opens[0] == 1


def test_a_comparison_of_two_runs_is_two_opens(db, opens):
    # One to resolve both references, one for the pair's metrics, flips and rerun marks.
    found = compare(CompareRequest(a="exp-base", b="exp-cf", metrics=("precision",), resamples=100), db)
    assert found.runs[0].pairing.n_paired == 4
    assert opens[0] == 2


def test_a_runs_end_keeps_its_experiments_values_in_one_read_and_one_write(db, opens):
    ended = after_run(db)
    ended("exp-cf")  # the experiment's report and Table 2 rows: computed in one read, kept in one write
    assert opens[0] == 2
    ended("exp-cf")  # found kept: the read alone
    assert opens[0] == 3
