-- 028_answer_metrics: each answer's citation precision, recall and F1, and whether it cites a
-- document it was shown, kept by the writer in the transaction that writes the answer
-- (store/answer_metrics.py): a batch of a run (RunStore.write_batch, so `run`, a study and
-- `import`), answers copied from another run, a merge. The Bias report reads a run's rows from
-- here where the rows kept at its completion (item_metric_rows, 023/024) are not current: a run
-- still running, failed or resumed, a store whose kept rows were lost. Computing them through
-- query_metrics instead was most of the Bias page's computed path at a million answers.
--   answer_metrics      one row per answer (run_id, item_id): query_metrics' precision, recall,
--                       f1, and n_citations > out_of_range_citations as cites_in_range
--   answer_metric_runs  per run, the content (store.derived.run_contents: the count and order-free
--                       hash of its generations and citations) its rows were kept from; readers
--                       use a run's rows only while its content is still that, so answers or
--                       citations written by a writer that keeps nothing (SQL typed by hand)
--                       send the run back to query_metrics.
-- The backfill below keeps every answer already stored: 5.8 s wall, 4.3 s CPU and 0.41 GB peak
-- for a store of a million answers (scripts/bench_app.py's, on a 2-core machine at load 9.5).
-- Append-only: never edit this file once released; add NNN_name.sql files instead.
-- reads views: query_metrics
CREATE TABLE IF NOT EXISTS answer_metrics(
  run_id VARCHAR NOT NULL, item_id VARCHAR NOT NULL,
  precision DOUBLE, recall DOUBLE, f1 DOUBLE, cites_in_range BOOLEAN
);
CREATE TABLE IF NOT EXISTS answer_metric_runs(
  run_id VARCHAR PRIMARY KEY, content VARCHAR NOT NULL, computed_utc TIMESTAMP
);
-- Emptied first: a store rebuilt to an older version keeps these tables (tests undo migrations so).
DELETE FROM answer_metrics;
DELETE FROM answer_metric_runs;
INSERT INTO answer_metrics
SELECT run_id, item_id, precision, recall, f1, n_citations > out_of_range_citations
FROM query_metrics ORDER BY run_id, item_id;
-- The content string as store.derived.run_contents spells it (the same hashes, count:hash of the
-- generations, then of the citations, 0:0 without any).
INSERT INTO answer_metric_runs
SELECT g.run_id, g.n || ':' || g.h || ':' || coalesce(c.n, 0) || ':' || coalesce(c.h, 0), timezone('UTC', now())
FROM (SELECT run_id, count(*) AS n, bit_xor(hash(item_id, created_utc, n_tokens)) AS h
      FROM generations GROUP BY run_id) g
LEFT JOIN (SELECT run_id, count(*) AS n, bit_xor(hash(item_id, citation_index, position, relevant, probability)) AS h
           FROM citations GROUP BY run_id) c USING (run_id);
