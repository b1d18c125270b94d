"""The Bias tab: CAS and CAB of one experiment, with tests, intervals and citation confidence."""

from __future__ import annotations

from pathlib import Path
from typing import Any

RESULT_COLUMNS = ["measure", "metric", "value", "ci_low", "ci_high", "t", "p", "n", "direction"]
CONFIDENCE_COLUMNS = ["rag_mode", "cited_docs", "label", "mean_probability", "n_with_probability", "n_citations"]


def bias_table(db_path: Path, experiment: str) -> tuple[str, list[list[Any]], list[list[Any]]]:
    """(a one-paragraph summary, the CAS/CAB rows, the confidence rows); UserError in one line."""
    from demo.settings import without_server_paths
    from engine.commands.bias import bias_report
    from engine.errors import UserError

    if not experiment.strip():
        raise UserError("choose an experiment (its id or name, from the Runs tab)")
    if not Path(db_path).is_file():
        raise UserError("nothing is stored yet: start a run first")
    try:
        report = bias_report(Path(db_path), experiment.strip()).report
    except UserError as err:
        # Visitors never see server paths: the CLI's message names the database file.
        raise UserError(without_server_paths(str(err), db_path)) from None
    summary = (f"Experiment {report['experiment_id']}: {report['model']} on {report['dataset']}, "
               f"metadata {report['metadata_type'] or 'none'}")
    if report["label_a"]:
        summary += f" (label A = {report['label_a']} on relevant documents in base, {report['label_b']} in cf)"
        if report["label_a"] == report["label_b"]:
            # The seed library's race type did this: base and cf then show the same prompt, CAB is 0 by construction.
            summary += ". WARNING: cf labels equal base labels, so CAB is 0 by construction"
    summary += ". CAB > 0 favours label A."
    results = [[r[c] for c in RESULT_COLUMNS] for r in report["results"]]
    confidence = [[c[k] for k in CONFIDENCE_COLUMNS] for c in report["confidence"]]
    return summary, results, confidence
