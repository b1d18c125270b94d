"""`python -m engine merge --from OTHER.duckdb`: copy the complete runs of another store into this one.

The merge is engine.usecases.storage.merge's (all SQL in store.merge: one transaction on the target, all
or nothing, the source opened read-only); here, the lines printed. Never imports torch.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from engine.commands._options import add_db_arg
from engine.paths import default_db_path
from engine.usecases.storage.merge import merge


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "merge",
        help="copy the complete runs of another store into this one",
        description="Copy the complete runs of another DuckDB store (results from another machine, or a "
        "published results file) with their experiments, items, generations and citations. Runs the "
        "target holds already are skipped, so merging twice adds nothing; runs that are not complete are "
        "skipped and listed. A run id held with another configuration, or items that differ between the "
        "stores, refuse the whole merge. A run whose mode its experiment already has in the target goes "
        "into an experiment of its own (EXPERIMENT~RUN_ID). The explanations and verifications of the runs "
        "copied (and of complete runs the target holds already) come along, as do the studies that group "
        "their experiments, and the document use (`used`) of those answers; a study's fitted label effects do "
        "not (refit them: the output names the studies). The source is never modified.",
    )
    p.add_argument("--from", dest="source", required=True, metavar="OTHER.duckdb", help="the store to copy runs from")
    add_db_arg(p, "DuckDB file to merge into")
    p.set_defaults(main=main)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def summary(result, source: str, target: str) -> list[str]:
    """The lines `merge` prints for a MergeResult."""
    lines = []
    if result.merged:
        lines.append(
            f"merged {_plural(len(result.merged), 'run')} from {source} into {target}: "
            f"{_plural(result.n_generations, 'generation')}, {_plural(result.n_citations, 'citation')}, "
            f"{_plural(result.n_items_new, 'item')} new, {_plural(result.n_experiments_new, 'experiment')} new"
        )
    else:
        lines.append(f"nothing to merge from {source}: no complete run the target lacks")
    if result.already:
        lines.append(f"already in the target, skipped: {_plural(len(result.already), 'run')} ({', '.join(result.already)})")
    for run in result.skipped:
        lines.append(f"skipped run {run.run_id} (experiment {run.experiment_id}, {run.mode}): {run.reason}")
    for run in result.moved:
        lines.append(
            f"run {run.run_id} ({run.mode}) went into experiment {run.to_experiment}: experiment "
            f"{run.from_experiment} already has {run.mode} run {run.taken_by}"
        )
    for experiment_id, name in result.unnamed:
        lines.append(f"experiment {experiment_id} merged without its name '{name}', which the target already uses")
    along = (result.n_explanations, result.n_verifications, result.n_studies_new, result.n_study_experiments)
    if any(along):
        lines.append(
            f"also copied: {_plural(result.n_explanations, 'explanation')}, "
            f"{_plural(result.n_verifications, 'verification')}, "
            f"{result.n_studies_new} {'study' if result.n_studies_new == 1 else 'studies'} new, "
            f"{_plural(result.n_study_experiments, 'study membership')} new"
        )
    if result.n_propensities:
        lines.append(f"also copied: {_plural(result.n_propensities, 'citation propensity row')} "
                     "(`python -m engine propensity`)")
    if result.n_judge_labels or result.n_judges_new:
        lines.append(f"also copied: {_plural(result.n_judge_labels, 'human label')} (`import-labels`), "
                     f"{_plural(result.n_judges_new, 'judge')} new")
    if result.n_document_use:
        lines.append(f"also copied: {_plural(result.n_document_use, 'document-use row')} (`python -m engine used`)")
    if result.n_left_out:
        lines.append(f"left out {result.n_left_out} of the explanations, verifications, labels and document-use rows: "
                     "they are of answers that differ between the stores")
    for study in result.refit:
        lines.append(f"study effects not carried: refit with `python -m engine why-cited --study {study} --save` "
                     "(this merge changed the study, or the target lacks its fit)")
    return lines


def main(args: argparse.Namespace) -> int:
    target = Path(args.db) if args.db else default_db_path()
    result = merge(target, args.source)
    print("\n".join(summary(result, args.source, str(target))))
    return 0
