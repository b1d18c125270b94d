-- compare: two runs' per-item metrics paired by item id (issue 17), for the SQL tab and notebooks.
-- The same columns `python -m engine compare` reads (store/compare_reads.py); tests/test_compare.py
-- checks the two agree. Metrics are query_metrics', plus two per item:
--   cites_nothing     1.0 when the answer cites nothing, else 0.0
--   mean_probability  mean probability of its citations; NULL where none was recorded
--
--   compare_item_metrics      one row per stored answer (run_id, item_id) with those metrics
--   compare_runs(run_a, run_b)
--                             one row per item both runs hold: each metric in A (_a), in B (_b)
--                             and B - A (_diff). Items only one run holds are left out: count
--                             them with the example below. Items are paired by id whatever the
--                             datasets; compare the runs' dataset_sha first (the CLI refuses two
--                             datasets unless given --pair-by-id).
-- Example (the items that drive the F1 difference):
--   SELECT item_id, f1_a, f1_b, f1_diff FROM compare_runs('RUN_A', 'RUN_B') ORDER BY abs(f1_diff) DESC LIMIT 20;
-- Paired and left-out counts:
--   SELECT count(*) FILTER (WHERE a.item_id IS NOT NULL AND b.item_id IS NOT NULL) AS paired,
--          count(*) FILTER (WHERE b.item_id IS NULL) AS only_a, count(*) FILTER (WHERE a.item_id IS NULL) AS only_b
--   FROM (SELECT item_id FROM generations WHERE run_id = 'RUN_A') a
--   FULL JOIN (SELECT item_id FROM generations WHERE run_id = 'RUN_B') b USING (item_id);
-- The statistics (bootstrap intervals, exact McNemar, permutation test, Holm, TOST, power) are
-- the CLI's and the Python API's: engine.usecases.compare.

CREATE OR REPLACE VIEW compare_item_metrics AS
SELECT q.run_id, q.item_id, q.precision, q.recall, q.f1, q.exact_match, q.squad_em, q.answer_recall,
       CAST(q.n_citations AS DOUBLE) AS n_citations,
       CASE WHEN q.n_citations = 0 THEN 1.0 ELSE 0.0 END AS cites_nothing,
       p.mean_probability
FROM query_metrics q
LEFT JOIN (SELECT run_id, item_id, avg(probability) AS mean_probability FROM citations GROUP BY run_id, item_id) p
  USING (run_id, item_id);

CREATE OR REPLACE MACRO compare_runs(run_a, run_b) AS TABLE
SELECT a.item_id,
       a.precision AS precision_a, b.precision AS precision_b, b.precision - a.precision AS precision_diff,
       a.recall AS recall_a, b.recall AS recall_b, b.recall - a.recall AS recall_diff,
       a.f1 AS f1_a, b.f1 AS f1_b, b.f1 - a.f1 AS f1_diff,
       a.exact_match AS exact_match_a, b.exact_match AS exact_match_b, b.exact_match - a.exact_match AS exact_match_diff,
       a.squad_em AS squad_em_a, b.squad_em AS squad_em_b, b.squad_em - a.squad_em AS squad_em_diff,
       a.answer_recall AS answer_recall_a, b.answer_recall AS answer_recall_b,
       b.answer_recall - a.answer_recall AS answer_recall_diff,
       a.n_citations AS n_citations_a, b.n_citations AS n_citations_b, b.n_citations - a.n_citations AS n_citations_diff,
       a.cites_nothing AS cites_nothing_a, b.cites_nothing AS cites_nothing_b,
       b.cites_nothing - a.cites_nothing AS cites_nothing_diff,
       a.mean_probability AS mean_probability_a, b.mean_probability AS mean_probability_b,
       b.mean_probability - a.mean_probability AS mean_probability_diff
FROM (SELECT * FROM compare_item_metrics WHERE run_id = run_a) a
JOIN (SELECT * FROM compare_item_metrics WHERE run_id = run_b) b USING (item_id)
ORDER BY a.item_id;
