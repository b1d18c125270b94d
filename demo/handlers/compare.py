"""The Compare tab: two runs, two experiments' modes or two whole experiments on the
same items, through engine.usecases.compare.compare (the CLI's `compare`). Plain functions: values in,
DataFrames, figures and HTML out, so that each is testable without a browser.

`/compare` returns Comparison.as_dict (JSON-ready); the page shows the pairing, one row per
metric, a plot of the differences with their intervals, the flips and the items that differ
most; `/compare_item` is one of those items with both runs side by side; `/compare_export`
writes the per-item comparison as CSV or Parquet.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from demo import render
from demo.handlers.query import clean_input, experiment_choices, shown_reference, visitor_line
from engine.bounds import PAGE_MAX_CHOICES, for_page
from engine.errors import UserError
from engine.types import ANSWER_METRICS, COMPARED_METRICS
from engine.usecases.compare.sides import (
    UnknownRun,
    default_metrics,
    example_pair,
    item_of_runs,
    stored_run,
    t_test_beside,
)
from engine.usecases.compare.sides import metric_choices as choices
from engine.usecases.runs.listing import experiments
from engine.usecases.runs.rerun_marks import MARK
from engine.usecases.storage.export import export_format

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

    from engine.usecases.compare.compare import CompareRequest, Comparison, Margins

EMPTY_STORE = "nothing is stored yet: start two runs in the Run tab, then compare them here"
# The metric table as the page shows it (the exact values: /compare).
TABLE_COLUMNS = ["comparison", "metric", "n", "mean A", "mean B", "B − A", "95% CI", "test", "p", "Holm p",
                 "t-test p", "min. detectable", "verdict"]
# Marks a bootstrap interval on fewer items than engine.statistics.stats.BOOTSTRAP_APPROXIMATE_BELOW (approximate).
APPROXIMATE = "*"
TOP_ITEMS = 20  # per comparison, on the page and in /compare (the export holds every item)
# The items table shows the sorting metric in A and B and its difference, then the other metrics'
# differences: every column of every metric (27 of them) would not fit a 1440 px window.
ITEM_KEY_COLUMNS = ["comparison", "item_id"]
# The items table's headers: short, with spaces, so that they wrap and 13 columns fit 1440 px.
SHORT_NAMES = {name: ANSWER_METRICS[name].short for name in COMPARED_METRICS}
# Colours of the plot's points by verdict: a difference that holds, an equivalence, neither.
VERDICT_COLOURS = {"different": "#d62728", "equivalent": "#2ca02c", "other": "#7f7f7f"}


# ---------------------------------------------------------------- choosing A and B


def side_choices(db: Path) -> list[tuple[str, str]]:
    """(label, reference) for the A and B pickers: every experiment (compared mode by mode),
    then every run, newest first; "EXP:mode" can be typed. Empty when nothing is stored."""
    if not Path(db).is_file():
        return []
    choices = [(for_page(f"experiment {label}"), e) for label, e in experiment_choices(db, with_modes=True)]
    for r in experiments(db, runs=True)[:PAGE_MAX_CHOICES]:
        label = f"run {r.run_id} · {r.experiment_id}:{r.mode} · {for_page(r.model, 60)} · {r.status}"
        choices.append((for_page(label), r.run_id))
    return choices


def metric_choices() -> list[tuple[str, str]]:
    """(label, name) of every metric compare knows, in its table order."""
    return list(choices())


def request_from(a: Any, b: Any, metrics: Sequence[str] | None = None, margin: Any = None,
                 pair_by_id: Any = False, exact: Any = False) -> CompareRequest:
    """The use case's request from the page's values (text, a list, margins as text or a number
    or blank, two ticks: pair by id, exact tests at any size); one-line UserError for a blank side, no metric, or a margin that does not read."""
    from engine.usecases.compare.compare import CompareRequest

    a, b = clean_input(a, "run A"), clean_input(b, "run B")
    if not a or not b:
        raise UserError("choose A and B: a run id, an experiment (id or name) or EXP:mode")
    if isinstance(metrics, str):  # an API caller's "f1, exact_match"
        metrics = [m for m in re.split(r"[,\s]+", metrics) if m]
    chosen = tuple(dict.fromkeys(m for m in (metrics if metrics is not None else default_metrics()) if m))
    if not chosen:
        raise UserError("tick at least one metric to compare")
    return CompareRequest(a, b, chosen, _margin(margin), bool(pair_by_id), exact=bool(exact))


def _margin(value: Any) -> Margins | None:
    """Margins as the CLI's --margin reads them: "5" (every metric in points), "precision=5,
    recall=5", "5,n_citations=0.2"; blank (or an API caller's 0) is none."""
    from engine.usecases.compare.compare import parse_margins

    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0:
        return None
    return parse_margins(value)


