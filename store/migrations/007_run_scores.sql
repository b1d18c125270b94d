-- 007_run_scores: per-run averages of query_metrics (precision, recall, f1, exact_match), cached
-- for the app's Runs tab, which otherwise computes them per answer on every page (4.8 s for the
-- first page of a 1M-generation store; scripts/bench_app.py).
-- Do not change what this file does once released: add NNN_name.sql files instead.
-- Edited since release (migration 018): the backfill reads query_metrics as store/views.sql
-- defines it now (the line `-- reads views:` below), not the view of the store's migrations; the
-- text as it shipped is tests/support/old_migrations/007_run_scores.sql.
--
-- A cache kept by the writer: store.run_store writes a run's row when it marks the run
-- complete, and store.merge for every run it copies (store/run_scores.py). Readers use a row
-- only while n_answers equals the run's current count of generations and compute the run live
-- otherwise, so a missing or stale row costs time, never correctness.
-- A LATER MIGRATION THAT CHANGES HOW query_metrics COMPUTES precision, recall, f1 OR exact_match
-- MUST RECOMPUTE THIS TABLE (as the backfill below does): a row whose count still matches would
-- otherwise keep the old definition's averages.

CREATE TABLE run_scores(
  run_id VARCHAR PRIMARY KEY,
  n_answers BIGINT,          -- generations the averages cover
  precision DOUBLE,          -- avg(query_metrics.precision); NULL when n_answers is 0
  recall DOUBLE,
  f1 DOUBLE,
  exact_match DOUBLE,        -- NULL also when no item has usable gold
  computed_utc TIMESTAMP
);

-- Backfill the complete runs (one pass over the view; running and failed runs are read live).
-- reads views: query_metrics
INSERT INTO run_scores
SELECT ru.run_id, coalesce(m.n, 0), m.p_avg, m.r_avg, m.f1_avg, m.em_avg, timezone('UTC', now())
FROM runs ru
LEFT JOIN (SELECT run_id, count(*) AS n, avg(precision) AS p_avg, avg(recall) AS r_avg, avg(f1) AS f1_avg,
                  avg(exact_match) AS em_avg
           FROM query_metrics GROUP BY run_id) m USING (run_id)
WHERE ru.status = 'complete';
