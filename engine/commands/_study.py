"""`python -m engine run` with comma lists: the study grid (engine.usecases.study.study), its plan
printed before the first model loads, then one line per experiment. engine/commands/run.py builds
the StudyRequest, each configuration's run as a single run's; here the grid runs and reports.
"""

from __future__ import annotations

import argparse
import shlex

from engine.commands._options import RunBar
from engine.usecases.study.study import run_study as run_grid


def run_study(study, args: argparse.Namespace):
    """Run the StudyRequest that `run` built from comma lists (engine.usecases.study.study), its plan
    printed before the first model loads, then one line per experiment."""
    bar = RunBar("", on_planned=_print_plan)
    try:
        outcome = run_grid(study, progress=bar)
    finally:
        bar.close()
    _study_report(outcome, args)
    return outcome


def _print_plan(summary) -> None:
    sizes = dict(summary.axis_sizes)
    print(f"study {summary.name}: {summary.n_experiments} experiment(s) "
          f"({' x '.join(f'{sizes[a]} {a}' for a in summary.varied_axes)}), {summary.n_shared} vanilla run(s) to share")
    print(summary.plan_line)
    if summary.n_todo == 0 and summary.n_copied == 0:
        print("already complete, nothing to do")


def _shown_configuration(experiment) -> str:
    configuration = experiment.configuration
    k = "all" if configuration["top_k"] is None else configuration["top_k"]
    return (f"{configuration['metadata']:<8} k={k:<4} {configuration['order']:<8} "
            f"few-shot {configuration['few_shot']}  xai {configuration['xai']}{experiment.battery_text('  ')}")


def _study_report(outcome, args: argparse.Namespace) -> None:
    """One line per experiment, then the command that shows the study."""
    for e in outcome.experiments:
        shared = e.copied_from
        runs = ", ".join(
            f"{r.mode} {r.run_id} {r.status}" + (f" (copied from {shared[r.mode]})" if r.mode in shared else
                                                 f" ({r.n_generated} new)")
            for r in e.outcome.runs
        )
        print(f"  experiment {e.outcome.experiment_id}  {e.label}  {_shown_configuration(e)}  {runs}")
    db_part = f" --db {shlex.quote(args.db)}" if args.db else ""
    print(f"see the study with: python -m engine report --study {shlex.quote(outcome.name)}{db_part} "
          "(--layout xai: the cut-off x order tables)")
