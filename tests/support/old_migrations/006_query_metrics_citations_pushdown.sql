-- 006_query_metrics_citations_pushdown: query_metrics, same columns and values, with the
-- citations aggregated through the generations they belong to, so that a run_id filter (the
-- bias tab and `engine bias` read three runs) reaches every table.
-- Append-only: never edit this file once released; replace the view in a later NNN_name.sql.
--
-- In 005 the citations were grouped per (run, item) in a CTE of their own and LEFT JOINed to the
-- generations; DuckDB pushes a filter into a LEFT JOIN's left side only, so reading the metrics
-- of one experiment grouped every citation of the store and computed the gold positions of every
-- generation before the filter applied (EXPLAIN ANALYZE: 1,000,000 rows through each, 1.5-1.8 s
-- for three runs of a 1M-generation store; scripts/bench_app.py). Here each generation LEFT JOINs
-- its own citations and the result is grouped by the generation's keys: the filter goes below
-- the group to generations, and the join's dynamic filters skip the citations' row groups of
-- other runs (0.16-0.33 s for the same three runs, ~2 of 9 row groups read). Whole-store reads
-- get faster too (every run's f1: 1.7 s against 2.5 s).
-- Semantics are 005's: a generation without citations has cited [], n_citations 0 and NULL
-- probabilities; citations of a generation that does not exist are ignored (inner side).
-- tests/test_query_detail.py checks this view against 002's on edge cases, and
-- tests/test_views.py checks it against engine/metrics.py.

CREATE OR REPLACE VIEW query_metrics AS
WITH gen AS NOT MATERIALIZED (
  SELECT g.run_id, g.item_id, g.answer, g.shown_doc_ids, len(g.shown_doc_ids) AS n_shown, r.dataset_sha
  FROM generations g JOIN runs r USING (run_id)
),
base AS NOT MATERIALIZED (
  SELECT g.run_id, g.item_id, g.answer, g.n_shown,
         coalesce(CAST(list_filter(range(1, g.n_shown + 1), lambda p:
           coalesce(list_bool_or(list_transform(list_filter(i.documents, lambda d: d.id = g.shown_doc_ids[p]),
                                                lambda d: coalesce(d.relevant, false))), false)) AS INTEGER[]),
                  []::INTEGER[]) AS gold,
         i.answers AS golds
  FROM gen g
  LEFT JOIN items i ON i.dataset_sha = g.dataset_sha AND i.item_id = g.item_id
),
cites AS NOT MATERIALIZED (
  -- One row per generation: its citations joined on, counted and averaged per (run, item).
  -- Grouped on the generation's own keys, so a run_id or item_id filter on the view reaches
  -- generations through the group and the join's left side, and citations through the join's
  -- dynamic filters. Unmatched rows (no citations) carry NULLs: citation_index, a key column,
  -- is NULL only there, and a NULL position satisfies no FILTER below.
  SELECT b.run_id, b.item_id,
         any_value(b.answer) AS answer, any_value(b.gold) AS gold, any_value(b.golds) AS golds,
         list_sort(list_distinct(list(c.position) FILTER (WHERE c.citation_index IS NOT NULL))) AS cited,
         count(c.citation_index) AS n_citations,
         count(*) FILTER (WHERE c.position < 1 OR c.position > b.n_shown) AS out_of_range_citations,
         avg(c.probability) FILTER (WHERE list_contains(b.gold, c.position)) AS p_relevant,
         avg(c.probability) FILTER (WHERE c.position BETWEEN 1 AND b.n_shown
                                      AND NOT list_contains(b.gold, c.position)) AS p_nonrelevant
  FROM base b LEFT JOIN citations c ON c.run_id = b.run_id AND c.item_id = b.item_id
  GROUP BY b.run_id, b.item_id
),
scored AS (
  SELECT run_id, item_id, coalesce(cited, []::INTEGER[]) AS cited, gold,
         len(list_intersect(coalesce(cited, []::INTEGER[]), gold)) AS hits,
         n_citations, out_of_range_citations, p_relevant, p_nonrelevant,
         normalize_answer(answer) AS answer_norm,
         normalize_squad(answer) AS answer_squad,
         normalized_tokens(normalize_squad(answer)) AS answer_tokens,
         golds,
         list_filter(list_transform(golds, lambda x: normalize_answer(x)), lambda x: x <> '') AS golds_norm,
         list_transform(golds, lambda x: normalize_squad(x)) AS golds_squad
  FROM cites
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
