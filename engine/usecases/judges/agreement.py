"""How far the judges of citations agree: `python -m engine agreement` and engine.api.agreement
.

Reads the store's `judgements` view (every judge's verdict per run, item and cited document) for
an experiment's runs or chosen runs, and hands each judge's binary verdicts (attributable or
not_attributable) to engine.statistics.agreement: per pair of judges Cohen's kappa (statsmodels),
for the panel Fleiss' kappa (statsmodels) and Krippendorff's alpha (`krippendorff`), each model
judge against each human judge (accuracy, precision and recall of "attributable", Wilson
intervals), and where a human labelled part of what a model judge judged, the attribution rate
corrected by prediction-powered inference. A NULL verdict (an output the parser could not read)
is left out of every statistic and counted per judge.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import FieldError, UserError, WordedError

if TYPE_CHECKING:  # the statistics' types, for annotations only: nothing loaded at import time
    from engine.statistics.agreement import AgainstHuman, CorrectedRate, PairAgreement, PanelAgreement

Citation = tuple[str, str, int]  # (run, item, position)


@dataclass(frozen=True)
class AgreementRequest:
    db: Path
    experiment: str | None = None  # id or name; or else `runs`
    runs: tuple[str, ...] = ()
    judges: tuple[str, ...] = ()  # () = every judge of these runs


@dataclass(frozen=True)
class JudgeCount:
    """One judge's verdicts on the runs: those with a label, and the NULL ones left out."""

    judge: str
    kind: str  # llm | nli | human
    n_verdicts: int
    n_null: int


@dataclass(frozen=True)
class PairRow:
    judge_a: str
    judge_b: str
    agreement: PairAgreement


@dataclass(frozen=True)
class HumanRow:
    judge: str
    human: str
    scores: AgainstHuman


@dataclass(frozen=True)
class PpiRow:
    judge: str
    human: str
    rate: CorrectedRate


@dataclass(frozen=True)
class Agreement:
    experiment_id: str | None
    run_ids: tuple[str, ...]
    judges: tuple[JudgeCount, ...]
    pairs: tuple[PairRow, ...]
    panel: PanelAgreement
    against_human: tuple[HumanRow, ...]
    ppi: tuple[PpiRow, ...]
    # Judges left out of the panel: none of their verdicts on these runs could be read (every
    # one NULL), so a column of theirs would hold nothing and empty every "complete" item.
    panel_left_out: tuple[str, ...] = ()

    def panel_note(self) -> str:
        """Which judges the panel leaves out and why; "" when none."""
        if not self.panel_left_out:
            return ""
        nulls = {c.judge: c.n_null for c in self.judges}
        left = ", ".join(f"{j} ({nulls.get(j, 0)} unreadable)" for j in self.panel_left_out)
        return f"left out of the panel, no usable verdict: {left}"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: tuples as lists, every statistic's fields by name."""
        return asdict(self)


def agreement_runs(request: AgreementRequest) -> tuple[str | None, tuple[str, ...]]:
    """(experiment id or None, the run ids) the request names; UserError for an unknown one."""
    from store.queries import label_runs, resolve_experiment

    if (request.experiment is None) == (not request.runs):
        raise FieldError("experiment", "give {experiment} or {runs} (one of them)")
    runs = label_runs(request.db)
    if request.experiment is not None:
        experiment_id = resolve_experiment(request.db, request.experiment)
        if experiment_id is None:
            raise FieldError("experiment", "unknown experiment '{name}' ({see_experiments})", name=request.experiment)
        return experiment_id, tuple(r.run_id for r in runs if r.experiment_id == experiment_id)
    known = {r.run_id for r in runs}
    for run_id in request.runs:
        if run_id not in known:
            raise FieldError("runs", "unknown run '{name}' ({see_runs})", name=run_id)
    return None, tuple(dict.fromkeys(request.runs))


@dataclass(frozen=True)
class _Verdicts:
    """The judges' binary verdicts on the request's runs, as agreement and disagreements read them."""

    experiment_id: str | None
    run_ids: tuple[str, ...]
    names: tuple[str, ...]  # the judges, chosen order or sorted
    kind: dict[str, str]
    # Each judge's in (run, item, position) order, as the store's query returns them, so that a
    # walk of one judge's filtered by another's is in that order without sorting (sorting the
    # pairs' shared citations took 9 of 31 s at 480,000 verdicts).
    verdicts: dict[str, dict[Citation, str]]
    nulls: dict[str, int]


