"""Plotly figures for the Bias tab: CAB with its intervals, and the spread of citation probability.

Pure functions from plain rows (the frozen dataclasses below) to a plotly Figure; the handler
(demo/handlers/bias.py) builds the rows from `python -m engine bias`'s report and the store.
Plotly draws text as SVG with a few tags of its own (<b>, <br>, <a href>…), so every piece of
stored text (models, labels, experiment ids) is HTML-escaped before it reaches a figure, and
shows as typed. plotly is imported inside the functions: nothing loads at import time.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from engine.presentation.formatting import SIGNIFICANCE
from engine.usecases.bias.page import CabValue, ProbabilitySpread

if TYPE_CHECKING:
    import plotly.graph_objects as go

CAB_METRICS = ("precision", "recall")  # the paper's Table 2
RELEVANCE = ("relevant", "non-relevant")
# Which label the cited documents carried: relevant ones carry label A in base and label B in
# cf (engine.prompting.prompts), so one colour follows one label across modes.
SLOTS = ("label A", "label B", "no label (vanilla)")
SLOT_COLOURS = {"label A": "#1f77b4", "label B": "#ff7f0e", "no label (vanilla)": "#7f7f7f"}


def slot(spread: ProbabilitySpread) -> str:
    """label A, label B or no label: which of the experiment's labels the cited documents carried."""
    if spread.mode not in ("base", "cf"):
        return SLOTS[2]
    return SLOTS[0] if (spread.mode == "base") == spread.relevant else SLOTS[1]


def _text(value: object) -> str:
    """Stored text as plotly shows it literally (its own tags and entities neutralised)."""
    return html.escape("-" if value is None else str(value), quote=False)


def type_name(metadata_type: str | None) -> str:
    """A metadata type as the paper's Table 2 names it (custom types under their own names)."""
    from engine.presentation.formatting import TYPE_NAMES

    return TYPE_NAMES.get(metadata_type or "", metadata_type or "no metadata type")


def _type_order(types: Sequence[str | None]) -> list[str | None]:
    from engine.presentation.formatting import TYPE_ORDER

    known = {t: i for i, t in enumerate(TYPE_ORDER)}
    return sorted(dict.fromkeys(types), key=lambda t: (known.get(t or "", len(known)), str(t)))


def series_names(bars: Sequence[CabValue]) -> dict[str, str]:
    """Per experiment, its colour's name: the model, or model and experiment where one model has
    several experiments of one metadata type (another dataset, another label pair)."""
    per_key: dict[tuple[str, str | None], list[str]] = {}
    for bar in bars:
        ids = per_key.setdefault((bar.model, bar.metadata_type), [])
        if bar.experiment_id not in ids:
            ids.append(bar.experiment_id)
    names = {}
    for (model, _), ids in per_key.items():
        for experiment_id in ids:
            names[experiment_id] = model if len(ids) == 1 else f"{model} ({experiment_id})"
    return names


def bar_text(bar: CabValue) -> str:
    """A CAB bar's label: its value as Table 2 writes it (+12.3, * where p < 0.05)."""
    star = "*" if bar.p is not None and bar.p < SIGNIFICANCE else ""
    return "" if bar.value is None else f"{bar.value:+.1f}{star}"


