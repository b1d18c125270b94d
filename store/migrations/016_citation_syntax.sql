-- 016_citation_syntax: query_metrics (store/views.sql) leaves numbers that were not shown out of
-- precision for runs whose config_json says citation_syntax 'paper' (`run` and
-- `import --citation-syntax paper`, the seed library's reading; engine/prompting/citations.py).
-- Do not change what this file does once released: add NNN_name.sql files instead.
-- Edited since release (18c5200: comments only, the paths of moved modules).
--
-- Every other run scores as before, so the kept numbers (run_scores, 007; run_metric_rows and
-- bias_rows, 013) of those runs still hold and are kept: emptying them would cost a large store
-- its fast reads until every run is written again. Only rows of 'paper' runs could differ, and
-- no store written before this migration holds one; they are deleted all the same (a missing
-- row costs time, never correctness), not recomputed here, because this file runs before
-- views.sql replaces the view (store/migrations/__init__.py).
DELETE FROM run_scores WHERE run_id IN
  (SELECT run_id FROM runs WHERE json_extract_string(config_json, '$.citation_syntax') = 'paper');
DELETE FROM run_metric_rows WHERE run_id IN
  (SELECT run_id FROM runs WHERE json_extract_string(config_json, '$.citation_syntax') = 'paper');
DELETE FROM bias_rows WHERE run_a IN
  (SELECT run_id FROM runs WHERE json_extract_string(config_json, '$.citation_syntax') = 'paper')
  OR run_b IN (SELECT run_id FROM runs WHERE json_extract_string(config_json, '$.citation_syntax') = 'paper');
