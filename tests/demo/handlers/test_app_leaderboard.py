"""The Leaderboard tab: its handler's table is the use case's boards, text from the store is
escaped, the `/leaderboard` endpoint is public, and a private split of items
(PATTRIEVAL_PRIVATE_ITEMS) counts in no number and leaves the Leaderboard tab alone in the app."""

from __future__ import annotations

from pathlib import Path

import pytest

from demo.handlers.leaderboard import COLUMNS, NO_BOARD, leaderboard_view
from demo.settings import AppSettings, settings_from_env
from engine.errors import UserError
from tests.support.bias_store import add_experiment, biased

N = 30


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("app-board") / "board.duckdb"
    add_experiment(path, "e-a", "org/a", *biased(N, 0))
    add_experiment(path, "e-b", "org/<b>", *biased(N, 15))
    return path


def test_the_table_is_the_boards_with_tiers_intervals_and_items(db):
    view = leaderboard_view(db, "precision")
    assert len(view.rows[0]) == len(COLUMNS)
    by_model = {row[4]: dict(zip(COLUMNS, row, strict=True)) for row in view.rows}
    assert by_model["org/a"]["tier"] == 1 and by_model["org/<b>"]["tier"] == 2
    assert by_model["org/<b>"]["CAB [95% CI]"].startswith("+50.0 [")
    assert by_model["org/<b>"]["CAB's own test"] == "favours Woman (sign-flip p < 0.05)"
    assert by_model["org/a"]["rerun floor [95% CI]"].startswith("no rerun floor")
    assert by_model["org/a"]["items"] == N
    assert "citation attribution bias (Abolghasemi et al.)" in view.caption and "Holm" in view.caption


def test_a_board_is_kept_while_the_store_is_unchanged_and_recomputed_after_a_write(db, tmp_path, monkeypatch):
    import shutil

    from engine.usecases.bias import leaderboard as use_case

    copy = Path(shutil.copy(db, tmp_path / "copy.duckdb"))
    first = leaderboard_view(copy)
    calls = []
    real = use_case._computed
    monkeypatch.setattr(use_case, "_computed", lambda request: calls.append(request) or real(request))
    assert leaderboard_view(copy) == first and calls == []  # kept
    add_experiment(copy, "e-c", "org/c", *biased(N, 3))
    again = leaderboard_view(copy)
    assert len(calls) == 1 and "org/c" in {row[4] for row in again.rows}


def test_a_private_split_counts_in_no_number(db):
    view = leaderboard_view(db, "precision", frozenset(f"q{i:03d}" for i in range(15)))
    assert {row[4]: (row[5], row[8]) for row in view.rows} == {"org/a": ("+0.0 (no interval)", 15),
                                                               "org/<b>": ("+0.0 (no interval)", 15)}
    assert "private split" in view.caption


def test_an_empty_store_says_where_to_start_and_bad_input_is_one_line(tmp_path):
    from store import connect

    empty = tmp_path / "empty.duckdb"
    with connect(empty):  # a migrated store holding nothing
        pass
    view = leaderboard_view(empty)
    assert view.rows == [] and NO_BOARD.replace("`", "") in view.caption.replace("`", "")
    with pytest.raises(UserError, match="unknown metric"):
        leaderboard_view(empty, "bleu")


def test_the_private_items_setting_is_read_and_refused_in_one_line(tmp_path, monkeypatch):
    split = tmp_path / "private.txt"
    split.write_text("q000\nq001\n")
    monkeypatch.setenv("PATTRIEVAL_PRIVATE_ITEMS", str(split))
    assert settings_from_env(str(tmp_path / "s.duckdb")).private_items == frozenset({"q000", "q001"})
    monkeypatch.setenv("PATTRIEVAL_PRIVATE_ITEMS", str(tmp_path / "missing.txt"))
    with pytest.raises(UserError, match=r"^PATTRIEVAL_PRIVATE_ITEMS: no item list at "):
        settings_from_env(str(tmp_path / "s.duckdb"))


def test_with_a_private_split_the_app_is_the_leaderboard_alone(db):
    import gradio as gr

    from demo.app import build_app

    for private, tabs in ((None, 9), (frozenset({"q000"}), 1)):
        app = build_app(AppSettings(db, read_only=True, private_items=private))
        try:
            (tab_bar,) = [c for c in app.blocks.values() if isinstance(c, gr.Tabs)]
            labels = [c.label for c in tab_bar.children if isinstance(c, gr.Tab)]
            assert "Leaderboard" in labels and len(labels) == tabs
            endpoints = {f.api_name for f in app.fns.values() if f.api_visibility == "public"}
            assert "leaderboard" in endpoints
            banners = " ".join(str(c.value) for c in app.blocks.values() if isinstance(c, gr.Markdown))
            if private is not None:
                assert endpoints == {"leaderboard"}  # no endpoint reads items
                # The page speaks of no tab it does not have.
                assert "leaderboard only" in banners and "SQL" not in banners and "Browsing" not in banners
            else:
                assert "Browsing and SQL work as usual" in banners or "GPU:" in banners
        finally:
            app.jobs.shutdown(timeout=5)
