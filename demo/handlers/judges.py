"""The Judges tab: how far the judges of citations agree, through
engine.usecases.judges.agreement (the CLI's `agreement`), and human labels imported through
engine.usecases.storage.import_labels (the CLI's `import-labels`). Plain functions: values in,
DataFrames and HTML out, so that each is testable without a browser. The app computes nothing:
every number is the use case's, only formatted here.

`/agreement` returns Agreement.as_dict (JSON-ready); the page shows the judges, the agreement
matrix (Cohen's kappa with its interval, raw agreement and n per pair), the panel's Fleiss' kappa
and Krippendorff's alpha, each model judge against each human one, the PPI-corrected attribution
rate, and for a chosen pair the citations they disagree on (a click opens the item in Query).

The agreement, the disagreements and a label import each read every verdict or answer of the
runs named, tens of seconds on a large store: each runs in a bounded child process
(demo.judges_child), one per visitor (demo.visitors.fair_key) at a time and one at a time in all,
4 more waiting their turn (a FitGate of their own, as Why-cited fits take turns); the agreement
and the disagreements are kept per store state (store.state_cache), so asking again on an
unchanged store costs a stat of its file. A label import is held to the store's quota as run
jobs are (PATTRIEVAL_MAX_STORE_MB, PATTRIEVAL_MAX_JOB_MB): refused before the file is read when
the store is at its quota, and by its labels' estimated size before and while they are written.
"""

from __future__ import annotations

import functools
import html
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from demo import judges_child, quotas
from demo.field_words import app_message
from demo.fit_child import FitBounds
from demo.handlers.query import clean_input, visitor_line
from demo.handlers.why_cited import BUSY as GATE_BUSY
from demo.handlers.why_cited import PENDING as GATE_PENDING
from demo.handlers.why_cited import FitGate
from demo.judges_child import DEFAULT_JUDGES_TIMEOUT_S, JudgesTask
from demo.settings import without_server_paths
from engine.bounds import PAGE_MAX_CHOICES, for_page
from engine.errors import UserError
from engine.usecases.judges.agreement import AgreementRequest
from engine.usecases.runs.listing import experiments
from engine.usecases.storage.import_labels import ImportLabelsRequest, quota_problem

if TYPE_CHECKING:
    import pandas as pd

    from demo.settings import AppSettings
    from engine.usecases.judges.agreement import Agreement

T = TypeVar("T")
EMPTY_STORE = "nothing is stored yet: start a run in the Run tab, judge it, then see the judges' agreement here"
JUDGE_COLUMNS = ["judge", "kind", "verdicts", "unparsed (left out)"]
HUMAN_COLUMNS = ["judge", "against human", "n", "accuracy", "precision (attributable)", "recall (attributable)"]
PPI_COLUMNS = ["judge", "human", "labelled by both", "judged only", "corrected rate (PPI)", "judge's own rate",
               "human sample's rate"]
# A disagreement row starts with these: a click opens (run, item) in the Query tab.
DISAGREEMENT_KEY = ["run", "item_id", "[n]"]
DISAGREEMENTS_SHOWN = 100  # rows on the page; the note says how many there are in all
VERDICT_WORDS = {"attributable": "attributable", "not_attributable": "not attributable", None: "–"}
PENDING = "your previous agreement, disagreements list or label import is still running: one at a time"
BUSY = "the judges' agreements and imports are busy; try again in a moment"


# ---------------------------------------------------------------- the child, its turn, what is kept


@functools.cache
def judges_gate() -> FitGate:
    """The process's turn-taking for the Judges tab's work in a child: one at a time, 4 waiting."""
    return FitGate(1)


@functools.cache
def _kept():
    from store.state_cache import StoreStateCache

    return StoreStateCache(16)


def clear_cache() -> None:
    """Forget the kept agreements (tests and benchmarks time uncached calls with it)."""
    _kept().clear()


def computed(task: JudgesTask, db: Path, bounds: FitBounds | None) -> Any:
    """The task's result computed now in a bounded child (demo.judges_child); UserError in one
    line naming no server path."""
    try:
        return judges_child.in_child(task, bounds or FitBounds(timeout_s=DEFAULT_JUDGES_TIMEOUT_S))
    except UserError as err:
        path = getattr(task.request, "labels", None)
        raise UserError(without_server_paths(app_message(err), db, dataset_path=str(path) if path else None)) from None


def in_turn(owner: str | None, call: Callable[[], T], gate: FitGate | None = None) -> T:
    """`call()` in `owner`'s turn at the gate (the process's judges_gate() when None); UserError
    in one line (PENDING, BUSY) when refused."""
    try:
        return (gate or judges_gate()).run(owner, call)
    except UserError as err:
        words = {GATE_PENDING: PENDING, GATE_BUSY: BUSY}
        if str(err) in words:
            raise UserError(words[str(err)]) from None
        raise


