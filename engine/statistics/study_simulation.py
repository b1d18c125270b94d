"""Studies drawn from a known per-configuration label effect: the proof that the study model works.

A study shows the same items in every configuration (a level combination of the axes, e.g. 2
models x 2 orders), in base and cf mode. Each item has its documents (one or two relevant), an
item random intercept a_i ~ N(0, item_sd) added to every document's utility (it cancels in the
answer's strata, as any item intercept does), and, optionally, an item random label slope
v_i ~ N(0, label_sd) shared by every configuration: the item's documents pull the label effect the
same way wherever the item recurs, which correlates its answers across configurations (what the
cluster-robust covariance by item is for). Document j of an answer in configuration c has utility

    u_j = a_i + relevant_c * relevant_j + middle * [middle]_j + last * [last]_j
          + (label_c + v_i) * [label_j == A]

(relevant_c is `relevant` in every configuration unless `relevant_by` gives one per configuration:
two models that weigh relevance differently).

and the answer cites the document with the largest u_j + Gumbel noise, or nothing when an outside
option (utility `nothing` + Gumbel) beats it. The order axis, when present, reverses the shown order
in its second level. study_coverage fits engine.statistics.study_model to seeded draws and counts
how often each 95% interval covers the truth and how often the joint interaction test and each
axis's test reject.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import product
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class StudyTruth:
    """Axes with their levels and the true label log odds ratio per configuration (grid order)."""

    axes: tuple[tuple[str, tuple[str, ...]], ...] = (("model", ("m1", "m2")), ("order", ("ranked", "reversed")))
    label: tuple[float, ...] = (math.log(1.5), math.log(1.5), math.log(1.0), math.log(2.0))
    relevant: float = math.log(4.0)
    relevant_by: tuple[float, ...] = ()  # per configuration (grid order); empty: `relevant` in each
    middle: float = math.log(0.8)
    last: float = math.log(0.7)
    nothing: float = 0.5
    item_sd: float = 1.0  # item random intercept (cancels in the strata)
    label_sd: float = 0.0  # item random label slope, shared by every configuration
    n_items: int = 100
    n_shown: int = 5
    modes: tuple[str, ...] = field(default=("base", "cf"))

    def configurations(self) -> list[dict[str, str]]:
        names = [a for a, _ in self.axes]
        return [dict(zip(names, values, strict=True)) for values in product(*(levels for _, levels in self.axes))]


def simulate_study(truth: StudyTruth, rng: np.random.Generator) -> pd.DataFrame:
    """One study's decisions frame (engine.statistics.study_answers.COLUMNS, the axes, `label`)."""
    import pandas as pd

    configs = truth.configurations()
    if len(configs) != len(truth.label):
        raise ValueError(f"{len(configs)} configurations but {len(truth.label)} label effects")
    if truth.relevant_by and len(truth.relevant_by) != len(configs):
        raise ValueError(f"{len(configs)} configurations but {len(truth.relevant_by)} relevance effects")
    n, k = truth.n_items, truth.n_shown
    n_rel = rng.choice(np.array([1, 2]), size=n)
    relevant = np.arange(k)[None, :] < n_rel[:, None]
    shuffle = np.argsort(rng.random((n, k)), axis=1)  # each item's ranked order of its documents
    ranked_position = np.argsort(shuffle, axis=1) + 1
    intercept = rng.normal(0.0, truth.item_sd, size=n) if truth.item_sd > 0 else np.zeros(n)
    slope = rng.normal(0.0, truth.label_sd, size=n) if truth.label_sd > 0 else np.zeros(n)
    items = np.array([f"q{i}" for i in range(n)], dtype=object)
    frames = []
    for c, (levels, beta) in enumerate(zip(configs, truth.label, strict=True)):
        reverse = levels.get("order") not in (None, "ranked") and list(dict(truth.axes).get("order", ())).index(
            levels["order"]) > 0
        position = (k + 1 - ranked_position) if reverse else ranked_position
        group = np.where(position == 1, "first", np.where(position == k, "last", "middle"))
        for mode in truth.modes:
            gets_a = relevant if mode == "base" else ~relevant
            weight = truth.relevant_by[c] if truth.relevant_by else truth.relevant
            u = (intercept[:, None] + weight * relevant + truth.middle * (group == "middle")
                 + truth.last * (group == "last") + (beta + slope)[:, None] * gets_a)
            noisy = u + rng.gumbel(size=(n, k))
            top = noisy.argmax(axis=1)
            cites = noisy[np.arange(n), top] > intercept + truth.nothing + rng.gumbel(size=n)
            cited = np.zeros((n, k), dtype=bool)
            cited[np.flatnonzero(cites), top[cites]] = True
            frame = pd.DataFrame({
                "answer": np.repeat(np.char.add(f"c{c}/{mode}/", items.astype(str)), k),
                "item": np.repeat(items, k),
                "cited": cited.ravel(),
                "relevant": relevant.ravel(),
                "position": position.ravel(),
                "position_group": group.ravel(),
                "label_side": np.where(gets_a, "A", "B").ravel(),
                "label": np.where(gets_a, "A", "B").ravel(),
                "mode": mode,
            })
            for axis, level in levels.items():
                frame[axis] = level
            frames.append(frame)
    return pd.concat(frames, ignore_index=True)


