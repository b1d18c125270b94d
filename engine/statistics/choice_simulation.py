"""Citation choices drawn from a known conditional logit: the proof that the statistics work.

No real model runs on the test machines, so the choice model (engine.statistics.choice_model) is checked
against data whose truth is known. Each answer sees k documents of an item; document j has
the utility

    u_j = beta_relevant_i * relevant_j + beta_label_i * [label_j == label A]
          + beta_middle * [middle]_j + beta_last * [last]_j + beta_repeated * repeated_j + q_j

and the answer either cites nothing (an outside option with utility `nothing`) or cites the one
document with the largest u_j + Gumbel noise (Gumbel-max: exactly the logit choice
probabilities). Given that an answer cites something, the cited document follows the
conditional logit among the shown documents (the outside option drops out), which is what
fit_choice_model estimates.

Modes are the paper's: base puts label A on relevant documents and label B on the others, cf
swaps them, vanilla shows no label. An item keeps its documents, their order and their
qualities q_j in every mode, so the modes differ only in labels, as in the real prompts.

Answers citing several documents (`cites`, off by default: every citing answer cites one):
- "top": a citing answer cites its top m documents by u_j + Gumbel noise (an exploded, rank-ordered
  logit whose order is not recorded), with m drawn from `n_cited` (capped at the documents shown);
  this is "the model picks its top m", for which the k-of-n conditional logit is misspecified;
- "independent": each document is cited on its own with probability 1 / (1 + exp(nothing - u_j)),
  so the number cited varies; given that number, the cited set follows the k-of-n conditional
  logit exactly (an answer citing none is silent).

Three sources of item heterogeneity are optional (all off by default, where the choice model is
exactly right): a quality q_j ~ N(0, quality_sd) per document, shared by the item's modes, a
per-item relevance strength beta_relevant_i ~ N(beta_relevant, relevance_sd) and a per-item label
effect beta_label_i ~ N(beta_label, label_sd), both shared by the item's modes. With them on, the
conditional logit is misspecified the way real data are (documents and items differ beyond the
covariates), and the per-item propensity difference base - cf no longer has one sign.

Besides the Contract-3 frame (one row per shown document per answer, as the store's
citation_decisions view gives it), the simulation returns per item and mode the true choice
probability mass on relevant documents, sum_{j relevant} exp(u_j) / sum_j exp(u_j): what the
propensity probe reads from a real model, with no sampling noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pandas is imported where a frame is built, not when this module loads
    import pandas as pd

MODES = ("vanilla", "base", "cf")


@dataclass(frozen=True)
class ChoiceTruth:
    """The true effects, as log odds ratios (the conditional logit's coefficients)."""

    relevant: float = math.log(4.0)  # a relevant document against a non-relevant one
    label: float = math.log(1.2)  # label A against label B
    middle: float = math.log(0.8)  # shown in the middle against first
    last: float = math.log(0.7)  # shown last against first
    repeated: float = 0.0  # each copy of a document shown twice, against a document shown once
    nothing: float = 0.5  # utility of citing nothing (about one answer in six is silent)
    quality_sd: float = 0.0  # SD of a document's quality utility, shared by its item's modes
    relevance_sd: float = 0.0  # SD of the item's relevance strength around `relevant`
    label_sd: float = 0.0  # SD of the item's label effect around `label` (shared by its modes)


@dataclass(frozen=True)
class SimulationSettings:
    """What is shown: n items of k documents, one or two of them relevant, in these modes."""

    n_items: int = 300
    n_shown: int = 5
    relevant_counts: tuple[int, ...] = (1, 2)  # each item draws its number of relevant documents
    modes: tuple[str, ...] = ("base", "cf")
    repeat_share: float = 0.0  # share of items that show one non-relevant document twice
    label_a: str = "A"
    label_b: str = "B"
    cites: str = "one"  # "one", "top" or "independent" (the module doc)
    n_cited: tuple[float, ...] = (1.0,)  # "top": P(m = 1), P(m = 2), ... of a citing answer

    def __post_init__(self) -> None:
        if self.cites not in ("one", "top", "independent"):
            raise ValueError("cites must be one, top or independent")
        if not self.n_cited or min(self.n_cited) < 0 or abs(sum(self.n_cited) - 1) > 1e-9:
            raise ValueError("n_cited must be probabilities of citing 1, 2, ... documents, summing to 1")
        if self.n_items < 1 or self.n_shown < 2:
            raise ValueError("need at least one item and two shown documents")
        if not self.relevant_counts or min(self.relevant_counts) < 0 or max(self.relevant_counts) >= self.n_shown:
            raise ValueError("relevant_counts must lie in [0, n_shown)")
        if not self.modes or any(m not in MODES for m in self.modes) or len(set(self.modes)) != len(self.modes):
            raise ValueError(f"modes must be distinct names from {MODES}")
        if not 0.0 <= self.repeat_share <= 1.0:
            raise ValueError("repeat_share must lie in [0, 1]")


@dataclass(frozen=True)
class SimulatedChoices:
    """A simulation's output: the decisions frame and the true relevant-document mass."""

    frame: pd.DataFrame  # Contract 3: answer, item, cited, relevant, position, n_shown, ...
    relevant_mass: pd.DataFrame  # item, mode, mass (true choice probability on relevant documents)


def simulate_choices(
    settings: SimulationSettings, truth: ChoiceTruth, rng: np.random.Generator
) -> SimulatedChoices:
    """Draw one data set. The same Generator state gives the same data."""
    import pandas as pd

    n, k = settings.n_items, settings.n_shown
    slots = k + 1  # k documents and a slot for the repeated copy, used by repeating items only
    n_rel = rng.choice(np.asarray(settings.relevant_counts), size=n)
    doc = np.arange(slots)
    relevant = doc[None, :] < n_rel[:, None]  # the first n_rel documents are the relevant ones
    repeats = rng.random(n) < settings.repeat_share
    # The copy duplicates one non-relevant document (chosen uniformly among them).
    source = n_rel + np.floor(rng.random(n) * (k - n_rel)).astype(int)
    present = np.ones((n, slots), dtype=bool)
    present[:, k] = repeats
    relevant[:, k] = False
    quality = rng.normal(0.0, truth.quality_sd, size=(n, slots)) if truth.quality_sd > 0 else np.zeros((n, slots))
    quality[:, k] = quality[np.arange(n), source]
    repeated = np.zeros((n, slots), dtype=bool)
    repeated[repeats, k] = True
    repeated[np.flatnonzero(repeats), source[repeats]] = True
    # Shown order: a random permutation of the present slots (the same in every mode).
    keys = np.where(present, rng.random((n, slots)), np.inf)
    position = np.argsort(np.argsort(keys, axis=1), axis=1) + 1
    n_shown = present.sum(axis=1)
    first = position == 1
    last = position == n_shown[:, None]
    middle = ~first & ~last
    spread = rng.normal(0.0, truth.relevance_sd, size=n) if truth.relevance_sd > 0 else np.zeros(n)
    beta_rel = truth.relevant + spread
    beta_label = truth.label + (rng.normal(0.0, truth.label_sd, size=n) if truth.label_sd > 0 else np.zeros(n))
    base_u = (beta_rel[:, None] * relevant + truth.middle * middle + truth.last * last
              + truth.repeated * repeated + quality)
    frames, masses = [], []
    for mode in settings.modes:
        if mode == "vanilla":
            gets_a = np.zeros((n, slots), dtype=bool)
            labels = np.full((n, slots), None, dtype=object)
        else:
            gets_a = relevant if mode == "base" else ~relevant
            labels = np.where(gets_a, settings.label_a, settings.label_b).astype(object)
        u = np.where(present, base_u + beta_label[:, None] * gets_a, -np.inf)
        cited = _cite(settings, truth, u, present, rng)
        weights = np.exp(u - u.max(axis=1, keepdims=True))  # exp(-inf) = 0 for absent slots
        mass = (weights * relevant).sum(axis=1) / weights.sum(axis=1)
        items = np.array([f"q{i}" for i in range(n)], dtype=object)
        rows = present.ravel()
        group = np.where(first, "first", np.where(last, "last", "middle"))
        frames.append(pd.DataFrame({
            "answer": np.repeat(np.char.add(f"{mode}/", items.astype(str)), slots)[rows],
            "item": np.repeat(items, slots)[rows],
            "cited": cited.ravel()[rows],
            "relevant": relevant.ravel()[rows],
            "position": position.ravel()[rows],
            "n_shown": np.repeat(n_shown, slots)[rows],
            "position_group": group.ravel()[rows],
            "label": labels.ravel()[rows],
            "repeated": repeated.ravel()[rows],
            "condition": mode,
        }))
        masses.append(pd.DataFrame({"item": items, "mode": mode, "mass": mass}))
    frame = pd.concat(frames, ignore_index=True)
    return SimulatedChoices(frame, pd.concat(masses, ignore_index=True))


def _cite(settings: SimulationSettings, truth: ChoiceTruth, u: np.ndarray, present: np.ndarray,
          rng: np.random.Generator) -> np.ndarray:
    """(n, slots) bool: which documents each answer cites (the module doc)."""
    n, slots = u.shape
    if settings.cites == "independent":
        return present & (rng.random((n, slots)) < 1.0 / (1.0 + np.exp(truth.nothing - u)))
    noisy = u + rng.gumbel(size=(n, slots))
    outside = truth.nothing + rng.gumbel(size=n)
    rank = np.argsort(-noisy, axis=1)  # absent slots (u = -inf) come last
    cites = noisy[np.arange(n), rank[:, 0]] > outside
    m = np.ones(n, dtype=int)
    if settings.cites == "top":
        m = rng.choice(np.arange(1, len(settings.n_cited) + 1), size=n, p=np.asarray(settings.n_cited))
        m = np.minimum(m, present.sum(axis=1))
    cited = np.zeros((n, slots), dtype=bool)
    for j in range(int(m.max())):
        take = cites & (m > j)
        cited[np.flatnonzero(take), rank[take, j]] = True
    return cited


@dataclass(frozen=True)
class Coverage:
    """How one term's estimates behave over seeded draws: its true odds ratio, the median fitted
    one, and the share of draws whose 95% interval covers the truth, model-based and
    cluster-robust (by item). Draws whose fit leaves the term unestimated count in `missing`."""

    term: str
    true_odds_ratio: float
    median_odds_ratio: float
    coverage: float  # model-based Wald interval
    robust_coverage: float  # cluster-robust (sandwich by item) Wald interval
    rejection: float  # share of draws with model-based p < 0.05 (the size where the truth is OR 1)
    robust_rejection: float
    draws: int
    missing: int


def choice_coverage(settings: SimulationSettings, truth: ChoiceTruth, draws: int, seed: int) -> tuple[Coverage, ...]:
    """Fit fit_choice_model to `draws` simulated data sets (label B the reference, position as
    first/middle/last) and measure each term's bias and interval coverage against `truth`."""
    from engine.statistics.choice_model import fit_choice_model

    expected = {"relevant": truth.relevant, "position[middle]": truth.middle, "position[last]": truth.last,
                f"label[{settings.label_a}]": truth.label, "repeated": truth.repeated}
    rng = np.random.default_rng(seed)
    found: dict[str, list[tuple[float, bool, bool, bool, bool]]] = {t: [] for t in expected}
    for _ in range(draws):
        fit = fit_choice_model(simulate_choices(settings, truth, rng).frame, label_reference=settings.label_b)
        for e in fit.effects:
            if e.term in found:
                true = math.exp(expected[e.term])
                found[e.term].append((e.odds_ratio, e.ci_low <= true <= e.ci_high,
                                      e.robust_ci_low <= true <= e.robust_ci_high, e.p < 0.05, e.robust_p < 0.05))
    out = []
    for term, rows in found.items():
        if not rows:
            continue
        cols = list(zip(*rows, strict=True))
        out.append(Coverage(term, math.exp(expected[term]), float(np.median(cols[0])), float(np.mean(cols[1])),
                            float(np.mean(cols[2])), float(np.mean(cols[3])), float(np.mean(cols[4])), draws,
                            draws - len(rows)))
    return tuple(out)
