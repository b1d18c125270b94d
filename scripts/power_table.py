"""Power of three label-bias measures on the same simulated data (docs/method.md has the table).

Data: engine.statistics.choice_simulation, base and cf answers per item (relevant documents labelled A in
base, B in cf, as the paper), 5 shown documents of which one or two are relevant, one cited
document per citing answer, an outside option 'cite nothing' (about one answer in six is
silent), and item heterogeneity: each document has a quality utility N(0, quality_sd) shared by
its item's base and cf answers, and each item its own relevance strength N(log 4, relevance_sd)
and its own label effect N(log OR, label_sd), shared by its base and cf answers.
All three measures read the same draws:

  (i)   binary CAB: the per-item citation precision difference base - cf (the cited document
        is relevant: 1, else 0; an answer citing nothing has precision 0, as the store's
        query_metrics view scores it), paired t-test (scipy ttest_rel);
  (ii)  the choice model: fit_choice_model's label effect (label A against B), its Wald p;
  (iii) propensity CAB: the per-item difference of the true probability mass on relevant
        documents base - cf (what the propensity probe reads, without sampling noise), paired
        t-test.

Power is the share of draws with p < 0.05. Run (about 25 minutes on one busy core):

    python scripts/power_table.py --items 100 500 2000 --odds-ratios 1.2 1.5 --draws 100 --seed 19
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from engine.errors import UserError  # noqa: E402
from engine.statistics.choice_model import fit_choice_model  # noqa: E402
from engine.statistics.choice_simulation import ChoiceTruth, SimulationSettings, simulate_choices  # noqa: E402

QUALITY_SD = 1.0
RELEVANCE_SD = 0.5
LABEL_SD = 0.5


@dataclass(frozen=True)
class PowerRow:
    items: int
    odds_ratio: float
    draws: int
    binary_cab: float  # power of each measure
    choice_model: float
    propensity_cab: float
    median_fitted_or: float  # the choice model's median label odds ratio over the draws
    mean_binary_cab: float  # mean binary CAB, x100 (points of precision)
    mean_propensity_cab: float  # mean propensity CAB, x100 (points of probability mass)


def _paired_p(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    from scipy.stats import ttest_rel

    d = a - b
    if np.all(d == d[0]):  # no spread: t is undefined; no evidence of a difference unless all differ
        return float(d[0]), (0.0 if d[0] != 0 else 1.0)
    return float(d.mean()), float(ttest_rel(a, b).pvalue)


def one_draw(items: int, odds_ratio: float, rng: np.random.Generator) -> tuple[float, float, float, float, float, float]:
    """(p binary CAB, p choice model, p propensity CAB, fitted OR, binary CAB, propensity CAB)."""
    truth = ChoiceTruth(label=math.log(odds_ratio), quality_sd=QUALITY_SD, relevance_sd=RELEVANCE_SD,
                        label_sd=LABEL_SD)
    sim = simulate_choices(SimulationSettings(n_items=items), truth, rng)
    f = sim.frame
    # Precision per answer: hits / cited, 0 for an answer citing nothing (one citation at most here).
    precision = (f["cited"] & f["relevant"]).groupby([f["condition"], f["item"]]).sum().astype(float)
    bin_cab, p_bin = _paired_p(precision["base"].sort_index().to_numpy(), precision["cf"].sort_index().to_numpy())
    mass = sim.relevant_mass.set_index(["mode", "item"])["mass"]
    prop_cab, p_prop = _paired_p(mass["base"].sort_index().to_numpy(), mass["cf"].sort_index().to_numpy())
    try:
        effect = fit_choice_model(f, label_reference="B").effect("label[A]")
        p_cm, fitted = effect.p, effect.odds_ratio
    except (UserError, KeyError):  # no informative answer, or the label dropped: no evidence
        p_cm, fitted = 1.0, float("nan")
    return p_bin, p_cm, p_prop, fitted, 100 * bin_cab, 100 * prop_cab


def power_table(items: list[int], odds_ratios: list[float], draws: int, seed: int,
                progress: bool = False) -> list[PowerRow]:
    """Every (items, odds ratio) cell from its own seeded stream (seed, cell index)."""
    rows: list[PowerRow] = []
    for i, n in enumerate(items):
        for j, ratio in enumerate(odds_ratios):
            rng = np.random.default_rng([seed, i, j])
            results = [one_draw(n, ratio, rng) for _ in range(draws)]
            share = [sum(r[k] < 0.05 for r in results) / draws for k in range(3)]
            fitted = [r[3] for r in results if not math.isnan(r[3])]
            rows.append(PowerRow(n, ratio, draws, share[0], share[1], share[2],
                                 statistics.median(fitted) if fitted else float("nan"),
                                 statistics.fmean(r[4] for r in results), statistics.fmean(r[5] for r in results)))
            if progress:  # a long run shows each row as it is done (stderr: stdout is the table)
                print(rows[-1], file=sys.stderr, flush=True)
    return rows


def markdown(rows: list[PowerRow], seed: int) -> str:
    lines = [
        "| items | true label OR | binary CAB | choice model | propensity CAB "
        "| median fitted OR | mean binary CAB (points) | mean propensity CAB (points) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r.items:,} | {r.odds_ratio:g} | {r.binary_cab:.2f} | {r.choice_model:.2f} "
                     f"| {r.propensity_cab:.2f} | {r.median_fitted_or:.2f} | {r.mean_binary_cab:.1f} "
                     f"| {r.mean_propensity_cab:.1f} |")
    draws = rows[0].draws if rows else 0
    lines.append("")
    lines.append(f"Power = share of {draws} draws per row with p < 0.05; seed {seed}; quality SD {QUALITY_SD}, "
                 f"relevance SD {RELEVANCE_SD}, label-effect SD {LABEL_SD}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, nargs="+", default=[100, 500, 2000])
    parser.add_argument("--odds-ratios", type=float, nargs="+", default=[1.2, 1.5])
    parser.add_argument("--draws", type=int, default=100)
    parser.add_argument("--seed", type=int, default=19)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    rows = power_table(args.items, args.odds_ratios, args.draws, args.seed, progress=True)
    print(markdown(rows, args.seed))
    print(f"\n({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
