"""Interval coverage of the study model (`why-cited --study NAME`) by simulation.

Data: engine.statistics.study_simulation: the same items in every configuration of a 2 models x 2
orders grid (the order reverses the shown order), base and cf answers, 5 shown documents (one or two
relevant), relevance OR 4, position ORs 0.8 (middle) and 0.7 (last), an item random intercept
N(0, 1) shared by every configuration and mode. True label ORs per configuration (m1 ranked, m1
reversed, m2 ranked, m2 reversed). Scenarios:
  differ        label ORs 1.5, 1.5, 1.0, 2.0; no label slope (the model is exactly right);
  differ_slope  the same, and an item random label slope N(0, 0.5) shared by the item's answers in
                every configuration (its answers correlated across configurations);
  equal_slope   every label OR 1.5, the same slope: the joint interaction test's size;
  relevance_differs  every label OR 1.5 and no slope, but m1 weighs relevance at OR 2 and m2 at
                OR 10: the tests' size where the models differ in a nuisance effect alone (the
                study model fits relevance and position per configuration for this).
For each configuration's label log odds ratio and each two configurations' difference: the median
estimate and the share of draws whose 95% interval covers the truth, cluster-robust by item (what
the command prints) and model-based beside it; and the share of draws in which the joint Wald
test of all label x configuration interactions rejects at 5%, and each axis's test.

    python scripts/study_model_coverage.py --items 100 --draws 200 --seed 33
    python scripts/study_model_coverage.py --items 300 --draws 200 --seed 33 --scenario relevance_differs
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.statistics.study_simulation import StudyTruth, study_coverage  # noqa: E402

DIFFER = (math.log(1.5), math.log(1.5), math.log(1.0), math.log(2.0))
SCENARIOS = {
    "differ": dict(label=DIFFER),
    "differ_slope": dict(label=DIFFER, label_sd=0.5),
    "equal_slope": dict(label=(math.log(1.5),) * 4, label_sd=0.5),
    "relevance_differs": dict(label=(math.log(1.5),) * 4, relevant_by=(math.log(2.0),) * 2 + (math.log(10.0),) * 2),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=100)
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--seed", type=int, default=33)
    parser.add_argument("--scenario", action="append", choices=list(SCENARIOS), default=None)
    args = parser.parse_args(argv)
    start = time.monotonic()
    print("| scenario | estimate | true log OR | median | covered (robust, by item) | covered (model-based) |")
    print("|---|---|---|---|---|---|")
    rejections = []
    for name in args.scenario or list(SCENARIOS):
        result = study_coverage(StudyTruth(n_items=args.items, **SCENARIOS[name]), args.draws, args.seed)
        for what, truth, median, robust, model in result.rows:
            print(f"| {name} | {what} | {truth:+.3f} | {median:+.3f} | {100 * robust:.1f}% | {100 * model:.1f}% |")
        rejections.append((name, result.interaction_rejection, result.axis_rejection))
    print()
    for name, share, by_axis in rejections:
        axes = "".join(f"; 'depends on {a}' in {100 * k:.1f}%" for a, k in by_axis)
        print(f"{name}: joint interaction test rejects at 5% in {100 * share:.1f}% of draws{axes}")
    print(f"\n{args.draws} draws per scenario, {args.items} items, seed {args.seed}; "
          f"{time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
