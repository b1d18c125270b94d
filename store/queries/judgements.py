"""Judges and their verdicts (migration 019): what `import-labels` checks labels against, and the
`judgements` view that `agreement` reads."""

from __future__ import annotations

from dataclasses import dataclass

from store.db import DbLike
from store.queries._read import fetch, marks, reading


@dataclass(frozen=True)
class Judgement:
    """One judge's verdict on one cited document of one answer; `attributable` is None where the
    judge gave no verdict (an unparsed output)."""

    run_id: str
    item_id: str
    position: int
    judge: str
    kind: str  # llm | nli | human
    attributable: bool | None


@dataclass(frozen=True)
class CitedAnswer:
    """A stored answer as imported labels are checked against it."""

    shown_doc_ids: tuple[str, ...]  # [1] is the first
    cited: frozenset[int]  # the numbers the answer cites (citations.position), shown or not


@dataclass(frozen=True)
class LabelRun:
    """A run labels may name, by id or as its experiment's mode."""

    run_id: str
    experiment_id: str
    experiment_name: str | None
    mode: str


def judgements(db: DbLike, run_ids: list[str] | tuple[str, ...],
               judges: list[str] | tuple[str, ...] | None = None) -> tuple[Judgement, ...]:
    """Every verdict of the `judgements` view on these runs (of these judges; None: all), in a
    stable order (run, item, position, judge)."""
    if not run_ids:
        return ()
    sql = f"SELECT run_id, item_id, position, judge, kind, attributable FROM judgements WHERE run_id IN ({marks(run_ids)})"
    params = list(run_ids)
    if judges:
        sql += f" AND judge IN ({marks(judges)})"
        params += list(judges)
    return fetch(db, sql + " ORDER BY run_id, item_id, position, judge", params, into=Judgement)


def label_runs(db: DbLike) -> tuple[LabelRun, ...]:
    """Every run, with its experiment's name: what a labels file may name."""
    return fetch(db, "SELECT r.run_id, r.experiment_id, e.name, r.rag_mode FROM runs r "
                     "LEFT JOIN experiments e USING (experiment_id) ORDER BY r.created_utc, r.run_id", into=LabelRun)


def cited_answers(db: DbLike, run_ids: list[str] | tuple[str, ...]) -> dict[tuple[str, str], CitedAnswer]:
    """(run, item) -> the answer's shown documents and cited numbers, for these runs."""
    if not run_ids:
        return {}
    with reading(db) as conn:
        rows = conn.execute(
            "SELECT g.run_id, g.item_id, g.shown_doc_ids, "
            "       list(c.position) FILTER (WHERE c.position IS NOT NULL) "
            f"FROM generations g LEFT JOIN citations c USING (run_id, item_id) WHERE g.run_id IN ({marks(run_ids)}) "
            "GROUP BY g.run_id, g.item_id, g.shown_doc_ids",
            list(run_ids),
        ).fetchall()
    return {(run_id, item_id): CitedAnswer(tuple(shown or ()), frozenset(cited or ()))
            for run_id, item_id, shown, cited in rows}


def judge_kinds(db: DbLike) -> dict[str, str]:
    """judge -> kind for every judge the store knows: the `judges` table, and the judges of
    verifications stored before migration 019 (kind 'llm')."""
    rows = fetch(db, "SELECT judge, kind FROM judges UNION ALL "
                     "SELECT DISTINCT judge_model, 'llm' FROM verifications "
                     "WHERE judge_model NOT IN (SELECT judge FROM judges)")
    return {judge: kind for judge, kind in rows}


def stored_labels(db: DbLike, judge: str, run_ids: list[str] | tuple[str, ...]) -> dict[tuple[str, str, int], str]:
    """(run, item, position) -> label of what `judge` has labelled on these runs already."""
    if not run_ids:
        return {}
    rows = fetch(db, f"SELECT run_id, item_id, position, label FROM judge_labels WHERE judge = ? "
                     f"AND run_id IN ({marks(run_ids)})", [judge, *run_ids])
    return {(r, i, int(p)): label for r, i, p, label in rows}


@dataclass(frozen=True)
class CitedDocument:
    """A cited document as the Judges tab lists a disagreement on it: its id, title and first words."""

    run_id: str
    item_id: str
    position: int
    doc_id: str | None  # None: the number was not shown (out of range)
    title: str | None
    text: str | None  # its first `chars` characters


def cited_documents(db: DbLike, keys: list[tuple[str, str, int]] | tuple[tuple[str, str, int], ...],
                    chars: int = 200) -> dict[tuple[str, str, int], CitedDocument]:
    """(run, item, position) -> the document shown there, read from the run's dataset items."""
    if not keys:
        return {}
    wanted = [{"run_id": r, "item_id": i, "position": int(p)} for r, i, p in dict.fromkeys(keys)]
    rows = fetch(
        db,
        "WITH k AS (SELECT unnest(?::STRUCT(run_id VARCHAR, item_id VARCHAR, position INTEGER)[], recursive := true)), "
        "s AS (SELECT k.run_id, k.item_id, k.position, g.shown_doc_ids[k.position] AS doc_id, r.dataset_sha "
        "      FROM k JOIN generations g USING (run_id, item_id) JOIN runs r USING (run_id)), "
        "d AS (SELECT s.*, list_filter(i.documents, lambda x: x.id = s.doc_id)[1] AS doc FROM s "
        "      LEFT JOIN items i ON i.dataset_sha = s.dataset_sha AND i.item_id = s.item_id) "
        "SELECT run_id, item_id, position, doc_id, doc.title, left(doc.text, ?) FROM d",
        [wanted, chars], into=CitedDocument)
    return {(d.run_id, d.item_id, d.position): d for d in rows}
