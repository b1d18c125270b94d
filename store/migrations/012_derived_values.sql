-- 012_derived_values: values computed from an experiment's runs (the Bias tab's bias report,
-- its Table 2 rows), kept so that the tab's first request for an experiment does not redo the
-- 2,000-resample bootstrap and the bias view (2 s at 1M answers; issue 21, scripts/bench_app.py).
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