@dataclass(frozen=True)
class StudyCoverage:
    """Over seeded draws: per configuration (and per pair, their difference) the true log odds
    ratio, the median estimate and the share of 95% intervals covering the truth (cluster-robust;
    model-based beside it); the joint interaction test's rejection rate at 5%, and each axis's
    ("the label effect does not depend on model")."""

    rows: tuple[tuple[str, float, float, float, float], ...]  # (what, truth, median, robust, model)
    interaction_rejection: float
    draws: int
    axis_rejection: tuple[tuple[str, float], ...] = ()  # (axis, share of draws its test rejects at 5%)


def study_coverage(truth: StudyTruth, draws: int, seed: int) -> StudyCoverage:
    """Fit the study model to `draws` simulated studies and measure its intervals' coverage."""
    from engine.statistics.study_model import fit_study_model

    rng = np.random.default_rng(seed)
    axes = [a for a, _ in truth.axes]
    names = [", ".join(f"{a}={v}" for a, v in levels.items()) for levels in truth.configurations()]
    true = dict(zip(names, truth.label, strict=True))
    hits: dict[str, list[tuple[float, bool, bool]]] = {}
    rejections = 0
    by_axis = dict.fromkeys(axes, 0)
    for _ in range(draws):
        fit = fit_study_model(simulate_study(truth, rng), axes)
        for e in fit.configurations:
            t = true[e.configuration]
            hits.setdefault(e.configuration, []).append(
                (e.log_odds, e.ci_low <= t <= e.ci_high, abs(e.log_odds - t) <= 1.959963984540054 * e.se_model))
        for d in fit.pairwise:
            t = true[d.b] - true[d.a]
            hits.setdefault(f"{d.b} minus {d.a}", []).append(
                (d.difference, d.ci_low <= t <= d.ci_high, abs(d.difference - t) <= 1.959963984540054 * d.se_model))
        rejections += bool(fit.interaction is not None and fit.interaction.p < 0.05)
        for test in fit.per_axis:
            by_axis[test.axis] += test.p < 0.05
    rows = []
    for what, found in hits.items():
        t = true[what] if what in true else true[what.split(" minus ")[0]] - true[what.split(" minus ")[1]]
        cols = list(zip(*found, strict=True))
        rows.append((what, t, float(np.median(cols[0])), float(np.mean(cols[1])), float(np.mean(cols[2]))))
    return StudyCoverage(tuple(rows), rejections / draws, draws, tuple((a, k / draws) for a, k in by_axis.items()))
