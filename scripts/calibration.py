"""Type-I error and interval coverage of what `bias`, `compare` and `why-cited` print, by simulation.

Answers are simulated per item, so the truth is known (issue 26). Each item shows 5 documents,
one or two relevant; a run's answer cites nothing (15%), one document (51%) or two (34%, the
multi-citation answers), each cited document relevant with the item's own probability
q ~ Beta(3, 2). Two runs of an item give the same answer with probability 0.7 (a label changes
most answers not at all: the sparse differences where t-tests misbehave); otherwise each draws
its own. Under the null the runs are exchangeable within items; under an effect, the cf run's
(or run B's) cited documents are relevant with probability q - `--shift`. True CAB, CAS and
differences are the means over 1,000,000 simulated items.

Measured, per n items and draws:
- bias (engine.statistics.bias.compute_bias, the numbers every face prints): the share of "favours ..."
  verdicts under the null (size; nominal 5%), of CAS rows whose signed vanilla-vs-base p < 0.05
  under the null, and the coverage of the CAB and CAS 95% intervals;
- compare (engine.statistics.compare_stats.compare_metric): the share of "different" verdicts under the
  null for citation precision (permutation test) and exact match (exact McNemar), interval
  coverage, and the share of "equivalent within M" where the true difference is M (nominal <= 5%);
- why-cited (engine.statistics.choice_simulation.choice_coverage): label odds-ratio coverage and the share
  of label p < 0.05 where the true label OR is 1, with one citation per answer and with 82% of
  answers citing their top two.

    python scripts/calibration.py                      # the table in docs/figures.md
    python scripts/calibration.py --items 30 --draws 100 --choice-draws 40   # minutes less
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

N_SHOWN = 5
SILENT, TWO = 0.15, 0.4  # P(cites nothing); P(cites two | cites)
SAME = 0.7  # P(two runs of an item give the same answer)
TRUTH_ITEMS = 1_000_000


@dataclass(frozen=True)
class Runs:
    """Per-item metrics of runs on the same items: precision, recall (shares), cites, em (0/1)."""

    precision: np.ndarray  # (runs, n)
    recall: np.ndarray
    cites: np.ndarray
    em: np.ndarray


def simulate(rng: np.random.Generator, n: int, shifts: tuple[float, ...]) -> Runs:
    """len(shifts) runs of n items; run r's cited documents are relevant with probability q - shifts[r]."""
    q = rng.beta(3.0, 2.0, n)
    n_relevant = rng.integers(1, 3, n)
    em_p = rng.beta(2.0, 2.0, n)
    own = [_answers(rng, q - s, n_relevant, em_p - s) for s in shifts]
    # One shared answer per item (drawn without shift, so that the effect acts on answers that change).
    shared = _answers(rng, q, n_relevant, em_p)
    same = rng.random(n) < SAME
    cols = []
    for answer in own:
        cols.append(tuple(np.where(same, s, a) for s, a in zip(shared, answer, strict=True)))
    return Runs(*(np.stack(x) for x in zip(*cols, strict=True)))