def run_compare(db: Path, a: Any, b: Any, metrics: Sequence[str] | None = None, margin: Any = None,
                pair_by_id: Any = False, exact: Any = False) -> Comparison:
    """The comparison, or a one-line UserError (nothing stored, an unknown side, disjoint items…)."""
    from engine.usecases.compare.compare import compare

    request = request_from(a, b, metrics, margin, pair_by_id, exact)
    if not Path(db).is_file():
        raise UserError(EMPTY_STORE)
    try:
        return compare(request, db)
    except UserError as err:
        raise UserError(visitor_line(err, db)) from None  # the page's words for its boxes


def compare_api(db: Path, a: Any, b: Any, metrics: Sequence[str] | None = None, margin: Any = None,
                pair_by_id: Any = False, exact: Any = False) -> dict[str, Any]:
    """`/compare`: the JSON-ready comparison, with the TOP_ITEMS items that differ most per pair."""
    return run_compare(db, a, b, metrics, margin, pair_by_id, exact).as_dict(items=TOP_ITEMS)


# ---------------------------------------------------------------- the page


@dataclass(frozen=True)
class CompareView:
    """What the Compare tab shows for one comparison."""

    summary: str  # demo.render HTML: what was compared, the pairing, notes and flips
    table: pd.DataFrame  # TABLE_COLUMNS, one row per metric and comparison
    figure: go.Figure  # the differences with their intervals
    items: pd.DataFrame  # the items that differ most, per comparison
    pairs: dict[str, tuple[str, str]]  # comparison -> (run A, run B): a clicked item opens these
    result: dict[str, Any]  # /compare's answer


def compare_view(db: Path, a: Any, b: Any, metrics: Sequence[str] | None = None, margin: Any = None,
                 pair_by_id: Any = False, exact: Any = False) -> CompareView:
    """The whole page for one comparison (UserError in one line when it cannot be made)."""
    result = run_compare(db, a, b, metrics, margin, pair_by_id, exact)
    return CompareView(render.comparison_summary(result), metric_rows(result), difference_figure(result),
                       top_items(result), {r.title: (r.run_a.run_id, r.run_b.run_id) for r in result.runs},
                       result.as_dict(items=TOP_ITEMS))


def refusal_html(line: str) -> str:
    """Why nothing was compared, as the page's one message in place of the summary (escaped:
    the line quotes what the visitor typed)."""
    return (f'<div class="pe-refusal" role="alert"><b>Not compared:</b> {html.escape(line, quote=False)}</div>')


def metric_rows(result: Comparison) -> pd.DataFrame:
    """One row per metric and comparison: means, B − A with its interval, the test, p, Holm p,
    the t-test's p beside a permutation test, the detectable difference, the verdict. What is
    undefined reads "undefined" (the verdict says why)."""
    import pandas as pd

    table = result.table()
    rows = []
    for r in table.itertuples(index=False):
        rows.append([r.comparison, r.label, int(r.n), _num(r.mean_a), _num(r.mean_b), _num(r.diff, signed=True),
                     _ci(r), r.test, format_p(r.p), format_p(r.p_holm), format_p(r.p_t) if t_test_beside(r.test) else "",
                     "undefined" if r.min_detectable_undefined else _num(r.min_detectable), _verdict(r)])
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


