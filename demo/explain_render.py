"""HTML for the Explain tab: an item's documents and, per mode, the answer and the stored Prompt 5
explanations, with the documents and labels each explanation names highlighted.

Built on demo.render (its CSS, `escape_text`, `cell_html`, `answer_html`) and held to the same rule:
every piece of model and dataset text, explanations included, goes through `escape_text` before it
reaches a tag or an attribute. No JavaScript: which explanation names what is in title= hovers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from demo.render import CSS, answer_html, cell_html, escape_text

if TYPE_CHECKING:
    from engine.types import ExplainRun

EXPLAIN_CSS = """<style>
.pe-q .named{outline:2px solid #e0a000;outline-offset:-2px;background:#fff4c2}
.pe-q .named-label{background:#ffd27a;border-radius:3px;padding:0 2px;font-weight:bold}
.pe-q .explanation{white-space:pre-wrap;overflow-wrap:anywhere;border-left:3px solid #e0a000;padding:.3em .6em;margin:.4em 0;background:#fffbea}
.pe-q .chip{display:inline-block;border-radius:8px;padding:0 6px;margin:0 .3em .2em 0;background:#eee;font-size:90%}
.pe-q .chip.label{background:#ffd27a}
</style>"""


def _named_doc_ids(mode: Any, explanations: list[Any]) -> dict[str, list[str]]:
    """doc_id -> the explainer models whose explanation of this mode's answer names it. Numbers
    are as shown to the answering model, so they are read through that run's positions."""
    by_position = {p: d for d, p in mode.positions.items()}
    named: dict[str, list[str]] = {}
    for e in explanations:
        for n in e.mentioned_docs:
            if n in by_position:
                named.setdefault(by_position[n], []).append(e.explainer_model)
    return named


def _named_labels(explanations: list[Any]) -> set[str]:
    return {label for e in explanations for label in e.mentioned_labels}


def documents_grid(detail: Any, by_mode: dict[str, list[Any]]) -> str:
    """The shown documents x modes: per mode the position, the label shown (highlighted when an
    explanation of that mode names it), whether the answer cited it, and whether an explanation
    names it (the cell highlighted, the explainers in its hover)."""
    modes = detail.modes
    shown = [d for d in detail.documents if any(d.doc_id in m.positions for m in modes)]
    head = ["#", "document", "relevant"] + [f"{m.mode}" for m in modes]
    rows = []
    for doc in shown:
        cells = [
            cell_html(str(doc.rank)),
            cell_html(f"<b>{escape_text(doc.title)}</b> {escape_text(doc.text)}" if doc.title else escape_text(doc.text), ["doc"],
                  title=doc.doc_id),
            cell_html("yes" if doc.relevant else "no", ["rel"] if doc.relevant else []),
        ]
        for m in modes:
            position = m.positions.get(doc.doc_id)
            if position is None:
                cells.append(cell_html("not shown"))
                continue
            mine = by_mode.get(m.mode, [])
            named_by = _named_doc_ids(m, mine).get(doc.doc_id, [])
            label = m.labels.get(doc.doc_id)
            parts = [f"[{position}]"]
            if label is not None:
                mark = ' class="named-label"' if label in _named_labels(mine) else ""
                parts.append(f"<span{mark}>{escape_text(label)}</span>")
            if m.answer is not None and doc.doc_id in m.cited_doc_ids:
                parts.append("cited")
            if named_by:
                parts.append("named")
            hover = f"{m.mode}: shown as [{position}]"
            if named_by:
                hover += "; named in the explanation by " + ", ".join(named_by)
            cells.append(cell_html(" · ".join(parts), ["named"] if named_by else [], hover))
        rows.append("<tr>" + "".join(cells) + "</tr>")
    header = "<tr>" + "".join(f"<th>{escape_text(h)}</th>" for h in head) + "</tr>"
    return f'<table class="grid">{header}{"".join(rows)}</table>'


def explanation_html(e: Any) -> str:
    """One explanation: who explained, the text, and chips for what it names."""
    docs = ", ".join(f"[{n}]" for n in e.mentioned_docs)
    chips = [f'<span class="chip">names documents {escape_text(docs)}</span>' if docs
             else '<span class="chip">names no document</span>']
    if e.mentioned_labels:
        chips.append('<span class="chip label">gives a label as a reason: '
                     + ", ".join(f"<b>{escape_text(label)}</b>" for label in e.mentioned_labels) + "</span>")
    else:
        chips.append('<span class="chip">names no label</span>')
    cut = " (cut at the token limit)" if e.finish_reason == "length" else ""
    return (f'<div class="explained"><h5>explanation by {escape_text(e.explainer_model)}{escape_text(cut)}</h5>'
            f'<div class="explanation">{escape_text(e.text)}</div>{"".join(chips)}</div>')


def explain_page(detail: Any, explanations: tuple[Any, ...]) -> str:
    """The whole tab's view of one item."""
    by_mode: dict[str, list[Any]] = {}
    for e in explanations:
        by_mode.setdefault(e.rag_mode, []).append(e)
    columns = []
    for m in detail.modes:
        mine = [e for e in by_mode.get(m.mode, []) if e.run_id == m.run_id]
        body = "".join(explanation_html(e) for e in mine) or (
            '<p class="none">no explanation stored yet (<code>python -m engine explain</code>)</p>')
        columns.append(f'<div class="mode"><h4>{escape_text(m.mode)} <small>run {escape_text(m.run_id)}</small></h4>'
                       f"{answer_html(m)}{body}</div>")
    golds = ", ".join(escape_text(a) for a in detail.gold_answers) or "–"
    count = len(explanations)
    return (
        f'{CSS}{EXPLAIN_CSS}<div class="pe-q">'
        f"<h3>{escape_text(detail.question)}</h3>"
        f"<p>item {escape_text(detail.item_id)} · experiment {escape_text(detail.experiment_id)} · gold: {golds}"
        f" · {count} explanation{'' if count == 1 else 's'} stored</p>"
        f"{documents_grid(detail, by_mode)}"
        f'<div class="modes">{"".join(columns)}</div></div>'
    )


def run_summary(run: ExplainRun, rates: tuple[tuple, ...]) -> str:
    """A whole run's heading: its mode and id, and per explainer model the share of its
    explanations that give a label as a reason (rows of store.queries.explanation_rates)."""
    head = f"run {escape_text(run.run_id)} · {escape_text(run.rag_mode)} · {run.n_answers} answer{'' if run.n_answers == 1 else 's'}"
    if not rates:
        body = '<p class="none">no explanation stored yet (<code>python -m engine explain --run</code>, or Generate)</p>'
    else:
        lines = []
        for _run, model, _mode, n, n_label, share in rates:
            lines.append(f"<li>by {escape_text(model)}: {n} explanation{'' if n == 1 else 's'}, {n_label} give a label as a "
                         f"reason: <b>label share {share:.2f}</b></li>")
        body = f"<ul>{''.join(lines)}</ul>"
    return f'{CSS}{EXPLAIN_CSS}<div class="pe-q"><h4>{head}</h4>{body}</div>'
