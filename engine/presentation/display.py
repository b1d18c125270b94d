"""How the API's results show at the end of a notebook cell (`_repr_html_`) or in a Python shell
(`__repr__`): a few lines in the CLI's words and order (precision, recall, f1; CAS before CAB),
not a dump of every field. The values themselves stay in the results' DataFrames and dicts.

An undefined CAS or CAB shows as "undefined" with its reason, as `python -m engine bias` prints
it, never as a number; the verdict column is the report's own (`direction`), which names its test.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

# The order the CLI prints, where a frame holds other metrics too.
METRIC_ORDER = ("precision", "recall", "f1")
MEASURE_ORDER = ("CAS", "CAB")
RUN_COLUMNS = ("rag_mode", "run_id", "n", "precision", "recall", "f1", "exact_match")
BIAS_HEADER = ("measure", "metric", "value", "95% CI", "p", "n", "verdict")
MAX_SHOWN = 30  # rows of one table; the frame holds all of them


def _missing(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _num(x: Any, spec: str) -> str:
    return "-" if _missing(x) else format(x, spec)


def _p(p: Any) -> str:
    """As the CLI prints a p (engine.presentation.formatting.format_p)."""
    from engine.presentation.formatting import format_p

    return format_p(None if _missing(p) else float(p))


def _order(row: Mapping[str, Any]) -> tuple[int, int]:
    measure, metric = row.get("measure"), row.get("metric")
    return (MEASURE_ORDER.index(measure) if measure in MEASURE_ORDER else len(MEASURE_ORDER),
            METRIC_ORDER.index(metric) if metric in METRIC_ORDER else len(METRIC_ORDER))


def bias_cells(rows: Iterable[Mapping[str, Any]]) -> list[list[str]]:
    """CAS and CAB rows (a bias report's `results`, or records of Evaluation.bias) as the CLI's
    cells, CAS then CAB, each precision, recall, f1 (a stable sort: experiments keep their order)."""
    rows = list(rows)
    by_experiment: dict[Any, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_experiment.setdefault(row.get("experiment_id"), []).append(row)
    cells = []
    for group in by_experiment.values():
        for r in sorted(group, key=_order):
            undefined = r.get("undefined_reason")
            undefined = None if _missing(undefined) else undefined
            value = "undefined" if undefined or _missing(r.get("value")) else \
                _num(r.get("value"), "+.1f" if r.get("measure") == "CAB" else ".1f")
            ci = interval_cell(r.get("ci_low"), r.get("ci_high"), r.get("interval_note"))
            verdict = r.get("direction")
            verdict = f"undefined: {undefined}" if undefined and _missing(verdict) else (verdict or "-")
            # CAS has no test of its own: its p (a signed test of vanilla vs base) is not shown beside it.
            p = "-" if r.get("measure") == "CAS" else _p(r.get("p"))
            cells.append([str(r.get("measure", "")), str(r.get("metric", "")), value, ci, p,
                          "-" if _missing(r.get("n")) else str(int(r["n"])), str(verdict)])
    return cells


def interval_cell(low: Any, high: Any, note: Any) -> str:
    """A bias interval as every face writes it: "[2.0, 6.3]"; where there is none, why ("none (no
    spread)" where every item's value is the same, "none (one item)"); "-" where the measure
    itself is undefined."""
    if not _missing(low):
        return f"[{_num(low, '.1f')}, {_num(high, '.1f')}]"
    note = "" if _missing(note) else str(note)
    if note.startswith("none: "):
        return "none (no spread)" if note.endswith("(no spread)") else f"none ({note[len('none: '):]})"
    return "-"


def run_cells(frame: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Evaluation.runs as (header, rows): the mode, the run and its metrics in the CLI's order."""
    header = [c for c in RUN_COLUMNS if c in frame.columns]
    rows = []
    for rec in frame[header].to_dict("records"):
        rows.append([str(rec[c]) if c in ("rag_mode", "run_id", "n") else _num(rec[c], ".3f") for c in header])
    return header, rows


def text_table(header: Iterable[str], rows: list[list[str]]) -> str:
    """Columns padded to their widest cell, as the CLI's tables; a note where rows were left out."""
    table = [list(header), *rows[:MAX_SHOWN]]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table]
    if len(rows) > MAX_SHOWN:
        lines.append(f"... {len(rows) - MAX_SHOWN} more rows (the DataFrame holds them all)")
    return "\n".join(lines)


