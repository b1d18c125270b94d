"""A use case's message names fields and places once; each face words them (engine.errors.WordedError):
the Python API plainly, the CLI as options and commands, the app as its boxes and tabs."""

from __future__ import annotations

import pickle

import pytest

from demo.field_words import app_message
from engine.commands._field_words import cli_message
from engine.errors import PLACES, FieldError, WordedError


def test_each_face_words_the_same_error_its_own_way():
    err = WordedError("no study '{study}' ({see_studies})", study="pilot {x}")  # a value's braces stay text
    assert str(err) == "no study 'pilot {x}' (see `python -m engine list --studies`)"
    assert cli_message(err) == str(err)
    assert app_message(err) == "no study 'pilot {x}' (the Runs tab's study filter lists them)"
    field = FieldError("margin", "{margin}: unknown metric '{name}'", name="f2")
    assert (str(field), cli_message(field), app_message(field)) == (
        "margin: unknown metric 'f2'", "--margin: unknown metric 'f2'", "the equivalence margin: unknown metric 'f2'")


def test_a_place_may_quote_the_values_and_every_place_is_worded_by_the_app():
    err = WordedError("too many; {fit_study_on_the_store}", study="s1")
    assert str(err) == "too many; run `python -m engine why-cited --study s1` on the store (no bound there)"
    from demo.field_words import APP_PLACES

    # The app says where to look in its own words wherever a command is named.
    for place, words in PLACES.items():
        shown = APP_PLACES.get(place, words)
        assert "python -m" not in shown or place.startswith("fit_"), place  # fits: the operator's command line


@pytest.mark.parametrize("err", [WordedError("no verdicts on {what}: {judge_first}", what="x"),
                                 FieldError("judge", "{judge} must name who labelled")])
def test_a_worded_error_crosses_a_process_whole(err):
    again = pickle.loads(pickle.dumps(err))  # the judges' and fits' child processes send them back so
    assert type(again) is type(err) and app_message(again) == app_message(err) and str(again) == str(err)
    assert getattr(again, "field", None) == getattr(err, "field", None)


def test_an_unknown_run_is_itself_after_a_process():
    from pathlib import Path

    from engine.usecases.judges.judge_runs import UnknownRun

    again = pickle.loads(pickle.dumps(UnknownRun("r1", Path("s.duckdb"))))
    assert isinstance(again, UnknownRun) and again.run_id == "r1"
    assert app_message(again) == "no run 'r1' in s.duckdb (the Runs tab lists them)"
