"""The report's rows beyond the metrics, per complete run shown: the AttrScore verification
shares of each judge (`verify`) and the share of Prompt 5 explanations that give a label as a
reason (`explain`). Empty where the store holds none, so the report is then what it was before
either existed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

VERIFICATION_CLASSES = ("attributable", "extrapolatory", "contradictory", "unparsed")


def verification_rows(path: Path, runs: Any) -> list[dict[str, Any]]:
    """Per complete run shown and judge model: the verification_shares row; empty without any."""
    from store.queries import verification_shares

    if runs.empty:
        return []
    shares_rows = verification_shares(path, runs["run_id"].tolist())
    if not shares_rows:  # most stores: no verification, and no need for the runs' records
        return []
    meta = {r["run_id"]: r for r in runs.to_dict("records")}
    out = []
    for run_id, judge, mode, n, *shares in shares_rows:
        rec = meta[run_id]
        out.append({"run_id": run_id, "model": rec.get("model"), "metadata_type": rec.get("metadata_type"),
                    "rag_mode": mode, "judge_model": judge, "n_citations": int(n),
                    **{f"{c}_share": float(v) for c, v in zip(VERIFICATION_CLASSES, shares, strict=True)}})
    return out


def explanation_rows(path: Path, runs: Any) -> list[dict[str, Any]]:
    """Per complete run shown and explainer model: the explanation_rates row; empty without any."""
    from store.queries import explanation_rates

    if runs.empty:
        return []
    rates = explanation_rates(path, runs["run_id"].tolist())
    if not rates:  # most stores: no explanations, and no need for the runs' records
        return []
    meta = {r["run_id"]: r for r in runs.to_dict("records")}
    return [
        {"run_id": run_id, "model": meta[run_id].get("model"), "metadata_type": meta[run_id].get("metadata_type"),
         "rag_mode": mode, "explainer_model": explainer, "n_explanations": int(n),
         "n_mention_label": int(n_label), "label_share": float(share)}
        for run_id, explainer, mode, n, n_label, share in rates
    ]
