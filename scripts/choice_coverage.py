"""Bias and interval coverage of the citation choice model (`why-cited`) by simulation.

Data: engine.statistics.choice_simulation, base and cf answers per item, 5 shown documents (one or two
relevant), true relevance OR 4, position ORs 0.8 (middle) and 0.7 (last), label OR 1.5, the
outside option at utility 0.5. Scenarios:
  one          every citing answer cites one document (the model is exactly right);
  top2         82% of citing answers cite their top two (an exploded logit; the k-of-n
               conditional logit the fit uses is then misspecified);
  independent  each document cited on its own (the k-of-n conditional logit is exact);
  quality      one citation each, documents of unequal quality N(0, 1), item relevance strength
               N(log 4, 0.5) and label effect N(log 1.5, 0.5), shared by an item's modes;
  quality_repeat  the same, half the items showing one non-relevant document twice (true
               repetition OR 1.5 per copy).
For each term: the median fitted odds ratio and the share of draws whose 95% interval covers the
truth, model-based and cluster-robust by item (engine.statistics.choice_simulation.choice_coverage).

    python scripts/choice_coverage.py --items 30 100 300 --draws 200 --seed 19
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.statistics.choice_simulation import ChoiceTruth, SimulationSettings, choice_coverage  # noqa: E402

LABEL = math.log(1.5)
SCENARIOS = {
    "one": (dict(), ChoiceTruth(label=LABEL)),
    "top2": (dict(cites="top", n_cited=(0.18, 0.82)), ChoiceTruth(label=LABEL)),
    "independent": (dict(cites="independent"), ChoiceTruth(label=LABEL, nothing=1.5)),
    "quality": (dict(), ChoiceTruth(label=LABEL, quality_sd=1.0, relevance_sd=0.5, label_sd=0.5)),
    "quality_repeat": (dict(repeat_share=0.5), ChoiceTruth(label=LABEL, repeated=math.log(1.5), quality_sd=1.0,
                                                          relevance_sd=0.5, label_sd=0.5)),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, nargs="+", default=[30, 100, 300])
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS)[:4], choices=list(SCENARIOS))
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--seed", type=int, default=19)
    args = parser.parse_args(argv)
    print("| scenario | items | term | true OR | median OR | coverage (model) | coverage (robust, by item) "
          "| no estimate |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.scenarios:
        extra, truth = SCENARIOS[name]
        for n in args.items:
            for c in choice_coverage(SimulationSettings(n_items=n, **extra), truth, args.draws, args.seed):
                print(f"| {name} | {n} | {c.term} | {c.true_odds_ratio:.2f} | {c.median_odds_ratio:.2f} | "
                      f"{100 * c.coverage:.1f}% | {100 * c.robust_coverage:.1f}% | {c.missing} |")
    print(f"\n95% intervals; share of {args.draws} draws, seed {args.seed} "
          f"(binomial SD of a 95% coverage: {100 * math.sqrt(0.95 * 0.05 / args.draws):.1f} points)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