def _ci(row: Any) -> str:
    if row.ci_undefined:
        return "undefined"
    # Which interval, where it is not the bootstrap: exact bounds (0/1), or the t interval (large samples).
    how = " exact" if row.ci_method.startswith("exact") else " t" if row.ci_method.startswith("t ") else ""
    return (f"[{_num(row.ci_low, signed=True)}, {_num(row.ci_high, signed=True)}]"
            f"{APPROXIMATE if row.ci_approximate else ''}{how}")


def _verdict(row: Any) -> str:
    """The verdict, with TOST's Holm p where a margin applies, and why a measure is undefined."""
    out = row.verdict
    tost = row.tost_p_holm
    if tost is not None and not (isinstance(tost, float) and math.isnan(tost)):
        out += f" (TOST within ±{row.margin:g}: Holm p {format_p(tost)})"
    if row.min_detectable_undefined and row.n >= 2:
        out += f"; detectable difference undefined: {row.min_detectable_undefined}"
    return out


def format_p(p: Any) -> str:
    """A p value as the CLI prints it (<0.001, else three decimals); a dash where undefined."""
    if p is None or (isinstance(p, float) and not math.isfinite(p)):
        return "–"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def _num(value: Any, *, signed: bool = False) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:+.1f}" if signed else f"{value:.1f}"


def top_items(result: Comparison, n: int = TOP_ITEMS) -> pd.DataFrame:
    """Per comparison, the n items whose sorting metric differs most: that metric in A, in B and
    Δ (B − A), then the other metrics' Δ (rounded; the export has the exact values, named as in
    Comparison.items())."""
    import pandas as pd

    frames = []
    for r in result.runs:
        key = r.sort_metric
        others = [c for c in r.items.columns if c.endswith("_diff") and c != f"{key}_diff"]
        frame = r.top_items(n)[["item_id", f"{key}_a", f"{key}_b", f"{key}_diff", *others]]
        frame.columns = ["item_id", *(_header(c) for c in frame.columns[1:])]
        if any(x.reruns.known for x in result.runs):  # a mark only where a rerun can tell
            frame = frame.assign(rerun=[MARK if not pd.isna(x) and x else ""
                                        for x in r.top_items(n)["changes_on_rerun"]])
        frames.append(frame.assign(comparison=r.title))
    if not frames:
        return pd.DataFrame(columns=ITEM_KEY_COLUMNS)
    frame = pd.concat(frames, ignore_index=True)
    frame = frame[ITEM_KEY_COLUMNS + [c for c in frame.columns if c not in ITEM_KEY_COLUMNS]]
    return frame.round(1)


def _header(column: str) -> str:
    """"f1_a" -> "F1 A", "f1_diff" -> "Δ F1" (Δ = B − A)."""
    name, _, side = column.rpartition("_")
    short = SHORT_NAMES.get(name, name)
    return f"Δ {short}" if side == "diff" else f"{short} {side.upper()}"


