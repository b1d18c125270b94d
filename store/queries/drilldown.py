"""Query drill-down (/query_detail): one item of one experiment across its modes, for the
app's drill-down and its navigation.

Every lookup is keyed by run_id (and item_id) first, so its cost does not grow with the store:
generations, citations and items are read through their primary keys, and query_metrics is
filtered with `run_id IN (?, ...)` and `item_id = ?`, which DuckDB pushes into the view.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import duckdb

from engine.errors import UserError
from engine.types import MODES
from store.queries._read import RESOLVE_EXPERIMENT, Readable, marks, reading

# Navigation filters of `item_ids`: citations changed between any two modes, or base vs cf.
CHANGED_FILTERS = ("modes", "base_cf")


@dataclass(frozen=True)
class QueryDocument:
    """One document of the item, in the dataset's ranked order."""

    rank: int  # 1-based position in the dataset's ranked list
    doc_id: str
    title: str | None
    text: str
    relevant: bool  # a missing flag counts as not relevant, as in query_metrics


@dataclass(frozen=True)
class QueryCitation:
    """One [n] mark of an answer, in order of appearance."""

    index: int  # from 0
    position: int  # n, 1-based as shown
    doc_id: str | None  # None when n was not shown
    relevant: bool | None
    probability: float | None  # None when not recorded (imported answers)


@dataclass(frozen=True)
class TokenAlternative:
    """One of the top alternatives recorded at a generation step."""

    token: str
    logprob: float | None  # None for a zero-probability alternative (JSON has no -inf)


@dataclass(frozen=True)
class QueryToken:
    """One generated token with its raw log-prob and, when recorded, the top alternatives."""

    step: int
    token: str
    logprob: float | None
    top: tuple[TokenAlternative, ...]


@dataclass(frozen=True)
class ModeMetrics:
    """query_metrics of one answer; exact_match is None when the item has no usable gold."""

    precision: float
    recall: float
    f1: float
    exact_match: float | None


@dataclass(frozen=True)
class ModeDetail:
    """One mode's run and its answer to the item (answer None when the run has not reached it)."""

    mode: str
    run_id: str
    status: str
    label_a: str | None  # the metadata labels as the prompt writes them; None without a type
    label_b: str | None
    labels: dict[str, str]  # doc_id -> label shown after the document; empty for vanilla
    positions: dict[str, int]  # doc_id -> 1-based shown position
    answer: str | None
    finish_reason: str | None
    citations: tuple[QueryCitation, ...]
    tokens: tuple[QueryToken, ...]
    metrics: ModeMetrics | None
    # The prompt text the model was given for this item (engine.prompting.prompts.build_prompt's, as the
    # runner stored it) and the run's model. Last, with defaults: tests build ModeDetail by keyword.
    prompt: str | None = None
    model: str | None = None

    @property
    def cited_doc_ids(self) -> frozenset[str]:
        """The shown documents this answer cites (out-of-range numbers name none)."""
        return frozenset(c.doc_id for c in self.citations if c.doc_id is not None)

    def citation_probability(self, doc_id: str) -> float | None:
        """The highest recorded probability among this answer's citations of doc_id."""
        values = [c.probability for c in self.citations if c.doc_id == doc_id and c.probability is not None]
        return max(values) if values else None


@dataclass(frozen=True)
class QueryDetail:
    """One item of an experiment side by side across its modes (MODES order)."""

    experiment_id: str
    item_id: str
    question: str
    gold_answers: tuple[str, ...]
    documents: tuple[QueryDocument, ...]  # ranked order
    modes: tuple[ModeDetail, ...]  # per mode, the newest complete-or-running run

    def mode(self, name: str) -> ModeDetail | None:
        """The detail of one mode, or None when the experiment has no such run."""
        return next((m for m in self.modes if m.mode == name), None)


