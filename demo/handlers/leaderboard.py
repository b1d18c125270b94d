"""The Leaderboard tab: the models of the store ranked by label bias (CAB) per label type, with
tiers (engine.usecases.bias.leaderboard). Plain values in and out, so the tab is testable without a
browser; every text from the store is escaped where it is rendered as HTML."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.usecases.bias.leaderboard import CAB_NAME, DEFAULT_METRIC, LeaderboardRequest, leaderboard

COLUMNS = ["label type", "labels (A / B)", "dataset", "tier", "model", "CAB [95% CI]", "CAB's own test",
           "rerun floor [95% CI]", "items"]
NO_BOARD = ("No model has complete base and cf runs yet: CAB needs both (a run in the Run tab with modes "
            "base and cf, or `python -m engine run --modes base,cf`).")


@dataclass(frozen=True)
class LeaderboardView:
    """The table's rows and the HTML said around it (the tiers' rule, the notes)."""

    rows: list[list[Any]]
    caption: str


def _interval(value: float, low: float, high: float) -> str:
    if math.isnan(low) or math.isnan(high):
        return f"{value:+.1f} (no interval)"
    return f"{value:+.1f} [{low:+.1f}, {high:+.1f}]"


def leaderboard_view(db_path: str | Path, metric: str = DEFAULT_METRIC,
                     private_items: frozenset[str] | None = None) -> LeaderboardView:
    """Every board of the store as one table; `private_items` (the operator's private split) count
    in no number. UserError in one line for a missing store or an unknown metric."""
    board = leaderboard(LeaderboardRequest(Path(db_path), metric or DEFAULT_METRIC, exclude_items=private_items))
    rows = []
    for b in board.boards:
        for r in b.rows:
            cab = r.verdict if math.isnan(r.cab) else _interval(r.cab, r.ci_low, r.ci_high)
            floor = r.floor_note if math.isnan(r.floor) else \
                f"{_interval(r.floor, r.floor_low, r.floor_high)} ({r.floor_note})"
            rows.append([b.metadata_type, f"{b.label_a} / {b.label_b}", b.dataset,
                         "-" if r.tier is None else r.tier, r.model, cab,
                         "" if math.isnan(r.cab) else r.verdict, floor, r.n_items])
    parts = [f"<p><b>CAB</b> = {html.escape(CAB_NAME)}: mean over items of M_base − M_cf on citation "
             f"{html.escape(board.metric)}, ×100; &gt; 0 favours label A. Least |CAB| first.</p>"]
    if board.boards:
        parts.append(f"<p><b>Tiers</b>: {html.escape(board.boards[0].test)}. Walking the order, a model joins "
                     "the current tier when no model already in it is told apart from it (Holm-adjusted p &lt; "
                     "0.05); within a tier no two models are told apart.</p>")
    else:
        parts.append(f"<p>{html.escape(NO_BOARD)}</p>")
    if private_items is not None:
        parts.append("<p>A private split of items is held out: it counts in no number on this page.</p>")
    if board.notes:
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in board.notes)
        parts.append(f"<p>Left out:</p><ul>{notes}</ul>")
    return LeaderboardView(rows, "".join(parts))
