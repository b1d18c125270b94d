"""Type-I error and interval coverage of what `bias`, `compare` and `why-cited` print, by simulation.

Answers are simulated per item, so the truth is known. Each item shows 5 documents,
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
  answers citing their top two;
- why-cited where most answers coincide: the share of label p < 0.05 (model-based and cluster-robust
  by item) with no label effect when the cf answer of a share of items (--identical) is their base
  answer (a label that changes few answers: the robust p then rests on the few items that differ),
  and where all but m items coincide (--identical-differ: in those m one run cites a relevant
  document and the other a non-relevant one, which by a coin flip);
- rerun floor (engine.statistics.rerun_floor.rerun_floors): vanilla, base and K reruns of vanilla,
  each answer the item's shared one with probability SAME, else a fresh draw, each run apart (the
  engine's noise). The share of CAS rows "above its floor" with no label effect (size; nominal
  <= 5%), and its power where base's cited documents are relevant with probability q - shift, and
  where the labels change more answers (base gives the shared answer with probability
  --floor-keep); the coverage of the floor's interval (true floor: mean |vanilla - rerun| over
  1,000,000 items).
- large samples (scripts/calibration_large.py): around the number of differing pairs above which
  `compare` and `bias` decide with the paired t-test or McNemar's chi-square and a t interval
  (engine.statistics.asymptotic.ASYMPTOTIC_ABOVE), the size and coverage of those and of the
  permutation and exact tests, at --large-differing differing pairs.

    python scripts/calibration.py                      # the table in docs/figures.md
    python scripts/calibration.py --items 30 --draws 100 --choice-draws 40   # minutes less
    python scripts/calibration.py --sections floor     # the rerun floor's table alone
    python scripts/calibration.py --sections identical --items 100 300   # answers that mostly coincide
    python scripts/calibration.py --sections asymptotic   # the large-sample number's table alone
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


def simulate(rng: np.random.Generator, n: int, shifts: tuple[float, ...],
             keep: tuple[float, ...] | None = None) -> Runs:
    """len(shifts) runs of n items; run r's cited documents are relevant with probability q - shifts[r].
    Every run gives the item's shared answer where one draw says so (P = SAME), else its own; with
    `keep`, run r gives it with probability keep[r], drawn for each run apart (a noisy engine)."""
    q = rng.beta(3.0, 2.0, n)
    n_relevant = rng.integers(1, 3, n)
    em_p = rng.beta(2.0, 2.0, n)
    own = [_answers(rng, q - s, n_relevant, em_p - s) for s in shifts]
    # One shared answer per item (drawn without shift, so that the effect acts on answers that change).
    shared = _answers(rng, q, n_relevant, em_p)
    if keep is None:
        masks = [rng.random(n) < SAME] * len(shifts)
    else:
        masks = [rng.random(n) < k for k in keep]
    cols = []
    for answer, same in zip(own, masks, strict=True):
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


@dataclass(frozen=True)
class FloorScenario:
    """Base's label effect in a rerun-floor simulation: its shift in relevance, and the probability
    that it gives the item's shared answer (vanilla and the reruns: SAME)."""

    name: str
    shift: float = 0.0
    base_keep: float = SAME


@dataclass(frozen=True)
class FloorRow:
    n: int
    reruns: int
    draws: int
    above: tuple[float, ...]  # share of CAS rows "above its floor" per scenario (precision, recall)
    floor_cover: float  # of the floor's 95% interval, in the first scenario
    undefined: int  # CAS rows whose test was undefined, all scenarios


def _floor_runs(rng: np.random.Generator, n: int, scenario: FloorScenario, reruns: int) -> Runs:
    """vanilla, base and `reruns` reruns of vanilla: every answer the item's shared one or a fresh draw, apart."""
    return simulate(rng, n, (0.0, scenario.shift) + (0.0,) * reruns, (SAME, scenario.base_keep) + (SAME,) * reruns)


def floor_truth(scenario: FloorScenario, seed: int) -> dict[str, float]:
    """True CAS and rerun floor in points (means over TRUTH_ITEMS simulated items)."""
    runs = _floor_runs(np.random.default_rng(seed + 20_000), TRUTH_ITEMS, scenario, 1)
    out = {}
    for metric in ("precision", "recall"):
        v, b, again = getattr(runs, metric)
        out[f"cas_{metric}"] = 100 * float(np.abs(v - b).mean())
        out[f"floor_{metric}"] = 100 * float(np.abs(v - again).mean())
    return out


