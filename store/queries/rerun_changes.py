"""Which items cite other documents when the same configuration is run again (`run --reruns`).

A citation that changes between base and cf may be the label's doing, or the engine's: the
same prompt in another batch, or another sampling draw, can cite otherwise. A rerun answers the
same prompts again, so an item whose cited set differs between a run and a rerun of it
"changes on a rerun too": its flip between modes is no evidence of the label by itself.

A run's reruns are the runs of the same mode (complete or running) in the experiments whose runs
say `rerun.of` = the run's experiment. An item counts when some rerun holds it and that rerun's
set of cited documents (distinct, shown documents only) differs from the run's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from store.queries._read import Readable, reading

_RERUNS = """
SELECT o.run_id, r.run_id
FROM runs o JOIN runs r
  ON json_extract_string(r.config_json, '$.rerun.of') = o.experiment_id AND r.rag_mode = o.rag_mode
WHERE o.run_id IN (SELECT unnest($runs)) AND r.status IN ('complete', 'running')
ORDER BY o.run_id, r.run_id
"""

# Cited sets compared as sorted distinct lists: [] for an answer citing no shown document.
_CHANGED = """
WITH pairs AS (SELECT unnest($originals) AS original, unnest($reruns) AS rerun),
cited AS (
  SELECT run_id, item_id, list_sort(list_distinct(list(doc_id))) AS docs
  FROM citations
  WHERE run_id IN (SELECT original FROM pairs UNION SELECT rerun FROM pairs) AND doc_id IS NOT NULL
    AND ($item IS NULL OR item_id = $item)
  GROUP BY run_id, item_id
)
SELECT DISTINCT p.original, g.item_id
FROM pairs p
JOIN generations g ON g.run_id = p.original AND ($item IS NULL OR g.item_id = $item)
JOIN generations h ON h.run_id = p.rerun AND h.item_id = g.item_id
LEFT JOIN cited a ON a.run_id = p.original AND a.item_id = g.item_id
LEFT JOIN cited b ON b.run_id = p.rerun AND b.item_id = g.item_id
WHERE coalesce(a.docs, []::VARCHAR[]) <> coalesce(b.docs, []::VARCHAR[])
"""

_HELD = """
SELECT p.original, count(*)
FROM (SELECT unnest($originals) AS original, unnest($reruns) AS rerun) p
JOIN generations h ON h.run_id = p.rerun AND h.item_id = $item
GROUP BY p.original
"""


@dataclass(frozen=True)
class RerunChanges:
    """Of each asked run: its reruns, and the items whose citations differ in one of them."""

    reruns: dict[str, tuple[str, ...]]  # run id -> its reruns' run ids; () for a run never rerun
    changed: dict[str, frozenset[str]]  # run id -> items citing other documents in some rerun
    held: dict[str, int]  # with an item asked: run id -> how many of its reruns hold the item

    def any_rerun(self) -> bool:
        return any(self.reruns.values())

    def changes(self, run_id: str, item_id: str) -> bool:
        return item_id in self.changed.get(run_id, frozenset())


def rerun_changes(db: Readable, run_ids: Sequence[str], item_id: str | None = None) -> RerunChanges:
    """The reruns of each run in `run_ids` and the items (only `item_id`, when given) whose cited
    set differs between the run and one of its reruns, in one read transaction."""
    runs = list(dict.fromkeys(run_ids))
    with reading(db) as conn:
        found = conn.execute(_RERUNS, {"runs": runs}).fetchall()
        reruns = {run: tuple(r for o, r in found if o == run) for run in runs}
        changed: dict[str, set[str]] = {run: set() for run in runs}
        held: dict[str, int] = {}
        if found:
            pairs = {"originals": [o for o, _ in found], "reruns": [r for _, r in found], "item": item_id}
            for original, item in conn.execute(_CHANGED, pairs).fetchall():
                changed[original].add(item)
            if item_id is not None:
                held = {o: int(n) for o, n in conn.execute(_HELD, pairs).fetchall()}
    return RerunChanges(reruns, {run: frozenset(items) for run, items in changed.items()}, held)