def difference_figure(result: Comparison) -> go.Figure:
    """B − A per metric with its 95% interval, one row each (CAS and CAB rows between
    two experiments), coloured by verdict; stored text is escaped (plotly reads a few tags)."""
    import plotly.graph_objects as go


    table = result.table()
    names = [html.escape(f"{r.comparison}: {r.label}", quote=False) for r in table.itertuples(index=False)]
    fig = go.Figure()
    for kind, colour in VERDICT_COLOURS.items():
        rows = [(i, r) for i, r in enumerate(table.itertuples(index=False)) if _verdict_kind(r.verdict) == kind]
        if not rows:
            continue
        fig.add_trace(go.Scatter(
            name={"different": "different", "equivalent": "equivalent", "other": "no significant difference"
                  " / inconclusive"}[kind],
            x=[_finite(r.diff) for _, r in rows], y=[names[i] for i, _ in rows], mode="markers",
            marker=dict(color=colour, size=10),
            # Asymmetric: a bootstrap interval need not be centred on the mean difference.
            error_x=dict(type="data", symmetric=False, visible=True, color=colour, thickness=2,
                         array=[_gap(r.ci_high, r.diff) for _, r in rows],
                         arrayminus=[_gap(r.diff, r.ci_low) for _, r in rows]),
            customdata=[[_num(r.ci_low, signed=True), _num(r.ci_high, signed=True), html.escape(r.test),
                         format_p(r.p), format_p(r.p_holm), html.escape(r.verdict), int(r.n)] for _, r in rows],
            hovertemplate=("<b>%{y}</b><br>B − A %{x:+.2f}, 95% CI [%{customdata[0]}, %{customdata[1]}]<br>"
                           "%{customdata[2]}: p %{customdata[3]}, Holm p %{customdata[4]}, n %{customdata[6]}<br>"
                           "%{customdata[5]}<extra></extra>"),
        ))
    fig.add_vline(x=0, line_width=1, line_color="#444")
    # Each metric's own equivalence margin (units differ between metrics), as ticks on its row.
    marked = [(names[i], float(r.margin)) for i, r in enumerate(table.itertuples(index=False)) if _finite(r.margin)]
    if marked:
        fig.add_trace(go.Scatter(
            name="equivalence margin ±M", x=[x for _, m in marked for x in (-m, m)],
            y=[name for name, _ in marked for _ in (0, 1)], mode="markers", hoverinfo="skip",
            marker=dict(symbol="line-ns", size=14, line=dict(width=2, color=VERDICT_COLOURS["equivalent"])),
        ))
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(names)), automargin=True)
    fig.update_xaxes(title_text="B − A (points x100; citations per answer in citations)", zeroline=False)
    # The legend above the plot, right of the title: below, its distance grew with the rows.
    fig.update_layout(height=max(260, 110 + 22 * len(names)), margin=dict(t=70, b=50, l=10, r=10),
                      title_text="Difference B − A per metric, with 95% intervals",
                      legend=dict(orientation="h", yanchor="bottom", y=1.01, xanchor="right", x=1))
    return fig


def _verdict_kind(verdict: str) -> str:
    if verdict.startswith("different"):
        return "different"
    return "equivalent" if verdict.startswith("equivalent") else "other"


def _finite(value: Any) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def _gap(high: Any, low: Any) -> float | None:
    if _finite(high) is None or _finite(low) is None:
        return None
    return max(0.0, float(high) - float(low))


def clicked_item(pairs: dict[str, tuple[str, str]] | None, row: Sequence[Any] | None) -> tuple[str, str, str] | None:
    """(run A, run B, item id) of a row clicked in the items table (ITEM_KEY_COLUMNS first); None
    for a click on nothing, or before any comparison."""
    if not pairs or not row or len(row) < 2:
        return None
    runs = pairs.get(str(row[0]))
    item_id = str(row[1]).strip()
    if runs is None or not item_id:
        return None
    return runs[0], runs[1], item_id


# ---------------------------------------------------------------- one item, both runs side by side


def pair_page(db: Path, run_a: Any, run_b: Any, item_id: Any) -> str:
    """`/compare_item`: one item with run A's and run B's answers, citations and the documents
    grid side by side (demo.render HTML); a one-line message when a run or the item is unknown."""
    try:
        refs = [clean_input(run_a, "run A"), clean_input(run_b, "run B")]
        item_id = clean_input(item_id, "item id")
        if not all(refs) or not item_id:
            return render.message("choose two runs and an item")
        if not Path(db).is_file():
            return render.message(EMPTY_STORE)
        sides = item_of_runs(db, refs, item_id)
    except UnknownRun as err:
        return render.message(f"unknown run '{shown_reference(err.reference)}'")
    except UserError as err:
        return render.message(visitor_line(err, db))
    if all(side.detail is None for side in sides):
        return render.message(f"neither run has item '{shown_reference(item_id)}'")
    return render.pair_page(item_id, [(f"{name}: run {s.run.run_id}", s.run.experiment_name, s.detail, s.mode)
                                      for name, s in zip("AB", sides, strict=True)])


