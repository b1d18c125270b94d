-- 013_kept_values: (1) derived_values: values computed from an experiment's runs (the Bias tab's bias report,
-- its Table 2 rows), kept so that the tab's first request for an experiment does not redo the
-- 2,000-resample bootstrap and the bias view (2 s at 1M answers; scripts/bench_app.py).
-- Append-only: never edit this file once released; add NNN_name.sql files instead.
--
-- Only a cache (store/derived.py): a row is used while its `signature` equals the one computed
-- now from the experiment's runs (their rows, and a content hash of the chosen runs'
-- generations and citations) and the schema version, so an added, merged or resumed run, or a
-- migration that changes a view, makes the row unused; a missing or stale row costs time only.
-- IF NOT EXISTS: tests that take a store back to an older version drop only the tables they know.
CREATE TABLE IF NOT EXISTS derived_values(
  kind VARCHAR,            -- what the value is, with its format version (e.g. 'bias_report/1')
  experiment_id VARCHAR,
  key VARCHAR,             -- the request's parameters as JSON (resamples, seed ...)
  signature VARCHAR,       -- store/derived.py experiment_signature when computed
  value_json VARCHAR,
  computed_utc TIMESTAMP,
  PRIMARY KEY(kind, experiment_id, key)
);

-- Whole-store reads (`python -m engine report`, the paper's tables) at 1M answers: run_metrics
-- computes every metric's interval for every run (12-25 s), the bias view every experiment's
-- per-item differences. Both kept by the writer, as run_scores (007) is: store/kept_metrics.py
-- writes a run's run_metrics numbers and its experiment's bias rows when the run is marked
-- complete, and store.merge for every run it copies. Readers use a kept row only while the
-- counts it was computed from equal the runs' current counts of generations (and, for bias,
-- while its runs are still the pair the bias view chooses), and read the views otherwise.
-- A LATER MIGRATION THAT CHANGES HOW query_metrics, run_metric_summary OR bias COMPUTE THEIR
-- NUMBERS MUST EMPTY THESE TABLES (DELETE FROM run_metric_rows; DELETE FROM bias_rows): a row
-- whose counts still match would otherwise keep the old definition's numbers.

-- run_metrics' per-run numbers (its CTE `w`), for runs with answers.
CREATE TABLE IF NOT EXISTS run_metric_rows(
  run_id VARCHAR PRIMARY KEY,
  n_answers BIGINT,          -- the run's generations when computed
  n BIGINT,
  n_gold BIGINT,
  precision DOUBLE,
  precision_ci_low DOUBLE,
  precision_ci_high DOUBLE,
  recall DOUBLE,
  recall_ci_low DOUBLE,
  recall_ci_high DOUBLE,
  f1 DOUBLE,
  f1_ci_low DOUBLE,
  f1_ci_high DOUBLE,
  exact_match DOUBLE,
  exact_match_ci_low DOUBLE,
  exact_match_ci_high DOUBLE,
  squad_em DOUBLE,
  squad_em_ci_low DOUBLE,
  squad_em_ci_high DOUBLE,
  token_f1 DOUBLE,
  token_f1_ci_low DOUBLE,
  token_f1_ci_high DOUBLE,
  answer_recall DOUBLE,
  answer_recall_ci_low DOUBLE,
  answer_recall_ci_high DOUBLE,
  computed_utc TIMESTAMP
);

-- The bias view's rows of the pairs it chose when computed.
CREATE TABLE IF NOT EXISTS bias_rows(
  experiment_id VARCHAR, model VARCHAR, dataset VARCHAR, metadata_type VARCHAR, measure VARCHAR, metric VARCHAR,
  value DOUBLE, ci_low DOUBLE, ci_high DOUBLE, t DOUBLE, df BIGINT, p DOUBLE, n BIGINT,
  n_a BIGINT,                -- generations of run_a and run_b: the row is used while they are unchanged
  n_b BIGINT,
  direction VARCHAR, run_a VARCHAR, run_b VARCHAR,
  computed_utc TIMESTAMP
);