def kept(task: JudgesTask, db: Path, owner: str | None, bounds: FitBounds | None, gate: FitGate | None = None) -> Any:
    """The task's result kept for the store's present state (served without queuing), else
    computed in its turn and kept. A task that waited looks again: the same may have been
    computed, and kept, while it waited."""
    key = (task.kind, task.request, task.pair, task.limit)
    return _kept().get(db, key, lambda: in_turn(owner, lambda: _kept().get(db, key, lambda: computed(task, db, bounds)),
                                                gate))


# ---------------------------------------------------------------- choosing the runs


def run_choices(db: Path) -> list[tuple[str, str]]:
    """(label, run id) for the runs multiselect, newest first; empty when nothing is stored."""
    if not Path(db).is_file():
        return []
    return [(for_page(f"{r.run_id} · {r.experiment_id}:{r.mode} · {for_page(r.model, 60)}"), r.run_id)
            for r in experiments(db, runs=True)[:PAGE_MAX_CHOICES]]


def request_from(db: Path, experiment: Any, runs: Any) -> AgreementRequest:
    """The use case's request: an experiment (id or name) or runs (a list, or an API caller's
    text "r1, r2"), one of them; UserError in one line otherwise."""
    experiment = clean_input(experiment, "experiment")
    if isinstance(runs, str):
        runs = runs.replace(",", " ").split()
    chosen = tuple(dict.fromkeys(clean_input(r, "run id") for r in (runs or ()) if str(r or "").strip()))
    if bool(experiment) == bool(chosen):
        raise UserError("choose an experiment or runs (one of them)")
    return AgreementRequest(Path(db), experiment or None, chosen)


def _page_words(err: UserError, db: Path) -> UserError:
    """The use case's line in the page's words: the store as "file", no CLI options."""
    return UserError(visitor_line(err, db))


def run_agreement(db: Path, experiment: Any, runs: Any, *, owner: str | None = None,
                  bounds: FitBounds | None = None, gate: FitGate | None = None) -> Agreement:
    """The use case's Agreement (kept per store state, else computed in a bounded child in
    `owner`'s turn), or a one-line UserError in the page's words."""
    request = request_from(db, experiment, runs)
    if not Path(db).is_file():
        raise UserError(EMPTY_STORE)
    try:
        return kept(JudgesTask("agreement", request), Path(db), owner, bounds, gate)
    except UserError as err:
        raise _page_words(err, db) from None


def agreement_api(db: Path, experiment: Any, runs: Any, *, owner: str | None = None,
                  bounds: FitBounds | None = None, gate: FitGate | None = None) -> dict[str, Any]:
    """`/agreement`: the use case's JSON (Agreement.as_dict)."""
    return run_agreement(db, experiment, runs, owner=owner, bounds=bounds, gate=gate).as_dict()


# ---------------------------------------------------------------- the page


@dataclass(frozen=True)
class AgreementView:
    """What the Judges tab shows for one choice of runs."""

    summary: str  # HTML: the runs, the judges, the panel line
    judges: pd.DataFrame  # JUDGE_COLUMNS
    matrix: pd.DataFrame  # judges x judges, each cell kappa [CI] · raw agreement · n
    humans: pd.DataFrame  # HUMAN_COLUMNS
    ppi: pd.DataFrame  # PPI_COLUMNS
    pairs: list[tuple[str, str]]  # (label, value) of each pair of judges, for the disagreements
    result: dict[str, Any]  # /agreement's answer


def agreement_view(db: Path, experiment: Any, runs: Any, *, owner: str | None = None,
                   bounds: FitBounds | None = None) -> AgreementView:
    import pandas as pd

    result = run_agreement(db, experiment, runs, owner=owner, bounds=bounds)
    judges = pd.DataFrame([[j.judge, j.kind, j.n_verdicts, j.n_null] for j in result.judges], columns=JUDGE_COLUMNS)
    humans = pd.DataFrame([[h.judge, h.human, h.scores.n, _share(h.scores.accuracy), _share(h.scores.precision),
                            _share(h.scores.recall)] for h in result.against_human], columns=HUMAN_COLUMNS)
    ppi = pd.DataFrame([[p.judge, p.human, p.rate.n_labelled, p.rate.n_unlabelled, _rate(p.rate),
                         _percent(p.rate.naive_judge_rate), _percent(p.rate.human_rate)] for p in result.ppi],
                       columns=PPI_COLUMNS)
    # The pair that disagrees most first: the list below the matrix is then not empty where any pair disagrees.
    ranked = sorted(result.pairs, key=lambda p: -_n_disagree(p.agreement))
    pairs = [(f"{p.judge_a} vs {p.judge_b}", pair_value(p.judge_a, p.judge_b)) for p in ranked]
    return AgreementView(summary_html(result), judges, matrix(result), humans, ppi, pairs, result.as_dict())