def _shown_runs(conn: duckdb.DuckDBPyConnection, reference: str) -> tuple[str, list[tuple]] | None:
    """The experiment id and, per mode in MODES order, its newest complete-or-running run:
    (run_id, rag_mode, status, dataset_sha, config_json, model)."""
    found = conn.execute(RESOLVE_EXPERIMENT, {"ref": reference}).fetchone()
    if not found:
        return None
    rows = conn.execute(
        "SELECT run_id, rag_mode, status, dataset_sha, config_json, model FROM runs "
        "WHERE experiment_id = ? AND status IN ('complete', 'running') ORDER BY created_utc, run_id",
        [found[0]],
    ).fetchall()
    newest = {row[1]: row for row in rows}  # oldest first: the newest of each mode wins
    return found[0], [newest[mode] for mode in MODES if mode in newest]


def metadata_labels(config_json: str | None) -> tuple[str | None, str | None]:
    """label_a and label_b of a run's stored prompt configuration (older runs kept it at the top)."""
    config = json.loads(config_json) if config_json else {}
    meta = (config.get("prompt") or {}).get("metadata") or config.get("metadata") or {}
    return meta.get("label_a"), meta.get("label_b")


def shown_labels(mode: str, label_a: str | None, label_b: str | None,
                  shown: list[str], relevant: dict[str, bool]) -> dict[str, str]:
    """The label after each shown document, as engine.prompting.prompts writes it: relevant documents
    get label A in base and label B in cf, the others the opposite; vanilla shows none."""
    if mode not in ("base", "cf") or label_a is None or label_b is None:
        return {}
    relevant_gets_a = mode == "base"
    return {d: label_a if relevant.get(d, False) == relevant_gets_a else label_b for d in shown}


def query_detail(db: Readable, experiment: str, item_id: str) -> QueryDetail | None:
    """One item of an experiment (id or name) across its modes; None if either is unknown or
    no shown run of the experiment holds the item."""
    with reading(db) as conn:
        shown = _shown_runs(conn, experiment)
        if shown is None or not shown[1]:
            return None
        experiment_id, runs = shown
        ids = [run[0] for run in runs]
        generations = {
            row[0]: row[1:]
            for row in conn.execute(
                "SELECT run_id, answer, shown_doc_ids, finish_reason, tokens, logprobs, top_logprobs, prompt, "
                f"shown_labels FROM generations WHERE run_id IN ({marks(ids)}) AND item_id = ?",
                [*ids, item_id],
            ).fetchall()
        }
        if not generations:
            return None
        sha = next(run[3] for run in runs if run[0] in generations)
        item = conn.execute(
            "SELECT question, answers, documents FROM items WHERE dataset_sha = ? AND item_id = ?",
            [sha, item_id],
        ).fetchone()
        if item is None:
            return None
        citations: dict[str, list[QueryCitation]] = {}
        for run_id, *cite in conn.execute(
            "SELECT run_id, citation_index, position, doc_id, relevant, probability FROM citations "
            f"WHERE run_id IN ({marks(ids)}) AND item_id = ? ORDER BY run_id, citation_index",
            [*ids, item_id],
        ).fetchall():
            citations.setdefault(run_id, []).append(QueryCitation(*cite))
        metrics = {
            row[0]: ModeMetrics(*row[1:])
            for row in conn.execute(
                # Placeholders, not IN (SELECT unnest(...)): see bias_inputs.
                "SELECT run_id, precision, recall, f1, exact_match FROM query_metrics "
                f"WHERE run_id IN ({marks(ids)}) AND item_id = ?",
                [*ids, item_id],
            ).fetchall()
        }
    question, answers, documents = item
    docs = tuple(
        QueryDocument(rank, d["id"], d["title"], d["text"], bool(d["relevant"]))
        for rank, d in enumerate(documents, start=1)
    )
    relevant: dict[str, bool] = {}
    for d in docs:  # a repeated id is relevant if any copy is, as in query_metrics
        relevant[d.doc_id] = relevant.get(d.doc_id, False) or d.relevant
    modes = []
    for run_id, mode, status, _sha, config_json, model in runs:
        label_a, label_b = metadata_labels(config_json)
        answer, shown_ids, finish, tokens, logprobs, top_json, prompt, stored_labels = generations.get(
            run_id, (None, [], None, [], [], None, None, None))
        shown_ids = list(shown_ids or [])
        if stored_labels is not None:  # as the prompt showed them (migration 014): the battery's too
            labels = {d: label for d, label in zip(shown_ids, stored_labels, strict=True) if label is not None}
        else:
            labels = shown_labels(mode, label_a, label_b, shown_ids, relevant)
        modes.append(ModeDetail(
            mode=mode,
            run_id=run_id,
            status=status,
            label_a=label_a,
            label_b=label_b,
            labels=labels,
            # The first occurrence wins, as a repeated id's [n] resolves to its first position.
            positions={d: n for n, d in reversed(list(enumerate(shown_ids, start=1)))},
            answer=answer,
            finish_reason=finish,
            citations=tuple(citations.get(run_id, ())),
            tokens=_tokens(tokens or [], logprobs or [], top_json),
            metrics=metrics.get(run_id),
            prompt=prompt,
            model=model,
        ))
    return QueryDetail(experiment_id, item_id, question, tuple(answers or ()), docs, tuple(modes))