def floor_calibration(n: int, draws: int, scenarios: tuple[FloorScenario, ...], seed: int,
                      reruns: int = 1) -> FloorRow:
    """rerun_floors on `draws` simulated experiments of n items per scenario; the first scenario's
    true floor is what the floor's interval should cover."""
    from engine.statistics.rerun_floor import rerun_floors

    truth = floor_truth(scenarios[0], seed)
    rng = np.random.default_rng(seed + 2)
    above = [0] * len(scenarios)
    covered = rows = undefined = 0
    for _ in range(draws):
        for s, scenario in enumerate(scenarios):
            runs = _floor_runs(rng, n, scenario, reruns)
            floors = rerun_floors({"vanilla": _frame(runs, 0), "base": _frame(runs, 1)},
                                  {"vanilla": [_frame(runs, 2 + k) for k in range(reruns)]},
                                  seed=int(rng.integers(2**31)))
            for res in floors:
                if res.metric == "f1":
                    continue
                if res.verdict is None or res.verdict.startswith("undefined"):
                    undefined += 1
                    continue
                above[s] += res.verdict.startswith("above its floor")
                if s == 0:
                    covered += res.ci_low <= truth[f"floor_{res.metric}"] <= res.ci_high
                    rows += 1
    per = 2 * draws  # precision and recall rows; an undefined one is not "above its floor"
    return FloorRow(n, reruns, draws, tuple(a / per for a in above), covered / max(rows, 1), undefined)


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


def coincide(frame, share: float, rng: np.random.Generator):
    """The frame with, for a `share` of items, the cf answer replaced by the item's base answer (the
    same documents cited: a label that changes few answers). Under no label effect base and cf
    answers are exchangeable draws, so the copies keep the null."""
    base = frame.index[frame["condition"] == "base"].to_numpy()
    cf = frame.index[frame["condition"] == "cf"].to_numpy()
    items = frame.loc[base, "item"].to_numpy()
    names, code = np.unique(items, return_inverse=True)
    same = (rng.random(len(names)) < share)[code]  # base and cf rows of an item in the same order
    cited = frame["cited"].to_numpy().copy()
    cited[cf[same]] = cited[base[same]]
    return frame.assign(cited=cited)


def differ_in(frame, m: int, rng: np.random.Generator):
    """Every cf answer its item's base answer, except in m items: there one of base and cf cites a
    relevant document and the other a non-relevant one, which of them by a coin flip (no label
    effect). The label's score then rests on exactly m items."""
    base = frame.index[frame["condition"] == "base"].to_numpy()
    cf = frame.index[frame["condition"] == "cf"].to_numpy()
    k = int(frame["n_shown"].iloc[0])  # the same number shown in every answer here: k rows per item
    cited = frame["cited"].to_numpy().copy()
    cited[cf] = cited[base]
    relevant = frame.loc[base, "relevant"].to_numpy(bool).reshape(-1, k)
    for i in rng.choice(len(relevant), m, replace=False):
        pair = [np.flatnonzero(relevant[i])[0], np.flatnonzero(~relevant[i])[0]]
        if rng.random() < 0.5:
            pair.reverse()
        cited[base[k * i:k * i + k]] = np.arange(k) == pair[0]
        cited[cf[k * i:k * i + k]] = np.arange(k) == pair[1]
    return frame.assign(cited=cited)


@dataclass(frozen=True)
class IdenticalRow:
    n: int
    share: float  # of items whose cf answer is their base answer
    draws: int
    model: float  # share of label p < 0.05 (model-based), no label effect
    robust: float  # the same for the robust p
    no_robust: int  # draws with no robust p (every cluster's score 0 up to round-off)
    differing: float  # median number of items whose base and cf answers differ