def _n_disagree(agreement: Any) -> int:
    """The cited documents two judges disagree on: their confusion table off its diagonal."""
    return sum(n for i, row in enumerate(agreement.confusion) for j, n in enumerate(row) if i != j)


def pair_value(judge_a: str, judge_b: str) -> str:
    """A pair of judges as one dropdown value (names may hold any character but quotes survive JSON)."""
    return json.dumps([judge_a, judge_b])


def pair_of(value: Any) -> tuple[str, str]:
    """The pair a dropdown value names; UserError when it names none."""
    try:
        a, b = json.loads(str(value or ""))
    except (ValueError, TypeError):
        raise UserError("choose two judges whose disagreements to list") from None
    return str(a), str(b)


def kappa_cell(agreement: Any) -> str:
    """One pair's cell: κ with its 95% interval (or why undefined), raw agreement and n."""
    if agreement.n == 0:
        return f"undefined: {agreement.undefined or 'no item judged by both'} · n 0"
    if agreement.kappa is None:
        kappa = f"κ undefined: {agreement.undefined}"
    elif agreement.kappa_ci is None:
        why = agreement.ci_undefined or "undefined"
        # statistics.agreement.PERFECT, cut short for a cell
        kappa = f"κ {agreement.kappa:.2f} (no interval: {'standard error 0' if why.startswith('perfect') else why})"
    else:
        low, high = agreement.kappa_ci
        kappa = f"κ {agreement.kappa:.2f} [{low:.2f}, {high:.2f}]"
    return f"{kappa} · agree {_percent(agreement.raw_agreement)} · n {agreement.n}"


def matrix(result: Agreement) -> pd.DataFrame:
    """Judges x judges: each cell the pair's kappa_cell (the same both ways), the diagonal a dash."""
    import pandas as pd

    names = [j.judge for j in result.judges]
    cells = {}
    for p in result.pairs:
        cells[(p.judge_a, p.judge_b)] = cells[(p.judge_b, p.judge_a)] = kappa_cell(p.agreement)
    rows = [[a, *("—" if a == b else cells.get((a, b), "–") for b in names)] for a in names]
    return pd.DataFrame(rows, columns=["judge", *names])


def panel_line(panel: Any) -> str:
    """The panel's Fleiss' kappa and Krippendorff's alpha, each naming its library, or why undefined."""
    if panel.fleiss_kappa is None:
        fleiss = f"Fleiss' κ undefined: {panel.fleiss_undefined or panel.undefined} (statsmodels)"
    else:
        fleiss = (f"Fleiss' κ {panel.fleiss_kappa:.2f} on the {panel.n_complete} citations every judge judged "
                  f"(statsmodels)")
    if panel.krippendorff_alpha is None:
        alpha = f"Krippendorff's α undefined: {panel.alpha_undefined or panel.undefined} (krippendorff)"
    else:
        alpha = f"Krippendorff's α {panel.krippendorff_alpha:.2f}, nominal (krippendorff)"
    return f"Panel of {panel.n_judges} judges on {panel.n_items} cited documents: {fleiss} · {alpha}"


def summary_html(result: Agreement) -> str:
    """What was read and the panel line, every stored name escaped."""
    what = (f"experiment {result.experiment_id}" if result.experiment_id else "runs") + ": " + ", ".join(result.run_ids)
    return (f'<div class="pe-judges"><p><b>{html.escape(what, quote=False)}</b></p>'
            f"<p>{html.escape(panel_line(result.panel), quote=False)}</p>"
            + (f"<p>{html.escape(result.panel_note(), quote=False)}</p>" if result.panel_note() else "") + "</div>")


def judges_bounds(settings: AppSettings) -> FitBounds:
    """The memory and CPU time one agreement or label import may take in its child."""
    return FitBounds(settings.fit_memory_mb * 1024**2, settings.judges_timeout_s)


def refusal_html(line: str) -> str:
    """Why nothing is shown, as the page's one message in place of the summary (escaped)."""
    return f'<div class="pe-refusal" role="alert"><b>Not shown:</b> {html.escape(line, quote=False)}</div>'


def _percent(value: float | None) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{100 * value:.1f}%"


def _share(p: Any) -> str:
    """A Proportion: k/n, the share and its Wilson interval, or why undefined."""
    if p.value is None:
        return f"undefined: {p.undefined}"
    low, high = p.ci
    return f"{_percent(p.value)} [{_percent(low)}, {_percent(high)}] ({p.k}/{p.n})"


