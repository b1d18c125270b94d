"""Tiers of a leaderboard of label bias: which models' CAB can be told apart, with the family of
pairwise tests corrected for multiplicity. docs/method.md, "The leaderboard's tiers", states it.

- Per item, a model's bias is d(i) = 100 * (M_base(i) - M_cf(i)), the values CAB is the mean of.
- Each pair of models is tested on the items both answered: the paired test of mean(d_a - d_b) = 0
  that CAB itself uses (engine.statistics.bias.difference_test: the sign-flip permutation test up
  to ASYMPTOTIC_ABOVE differing items, the paired t-test above). Its null: on each item, either
  model's bias was as likely to be the larger.
- The pairs' p values are adjusted together by Holm's step-down method (engine.statistics.stats.holm,
  statsmodels' multipletests(method="holm") in numbers), which holds the chance of telling any two equal models apart at
  SIGNIFICANCE whatever the number of models.
- Order: |CAB| ascending (the least label bias first), then the model's name.
- Tiers: walk the order; a model joins the current tier when its adjusted p against every model
  already in that tier is at least SIGNIFICANCE, else it opens the next tier. Within a tier no two
  models are told apart; the first model of a tier is told apart from at least one model of the
  tier before. Models whose every pair cannot be told apart all share tier 1, so equal models share
  one tier with probability at least 1 - SIGNIFICANCE.

The tiers test CAB itself, signed: two models that favour opposite labels by the same amount are
told apart although they are as far from 0. A pair with fewer than two common items has no test
(p undefined, said in the pair's note) and is not counted as told apart.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from engine.statistics.bias import SIGNIFICANCE, difference_test
from engine.statistics.stats import DEFAULT_SEED, holm

TIERS_TEST = ("pairwise paired tests of per-item CAB between models (sign-flip permutation test, paired t-test "
              "above 1,000 differing items), Holm-corrected")


@dataclass(frozen=True)
class PairTest:
    """One pair of models: the raw and Holm-adjusted p of their per-item bias, on common items."""

    a: str
    b: str
    n: int  # items both models answered
    difference: float  # mean over those items of d_a - d_b, in points; NaN with fewer than one item
    p: float  # the paired test's p; NaN where there is no test
    p_holm: float  # Holm-adjusted over every tested pair of the board; NaN where there is no test
    test: str  # "sign-flip permutation test (exact)", "paired t-test", or why there is none
    told_apart: bool  # p_holm < SIGNIFICANCE


@dataclass(frozen=True)
class Tiers:
    """Models in order (|CAB| ascending) with their tier (1 = least label bias) and every pair's test."""

    order: tuple[str, ...]
    tier: dict[str, int]
    pairs: tuple[PairTest, ...]
    test: str = TIERS_TEST


def pair_test(a: Mapping[str, float], b: Mapping[str, float], *, seed: int = DEFAULT_SEED) -> tuple[int, float, float, str]:
    """(n common items, mean difference, p, test name) of two models' per-item bias (item id -> d)."""
    common = sorted(set(a) & set(b))
    if len(common) < 2:
        return len(common), (a[common[0]] - b[common[0]]) if common else math.nan, math.nan, \
            f"none: {len(common)} common item{'s' if len(common) != 1 else ''} (a test needs two)"
    diffs = np.fromiter((a[i] - b[i] for i in common), dtype=float, count=len(common))
    test = difference_test(diffs, seed=seed)
    return len(common), float(diffs.mean()), test.p, test.name


def tiers(bias: Mapping[str, Mapping[str, float]], cab: Mapping[str, float], *, seed: int = DEFAULT_SEED) -> Tiers:
    """The tiers of the models in `bias` (model -> item id -> per-item bias in points), whose CAB
    values are `cab` (model -> CAB, all finite): see the module's docstring for the rule."""
    order = tuple(sorted(bias, key=lambda m: (abs(cab[m]), m)))
    raw = []
    for i, a in enumerate(order):
        for b in order[i + 1:]:
            raw.append((a, b, *pair_test(bias[a], bias[b], seed=seed)))
    adjusted = holm([r[4] for r in raw])
    pairs = tuple(
        PairTest(a, b, n, diff, p, q, name, bool(not math.isnan(q) and q < SIGNIFICANCE))
        for (a, b, n, diff, p, name), q in zip(raw, adjusted, strict=True)
    )
    apart = {frozenset((t.a, t.b)) for t in pairs if t.told_apart}
    tier: dict[str, int] = {}
    members: list[str] = []
    current = 0
    for model in order:
        if not members or any(frozenset((model, m)) in apart for m in members):
            current += 1
            members = []
        members.append(model)
        tier[model] = current
    return Tiers(order, tier, pairs)
