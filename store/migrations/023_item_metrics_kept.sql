-- 023_item_metrics_kept: compare's per-item metrics (the compare_item_metrics view's rows), kept
-- by the writer when a run completes or is merged (store/kept_metrics.py), so that `compare` of
-- two runs of a million items reads them instead of computing query_metrics' text matching for
-- every answer again (~15 s a run at 1M). Readers use a run's kept rows only while they
-- are as many as its generations; other runs, and older stores (empty here until their runs are
-- completed again, merged, or keep_all runs), are read through the view as before.
-- Append-only: never edit this file once released; add NNN_name.sql files instead.
CREATE TABLE IF NOT EXISTS item_metric_rows(
  run_id VARCHAR, item_id VARCHAR,
  precision DOUBLE, recall DOUBLE, f1 DOUBLE, exact_match DOUBLE, squad_em DOUBLE, answer_recall DOUBLE,
  n_citations DOUBLE, cites_nothing DOUBLE, mean_probability DOUBLE,
  computed_utc TIMESTAMP
);