def _read_verdicts(request: AgreementRequest) -> _Verdicts:
    from engine.statistics.agreement import BINARY
    from store.queries import judge_kinds, judgements

    if not Path(request.db).is_file():
        raise FieldError("db", "no database at {path}: give {db} the path of a store", path=request.db)
    experiment_id, run_ids = agreement_runs(request)
    chosen = tuple(dict.fromkeys(request.judges))
    if chosen:
        kinds = judge_kinds(request.db)
        for judge in chosen:
            if judge not in kinds:
                known = ", ".join(sorted(kinds)) or "none yet"
                raise UserError(f"unknown judge '{judge}' (judges in the store: {known})")
    rows = judgements(request.db, run_ids, chosen or None)
    if not rows:
        what = f"experiment {experiment_id}" if experiment_id else "these runs"
        raise WordedError("no verdicts on {what}: {judge_first}", what=what)

    verdicts: dict[str, dict[Citation, str]] = {}
    kind: dict[str, str] = {}
    nulls: dict[str, int] = {}
    for r in rows:
        kind[r.judge] = r.kind
        verdicts.setdefault(r.judge, {})
        nulls.setdefault(r.judge, 0)
        if r.attributable is None:
            nulls[r.judge] += 1
        else:
            verdicts[r.judge][(r.run_id, r.item_id, r.position)] = BINARY[0] if r.attributable else BINARY[1]
    names = tuple(j for j in chosen if j in kind) if chosen else tuple(sorted(kind))
    return _Verdicts(experiment_id, run_ids, names, kind, verdicts, nulls)


def agreement(request: AgreementRequest) -> Agreement:
    """Every agreement statistic of the judges of these runs (see the module's docstring)."""
    from engine.statistics.agreement import BINARY, against_human, pair_agreement, panel_agreement, ppi_rate

    read = _read_verdicts(request)
    experiment_id, run_ids, names, kind, verdicts = read.experiment_id, read.run_ids, read.names, read.kind, read.verdicts
    counts = tuple(JudgeCount(j, kind[j], len(verdicts[j]), read.nulls[j]) for j in names)

    pairs = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            both = [c for c in verdicts[a] if c in verdicts[b]]
            pairs.append(PairRow(a, b, pair_agreement([verdicts[a][c] for c in both], [verdicts[b][c] for c in both],
                                                      categories=BINARY)))
    seated = tuple(j for j in names if verdicts[j])
    citations = sorted(set().union(*(verdicts[j].keys() for j in seated)))
    panel = panel_agreement([[verdicts[j].get(c) for j in seated] for c in citations], categories=BINARY)

    humans = [j for j in names if kind[j] == "human"]
    models = [j for j in names if kind[j] != "human"]
    scored, corrected = [], []
    for judge in models:
        for human in humans:
            both = [c for c in verdicts[judge] if c in verdicts[human]]
            scored.append(HumanRow(judge, human, against_human([verdicts[judge][c] for c in both],
                                                               [verdicts[human][c] for c in both])))
            rest = [c for c in verdicts[judge] if c not in verdicts[human]]
            if both and rest:  # the human labelled a part of what the judge judged
                corrected.append(PpiRow(judge, human, ppi_rate(
                    [verdicts[human][c] == BINARY[0] for c in both],
                    [verdicts[judge][c] == BINARY[0] for c in both],
                    [verdicts[judge][c] == BINARY[0] for c in rest])))
    return Agreement(experiment_id, run_ids, counts, tuple(pairs), panel, tuple(scored), tuple(corrected),
                     tuple(j for j in names if j not in seated))


@dataclass(frozen=True)
class Disagreement:
    """A cited document two judges gave different verdicts on, with every judge's verdict on it
    (None: that judge gave none) and the document as shown."""

    run_id: str
    item_id: str
    position: int
    verdicts: tuple[tuple[str, str | None], ...]  # (judge, attributable | not_attributable | None), judge order
    doc_id: str | None
    title: str | None
    text: str | None  # its first words (DISAGREEMENT_TEXT_CHARS characters)


DISAGREEMENT_TEXT_CHARS = 200


def disagreements(request: AgreementRequest, judge_a: str, judge_b: str, *,
                  limit: int | None = None) -> tuple[tuple[Disagreement, ...], int]:
    """(the first `limit` citations judge_a and judge_b disagree on, in run, item and position
    order; how many there are in all). UserError for a judge not among the runs' judges."""
    from store.queries import cited_documents

    read = _read_verdicts(request)
    for judge in (judge_a, judge_b):
        if judge not in read.kind:
            listed = ", ".join(read.names)
            raise UserError(f"judge '{judge}' gave no verdict on these runs (their judges: {listed})")
    if judge_a == judge_b:
        raise UserError("choose two different judges")
    a, b = read.verdicts[judge_a], read.verdicts[judge_b]
    differ = [c for c in a if c in b and a[c] != b[c]]
    shown = differ if limit is None else differ[:limit]
    docs = cited_documents(request.db, shown, DISAGREEMENT_TEXT_CHARS)
    out = []
    for c in shown:
        doc = docs.get(c)
        out.append(Disagreement(c[0], c[1], c[2], tuple((j, read.verdicts[j].get(c)) for j in read.names),
                                doc.doc_id if doc else None, doc.title if doc else None, doc.text if doc else None))
    return tuple(out), len(differ)
