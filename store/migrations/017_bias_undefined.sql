-- 017_bias_undefined: the bias view (store/views.sql) gives the arithmetic of CAS and CAB and the
-- inputs of engine/statistics/bias.py's test, no longer a t-interval, t-test or direction of its own:
-- value is NULL with undefined_reason where no answer of either run cites a shown
-- document, beside n_cite_a, n_cite_b, n_differ, mean_diff, sd_diff and differences.
-- Do not change what this file does once released: add NNN_name.sql files instead.
-- Edited since release (18c5200: comments only, the paths of moved modules).
--
-- bias_rows (013) keeps the view's rows, so it takes the view's new columns. Its rows are dropped
-- with it (013: a change to how bias computes must empty it); the writer keeps them again as runs
-- complete or merge, and readers use the view meanwhile (store/kept_metrics.py). Not refilled
-- here: this file runs before views.sql replaces the view (store/migrations/__init__.py).
DROP TABLE IF EXISTS bias_rows;
CREATE TABLE bias_rows(
  experiment_id VARCHAR, model VARCHAR, dataset VARCHAR, metadata_type VARCHAR, measure VARCHAR, metric VARCHAR,
  value DOUBLE,              -- NULL where undefined_reason says why
  n BIGINT,
  n_a BIGINT,                -- generations of run_a and run_b: the row is used while they are unchanged
  n_b BIGINT,
  n_cite_a BIGINT,           -- paired items whose answer cites a shown document, in run_a / run_b
  n_cite_b BIGINT,
  undefined_reason VARCHAR,
  n_differ BIGINT,           -- engine/statistics/bias.py's test reads these four
  mean_diff DOUBLE,
  sd_diff DOUBLE,
  differences DOUBLE[],
  run_a VARCHAR, run_b VARCHAR,
  computed_utc TIMESTAMP
);