def _answers(rng: np.random.Generator, q: np.ndarray, n_relevant: np.ndarray, em_p: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    n = q.size
    q = np.clip(q, 0.0, 1.0)
    m = np.where(rng.random(n) < SILENT, 0, np.where(rng.random(n) < TWO, 2, 1))
    hits = (rng.random(n) < q).astype(int) * (m >= 1) + (rng.random(n) < q).astype(int) * (m >= 2)
    hits = np.minimum(hits, n_relevant)
    precision = np.where(m > 0, hits / np.maximum(m, 1), 0.0)
    recall = hits / n_relevant
    em = (rng.random(n) < np.clip(em_p, 0.0, 1.0)).astype(float)
    return precision, recall, m > 0, em


def truths(shift: float, seed: int) -> dict[str, float]:
    """True CAB (base - cf) and CAS (mean |vanilla - base|) in points, and true B - A differences."""
    runs = simulate(np.random.default_rng(seed + 10_000), TRUTH_ITEMS, (0.0, 0.0, shift))
    return {
        "cab_precision": 100 * float((runs.precision[1] - runs.precision[2]).mean()),
        "cab_recall": 100 * float((runs.recall[1] - runs.recall[2]).mean()),
        "cas_precision": 100 * float(np.abs(runs.precision[0] - runs.precision[1]).mean()),
        "cas_recall": 100 * float(np.abs(runs.recall[0] - runs.recall[1]).mean()),
        "em": 100 * float((runs.em[2] - runs.em[1]).mean()),
    }


def _frame(runs: Runs, r: int) -> list[dict]:
    return [{"item_id": f"q{i}", "precision": p, "recall": c, "f1": 0.0, "cites": bool(k)}
            for i, (p, c, k) in enumerate(zip(runs.precision[r], runs.recall[r], runs.cites[r], strict=True))]


@dataclass(frozen=True)
class BiasRow:
    n: int
    scenario: str
    draws: int
    favours: float  # share of CAB "favours" verdicts (precision, recall together)
    cas_signed: float  # share of CAS rows with the signed test's p < 0.05
    cab_cover: float
    cas_cover: float
    undefined: int


def bias_calibration(n: int, draws: int, shift: float, seed: int) -> BiasRow:
    """compute_bias on `draws` simulated experiments (vanilla, base, cf) of n items."""
    from engine.statistics.bias import compute_bias

    truth = truths(shift, seed)
    rng = np.random.default_rng(seed)
    favours = signed = cab_in = cas_in = rows = undefined = 0
    for _ in range(draws):
        runs = simulate(rng, n, (0.0, 0.0, shift))
        results = compute_bias({m: _frame(runs, r) for r, m in enumerate(("vanilla", "base", "cf"))},
                               seed=int(rng.integers(2**31)))
        for res in results:
            if res.metric == "f1":
                continue
            if res.undefined_reason:
                undefined += 1
                continue
            true = truth[f"{res.measure.lower()}_{res.metric}"]
            inside = res.ci_low <= true <= res.ci_high
            if res.measure == "CAB":
                favours += bool(res.direction and res.direction.startswith("favours"))
                cab_in += inside
                rows += 1
            else:
                signed += res.p < 0.05
                cas_in += inside
    per = max(rows, 1)
    return BiasRow(n, "null" if shift == 0 else f"shift {shift:g}", draws, favours / per, signed / per,
                   cab_in / per, cas_in / per, undefined)


@dataclass(frozen=True)
class CompareRow:
    n: int
    metric: str
    draws: int
    different: float  # under the null
    cover: float  # of the 95% interval, under the shift
    equivalent_at_margin: float  # "equivalent within |true diff|" under the shift (nominal <= 5%)
    true_diff: float


def compare_calibration(n: int, draws: int, shift: float, seed: int) -> list[CompareRow]:
    """compare_metric on simulated pairs of runs: precision (continuous) and exact match (0/1)."""
    from engine.statistics.compare_stats import METRICS, compare_metric

    truth = truths(shift, seed)
    # Run B is the shifted one: B - A is minus CAB's base - cf.
    true = {"precision": -truth["cab_precision"], "exact_match": truth["em"]}
    rng = np.random.default_rng(seed + 1)
    counts = {m: [0, 0, 0] for m in true}
    for _ in range(draws):
        null = simulate(rng, n, (0.0, 0.0))
        moved = simulate(rng, n, (0.0, shift))
        s = int(rng.integers(2**31))
        for metric, attr in (("precision", "precision"), ("exact_match", "em")):
            spec = METRICS[metric]
            a0, b0 = getattr(null, attr)
            a1, b1 = getattr(moved, attr)
            kw = dict(n_resamples=1000, seed=s, permutations=1999)
            counts[metric][0] += compare_metric(spec, a0, b0, **kw).verdict == "different"
            res = compare_metric(spec, a1, b1, margin=abs(true[metric]), **kw)
            counts[metric][1] += res.ci_low <= true[metric] <= res.ci_high
            counts[metric][2] += res.verdict.startswith("equivalent")
    return [CompareRow(n, m, draws, c[0] / draws, c[1] / draws, c[2] / draws, true[m]) for m, c in counts.items()]


def choice_calibration(n: int, draws: int, seed: int) -> list[tuple[str, float, float, float]]:
    """(scenario, label OR coverage under OR 1.5, robust coverage, label rejection under OR 1)."""
    from engine.statistics.choice_simulation import ChoiceTruth, SimulationSettings, choice_coverage

    out = []
    for name, extra in (("one citation", {}), ("82% cite their top two", dict(cites="top", n_cited=(0.18, 0.82)))):
        settings = SimulationSettings(n_items=n, **extra)
        label = "label[A]"
        effect = {c.term: c for c in choice_coverage(settings, ChoiceTruth(label=math.log(1.5)), draws, seed)}
        null = {c.term: c for c in choice_coverage(settings, ChoiceTruth(label=0.0), draws, seed + 1)}
        out.append((name, effect[label].coverage, effect[label].robust_coverage, null[label].rejection))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, nargs="+", default=[30, 100, 300])
    parser.add_argument("--draws", type=int, default=1000, help="simulated experiments per cell (bias, compare)")
    parser.add_argument("--choice-draws", type=int, default=200, help="simulated studies per cell (why-cited)")
    parser.add_argument("--shift", type=float, default=0.1, help="the effect: drop in P(cited document is relevant)")
    parser.add_argument("--seed", type=int, default=26)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    sd = lambda p, k: 100 * math.sqrt(p * (1 - p) / k)  # noqa: E731  a share's binomial SD

    print("### bias (CAB verdict and intervals; CAS interval and its signed test)\n")
    print("| items | runs | CAB 'favours' | CAS signed p < 0.05 | CAB interval covers | CAS interval covers | undefined |")
    print("|---|---|---|---|---|---|---|")
    for n in args.items:
        for shift in (0.0, args.shift):
            r = bias_calibration(n, args.draws, shift, args.seed)
            print(f"| {n} | {r.scenario} | {100 * r.favours:.1f}% | {100 * r.cas_signed:.1f}% | "
                  f"{100 * r.cab_cover:.1f}% | {100 * r.cas_cover:.1f}% | {r.undefined} |")
    print(f"\nPrecision and recall rows together ({2 * args.draws} per cell); binomial SD of a 5% share: "
          f"{sd(0.05, 2 * args.draws):.1f} points, of a 95% coverage: {sd(0.95, 2 * args.draws):.1f}.\n")

    print("### compare (verdicts and intervals)\n")
    print("| items | metric | 'different' under the null | interval covers (shift) | 'equivalent within the true difference' "
          "| true diff |")
    print("|---|---|---|---|---|---|")
    for n in args.items:
        for c in compare_calibration(n, args.draws, args.shift, args.seed):
            print(f"| {n} | {c.metric} | {100 * c.different:.1f}% | {100 * c.cover:.1f}% | "
                  f"{100 * c.equivalent_at_margin:.1f}% | {c.true_diff:+.2f} |")
    print(f"\n{args.draws} draws per cell; binomial SD of a 5% share: {sd(0.05, args.draws):.1f} points.\n")

    print("### why-cited (label odds ratio)\n")
    print("| items | answers | label OR 1.5: covered (model) | covered (robust, by item) | label OR 1: p < 0.05 |")
    print("|---|---|---|---|---|")
    for n in args.items:
        for name, cover, robust, reject in choice_calibration(n, args.choice_draws, args.seed):
            print(f"| {n} | {name} | {100 * cover:.1f}% | {100 * robust:.1f}% | {100 * reject:.1f}% |")
    print(f"\n{args.choice_draws} draws per cell; binomial SD of a 95% coverage: "
          f"{sd(0.95, args.choice_draws):.1f} points. Seed {args.seed}; "
          f"{time.perf_counter() - start:.0f} s.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