def _tokens(tokens: list[str], logprobs: list[float | None], top_json: str | None) -> tuple[QueryToken, ...]:
    """Tokens zipped with their log-probs and the per-step alternatives (JSON, or NULL)."""
    top = json.loads(top_json) if top_json else []
    return tuple(
        QueryToken(
            step,
            token,
            logprobs[step] if step < len(logprobs) else None,
            tuple(TokenAlternative(a.get("token", ""), a.get("logprob")) for a in (top[step] or []))
            if step < len(top) else (),
        )
        for step, token in enumerate(tokens)
    )


def item_ids(db: Readable, experiment: str, search: str | None = None, changed: str | None = None) -> tuple[str, ...] | None:
    """The item ids of an experiment (id or name) in the dataset's order (as its items were stored;
    the order answers are written follows the generator's length-sorted batches); None if
    the experiment is unknown.

    search keeps items whose question or item id contains it (case-insensitive, literal text);
    changed keeps items whose cited document sets differ between any two modes that answered
    them ("modes"), or between base and cf ("base_cf", items both answered).
    """
    if changed is not None and changed not in CHANGED_FILTERS:
        raise UserError(f"unknown filter '{changed}' (choose from {', '.join(CHANGED_FILTERS)})")
    with reading(db) as conn:
        shown = _shown_runs(conn, experiment)
        if shown is None:
            return None
        runs = shown[1]
        if not runs:
            return ()
        by_mode = {run[1]: run[0] for run in runs}
        rows = conn.execute(
            """
            WITH gens AS (
              SELECT g.run_id, g.item_id
              FROM generations g WHERE g.run_id IN (SELECT unnest($ids))),
            cites AS (
              SELECT run_id, item_id, list_sort(list_distinct(list(doc_id))) AS docs
              FROM citations WHERE run_id IN (SELECT unnest($ids)) GROUP BY run_id, item_id),
            per AS (
              SELECT g.*, coalesce(c.docs, []::VARCHAR[]) AS docs
              FROM gens g LEFT JOIN cites c USING (run_id, item_id))
            SELECT p.item_id
            FROM per p JOIN items i ON i.dataset_sha = $sha AND i.item_id = p.item_id
            GROUP BY p.item_id
            HAVING ($search IS NULL OR contains(lower(any_value(i.question)), lower($search))
                    OR contains(lower(p.item_id), lower($search)))
               AND ($changed IS NULL
                    OR $changed = 'modes' AND count(DISTINCT p.docs) > 1
                    OR $changed = 'base_cf'
                       AND any_value(p.docs) FILTER (WHERE p.run_id = $base) IS NOT NULL
                       AND any_value(p.docs) FILTER (WHERE p.run_id = $cf) IS NOT NULL
                       AND any_value(p.docs) FILTER (WHERE p.run_id = $base)
                           <> any_value(p.docs) FILTER (WHERE p.run_id = $cf))
            ORDER BY min(i.rowid), p.item_id
            """,
            {
                "ids": [run[0] for run in runs],
                "sha": runs[0][3],
                "search": search or None,
                "changed": changed,
                "base": by_mode.get("base"),
                "cf": by_mode.get("cf"),
            },
        ).fetchall()
    return tuple(row[0] for row in rows)
