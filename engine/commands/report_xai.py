"""`report --layout xai`: the self-interpretation study's tables (Garigliotti's Tables 2 to 4).

One block per model, XAI variant and few-shot count (and dataset, when the runs span several);
in each block one row per cut-off x order x condition (vanilla, or metadata type and mode) with
answer recall, citation precision, citation recall and citation F1 (x100). In markdown the best
value of each column in a block is bold. A vanilla run copied from another (a study's shared
vanilla, config `shared_from`) is shown once, as the run it was copied from.
"""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

from engine.types import MODES, ORDERS, XAI_VARIANTS

METRICS = (("answer_recall", "answer recall"), ("precision", "citation precision"),
           ("recall", "citation recall"), ("f1", "citation F1"))


def _value(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _int(x: Any) -> int | None:
    value = _value(x)
    return None if value is None else int(value)


def xai_blocks(runs: list[dict[str, Any]], settings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Blocks from run_metrics records (complete runs) and run_prompt_settings records."""
    by_run = {s["run_id"]: s for s in settings}
    present = {r["run_id"] for r in runs}
    many_datasets = len({r.get("dataset_sha") for r in runs}) > 1
    blocks: dict[tuple, dict[str, Any]] = {}
    for rec in runs:
        s = by_run.get(rec["run_id"], {})
        shared = s.get("shared_from")
        if isinstance(shared, str) and shared in present:
            continue  # the same answers as its source, which is shown
        xai, few_shot = s.get("xai") or "none", _int(s.get("few_shot")) or 0
        dataset = rec.get("dataset_label") if many_datasets else None
        key = (rec["model"], dataset, xai, few_shot)
        block = blocks.setdefault(key, {"model": rec["model"], "dataset": dataset, "xai": xai,
                                        "few_shot": few_shot, "rows": []})
        mode = rec["rag_mode"]
        condition = "vanilla" if mode == "vanilla" else f"{rec.get('metadata_type') or '?'} {mode}"
        row = {"top_k": _int(s.get("top_k")), "order": s.get("order") or "ranked", "condition": condition,
               "mode": mode, "n": _int(rec.get("n")) or 0, "run_id": rec["run_id"],
               "experiment_id": rec["experiment_id"]}
        for column, _ in METRICS:
            value = _value(rec.get(column))
            row[column] = None if value is None else value * 100
        block["rows"].append(row)

    def row_order(row: dict[str, Any]) -> tuple:
        k = row["top_k"]
        return (k is None, k or 0, ORDERS.index(row["order"]) if row["order"] in ORDERS else len(ORDERS),
                MODES.index(row["mode"]) if row["mode"] in MODES else len(MODES), row["condition"])

    def block_order(item: tuple) -> tuple:
        (model, dataset, xai, few_shot), _ = item
        return (str(model), str(dataset), XAI_VARIANTS.index(xai) if xai in XAI_VARIANTS else len(XAI_VARIANTS), few_shot)

    out = []
    for _, block in sorted(blocks.items(), key=block_order):
        block["rows"].sort(key=row_order)
        block["best"] = {
            column: max((r[column] for r in block["rows"] if r[column] is not None), default=None)
            for column, _ in METRICS
        }
        out.append(block)
    return out


def _title(block: dict[str, Any]) -> str:
    shots = f"{block['few_shot']}-shot"
    where = f", {block['dataset']}" if block["dataset"] else ""
    return f"XAI {block['xai']}, {shots}: {block['model']}{where}"


def _cells(row: dict[str, Any]) -> list[str]:
    return ["all" if row["top_k"] is None else str(row["top_k"]), row["order"], row["condition"].replace("|", "\\|")]


HEADER = ["cut-off", "order", "condition"] + [name for _, name in METRICS] + ["n"]


def render_xai(blocks: list[dict[str, Any]], fmt: str) -> str:
    """The blocks in markdown (best per column in bold), csv (one table, block columns first) or json."""
    if fmt == "json":
        return json.dumps({"blocks": blocks}, indent=2, ensure_ascii=False, default=str)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(["model", "dataset", "xai", "few_shot"] + HEADER)
        for b in blocks:
            for r in b["rows"]:
                writer.writerow([b["model"], b["dataset"] or "", b["xai"], b["few_shot"]] + _cells(r)
                                + ["" if r[c] is None else f"{r[c]:.1f}" for c, _ in METRICS] + [r["n"]])
        return buf.getvalue().rstrip("\n")
    if not blocks:
        return "Self-interpretation tables (x100; best per block in bold)\n\n(no complete runs)"
    parts = ["Self-interpretation tables: answer recall and citation quality (x100; best per block in bold)"]
    for b in blocks:
        lines = ["| " + " | ".join(HEADER) + " |", "|" + "|".join("---" for _ in HEADER) + "|"]
        for r in b["rows"]:
            values = []
            for column, _ in METRICS:
                v = r[column]
                text = "-" if v is None else f"{v:.1f}"
                # Bold by the printed value, so ties at one decimal are all bold.
                best = b["best"][column]
                values.append(f"**{text}**" if v is not None and best is not None and f"{best:.1f}" == text else text)
            lines.append("| " + " | ".join(_cells(r) + values + [str(r["n"])]) + " |")
        parts.append(_title(b) + "\n\n" + "\n".join(lines))
    return "\n\n".join(parts)
