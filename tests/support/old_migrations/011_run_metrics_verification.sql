-- 011_run_metrics_verification: run_metrics gains each run's AttrScore verification shares
-- (issue 8: "the shares of attributable, extrapolatory, contradictory and unparsed citations go
-- into run_metrics"), so one row per run says both how well it cites against the gold labels
-- and how often what it cites supports the sentence citing it, which needs no gold labels.
-- Append-only: never edit this file once released; add NNN_name.sql files instead.
--
-- The view is 002's, column for column, with six columns added at the end; they are NULL for a
-- run nobody verified:
--   verification_judge   the judge model whose verdicts are shown (a run may have several:
--                        the one with the most judged citations, ties by name; the
--                        verification_shares view has every judge)
--   n_verified           (sentence, cited document) pairs it judged
--   attributable_share, extrapolatory_share, contradictory_share, unparsed_share
--                        the share of those pairs in each class (they sum to 1)

CREATE OR REPLACE VIEW run_metrics AS
WITH w AS (
  SELECT run_id,
    max(n) FILTER (WHERE metric = 'precision') AS n,
    max(n) FILTER (WHERE metric = 'exact_match') AS n_gold,
    max(mean) FILTER (WHERE metric = 'precision') AS precision,
    max(ci_low) FILTER (WHERE metric = 'precision') AS precision_ci_low,
    max(ci_high) FILTER (WHERE metric = 'precision') AS precision_ci_high,
    max(mean) FILTER (WHERE metric = 'recall') AS recall,
    max(ci_low) FILTER (WHERE metric = 'recall') AS recall_ci_low,
    max(ci_high) FILTER (WHERE metric = 'recall') AS recall_ci_high,
    max(mean) FILTER (WHERE metric = 'f1') AS f1,
    max(ci_low) FILTER (WHERE metric = 'f1') AS f1_ci_low,
    max(ci_high) FILTER (WHERE metric = 'f1') AS f1_ci_high,
    max(mean) FILTER (WHERE metric = 'exact_match') AS exact_match,
    max(ci_low) FILTER (WHERE metric = 'exact_match') AS exact_match_ci_low,
    max(ci_high) FILTER (WHERE metric = 'exact_match') AS exact_match_ci_high,
    max(mean) FILTER (WHERE metric = 'squad_em') AS squad_em,
    max(ci_low) FILTER (WHERE metric = 'squad_em') AS squad_em_ci_low,
    max(ci_high) FILTER (WHERE metric = 'squad_em') AS squad_em_ci_high,
    max(mean) FILTER (WHERE metric = 'token_f1') AS token_f1,
    max(ci_low) FILTER (WHERE metric = 'token_f1') AS token_f1_ci_low,
    max(ci_high) FILTER (WHERE metric = 'token_f1') AS token_f1_ci_high,
    max(mean) FILTER (WHERE metric = 'answer_recall') AS answer_recall,
    max(ci_low) FILTER (WHERE metric = 'answer_recall') AS answer_recall_ci_low,
    max(ci_high) FILTER (WHERE metric = 'answer_recall') AS answer_recall_ci_high
  FROM run_metric_summary GROUP BY run_id
),
-- One judge per run: the one that judged the most citations (ties: the first judge by name);
-- verification_shares keeps every judge.
v AS (
  SELECT run_id, judge_model AS verification_judge, n_citations AS n_verified,
         attributable_share, extrapolatory_share, contradictory_share, unparsed_share
  FROM verification_shares
  QUALIFY row_number() OVER (PARTITION BY run_id ORDER BY n_citations DESC, judge_model) = 1
)
SELECT r.run_id, r.experiment_id, r.created_utc, r.status, r.model, r.quantization, r.dataset,
       r.dataset_sha, r.metadata_type, r.rag_mode,
       CASE r.rag_mode WHEN 'base' THEN label_short_a(r.config_json, r.metadata_type)
                       WHEN 'cf' THEN label_short_b(r.config_json, r.metadata_type) END AS label_relevant,
       CASE r.rag_mode WHEN 'base' THEN label_short_b(r.config_json, r.metadata_type)
                       WHEN 'cf' THEN label_short_a(r.config_json, r.metadata_type) END AS label_nonrelevant,
       coalesce(w.n, 0) AS n, coalesce(w.n_gold, 0) AS n_gold,
       w.* EXCLUDE (run_id, n, n_gold),
       v.* EXCLUDE (run_id)
FROM runs r LEFT JOIN w USING (run_id) LEFT JOIN v USING (run_id);
