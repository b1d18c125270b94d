-- 024_item_metrics_current: the Bias report's per-item metrics read from the rows the writer
-- kept (item_metric_rows, migration 023) instead of computing query_metrics for the experiment's
-- runs again, and kept rows told current by their run's content, not by its count:
--   item_metric_rows.cites_in_range  whether the answer cites a document it was shown
--                                    (query_metrics' n_citations > out_of_range_citations; the
--                                    compare_item_metrics view gives the same column)
--   item_metric_runs                 per run whose rows are kept: how many rows were kept, and the
--                                    count and order-free hash of its generations and citations
--                                    then (store.derived.run_contents). Readers use a run's kept
--                                    rows only while they are all there and its content is still
--                                    that: a count alone missed citations deleted or rewritten by hand.
-- Rows kept before this migration have no item_metric_runs row, so they are not used until the
-- run's next keep (its completion, a merge, keep_all).
-- Append-only: never edit this file once released; add NNN_name.sql files instead.
ALTER TABLE item_metric_rows ADD COLUMN IF NOT EXISTS cites_in_range BOOLEAN;
CREATE TABLE IF NOT EXISTS item_metric_runs(
  run_id VARCHAR PRIMARY KEY, n_rows BIGINT, content VARCHAR, computed_utc TIMESTAMP
);