def cab_figure(bars: Sequence[CabValue], metrics: Sequence[str] = CAB_METRICS) -> go.Figure:
    """Grouped bars of CAB with 95% error bars: x = metadata type, one colour per model, one panel per metric."""
    import plotly.graph_objects as go
    from plotly.colors import qualitative
    from plotly.subplots import make_subplots

    from engine.presentation.formatting import format_p

    shown = [b for b in bars if b.metric in metrics and b.value is not None]
    fig = make_subplots(rows=1, cols=len(metrics), shared_yaxes=True, horizontal_spacing=0.06,
                        subplot_titles=[f"CAB Δ {m}" for m in metrics])
    names = series_names(shown)
    series = list(dict.fromkeys(names[b.experiment_id] for b in shown))
    categories = [type_name(t) for t in _type_order([b.metadata_type for b in shown])]
    palette = qualitative.Plotly
    for col, metric in enumerate(metrics, start=1):
        for i, name in enumerate(series):
            mine = [b for b in shown if b.metric == metric and names[b.experiment_id] == name]
            if not mine:
                continue
            fig.add_trace(go.Bar(
                name=_text(name), legendgroup=_text(name), showlegend=col == 1,
                marker_color=palette[i % len(palette)],
                x=[type_name(b.metadata_type) for b in mine],
                y=[b.value for b in mine],
                # Asymmetric: a bootstrap interval need not be centred on the mean.
                error_y=dict(type="data", symmetric=False, visible=True,
                             array=[None if b.ci_high is None or b.value is None else b.ci_high - b.value
                                    for b in mine],
                             arrayminus=[None if b.ci_low is None or b.value is None else b.value - b.ci_low
                                         for b in mine]),
                # The value as Table 2 writes it, * where CAB's paired test gives p < 0.05; at the
                # bar's foot, where the error bar rarely runs (above the bar it hides the star).
                text=[bar_text(b) for b in mine],
                textposition="inside", insidetextanchor="start", textangle=0,
                customdata=[[_text(b.experiment_id), _text(b.labels), "-" if b.ci_low is None else f"{b.ci_low:+.1f}",
                             "-" if b.ci_high is None else f"{b.ci_high:+.1f}", format_p(b.p), b.n,
                             _text(b.direction or "-")] for b in mine],
                hovertemplate=("<b>%{fullData.name}</b>, %{x} (%{customdata[1]})<br>"
                               "CAB %{y:+.1f}, 95% CI [%{customdata[2]}, %{customdata[3]}]<br>"
                               "p %{customdata[4]}, n %{customdata[5]}, %{customdata[6]}<br>"
                               "experiment %{customdata[0]}<extra></extra>"),
            ), row=1, col=col)
        fig.update_xaxes(categoryorder="array", categoryarray=categories, title_text="metadata type", row=1, col=col)
    fig.update_yaxes(title_text="CAB x100 (> 0 favours label A)", zeroline=True, zerolinewidth=2, row=1, col=1)
    fig.update_layout(barmode="group", height=420, margin=dict(t=60, b=40),
                      legend_title_text="model", title_text="Citation attribution bias with bootstrap 95% intervals "
                      f"(* CAB's paired test of base vs cf, p < {SIGNIFICANCE})")
    if not shown:
        fig.add_annotation(text="no CAB to plot", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    return fig


def probability_figure(boxes: Sequence[ProbabilitySpread], titles: Mapping[str, str] | None = None) -> go.Figure:
    """Box plots of citation probability for relevant vs non-relevant documents, one colour per
    label the documents carried (A, B, none in vanilla), one panel per experiment, titled by
    `titles` (experiment id -> title; the id where it has none)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    def panel_of(box: ProbabilitySpread) -> str:
        return (titles or {}).get(box.experiment_id, box.experiment_id)

    shown = [b for b in boxes if b.n]
    panels = list(dict.fromkeys(panel_of(b) for b in shown)) or [""]
    fig = make_subplots(rows=len(panels), cols=1, vertical_spacing=min(0.12, 0.5 / len(panels)),
                        subplot_titles=[_text(p) for p in panels])
    legend: set[str] = set()
    for row, panel in enumerate(panels, start=1):
        for label in SLOTS:
            mine = sorted((b for b in shown if panel_of(b) == panel and slot(b) == label), key=lambda b: not b.relevant)
            if not mine:
                continue
            fig.add_trace(go.Box(
                name=label, legendgroup=label, showlegend=label not in legend, marker_color=SLOT_COLOURS[label],
                x=[RELEVANCE[0] if b.relevant else RELEVANCE[1] for b in mine],
                # Precomputed in the store: a box needs five numbers, not every citation's value.
                q1=[b.q1 for b in mine], median=[b.median for b in mine], q3=[b.q3 for b in mine],
                lowerfence=[b.minimum for b in mine], upperfence=[b.maximum for b in mine],
                mean=[b.mean for b in mine], boxmean=True,
                hovertext=[f"{b.mode}: {b.n} citations of documents labelled {_text(b.label or 'nothing')}"
                           for b in mine],
            ), row=row, col=1)
            legend.add(label)
        fig.update_xaxes(categoryorder="array", categoryarray=list(RELEVANCE), row=row, col=1)
        fig.update_yaxes(range=[0, 1.05], title_text="citation probability", row=row, col=1)
    fig.update_layout(boxmode="group", height=max(360, 300 * len(panels)), margin=dict(t=60, b=40),
                      legend_title_text="cited documents carried",
                      title_text="Probability of the cited number, by relevance and label (whiskers: min to max)")
    if not shown:
        fig.add_annotation(text="no citation probabilities to plot", showarrow=False, xref="paper", yref="paper",
                           x=0.5, y=0.5)
    return fig


def forest_figure(rows: Sequence, title: str | None = None, axis_title: str | None = None) -> go.Figure:
    """Odds ratios with their 95% intervals on a log axis, one row per effect (engine.statistics.choice_model.Effect,
    or anything with its term, odds_ratio, ci_low, ci_high and p: the study model's configurations)."""
    import plotly.graph_objects as go

    from engine.presentation.formatting import format_p

    shown = [r for r in rows if r.odds_ratio == r.odds_ratio]  # NaN: nothing to draw
    fig = go.Figure(go.Scatter(
        x=[r.odds_ratio for r in shown], y=[_text(r.term) for r in shown], mode="markers",
        marker=dict(size=10, color=["#1f77b4" if r.p < SIGNIFICANCE else "#7f7f7f" for r in shown]),
        error_x=dict(type="data", symmetric=False, array=[r.ci_high - r.odds_ratio for r in shown],
                     arrayminus=[r.odds_ratio - r.ci_low for r in shown]),
        customdata=[[f"{r.ci_low:.2f}", f"{r.ci_high:.2f}", format_p(r.p)] for r in shown],
        hovertemplate="%{y}: odds ratio %{x:.2f} [%{customdata[0]}, %{customdata[1]}], p %{customdata[2]}<extra></extra>",
    ))
    fig.add_vline(x=1.0, line_dash="dash", line_color="#444")
    # Plain numbers as ticks (plotly's log axis labels minor ticks 6, 7, 8, 9 for 0.6 ... 0.9).
    low = min([r.ci_low for r in shown if r.ci_low > 0] + [1.0])
    high = max([r.ci_high for r in shown if r.ci_high < float("inf")] + [1.0])
    ticks = [t for t in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 0.75, 1, 1.5, 2, 5, 10, 20, 50, 100)
             if low / 1.5 <= t <= high * 1.5]
    fig.update_xaxes(type="log", title_text=axis_title or "odds ratio of being cited (log scale; 1 = no effect)",
                     tickvals=ticks, ticktext=[f"{t:g}" for t in ticks])
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(height=max(260, 70 + 48 * len(shown)), margin=dict(t=50, b=40, l=10, r=10), showlegend=False,
                      title_text=f"{title or 'Why was a document cited? Odds ratios'} with 95% intervals "
                                 f"(blue: p < {SIGNIFICANCE})")
    if not shown:
        fig.add_annotation(text="no effect to plot", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    return fig