def html_table(header: Iterable[str], rows: list[list[str]], caption: str = "") -> str:
    """An escaped HTML table (every cell is text from the store: names, reasons)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows[:MAX_SHOWN])
    more = (f"<p>... {len(rows) - MAX_SHOWN} more rows (the DataFrame holds them all)</p>"
            if len(rows) > MAX_SHOWN else "")
    title = f"<caption style='text-align:left'>{html.escape(caption)}</caption>" if caption else ""
    return f"<table>{title}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}"


def bias_report_title(report: Mapping[str, Any]) -> str:
    """The report's first lines, as `python -m engine bias` opens."""
    labels = (f", label A = {report['label_a']} on relevant documents in base, {report.get('label_b')} in cf"
              if report.get("label_a") else "")
    return (f"experiment {report.get('experiment_id')}  model {report.get('model')}  dataset {report.get('dataset')}"
            f"  ({report.get('metadata_type') or 'no metadata type'}{labels})")


def bias_report_text(report: Mapping[str, Any]) -> str:
    return "\n".join([bias_report_title(report), text_table(BIAS_HEADER, bias_cells(report.get("results") or ())),
                      *rerun_floor_lines(report)])


def bias_report_html(report: Mapping[str, Any]) -> str:
    floors = "".join(f"<p>{html.escape(line)}</p>" for line in rerun_floor_lines(report))
    return html_table(BIAS_HEADER, bias_cells(report.get("results") or ()), bias_report_title(report)) + floors


def rerun_floor_lines(report: Mapping[str, Any]) -> list[str]:
    """The report's rerun floors as every face prints them (printed_floors of its `rerun_experiments`,
    `rerun_lines` and `rerun_note`; reports kept before the floors existed hold none: nothing)."""
    return printed_floors(report.get("rerun_experiments") or (), report.get("rerun_lines") or (),
                          report.get("rerun_note"))


def printed_floors(rerun_experiments: Sequence[str], rerun_lines: Sequence[str], rerun_note: str | None) -> list[str]:
    """An experiment's rerun floors as every face prints them: a heading naming its reruns and one
    line per measure and metric (engine.statistics.rerun_floor.floor_line), or the one line that
    says there is none and how to get one, or why it is undefined."""
    ids, lines = list(rerun_experiments), list(rerun_lines)
    if lines:
        plural = "s" if len(ids) != 1 else ""
        heading = (f"rerun floor ({len(ids)} rerun{plural} of this experiment: {', '.join(ids)}; each measure between "
                   "a mode and its reruns, the noise that no label causes):")
        return [heading, *("  " + line for line in lines)]
    return [rerun_note] if rerun_note else []


def evaluation_title(n_answers: int, n_runs: int, experiment_ids: Iterable[str]) -> str:
    ids = ", ".join(experiment_ids) or "none"
    return f"Evaluation: {n_answers} answers in {n_runs} runs (experiment {ids}); .items, .runs and .bias hold every column"


def evaluation_text(title: str, runs: pd.DataFrame, bias: pd.DataFrame) -> str:
    parts = [title, text_table(*run_cells(runs))]
    if not bias.empty:
        parts.append(text_table(BIAS_HEADER, bias_cells(bias.to_dict("records"))))
    return "\n\n".join(parts)


def evaluation_html(title: str, runs: pd.DataFrame, bias: pd.DataFrame) -> str:
    parts = [f"<p>{html.escape(title)}</p>", html_table(*run_cells(runs), caption="per run (run_metrics)")]
    if not bias.empty:
        parts.append(html_table(BIAS_HEADER, bias_cells(bias.to_dict("records")), caption="CAS and CAB"))
    return "".join(parts)
