"""Citation flips between two runs, counted in the store in one query.

`compare` shows five counts: documents shown in both runs of an item and cited by one run only,
split by whether they hold the answer, and how many (item, document) pairs both runs showed.
Reading every item's shown and cited lists into Python to pair them cost seconds per million
items; this query counts them where they lie. The definition is engine.statistics.flips'
citation_flips, which tests/store/queries/test_citation_flips_sql.py checks this against:

- the items are those both runs hold a generation for;
- shown in both: the distinct documents of A's shown_doc_ids that B's shown_doc_ids also hold;
- cited by a run: the distinct non-NULL citations.doc_id of its citations of the item (a NULL
  doc_id is a number no document was shown under);
- relevant: cited with citations.relevant true by either run (NULL counts as not).
"""

from __future__ import annotations

from store.queries._read import Readable, reading

# Shown in both: each document of A's list at its first position (list_position, 1-based, finds
# a NULL element as Python's `in` does, so a NULL in both lists counts once, as in
# citation_flips; list_distinct would drop it and costs more).
_CITATION_FLIPS = """
WITH shown AS (
  SELECT a.item_id,
         list_filter(a.shown_doc_ids, lambda d, i: list_position(a.shown_doc_ids, d) = i
                                                   AND list_position(b.shown_doc_ids, d) IS NOT NULL) AS docs
  FROM generations a JOIN generations b ON b.item_id = a.item_id
  WHERE a.run_id = $a AND b.run_id = $b
),
-- Documents one run cited and the other did not (when the two runs are one, none).
one_side AS (
  SELECT item_id, doc_id, bool_or(run_id = $a) AS by_a, coalesce(bool_or(relevant), false) AS relevant
  FROM citations
  WHERE run_id IN ($a, $b) AND doc_id IS NOT NULL
  GROUP BY item_id, doc_id
  HAVING bool_or(run_id = $a) <> bool_or(run_id = $b)
),
flips AS (
  SELECT o.by_a, o.relevant
  FROM one_side o JOIN shown s ON s.item_id = o.item_id
  WHERE list_contains(s.docs, o.doc_id)
)
SELECT (SELECT count(*) FILTER (WHERE by_a AND relevant) FROM flips),
       (SELECT count(*) FILTER (WHERE by_a AND NOT relevant) FROM flips),
       (SELECT count(*) FILTER (WHERE NOT by_a AND relevant) FROM flips),
       (SELECT count(*) FILTER (WHERE NOT by_a AND NOT relevant) FROM flips),
       (SELECT coalesce(sum(len(docs)), 0) FROM shown)
"""


def citation_flip_counts(db: Readable, run_a: str, run_b: str) -> tuple[int, int, int, int, int]:
    """engine.statistics.flips.CitationFlips' fields for runs A and B, in its order: cited by A
    only and relevant, A only not relevant, B only relevant, B only not relevant, and the (item,
    document) pairs shown in both runs."""
    with reading(db) as conn:
        row = conn.execute(_CITATION_FLIPS, {"a": run_a, "b": run_b}).fetchone()
    assert row is not None  # an aggregate of scalar subqueries: always one row
    a_rel, a_non, b_rel, b_non, shown = (int(v) for v in row)
    return a_rel, a_non, b_rel, b_non, shown