def _rate(rate: Any) -> str:
    if rate.estimate is None:
        return f"undefined: {rate.undefined}"
    ci = f" [{_percent(rate.ci[0])}, {_percent(rate.ci[1])}]" if rate.ci else ""
    return f"{_percent(rate.estimate)}{ci}" + (f" ({rate.note})" if rate.note else "")


# ---------------------------------------------------------------- disagreements


def disagreement_rows(db: Path, experiment: Any, runs: Any, pair: Any, *, owner: str | None = None,
                      bounds: FitBounds | None = None) -> tuple[pd.DataFrame, str]:
    """(the citations the pair disagrees on, DISAGREEMENT_KEY first then each judge's verdict and
    the document's title and first words; a one-line note of how many)."""
    import pandas as pd

    judge_a, judge_b = pair_of(pair)
    request = request_from(db, experiment, runs)
    if not Path(db).is_file():
        raise UserError(EMPTY_STORE)
    try:
        task = JudgesTask("disagreements", request, (judge_a, judge_b), DISAGREEMENTS_SHOWN)
        found, total = kept(task, Path(db), owner, bounds)
    except UserError as err:
        raise _page_words(err, db) from None
    columns = [*DISAGREEMENT_KEY, f"A: {judge_a}", f"B: {judge_b}", "other judges", "document"]
    rows = []
    for d in found:
        verdicts = dict(d.verdicts)
        others = "; ".join(f"{j}: {VERDICT_WORDS[v]}" for j, v in d.verdicts if j not in (judge_a, judge_b))
        rows.append([d.run_id, d.item_id, d.position, VERDICT_WORDS[verdicts.get(judge_a)],
                     VERDICT_WORDS[verdicts.get(judge_b)], others, _document(d)])
    shown = f" (the first {len(found)} shown)" if total > len(found) else ""
    note = f"{total} cited documents where {judge_a} and {judge_b} disagree{shown}; click a row to open its item in Query."
    return pd.DataFrame(rows, columns=columns), note


def _document(d: Any) -> str:
    words = " ".join((d.text or "").split())
    first = words if len(words) < 120 else words[:119] + "…"
    name = d.title or d.doc_id or "(not shown)"
    return f"{name}: {first}" if first else name


def clicked_disagreement(row: Sequence[Any] | None) -> tuple[str, str] | None:
    """(run id, item id) of a clicked disagreement row; None for a click on nothing."""
    if not row or len(row) < 2:
        return None
    run_id, item_id = str(row[0]).strip(), str(row[1]).strip()
    return (run_id, item_id) if run_id and item_id else None


# ---------------------------------------------------------------- importing labels


def import_labels_file(settings: AppSettings, path: Any, judge: Any, *, owner: str | None = None) -> str:
    """Import an uploaded labels file (CSV or JSONL) as `judge`'s, in a bounded child in `owner`'s
    turn: one line saying what was stored, or a one-line UserError (a read-only app, no file, a
    file past the upload limit, a store at or past its quota, or the use case's refusal with the
    file named, never its server path)."""
    from demo.visitors import labels_judge

    if settings.read_only:
        raise UserError("this app is read-only: labels cannot be imported here")
    path = clean_input(path, "labels file")
    if not path:
        raise UserError("upload a labels file (CSV or JSONL) first")
    name = Path(path).name
    try:
        size = os.path.getsize(path)
    except OSError:
        raise UserError(f"{name} is gone from the server; upload it again") from None
    if size > settings.max_upload_bytes:
        raise UserError(f"{name} is {size / 2**20:.1f} MB; uploads here are limited to {settings.max_upload_mb} MB")
    judge = clean_input(judge, "judge's name")
    if not judge:
        raise UserError("name the judge who labelled (a person or a team)")
    judge = labels_judge(settings, owner, judge)  # a visitor's: "visitor <tag>: <name>"
    request = ImportLabelsRequest(Path(settings.db_path), Path(path), judge,
                                  max_store_bytes=settings.max_store_mb and settings.max_store_mb * quotas.MB,
                                  max_import_bytes=settings.max_job_mb and settings.max_job_mb * quotas.MB)
    full = quota_problem(request, 0, 0)
    if full:  # a store at its quota: refused at once, before a child is started or the file read
        raise UserError(full)
    try:
        task = JudgesTask("import_labels", request)
        result = in_turn(owner, lambda: computed(task, Path(settings.db_path), judges_bounds(settings)))
    except UserError as err:
        raise UserError(app_message(err)) from None  # the judge box by its name in the page
    runs = ", ".join(result.run_ids)
    if result.already:
        return f"{name}: all {result.n_labels} labels of judge '{result.judge}' were stored already (runs {runs})"
    return f"{name}: {result.n_added} of {result.n_labels} labels stored as judge '{result.judge}' (runs {runs})"
