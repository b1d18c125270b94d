"""How the leaderboard's tiers behave on simulated boards: equal models sharing a tier, and truly
different models split.

    python scripts/leaderboard_tiers.py --models 5 --items 3000 --boards 200 --gap 5 --seed 0

Each board holds `--models` models answering the same `--items` items. A model's per-item bias
d(i) = 100 (M_base(i) - M_cf(i)) is +100, 0 or -100, as precision's CAB takes on an item with one
cited document: +100 with chance r + c/200, -100 with chance r - c/200 (r = `--flip`, the share
of items whose citation moves each way by chance), so the model's true CAB is c points. The
board's tiers come from engine.statistics.tiers.tiers, the function the leaderboard
(engine.usecases.bias.leaderboard) calls with the same per-item values and CAB as their mean.

- Equal: every model's true CAB is `--cab`. Holm's correction bounds the chance that any pair is
  told apart at 5%, so all models should share one tier in at least 95% of boards.
- Different: true CABs `--cab`, `--cab` + gap, `--cab` + 2 gap, ...; each pair of models is
  truly different, and the script counts how often the tiers split them (the two in different
  tiers), by their true difference.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from engine.errors import UserError  # noqa: E402
from engine.statistics.bias import SIGNIFICANCE  # noqa: E402
from engine.statistics.tiers import TIERS_TEST, tiers  # noqa: E402


@dataclass(frozen=True)
class Settings:
    models: int
    items: int
    boards: int
    cab: float  # the equal models' true CAB, and the lowest of the different ones, in points
    gap: float  # true CAB between neighbours among the different models, in points
    flip: float  # chance of +100 (and of -100) per item at CAB 0
    seed: int


@dataclass(frozen=True)
class Outcome:
    equal_one_tier: int  # boards of equal models that all share one tier
    equal_pairs_shared: int  # pairs of equal models in one tier, over every board
    equal_pairs: int
    split: dict[float, tuple[int, int]]  # true difference -> (pairs split into other tiers, pairs)


def per_item(rng: np.random.Generator, true_cab: Sequence[float], items: int, flip: float) -> dict[str, dict[str, float]]:
    """One board's per-item bias (model -> item id -> d), model k with true CAB true_cab[k]."""
    ids = [f"q{i}" for i in range(items)]
    board = {}
    for k, c in enumerate(true_cab):
        u = rng.random(items)
        d = np.where(u < flip + c / 200, 100.0, np.where(u > 1 - (flip - c / 200), -100.0, 0.0))
        board[f"m{k}"] = dict(zip(ids, d.tolist(), strict=True))
    return board


def tier_of(board: dict[str, dict[str, float]], seed: int) -> dict[str, int]:
    """The leaderboard's tiers of a board (CAB: the mean of the per-item values, as compute_bias gives)."""
    return tiers(board, {m: float(np.mean(list(v.values()))) for m, v in board.items()}, seed=seed).tier


def simulate(s: Settings) -> Outcome:
    rng = np.random.default_rng(s.seed)
    equal = [s.cab] * s.models
    different = [s.cab + k * s.gap for k in range(s.models)]
    one_tier = shared = pairs = 0
    split: dict[float, list[int]] = {}
    for board in range(s.boards):
        tier = tier_of(per_item(rng, equal, s.items, s.flip), s.seed + board)
        one_tier += len(set(tier.values())) == 1
        for a in range(s.models):
            for b in range(a + 1, s.models):
                shared += tier[f"m{a}"] == tier[f"m{b}"]
                pairs += 1
        tier = tier_of(per_item(rng, different, s.items, s.flip), s.seed + board)
        for a in range(s.models):
            for b in range(a + 1, s.models):
                counts = split.setdefault(round(different[b] - different[a], 6), [0, 0])
                counts[0] += tier[f"m{a}"] != tier[f"m{b}"]
                counts[1] += 1
    return Outcome(one_tier, shared, pairs, {k: (v[0], v[1]) for k, v in sorted(split.items())})


def check(s: Settings) -> None:
    if s.models < 2:
        raise UserError(f"--models must be at least 2, not {s.models}")
    if s.items < 2 or s.boards < 1:
        raise UserError("--items must be at least 2 and --boards at least 1")
    top = s.cab + (s.models - 1) * s.gap
    for c in (s.cab, top):
        if not (s.flip + c / 200 >= 0 and s.flip - c / 200 >= 0 and 2 * s.flip <= 1):
            raise UserError(f"a true CAB of {c:g} points does not fit --flip {s.flip:g}: each of +100 and -100 "
                            "needs a chance between 0 and 1 (flip ± CAB/200)")
    if s.gap <= 0:
        raise UserError(f"--gap must be above 0, not {s.gap:g}")


def _share(k: int, n: int, what: str = "") -> str:
    return f"{k:,} of {n:,}{' ' + what if what else ''} ({100 * k / n:.1f}%)"


def report(s: Settings, o: Outcome) -> str:
    lines = [
        f"tiers: {TIERS_TEST}, at {SIGNIFICANCE:g}",
        f"{s.boards:,} boards of {s.models} models x {s.items:,} items (per-item bias +100 / 0 / -100, "
        f"{s.flip:g} ± CAB/200 each way), seed {s.seed}",
        f"equal true CAB ({s.cab:g} points each): all {s.models} share one tier in "
        f"{_share(o.equal_one_tier, s.boards, 'boards')} (Holm's bound: at least {100 * (1 - SIGNIFICANCE):.0f}%); "
        f"pairs in one tier: {_share(o.equal_pairs_shared, o.equal_pairs)}",
        "different true CAB (" + ", ".join(f"{s.cab + k * s.gap:g}" for k in range(s.models)) + " points): "
        "pairs split into different tiers, by true difference:",
    ]
    se = math.sqrt(2 * 2 * s.flip * 100 ** 2 / s.items)  # the standard error of a pair's mean difference at CAB 0
    for diff, (k, n) in o.split.items():
        lines.append(f"  {diff:g} points (about {diff / se:.1f} standard errors): {_share(k, n)}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=5)
    parser.add_argument("--items", type=int, default=3000)
    parser.add_argument("--boards", type=int, default=200)
    parser.add_argument("--cab", type=float, default=5.0, help="the equal models' true CAB, in points")
    parser.add_argument("--gap", type=float, default=5.0, help="true CAB between neighbouring different models")
    parser.add_argument("--flip", type=float, default=0.2, help="chance of +100 and of -100 per item at CAB 0")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    settings = Settings(args.models, args.items, args.boards, args.cab, args.gap, args.flip, args.seed)
    try:
        check(settings)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(report(settings, simulate(settings)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
