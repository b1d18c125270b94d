"""The run options are declared once (engine.usecases.runs.run_options), and every face takes them from
there: `run`'s argparse options, the app's form and its words, the grid's axes and the Python
API's RunRequest all name each option the same way."""

from __future__ import annotations

import argparse
from dataclasses import fields

from demo.field_words import FIELD_LABELS
from demo.handlers.run import RunForm
from engine.commands import run as run_command
from engine.prompting.study import AXES, Grid
from engine.running.run_request import RunRequest
from engine.usecases.runs.run_options import GRID_AXES, OPTIONS, RUN_OPTIONS, SERVED


def _run_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    run_command.add_parser(parser.add_subparsers())
    return parser._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]


def test_run_declares_every_option_of_the_table_by_its_name():
    dests = {a.dest for a in _run_parser()._actions}
    assert {o.name for o in RUN_OPTIONS} <= dests
    # The rest are the store (shared by every command) and help.
    assert dests - set(OPTIONS) == {"help", "db"}


def test_each_option_of_run_says_its_default():
    for action in _run_parser()._actions:
        if action.dest in OPTIONS and OPTIONS[action.dest].group != SERVED:
            assert action.help and ("(default: " in action.help or action.help.endswith("(required)")), action.dest


def test_the_grid_axes_are_the_tables_grid_options():
    assert GRID_AXES == AXES == tuple(f.name for f in fields(Grid))


def test_the_request_the_form_and_the_words_use_the_tables_names():
    request_fields = {f.name for f in fields(RunRequest)}
    for renamed in ("do_sample", "top_k_sampling", "top_n_logprobs"):
        assert renamed not in request_fields
    assert {"sample", "sample_top_k", "top_logprobs"} <= request_fields
    form_fields = {f.name for f in fields(RunForm)}
    assert form_fields - set(OPTIONS) == {"local_path"}  # the app's own: a dataset path on the desktop
    assert all(FIELD_LABELS[name] == OPTIONS[name].label for name in OPTIONS)
    assert {name: getattr(RunForm(), name) for name in ("model", "metadata", "limit", "max_new_tokens", "top_k")} \
        == {name: OPTIONS[name].initial for name in ("model", "metadata", "limit", "max_new_tokens", "top_k")}
