"""`python -m engine leaderboard`: the models of a store ranked by label bias (CAB), per label type
and dataset, with tiers by Holm-corrected pairwise tests, each model's rerun floor and its items.

Reads only the store. The numbers are engine.usecases.bias.leaderboard's; this module parses and prints.
"""

from __future__ import annotations

import argparse
import json
import math

from engine.bounds import for_terminal, json_for_terminal
from engine.commands._options import add_db_arg
from engine.usecases.bias.leaderboard import (
    CAB_NAME,
    DEFAULT_METRIC,
    METRICS,
    LeaderboardRequest,
    board_records,
    leaderboard,
    pair_records,
    read_item_ids,
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "leaderboard",
        help="models ranked by label bias (CAB), per label type, with tiers",
        description=f"Rank the models of a store by CAB, {CAB_NAME}: mean over items of "
        "M_base - M_cf, x100, with its bootstrap 95% interval, per label type and dataset, least |CAB| first. "
        "Models share a tier while no pair of them is told apart by the pairwise paired test of per-item "
        "CAB, Holm-corrected over the board's pairs (docs/method.md). Each model's newest experiment with "
        "complete base and cf runs stands; the rerun floor shows where `run --reruns` measured it.",
    )
    add_db_arg(p)
    p.add_argument("--metric", choices=METRICS, default=DEFAULT_METRIC,
                   help=f"the citation metric CAB is computed on (default {DEFAULT_METRIC})")
    p.add_argument("--exclude-items", metavar="FILE", default=None,
                   help="a file of item ids, one a line: a private split that no number uses")
    p.add_argument("--items", metavar="FILE", default=None,
                   help="a file of item ids, one a line: only these items count")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--resamples", type=int, default=None, help="bootstrap resamples (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap and permutation seed (default 0)")
    p.set_defaults(main=main)


def main(args: argparse.Namespace) -> int:
    from engine.commands.bias import db_path

    exclude = read_item_ids(args.exclude_items) if args.exclude_items else None
    only = read_item_ids(args.items) if args.items else None
    board = leaderboard(LeaderboardRequest(db_path(args.db), args.metric, exclude, only, args.resamples, args.seed))
    if args.json:
        out = {"measure": board.measure, "metric": board.metric, "items": board.items_note,
               "tiers_test": board.boards[0].test if board.boards else None,
               "rows": board_records(board), "pairs": pair_records(board), "notes": list(board.notes)}
        print(json_for_terminal(json.dumps(out, indent=2, ensure_ascii=False)))
        return 0
    if not board.boards:
        print("no model has complete base and cf runs yet: CAB needs both (python -m engine run --modes base,cf)")
    for b in board.boards:
        print(for_terminal(f"{b.metadata_type} ({b.label_a} / {b.label_b}) on {b.dataset}: CAB {board.metric}, "
                           f"{CAB_NAME}; > 0 favours {b.label_a}"))
        print(f"{'tier':>4} {'model':<40} {'CAB [95% CI]':<24} {'rerun floor':<24} {'items':>6}")
        for r in b.rows:
            print(for_terminal(f"{r.tier if r.tier is not None else '-':>4} {r.model:<40} {_cab(r):<24} "
                               f"{_floor(r):<24} {r.n_items:>6}"))
        print(f"tiers: {b.test}; level 0.05")
        print()
    if board.items_note:
        print(f"items: {board.items_note}")
    for note in board.notes:
        print(for_terminal(f"note: {note}"))
    return 0


def _interval(value: float, low: float, high: float) -> str:
    if math.isnan(low) or math.isnan(high):
        return f"{value:+.1f} (no interval)"
    return f"{value:+.1f} [{low:+.1f}, {high:+.1f}]"


def _cab(r) -> str:
    return r.verdict if math.isnan(r.cab) else _interval(r.cab, r.ci_low, r.ci_high)


def _floor(r) -> str:
    return "not measured" if math.isnan(r.floor) else _interval(r.floor, r.floor_low, r.floor_high)
