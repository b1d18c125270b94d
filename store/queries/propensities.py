"""Citation propensities (migration 015): what `python -m engine propensity` reads before it
probes (the experiment's runs, and per item the vanilla answer with the base and cf prompts)
and the rows it stored."""

from __future__ import annotations

from dataclasses import dataclass

from store.db import DbLike
from store.queries._read import RESOLVE_EXPERIMENT, fetch, reading


@dataclass(frozen=True)
class ProbeRun:
    """One run of the experiment: its mode, the model as stored, and whether a server answered."""

    run_id: str
    rag_mode: str
    model: str
    served: bool


@dataclass(frozen=True)
class ProbeItem:
    """One item's vanilla answer and the base and cf prompts (None where that mode has no
    answer or no stored prompt), with the shown documents of each mode and their relevance."""

    item_id: str
    answer: str
    shown: tuple[str, ...]  # the vanilla run's shown_doc_ids
    base_prompt: str | None
    base_shown: tuple[str, ...] | None
    cf_prompt: str | None
    cf_shown: tuple[str, ...] | None
    relevant: tuple[bool, ...]  # per vanilla-shown document (a repeated id is relevant if any copy is)


def probe_runs(db: DbLike, reference: str) -> tuple[str, tuple[ProbeRun, ...]] | None:
    """The experiment `reference` names (id or name) and its runs, newest first per mode; None
    when the store has no such experiment."""
    with reading(db) as conn:
        found = conn.execute(RESOLVE_EXPERIMENT, {"ref": reference}).fetchall()
        if not found:
            return None
        experiment_id = found[0][0]
        rows = conn.execute(
            "SELECT run_id, rag_mode, model, json_extract(config_json, '$.served') IS NOT NULL "
            "AND json_type(config_json, '$.served') <> 'NULL' "
            "FROM runs WHERE experiment_id = ? ORDER BY created_utc DESC, run_id", [experiment_id]).fetchall()
    return experiment_id, tuple(ProbeRun(r, m, model, bool(s)) for r, m, model, s in rows)


def probe_items(db: DbLike, vanilla: str, base: str, cf: str) -> tuple[ProbeItem, ...]:
    """Every answer of the `vanilla` run (run ids), in the order it stored them, with the same
    item's prompts and shown documents in the `base` and `cf` runs."""
    rows = fetch(
        db,
        "SELECT v.item_id, v.answer, v.shown_doc_ids, b.prompt, b.shown_doc_ids, c.prompt, c.shown_doc_ids, "
        "       i.documents "
        "FROM generations v JOIN runs r ON r.run_id = v.run_id "
        "JOIN items i ON i.dataset_sha = r.dataset_sha AND i.item_id = v.item_id "
        "LEFT JOIN generations b ON b.run_id = $base AND b.item_id = v.item_id "
        "LEFT JOIN generations c ON c.run_id = $cf AND c.item_id = v.item_id "
        "WHERE v.run_id = $vanilla ORDER BY v.created_utc, v.item_id",
        {"vanilla": vanilla, "base": base, "cf": cf},
    )
    items = []
    for item_id, answer, shown, base_prompt, base_shown, cf_prompt, cf_shown, documents in rows:
        relevant: dict[str, bool] = {}
        for d in documents:
            relevant[d["id"]] = relevant.get(d["id"], False) or bool(d["relevant"])
        shown_ids = tuple(shown or ())
        items.append(ProbeItem(
            item_id, answer, shown_ids,
            base_prompt, None if base_shown is None else tuple(base_shown),
            cf_prompt, None if cf_shown is None else tuple(cf_shown),
            tuple(relevant.get(d, False) for d in shown_ids),
        ))
    return tuple(items)


def stored_propensities(db: DbLike, experiment_id: str, probe_model: str) -> tuple[tuple, ...]:
    """The stored rows of one experiment and probe model: (rag_mode, item_id, site_index,
    position, logprob, probability), ordered."""
    return fetch(
        db,
        "SELECT rag_mode, item_id, site_index, position, logprob, probability FROM citation_propensities "
        "WHERE experiment_id = ? AND probe_model = ? ORDER BY rag_mode, item_id, site_index, position",
        [experiment_id, probe_model],
    )