def identical_calibration(n: int, draws: int, share: float, seed: int, differ: int | None = None) -> IdenticalRow:
    """why-cited's label p with no label effect where most items' base and cf answers coincide: a
    `share` of items at random, or all but `differ` items (differ_in)."""
    from engine.statistics.choice_model import fit_choice_model
    from engine.statistics.choice_simulation import ChoiceTruth, SimulationSettings, simulate_choices

    rng = np.random.default_rng(seed)
    model = robust = none = 0
    differing = []
    for _ in range(draws):
        drawn = simulate_choices(SimulationSettings(n_items=n), ChoiceTruth(label=0.0), rng).frame
        frame = coincide(drawn, share, rng) if differ is None else differ_in(drawn, differ, rng)
        pair = frame.pivot_table(index=["item", "position"], columns="condition", values="cited", aggfunc="first")
        differing.append(int((pair["base"] != pair["cf"]).groupby(level="item").any().sum()))
        e = fit_choice_model(frame, label_reference="B").effect("label[A]")
        model += e.p < 0.05
        if e.robust_undefined:
            none += 1
        else:
            robust += e.robust_p < 0.05
    return IdenticalRow(n, share, draws, model / draws, robust / max(draws - none, 1), none,
                        float(np.median(differing)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, nargs="+", default=[30, 100, 300])
    parser.add_argument("--draws", type=int, default=1000, help="simulated experiments per cell (bias, compare)")
    parser.add_argument("--choice-draws", type=int, default=200, help="simulated studies per cell (why-cited)")
    parser.add_argument("--shift", type=float, default=0.1, help="the effect: drop in P(cited document is relevant)")
    parser.add_argument("--floor-keep", type=float, default=0.5,
                        help="rerun floor's second effect: P(base gives the item's shared answer), else SAME")
    parser.add_argument("--floor-reruns", type=int, nargs="+", default=[1, 2], help="reruns of vanilla (K)")
    parser.add_argument("--identical", type=float, nargs="+", default=[0.9, 0.97],
                        help="why-cited where most answers coincide: shares of items whose cf answer is the base one")
    parser.add_argument("--identical-differ", type=int, nargs="*", default=[4, 8, 16],
                        help="identical: also all items' answers coinciding but this many (one cites a relevant "
                             "document, the other a non-relevant one)")
    parser.add_argument("--identical-draws", type=int, default=1000, help="simulated studies per cell (identical)")
    parser.add_argument("--large-differing", type=int, nargs="+", default=[100, 300, 1000, 3000],
                        help="asymptotic: differing pairs per cell")
    parser.add_argument("--large-draws", type=int, default=10_000, help="asymptotic: draws of the large-sample side")
    parser.add_argument("--large-exact-draws", type=int, default=300,
                        help="asymptotic: draws of the permutation and exact side (the bootstrap's cost)")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS), help="which tables")
    parser.add_argument("--seed", type=int, default=26)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    for section in SECTIONS:
        if section in args.sections:
            _PRINTERS[section](args)
    print(f"Seed {args.seed}; {time.perf_counter() - start:.0f} s.")
    return 0


def _sd(p: float, k: int) -> float:
    """A share's binomial SD, in points."""
    return 100 * math.sqrt(p * (1 - p) / k)


def _print_bias(args: argparse.Namespace) -> None:
    print("### bias (CAB verdict and intervals; CAS interval and its signed test)\n")
    print("| items | runs | CAB 'favours' | CAS signed p < 0.05 | CAB interval covers | CAS interval covers | undefined |")
    print("|---|---|---|---|---|---|---|")
    for n in args.items:
        for shift in (0.0, args.shift):
            r = bias_calibration(n, args.draws, shift, args.seed)
            print(f"| {n} | {r.scenario} | {100 * r.favours:.1f}% | {100 * r.cas_signed:.1f}% | "
                  f"{100 * r.cab_cover:.1f}% | {100 * r.cas_cover:.1f}% | {r.undefined} |")
    print(f"\nPrecision and recall rows together ({2 * args.draws} per cell); binomial SD of a 5% share: "
          f"{_sd(0.05, 2 * args.draws):.1f} points, of a 95% coverage: {_sd(0.95, 2 * args.draws):.1f}.\n")


def _print_compare(args: argparse.Namespace) -> None:
    print("### compare (verdicts and intervals)\n")
    print("| items | metric | 'different' under the null | interval covers (shift) | 'equivalent within the true difference' "
          "| true diff |")
    print("|---|---|---|---|---|---|")
    for n in args.items:
        for c in compare_calibration(n, args.draws, args.shift, args.seed):
            print(f"| {n} | {c.metric} | {100 * c.different:.1f}% | {100 * c.cover:.1f}% | "
                  f"{100 * c.equivalent_at_margin:.1f}% | {c.true_diff:+.2f} |")
    print(f"\n{args.draws} draws per cell; binomial SD of a 5% share: {_sd(0.05, args.draws):.1f} points.\n")


def _print_why_cited(args: argparse.Namespace) -> None:
    print("### why-cited (label odds ratio)\n")
    print("| items | answers | label OR 1.5: covered (model) | covered (robust, by item) | label OR 1: p < 0.05 |")
    print("|---|---|---|---|---|")
    for n in args.items:
        for name, cover, robust, reject in choice_calibration(n, args.choice_draws, args.seed):
            print(f"| {n} | {name} | {100 * cover:.1f}% | {100 * robust:.1f}% | {100 * reject:.1f}% |")
    print(f"\n{args.choice_draws} draws per cell; binomial SD of a 95% coverage: "
          f"{_sd(0.95, args.choice_draws):.1f} points.\n")