# ---------------------------------------------------------------- export, the Runs tab, the SQL tab


def export_items(db: Path, a: Any, b: Any, metrics: Sequence[str] | None, margin: Any, pair_by_id: Any,
                 fmt: Any, *, exact: Any = False, owner: str | None = None, limits: Any = None) -> Path:
    """The per-item comparison (Comparison.items(): every item of every pair, exact values, units
    as shown) written to a new temporary `pattrieval-compare.csv|parquet`."""
    from demo.downloads import new_download

    fmt = export_format(str(fmt or "").strip())
    frame = run_compare(db, a, b, metrics, margin, pair_by_id, exact).items()
    # `limits` (demo.downloads.DownloadLimits): the temp disk's room, `owner`'s and everyone's.
    out = new_download(f"pattrieval-compare.{fmt}", owner=owner, limits=limits)
    if fmt == "csv":
        from store.csv_safe import csv_frame

        csv_frame(frame).to_csv(out, index=False)  # item ids are visitors' text: no live formulas
    else:
        frame.to_parquet(out, index=False)
    return out


def tick_choices(frame: Any) -> list[tuple[str, str]]:
    """The Runs tab's tick boxes: (label, experiment id) for each experiment row on the page."""
    if frame is None or not hasattr(frame, "itertuples") or frame.empty:
        return []
    columns = list(frame.columns)
    if "experiment" not in columns:
        return []
    out = []
    for row in frame.itertuples(index=False):
        values = dict(zip(columns, row, strict=True))
        experiment_id = str(values["experiment"]).strip()
        if not experiment_id:
            continue
        name = str(values.get("name") or "-")
        label = experiment_id if name in ("", "-") else f"{name} ({experiment_id})"
        out.append((f"{label} · {values.get('modes', '')}", experiment_id))
    return out


def two_ticked(ticked: Sequence[str] | None) -> tuple[str, str]:
    """The two experiments ticked in the Runs tab, in the order ticked; UserError otherwise."""
    chosen = [t for t in dict.fromkeys(ticked or ()) if t]
    if len(chosen) != 2:
        raise UserError(f"tick exactly two experiments to compare (ticked: {len(chosen)})")
    return chosen[0], chosen[1]


def sql_example(db: Path) -> str:
    """The SQL tab's compare_runs example, on two stored runs of one dataset and mode where the
    store has them (the newest such pair), else on placeholders to replace."""
    a, b = "RUN_A", "RUN_B"
    if Path(db).is_file():
        a, b = example_pair(db) or (a, b)
    quote = lambda s: s.replace("'", "''")  # noqa: E731 - a run id inside a SQL string
    return (f"-- The items that drive the F1 difference between two runs (B - A); compare_runs and the\n"
            f"-- compare_item_metrics view pair the runs' per-item metrics by item id (store/views.sql)\n"
            f"SELECT item_id, round(100 * f1_a, 1) AS f1_a, round(100 * f1_b, 1) AS f1_b,\n"
            f"       round(100 * f1_diff, 1) AS f1_diff, exact_match_a, exact_match_b\n"
            f"FROM compare_runs('{quote(a)}', '{quote(b)}') ORDER BY abs(f1_diff) DESC NULLS LAST LIMIT 20")


def pair_view(db: Path, run_a: Any, run_b: Any, item_id: Any) -> tuple[str, str]:
    """(pair_page's HTML, run A's experiment id or "" when run A is unknown): the Query tab opens
    that experiment on the item below the side-by-side view."""
    page = pair_page(db, run_a, run_b, item_id)
    try:
        run_a = clean_input(run_a, "run A")
        run = stored_run(db, run_a) if run_a and Path(db).is_file() else None
    except UserError:
        run = None
    return page, run.experiment_id if run is not None else ""
