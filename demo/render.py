"""HTML for the query drill-down: the documents grid, answers with citations, token heat maps.

Pure functions from store.queries.QueryDetail to HTML strings. gr.HTML does not sanitise, and
model and dataset text is untrusted, so every piece of it goes through `escape_text` (html.escape,
quotes included) before it reaches a tag or an attribute; only numbers this module formats
reach a style. No JavaScript: hover values live in title= attributes.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Iterable
from typing import Any

from engine.prompting.citations import parse_citation_marks
from engine.usecases.runs.model_names import is_smoke

# Said wherever a smoke run's numbers are shown: all zeros would otherwise look like a finding.
SMOKE_NOTE = ("The smoke model has random weights and never cites, so its scores are 0: run a real model "
              "to see attribution.")


CSS = """<style>
.pe-q table{border-collapse:collapse;margin:.5em 0}
.pe-q th,.pe-q td{border:1px solid #ccc;padding:2px 6px;vertical-align:top}
.pe-q .rel{font-weight:bold}
.pe-q .cited{background:#d8ecff}
.pe-q .flip{outline:2px solid #d33;outline-offset:-2px;background:#ffe0e0}
.pe-q .answer,.pe-q .heat{white-space:pre-wrap;font-family:monospace;line-height:1.6;overflow-wrap:anywhere}
.pe-q td,.pe-q th{overflow-wrap:break-word}
.pe-q td.doc,.pe-q h3,.pe-q p,.pe-q summary{overflow-wrap:anywhere}
.pe-q td.doc{width:45%}
.pe-q table.grid{width:100%}
.pe-q .mode{min-width:0}
.pe-q pre.prompt{white-space:pre-wrap;overflow-wrap:anywhere;max-height:28em;overflow:auto;background:#f7f7f7;padding:.5em;font-size:.85em}
.pe-q mark.label-a{background:#ffe08a}
.pe-q mark.label-b{background:#c9e7ff}
.pe-q .note{background:#fff6dd;padding:.4em .6em;border-radius:4px}
.pe-q .cite{border-radius:3px;padding:0 2px;font-weight:bold}
.pe-q .tok{border-radius:2px}
.pe-q .modes{display:flex;gap:1em;flex-wrap:wrap}
.pe-q .used{background:#dff3df}
.pe-q .posthoc{background:#fde2c8;font-weight:bold}
.pe-q p.legend{font-size:.9em;color:#444}
.pe-q .mode{flex:1;min-width:18em}
</style>"""


def escape_text(value: object) -> str:
    """Escaped text for an element or a quoted attribute; None shows as a dash."""
    return "–" if value is None else html.escape(str(value), quote=True)


def probability_colour(p: float | None) -> str:
    """A background colour from red (0) through yellow to green (1); grey when unknown."""
    if p is None or math.isnan(p):
        return "#e0e0e0"
    return f"hsl({120 * min(max(p, 0.0), 1.0):.0f},75%,80%)"


def _number(p: float | None, digits: int = 3) -> str:
    return "–" if p is None else f"{p:.{digits}f}"


def cell_html(content: str, classes: Iterable[str] = (), title: str | None = None) -> str:
    attrs = f' class="{" ".join(classes)}"' if classes else ""
    if title is not None:
        attrs += f' title="{escape_text(title)}"'
    return f"<td{attrs}>{content}</td>"


def documents_grid(detail: Any, use: Iterable[Any] = ()) -> str:
    """The shown documents x modes table: position per mode, labels in base and cf, relevance,
    citation per mode with its probability; cited cells that differ between modes get `flip`.
    With `use` (engine.usecases.runs.items.DocumentUse rows), a column per mode whose answer `used`
    read: each document's necessity and whether it is used."""
    modes, use = detail.modes, tuple(use)
    by_run: dict[str, dict[int, Any]] = {}
    for u in use:
        by_run.setdefault(u.run_id, {})[u.position] = u
    read = [m for m in modes if m.answer is not None and m.run_id in by_run]
    shown = [d for d in detail.documents if any(d.doc_id in m.positions for m in modes)]
    head = ["#", "document", "relevant"]
    # One position column when every mode showed the documents in the same order (ranked or
    # reversed: the usual case); three identical columns only repeat it.
    same_order = len({tuple(sorted(m.positions.items())) for m in modes}) <= 1
    position_modes = modes[:1] if same_order else modes
    head += ["position"] if same_order else [f"{m.mode} position" for m in modes]
    head += [f"{m.mode} label" for m in modes if m.mode in ("base", "cf")]
    head += [f"{m.mode} cited (p)" for m in modes]
    use_head = [f"{m.mode} used (nats)" for m in read]
    rows = []
    for doc in shown:
        answered = [m for m in modes if m.answer is not None]
        cited_in = {m.mode for m in answered if doc.doc_id in m.cited_doc_ids}
        flipped = 0 < len(cited_in) < len(answered)
        title = f"{doc.title}: " if doc.title else ""
        cells = [
            cell_html(str(doc.rank)),
            cell_html(f"<b>{escape_text(doc.title)}</b> {escape_text(doc.text)}" if doc.title else escape_text(doc.text), ["doc"],
                  title=f"{title}{doc.doc_id}"),
            cell_html("yes" if doc.relevant else "no", ["rel"] if doc.relevant else []),
        ]
        cells += [cell_html(escape_text(m.positions.get(doc.doc_id))) for m in position_modes]
        cells += [cell_html(escape_text(m.labels.get(doc.doc_id))) for m in modes if m.mode in ("base", "cf")]
        for m in modes:
            if m.answer is None:
                cells.append(cell_html("no answer"))
                continue
            cited = m.mode in cited_in
            p = m.citation_probability(doc.doc_id)
            classes = (["cited"] if cited else []) + (["flip"] if flipped else [])
            label = f"cited ({_number(p, 2)})" if cited else "–"
            hover = f"{m.mode}: {'cited' if cited else 'not cited'}" + (f", p = {p:.4f}" if p is not None else "")
            if flipped:
                hover += "; the citation differs between modes"
            cells.append(cell_html(label, classes, hover))
        cells += [use_cell(m.mode, by_run[m.run_id].get(m.positions.get(doc.doc_id, 0))) for m in read]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    header = ("<tr>" + "".join(f"<th>{escape_text(h)}</th>" for h in head)
              + "".join(f'<th title="{escape_text(use_rule(use[0].threshold))}">{escape_text(h)}</th>' for h in use_head)
              + "</tr>")
    legend = use_legend(u for u in use if u.run_id in {m.run_id for m in read})
    return f'<table class="grid">{header}{"".join(rows)}</table>{legend}'


def use_rule(threshold: float) -> str:
    """The rule a document's use is read by, in words (said in the header's tooltip and under the grid)."""
    return (f"necessity = log P(answer | all documents) − log P(answer | without this one), in nats; used: "
            f"necessity above {threshold:g} nats (the answer at least {math.exp(threshold):.2f} times less likely "
            "without it); post-rationalised: cited but not used")


def use_cell(mode: str, use: Any | None) -> str:
    """One document's use in one answer: a word (used, not used, post-rationalised) and its
    necessity; a dash where `used` stored nothing for it (an answer it skipped)."""
    if use is None:
        return cell_html("–", title=f"{mode}: not read by `python -m engine used`")
    word, classes = ("used", ["used"]) if use.used else (("post-rationalised", ["posthoc"]) if use.cited
                                                         else ("not used", []))
    hover = (f"{mode}: {'cited' if use.cited else 'not cited'}, {word}; necessity = {use.necessity:.3f} nats, "
             f"sufficiency of the cited documents = {use.sufficiency:.3f} nats (read by {use.model}); "
             f"used: necessity > {use.threshold:g} nats")
    return cell_html(f"{word} ({use.necessity:.2f})", classes, hover)


def use_legend(use: Iterable[Any]) -> str:
    """The line under the grid that says the rule and who read the answers; "" without use."""
    rows = list(use)
    if not rows:
        return ""
    models = ", ".join(sorted({u.model for u in rows}))
    return (f'<p class="legend">Used (nats), from <code>python -m engine used</code> read by {escape_text(models)}: '
            f"{escape_text(use_rule(rows[0].threshold))}.</p>")


def answer_html(mode: Any) -> str:
    """The answer with each [n] highlighted, coloured by its citation probability (hover: value)."""
    if mode.answer is None:
        return '<div class="answer">(no answer stored yet)</div>'
    text = mode.answer
    by_index = {c.index: c for c in mode.citations}
    # Marks are the parser's, in citation_index order; a range "[1-3]" gives several marks on
    # one span, which is highlighted once with every number in its hover text.
    spans: dict[tuple[int, int], list[tuple[int, float | None]]] = {}
    for index, mark in enumerate(parse_citation_marks(text)):
        cite = by_index.get(index)
        probability = cite.probability if cite is not None and cite.position == mark.number else None
        spans.setdefault((mark.start, mark.end), []).append((mark.number, probability))
    out, cursor = [], 0
    for (start, end), marks in sorted(spans.items()):
        known = [p for _, p in marks if p is not None]
        colour = probability_colour(min(known) if known else None)
        hover = "; ".join(f"[{n}] p = {p:.4f}" if p is not None else f"[{n}] p unknown" for n, p in marks)
        out.append(escape_text(text[cursor:start]))
        out.append(f'<span class="cite" style="background:{colour}" title="{escape_text(hover)}">{escape_text(text[start:end])}</span>')
        cursor = end
    out.append(escape_text(text[cursor:]))
    return f'<div class="answer">{"".join(out)}</div>'


def _token_title(token: Any) -> str:
    p = math.exp(token.logprob) if token.logprob is not None else None
    lines = [f"{token.token!r}: p = {_number(p, 4)}, log-prob = {_number(token.logprob, 4)}"]
    for alt in token.top:
        alt_p = math.exp(alt.logprob) if alt.logprob is not None else 0.0
        lines.append(f"  {alt.token!r}: p = {alt_p:.4f}")
    return "\n".join(lines)


def token_heatmap(mode: Any) -> str:
    """Each generated token coloured by exp(log-prob); hover: the value and the alternatives."""
    if not mode.tokens:
        return '<div class="heat">(no tokens recorded)</div>'
    spans = (
        f'<span class="tok" style="background:{probability_colour(math.exp(t.logprob) if t.logprob is not None else None)}"'
        f' title="{escape_text(_token_title(t))}">{escape_text(t.token)}</span>'
        for t in mode.tokens
    )
    return f'<div class="heat">{"".join(spans)}</div>'


def prompt_html(mode: Any) -> str:
    """The prompt the model was given for this item, escaped, with each document's label
    (`(written by …)`, label A and label B in two colours) highlighted."""
    if not mode.prompt:
        return '<p class="prompt">(no prompt stored for this answer: imported, or not answered yet)</p>'
    labels = {label: cls for label, cls in ((mode.label_a, "label-a"), (mode.label_b, "label-b")) if label}
    if mode.mode == "vanilla" or not labels:
        return f'<pre class="prompt">{escape_text(mode.prompt)}</pre>'
    # engine.prompting.prompts writes a label as " (written by LABEL)" at the end of a document's line;
    # anchored there, so that a document quoting those words is not taken for a label.
    alternatives = "|".join(re.escape(label) for label in sorted(labels, key=len, reverse=True))
    pattern = re.compile(rf"\(written by ({alternatives})\)$", re.MULTILINE)
    out, cursor = [], 0
    for match in pattern.finditer(mode.prompt):
        out.append(escape_text(mode.prompt[cursor:match.start()]))
        out.append(f'<mark class="{labels[match.group(1)]}" title="label {"A" if labels[match.group(1)] == "label-a" else "B"}">'
                   f"{escape_text(match.group(0))}</mark>")
        cursor = match.end()
    out.append(escape_text(mode.prompt[cursor:]))
    return f'<pre class="prompt">{"".join(out)}</pre>'


def metrics_table(detail: Any) -> str:
    """Citation precision, recall, F1 and exact match per mode."""
    names = ("precision", "recall", "f1", "exact_match")
    rows = []
    for m in detail.modes:
        values = [getattr(m.metrics, n) if m.metrics else None for n in names]
        rows.append(f"<tr><td>{escape_text(m.mode)}</td>" + "".join(f"<td>{_number(v)}</td>" for v in values) + "</tr>")
    header = "<tr><th>mode</th>" + "".join(f"<th>{n}</th>" for n in ("precision", "recall", "F1", "EM")) + "</tr>"
    return f'<table class="metrics">{header}{"".join(rows)}</table>'


def query_page(detail: Any, use: Iterable[Any] = (), reruns: Iterable[Any] = (), rerun_note: str = "") -> str:
    """The whole drill-down: question, gold answers, grid (with the documents' use where `used`
    read the answers), answers (each marked where its citations change on a rerun too) and heat
    maps, metrics."""
    golds = ", ".join(escape_text(a) for a in detail.gold_answers) or "–"
    marks = {m.mode: m for m in reruns}

    def rerun_mark(mode: str) -> str:
        mark = marks.get(mode)
        if mark is None or not mark.text():
            return ""
        return f' <small class="{"flip" if mark.changed else "note"}">{escape_text(mark.text())}</small>'

    columns = "".join(
        f'<div class="mode"><h4>{escape_text(m.mode)} <small>run {escape_text(m.run_id)} ({escape_text(m.status)})</small>'
        f'{rerun_mark(m.mode)}</h4>'
        f"{answer_html(m)}<h5>tokens</h5>{token_heatmap(m)}"
        f"<details><summary>the prompt {escape_text(m.mode)} saw</summary>{prompt_html(m)}</details></div>"
        for m in detail.modes
    )
    smoke = any(is_smoke(m.model) for m in detail.modes if m.model)
    note = f'<p class="note">{escape_text(SMOKE_NOTE)}</p>' if smoke else ""
    if rerun_note:
        note += f'<p class="note">{escape_text(rerun_note)}</p>'
    return (
        f'{CSS}<div class="pe-q">'
        f"<h3>{escape_text(detail.question)}</h3>"
        f"<p>item {escape_text(detail.item_id)} · experiment {escape_text(detail.experiment_id)} · gold: {golds}</p>"
        f"{note}{documents_grid(detail, use)}"
        f'<div class="modes">{columns}</div>'
        f"{metrics_table(detail)}</div>"
    )


def message(text: str) -> str:
    """A one-line notice (unknown experiment or item) as escaped HTML."""
    return f'{CSS}<div class="pe-q"><p>{escape_text(text)}</p></div>'


# ---------------------------------------------------------------- compare: two runs side by side


def comparison_summary(result) -> str:
    """What a comparison paired (engine.usecases.compare.compare.Comparison): per pair of runs the runs,
    the items paired and left out, notes (a run still running), the EM and citation flips."""
    parts = [f"<p><b>A</b> {escape_text(result.request.a)} ({escape_text(result.side_a.kind)}) · "
             f"<b>B</b> {escape_text(result.request.b)} ({escape_text(result.side_b.kind)}) · differences are B − A</p>"]
    smoke = False
    for r in result.runs:
        smoke = smoke or is_smoke(r.run_a.model) or is_smoke(r.run_b.model)
        p = r.pairing
        by_id = " · paired by id although the datasets differ" if p.pair_by_id else ""
        lines = [
            f"<b>{escape_text(r.title)}</b>: run {escape_text(r.run_a.run_id)} ({escape_text(r.run_a.experiment_name)}, "
            f"{escape_text(r.run_a.model)}) vs run {escape_text(r.run_b.run_id)} ({escape_text(r.run_b.experiment_name)}, "
            f"{escape_text(r.run_b.model)})",
            f"{p.n_paired} item{'' if p.n_paired == 1 else 's'} paired; {p.only_a} only in A, {p.only_b} only in B"
            f"{by_id}",
        ]
        if r.em_flips is not None:
            e = r.em_flips
            lines.append(f"exact match flips: {e.right_to_wrong} right → wrong, {e.wrong_to_right} wrong → right "
                         f"(of {e.n} items with gold answers)")
        c = r.citation_flips
        lines.append(f"citation flips over {c.shown_both} documents shown in both: cited in A only "
                     f"{c.a_only_relevant} relevant / {c.a_only_nonrelevant} not; in B only {c.b_only_relevant} "
                     f"relevant / {c.b_only_nonrelevant} not")
        lines.append(escape_text(r.reruns.line()))
        lines += [f'<span class="note">{escape_text(n)}</span>' for n in r.notes]
        parts.append("<li>" + "<br>".join(lines) + "</li>")
    for b in result.bias:
        p = b.pairing
        parts.append(f"<li><b>{escape_text(b.measure)}</b> of B against A's: {p.n_paired} items paired "
                     f"({p.only_a} left out in A, {p.only_b} in B)</li>")
    note = f'<p class="note">{escape_text(SMOKE_NOTE)}</p>' if smoke else ""
    return f'{CSS}<div class="pe-q">{parts[0]}{note}<ul>{"".join(parts[1:])}</ul></div>'


def pair_grid(sides) -> str:
    """The shown documents x two runs: position, label, citation (p) in each; a document cited in
    one answer and not the other gets `flip`. `sides`: (name, QueryDetail, ModeDetail) with both known."""
    docs, seen = [], set()
    for _, detail, _ in sides:
        for d in detail.documents:
            if d.doc_id not in seen and any(d.doc_id in m.positions for _, _, m in sides):
                seen.add(d.doc_id)
                docs.append(d)
    labelled = [(n, m) for n, _, m in sides if m.mode in ("base", "cf")]
    head = ["#", "document", "relevant", *(f"{n} position" for n, _, _ in sides), *(f"{n} label" for n, _ in labelled),
            *(f"{n} cited (p)" for n, _, _ in sides)]
    rows = []
    for doc in docs:
        answered = [(n, m) for n, _, m in sides if m.answer is not None]
        cited_in = {n for n, m in answered if doc.doc_id in m.cited_doc_ids}
        flipped = 0 < len(cited_in) < len(answered)
        title = f"{doc.title}: " if doc.title else ""
        cells = [cell_html(str(doc.rank)),
                 cell_html(f"<b>{escape_text(doc.title)}</b> {escape_text(doc.text)}" if doc.title else escape_text(doc.text), ["doc"],
                       title=f"{title}{doc.doc_id}"),
                 cell_html("yes" if doc.relevant else "no", ["rel"] if doc.relevant else [])]
        cells += [cell_html(escape_text(m.positions.get(doc.doc_id))) for _, _, m in sides]
        cells += [cell_html(escape_text(m.labels.get(doc.doc_id))) for _, m in labelled]
        for n, _, m in sides:
            if m.answer is None:
                cells.append(cell_html("no answer"))
                continue
            cited = n in cited_in
            p = m.citation_probability(doc.doc_id)
            hover = f"{n}: {'cited' if cited else 'not cited'}" + (f", p = {p:.4f}" if p is not None else "")
            if flipped:
                hover += "; cited in one run only"
            cells.append(cell_html(f"cited ({_number(p, 2)})" if cited else "–",
                               (["cited"] if cited else []) + (["flip"] if flipped else []), hover))
        rows.append("<tr>" + "".join(cells) + "</tr>")
    header = "<tr>" + "".join(f"<th>{escape_text(h)}</th>" for h in head) + "</tr>"
    return f'<table class="grid pair">{header}{"".join(rows)}</table>'


def pair_page(item_id: str, sides) -> str:
    """One item, two runs side by side (the Compare tab's drill-down): the question, the documents
    grid over both runs, each run's answer, tokens and prompt, their metrics. `sides`: per run
    (title, experiment name, QueryDetail or None, ModeDetail or None)."""
    known = [(t, e, d, m) for t, e, d, m in sides if d is not None and m is not None]
    first = next((d for _, _, d, _ in sides if d is not None), None)
    if first is None:
        return message(f"neither run has item '{item_id}'")
    questions = list(dict.fromkeys(d.question for _, _, d, _ in sides if d is not None))
    golds = ", ".join(escape_text(a) for a in first.gold_answers) or "–"
    head = f"<h3>{escape_text(questions[0])}</h3>" + "".join(f"<p>B's dataset asks: {escape_text(q)}</p>" for q in questions[1:])
    missing = []
    for title, _, detail, mode in sides:
        if detail is None:
            missing.append(f"{title}: its experiment holds no item '{item_id}'")
        elif mode is None:
            missing.append(f"{title}: not the run the Query tab shows for its experiment (failed, or an older run of "
                           "its mode); open it there by experiment")
    notes = "".join(f'<p class="note">{escape_text(n)}</p>' for n in missing)
    if any(is_smoke(m.model) for _, _, _, m in known if m.model):
        notes += f'<p class="note">{escape_text(SMOKE_NOTE)}</p>'
    names = [t.split(":", 1)[0] for t, _, _, _ in known]
    grid = pair_grid([(n, d, m) for n, (_, _, d, m) in zip(names, known, strict=True)]) if known else ""
    columns = "".join(
        f'<div class="mode"><h4>{escape_text(title)} <small>{escape_text(experiment)}:{escape_text(m.mode)} · {escape_text(m.model)} '
        f"({escape_text(m.status)})</small></h4>{answer_html(m)}<h5>tokens</h5>{token_heatmap(m)}"
        f"<details><summary>the prompt run {escape_text(m.run_id)} saw</summary>{prompt_html(m)}</details></div>"
        for title, experiment, _, m in known
    )
    names_m = ("precision", "recall", "f1", "exact_match")
    metric_rows = "".join(
        f"<tr><td>{escape_text(n)}</td>" + "".join(
            f"<td>{_number(getattr(m.metrics, x) if m.metrics else None)}</td>" for x in names_m) + "</tr>"
        for n, (_, _, _, m) in zip(names, known, strict=True))
    metrics = ('<table class="metrics"><tr><th>run</th><th>precision</th><th>recall</th><th>F1</th><th>EM</th></tr>'
               f"{metric_rows}</table>") if known else ""
    return (f'{CSS}<div class="pe-q">{head}<p>item {escape_text(item_id)} · gold: {golds}</p>{notes}{grid}'
            f'<div class="modes">{columns}</div>{metrics}</div>')