def _print_floor(args: argparse.Namespace) -> None:
    scenarios = (FloorScenario("no label effect"), FloorScenario(f"shift {args.shift:g}", shift=args.shift),
                 FloorScenario(f"base keeps {100 * args.floor_keep:g}%", base_keep=args.floor_keep))
    truths = [floor_truth(s, args.seed) for s in scenarios]
    print("### rerun floor (CAS against its floor: the one-sided within-item permutation test)\n")
    print("| items | reruns | " + " | ".join(f"{s.name}: 'above its floor'" for s in scenarios)
          + " | floor interval covers | undefined |")
    print("|---|---|" + "---|" * len(scenarios) + "---|---|")
    for n in args.items:
        for k in args.floor_reruns:
            r = floor_calibration(n, args.draws, scenarios, args.seed, reruns=k)
            print(f"| {n} | {k} | " + " | ".join(f"{100 * a:.1f}%" for a in r.above)
                  + f" | {100 * r.floor_cover:.1f}% | {r.undefined} |")
    gaps = "; ".join(f"{s.name}: precision {t['cas_precision'] - t['floor_precision']:+.2f}, recall "
                     f"{t['cas_recall'] - t['floor_recall']:+.2f}" for s, t in zip(scenarios, truths, strict=True))
    print(f"\nPrecision and recall rows together ({2 * args.draws} per cell); binomial SD of a 5% share: "
          f"{_sd(0.05, 2 * args.draws):.1f} points. True CAS minus its floor, in points: {gaps}.\n")


def _print_identical(args: argparse.Namespace) -> None:
    print("### why-cited where most answers coincide (label OR 1: p < 0.05)\n")
    print("| items | base and cf answers coincide | items whose answers differ (median) | model-based p < 0.05 "
          "| robust p < 0.05 | no robust p |")
    print("|---|---|---|---|---|---|")
    for n in args.items:
        for share in args.identical:
            r = identical_calibration(n, args.identical_draws, share, args.seed)
            print(f"| {n} | {100 * share:g}% | {r.differing:g} | {100 * r.model:.1f}% | {100 * r.robust:.1f}% "
                  f"| {r.no_robust} |")
        for m in args.identical_differ:
            r = identical_calibration(n, args.identical_draws, 1.0, args.seed, differ=m)
            print(f"| {n} | all but {m} items | {r.differing:g} | {100 * r.model:.1f}% | {100 * r.robust:.1f}% "
                  f"| {r.no_robust} |")
    print(f"\n{args.identical_draws} draws per cell; binomial SD of a 5% share: "
          f"{_sd(0.05, args.identical_draws):.1f} points.\n")


def _print_asymptotic(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from calibration_large import large_sample_calibration

    from engine.statistics.asymptotic import ASYMPTOTIC_ABOVE

    print("### compare and bias around the large-sample number\n")
    print(f"Above {ASYMPTOTIC_ABOVE:,} differing pairs the large-sample test decides.\n")
    print("| differing pairs | items | metric | large-sample test: p < 0.05 under the null | permutation / exact "
          "test: p < 0.05 | t interval covers | bootstrap / exact bounds cover |")
    print("|---|---|---|---|---|---|---|")
    for m in args.large_differing:
        for r in large_sample_calibration(m, args.large_draws, args.large_exact_draws, args.seed):
            print(f"| {m:,} | {r.n:,} | {r.kind} | {100 * r.size_large:.2f}% | {100 * r.size_exact:.1f}% | "
                  f"{100 * r.cover_large:.2f}% | {100 * r.cover_exact:.1f}% |")
    d, e = args.large_draws, min(args.large_draws, args.large_exact_draws)
    print(f"\nLarge-sample side: {d:,} draws per cell, binomial SD of a 5% share {_sd(0.05, d):.2f} points, of a "
          f"95% coverage {_sd(0.95, d):.2f}; permutation and exact side: {e:,} draws, {_sd(0.05, e):.1f} and "
          f"{_sd(0.95, e):.1f} points.\n")


SECTIONS = ("bias", "compare", "why-cited", "floor", "identical", "asymptotic")
_PRINTERS = {"bias": _print_bias, "compare": _print_compare, "why-cited": _print_why_cited, "floor": _print_floor,
             "identical": _print_identical, "asymptotic": _print_asymptotic}


if __name__ == "__main__":
    raise SystemExit(main())
