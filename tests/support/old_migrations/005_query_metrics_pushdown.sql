-- 005_query_metrics_pushdown: query_metrics, same columns and values, rewritten so that a
-- filter on run_id and item_id reaches the tables (the app's drill-down reads one item of one
-- experiment; scripts/bench_app.py times it at a million generations).
-- Append-only: never edit this file once released; replace the view in a later NNN_name.sql.
--
-- In 002 the generations CTE is read twice, so DuckDB materialised it whole before any filter,
-- and the relevance flags were unnested and grouped over every item of every dataset: reading
-- one item cost a scan of the store (EXPLAIN ANALYZE showed every generation and item read).
-- Here the CTEs are NOT MATERIALIZED, and gold positions come from the item's own documents
-- by list functions (a repeated document id is relevant if any copy is, as before), so an
-- item_id filter reaches generations, items and citations. No index is needed: those lookups
-- go through the primary keys and zone maps. Whole-run reads got faster too (the run_metrics
-- of 100 runs x 10,000 items: 25-30 s against 37-41 s, on a loaded 2-core machine).
-- tests/test_query_detail.py checks this view against 002's on edge cases, and
-- tests/test_views.py checks it against engine/metrics.py.

CREATE OR REPLACE VIEW query_metrics AS
WITH gen AS NOT MATERIALIZED (
  SELECT g.run_id, g.item_id, g.answer, g.shown_doc_ids, len(g.shown_doc_ids) AS n_shown, r.dataset_sha
  FROM generations g JOIN runs r USING (run_id)
),
base AS NOT MATERIALIZED (
  -- gold: the shown positions whose document the item marks relevant (any copy of a repeated id)
  SELECT g.run_id, g.item_id, g.answer, g.n_shown,
         coalesce(CAST(list_filter(range(1, g.n_shown + 1), lambda p:
           coalesce(list_bool_or(list_transform(list_filter(i.documents, lambda d: d.id = g.shown_doc_ids[p]),
                                                lambda d: coalesce(d.relevant, false))), false)) AS INTEGER[]),
                  []::INTEGER[]) AS gold,
         i.answers AS golds
  FROM gen g
  LEFT JOIN items i ON i.dataset_sha = g.dataset_sha AND i.item_id = g.item_id
),
cites AS (
  SELECT c.run_id, c.item_id,
         list_sort(list_distinct(list(c.position))) AS cited,
         count(*) AS n_citations,
         count(*) FILTER (WHERE c.position < 1 OR c.position > b.n_shown) AS out_of_range_citations,
         -- Out-of-range marks name no document, so they are in neither mean.
         avg(c.probability) FILTER (WHERE list_contains(b.gold, c.position)) AS p_relevant,
         avg(c.probability) FILTER (WHERE c.position BETWEEN 1 AND b.n_shown
                                      AND NOT list_contains(b.gold, c.position)) AS p_nonrelevant
  FROM citations c JOIN base b USING (run_id, item_id)
  GROUP BY c.run_id, c.item_id
),
scored AS (
  SELECT b.run_id, b.item_id, coalesce(c.cited, []::INTEGER[]) AS cited, b.gold,
         len(list_intersect(coalesce(c.cited, []::INTEGER[]), b.gold)) AS hits,
         coalesce(c.n_citations, 0) AS n_citations,
         coalesce(c.out_of_range_citations, 0) AS out_of_range_citations,
         c.p_relevant, c.p_nonrelevant,
         normalize_answer(b.answer) AS answer_norm,
         normalize_squad(b.answer) AS answer_squad,
         normalized_tokens(normalize_squad(b.answer)) AS answer_tokens,
         b.golds,
         list_filter(list_transform(b.golds, lambda x: normalize_answer(x)), lambda x: x <> '') AS golds_norm,
         list_transform(b.golds, lambda x: normalize_squad(x)) AS golds_squad
  FROM base b LEFT JOIN cites c USING (run_id, item_id)
)
SELECT
  run_id,
  item_id,
  cited,
  gold,
  CASE WHEN len(cited) = 0 THEN 0.0::DOUBLE ELSE hits / len(cited) END AS precision,
  CASE WHEN len(gold) = 0 THEN 0.0::DOUBLE ELSE hits / len(gold) END AS recall,
  CASE WHEN len(cited) + len(gold) = 0 THEN 0.0::DOUBLE ELSE 2 * hits / (len(cited) + len(gold)) END AS f1,
  CASE WHEN golds_norm IS NULL OR len(golds_norm) = 0 THEN NULL
       WHEN list_bool_or(list_transform(golds_norm, lambda x: contains(answer_norm, x))) THEN 1.0::DOUBLE
       ELSE 0.0::DOUBLE END AS exact_match,
  CASE WHEN golds IS NULL OR len(golds) = 0 THEN NULL
       WHEN list_contains(golds_squad, answer_squad) THEN 1.0::DOUBLE
       ELSE 0.0::DOUBLE END AS squad_em,
  CASE WHEN golds IS NULL OR len(golds) = 0 THEN NULL
       ELSE list_max(list_transform(golds_squad, lambda gs: squad_token_f1(answer_tokens, normalized_tokens(gs))))
  END AS token_f1,
  CASE WHEN golds_norm IS NULL OR len(golds_norm) = 0 THEN NULL
       ELSE len(list_filter(list_distinct(golds_norm), lambda x: contains(answer_norm, x)))
            / len(list_distinct(golds_norm)) END AS answer_recall,
  n_citations,
  out_of_range_citations,
  p_relevant,
  p_nonrelevant
FROM scored;
