"""The report's rows beyond the metrics, per complete run shown: the AttrScore verification
shares of each judge (`verify`) and the share of Prompt 5 explanations that give a label as a
reason (`explain`). Empty where the store holds none, so the report is then what it was before
either existed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

VERIFICATION_CLASSES = ("attributable", "extrapolatory", "contradictory", "unparsed")


def verification_rows(path: Path, runs: Any) -> list[dict[str, Any]]:
    """Per complete run shown and judge model: the verification_shares row; empty without any."""
    from store.queries import verification_shares

    return [{**run, "rag_mode": mode, "judge_model": judge, "n_citations": int(n),
             **{f"{c}_share": float(v) for c, v in zip(VERIFICATION_CLASSES, shares, strict=True)}}
            for run, (judge, mode, n, *shares) in _with_runs(path, runs, verification_shares)]


def explanation_rows(path: Path, runs: Any) -> list[dict[str, Any]]:
    """Per complete run shown and explainer model: the explanation_rates row; empty without any."""
    from store.queries import explanation_rates

    return [{**run, "rag_mode": mode, "explainer_model": explainer, "n_explanations": int(n),
             "n_mention_label": int(n_label), "label_share": float(share)}
            for run, (explainer, mode, n, n_label, share) in _with_runs(path, runs, explanation_rates)]


def _with_runs(path: Path, runs: Any, read: Callable[[Path, list[str]], tuple[tuple, ...]]
               ) -> list[tuple[dict[str, Any], tuple]]:
    """Each row `read` gives for the runs shown (run_id first), as (its run's run_id, model and
    metadata type; the row's other fields). The runs' records are made only where there are rows:
    most stores have neither verifications nor explanations."""
    from store.queries import records

    if runs.empty:
        return []
    rows = read(path, runs["run_id"].tolist())
    if not rows:
        return []
    meta = {r["run_id"]: {"run_id": r["run_id"], "model": r.get("model"), "metadata_type": r.get("metadata_type")}
            for r in records(runs[[c for c in ("run_id", "model", "metadata_type") if c in runs.columns]])}
    return [(meta[row[0]], row[1:]) for row in rows]
