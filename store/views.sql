-- store/views.sql: every view's current definition, once. Applied (CREATE OR REPLACE) after the
-- table migrations, in the transaction of the last one, whenever a store applies migrations: a
-- new store, and every upgrade, ends with exactly these views whatever its version was
-- (store/migrations/__init__.py; tests/store/test_store_views.py checks stores left by older code).
--
-- Edit a view HERE, not in a migration. A change must ship with a new migration file (a comment
-- naming the changed view is enough): stores apply this file when they apply a migration, so
-- without one, stores already at the newest version would keep the old view. A change to how
-- query_metrics computes precision, recall, f1 or exact_match must also recompute run_scores
-- in that migration (see 007_run_scores.sql), and for precision, recall or f1 answer_metrics
-- (see 028_answer_metrics.sql).
--
-- Views are listed so that each comes after the views it reads. The scalar macros they call
-- (normalize_answer, t_quantile_975, label_short_a, dataset_label ...) are store/macros.sql's,
-- applied just before this file. Migrations 001-011 created these views as they went; this file
-- replaces what they made (tests/support/old_migrations holds their texts; tests/store/test_store_views.py).
-- A migration that reads a view says so on a line `-- reads views: NAME, ...`: the runner
-- creates those views from this file, as defined here, before applying it (007's backfill).
-- The metric views are checked against an independent Python oracle (tests/support/metrics_oracle.py,
-- engine/statistics/bias.py) on random runs by tests/store/test_views.py.

-- ---------------------------------------------------------------- tokens (as of migration 001)
-- One row per generated token; step 0 is the first generated token.
-- Parallel unnests in one SELECT zip element-wise; `top` is NULL where alternatives were not recorded.
CREATE OR REPLACE VIEW tokens AS
SELECT
  run_id,
  item_id,
  unnest(range(len(tokens))) AS step,
  unnest(token_ids) AS token_id,
  unnest(tokens) AS token,
  unnest(logprobs) AS logprob,
  unnest(CAST(top_logprobs AS JSON[])) AS top
FROM generations;

-- ---------------------------------------------------------------- query_metrics (as of migration 016)
-- `cited` holds every distinct cited number, shown or not: a number no document was shown under
-- counts against precision (a false positive). Runs whose config says citation_syntax 'paper'
-- (`run`/`import --citation-syntax paper`: the seed library's reading, engine/prompting/citations.py)
-- score as the seed's evaluate_prec_recall does: over the shown documents only, so such a
-- number is left out of `cited` (it is still counted in n_citations and out_of_range_citations).
CREATE OR REPLACE VIEW query_metrics AS
WITH gen AS NOT MATERIALIZED (
  SELECT g.run_id, g.item_id, g.answer, g.shown_doc_ids, len(g.shown_doc_ids) AS n_shown, r.dataset_sha,
         coalesce(json_extract_string(r.config_json, '$.citation_syntax') = 'paper', false) AS shown_only
  FROM generations g JOIN runs r USING (run_id)
),
base AS NOT MATERIALIZED (
  SELECT g.run_id, g.item_id, g.answer, g.n_shown, g.shown_only,
         coalesce(CAST(list_filter(range(1, g.n_shown + 1), lambda p:
           coalesce(list_bool_or(list_transform(list_filter(i.documents, lambda d: d.id = g.shown_doc_ids[p]),
                                                lambda d: coalesce(d.relevant, false))), false)) AS INTEGER[]),
                  []::INTEGER[]) AS gold,
         i.answers AS golds
  FROM gen g
  LEFT JOIN items i ON i.dataset_sha = g.dataset_sha AND i.item_id = g.item_id
),
cites AS NOT MATERIALIZED (
  -- One row per generation: its citations joined on, counted and averaged per (run, item).
  -- Grouped on the generation's own keys, so a run_id or item_id filter on the view reaches
  -- generations through the group and the join's left side, and citations through the join's
  -- dynamic filters. Unmatched rows (no citations) carry NULLs: citation_index, a key column,
  -- is NULL only there, and a NULL position satisfies no FILTER below.
  SELECT b.run_id, b.item_id,
         any_value(b.answer) AS answer, any_value(b.gold) AS gold, any_value(b.golds) AS golds,
         list_sort(list_distinct(list(c.position) FILTER (WHERE c.citation_index IS NOT NULL
                                                       AND (NOT b.shown_only OR c.position BETWEEN 1 AND b.n_shown)))) AS cited,
         count(c.citation_index) AS n_citations,
         count(*) FILTER (WHERE c.position < 1 OR c.position > b.n_shown) AS out_of_range_citations,
         avg(c.probability) FILTER (WHERE list_contains(b.gold, c.position)) AS p_relevant,
         avg(c.probability) FILTER (WHERE c.position BETWEEN 1 AND b.n_shown
                                      AND NOT list_contains(b.gold, c.position)) AS p_nonrelevant
  FROM base b LEFT JOIN citations c ON c.run_id = b.run_id AND c.item_id = b.item_id
  GROUP BY b.run_id, b.item_id
),
scored AS (
  SELECT run_id, item_id, coalesce(cited, []::INTEGER[]) AS cited, gold,
         len(list_intersect(coalesce(cited, []::INTEGER[]), gold)) AS hits,
         n_citations, out_of_range_citations, p_relevant, p_nonrelevant,
         normalize_answer(answer) AS answer_norm,
         normalize_squad(answer) AS answer_squad,
         normalized_tokens(normalize_squad(answer)) AS answer_tokens,
         golds,
         list_filter(list_transform(golds, lambda x: normalize_answer(x)), lambda x: x <> '') AS golds_norm,
         list_transform(golds, lambda x: normalize_squad(x)) AS golds_squad
  FROM cites
)
SELECT
  run_id,
  item_id,
  cited,
  gold,
  CASE WHEN len(cited) = 0 THEN 0.0::DOUBLE ELSE hits / len(cited) END AS precision,
  CASE WHEN len(gold) = 0 THEN 0.0::DOUBLE ELSE hits / len(gold) END AS recall,
  CASE WHEN len(cited) + len(gold) = 0 THEN 0.0::DOUBLE ELSE 2 * hits / (len(cited) + len(gold)) END AS f1,
  CASE WHEN golds_norm IS NULL OR len(golds_norm) = 0 THEN NULL
       WHEN list_bool_or(list_transform(golds_norm, lambda x: contains(answer_norm, x))) THEN 1.0::DOUBLE
       ELSE 0.0::DOUBLE END AS exact_match,
  CASE WHEN golds IS NULL OR len(golds) = 0 THEN NULL
       WHEN list_contains(golds_squad, answer_squad) THEN 1.0::DOUBLE
       ELSE 0.0::DOUBLE END AS squad_em,
  CASE WHEN golds IS NULL OR len(golds) = 0 THEN NULL
       ELSE list_max(list_transform(golds_squad, lambda gs: squad_token_f1(answer_tokens, normalized_tokens(gs))))
  END AS token_f1,
  CASE WHEN golds_norm IS NULL OR len(golds_norm) = 0 THEN NULL
       ELSE len(list_filter(list_distinct(golds_norm), lambda x: contains(answer_norm, x)))
            / len(list_distinct(golds_norm)) END AS answer_recall,
  n_citations,
  out_of_range_citations,
  p_relevant,
  p_nonrelevant
FROM scored;

-- ---------------------------------------------------------------- run_metric_summary (as of migration 002)
-- One row per (run, metric): n items where the metric is defined, mean, sd and the t-based 95%
-- interval mean +/- t(0.975, n-1) * sd / sqrt(n) (NULL for fewer than two items).
CREATE OR REPLACE VIEW run_metric_summary AS
WITH long AS (
  SELECT run_id, unnest([
    {'metric': 'precision', 'value': precision},
    {'metric': 'recall', 'value': recall},
    {'metric': 'f1', 'value': f1},
    {'metric': 'exact_match', 'value': exact_match},
    {'metric': 'squad_em', 'value': squad_em},
    {'metric': 'token_f1', 'value': token_f1},
    {'metric': 'answer_recall', 'value': answer_recall}
  ], recursive := true)
  FROM query_metrics
),
agg AS (
  SELECT run_id, metric, count(value) AS n, avg(value) AS mean, stddev_samp(value) AS sd
  FROM long GROUP BY run_id, metric
)
SELECT run_id, metric, n, mean, sd,
       mean - t_quantile_975(n - 1) * sd / sqrt(n) AS ci_low,
       mean + t_quantile_975(n - 1) * sd / sqrt(n) AS ci_high
FROM agg;

-- ---------------------------------------------------------------- verification_shares (as of migration 010)
-- Per run and judge: how many citations (sentence, document pairs) were judged, and the share
-- of each class, unparsed included (the four shares sum to 1).
CREATE OR REPLACE VIEW verification_shares AS
SELECT
  v.run_id, v.judge_model, r.experiment_id, r.model, r.rag_mode, r.metadata_type,
  count(*) AS n_citations,
  count(*) FILTER (WHERE v.class = 'attributable') AS n_attributable,
  count(*) FILTER (WHERE v.class = 'extrapolatory') AS n_extrapolatory,
  count(*) FILTER (WHERE v.class = 'contradictory') AS n_contradictory,
  count(*) FILTER (WHERE v.class = 'unparsed') AS n_unparsed,
  avg(CASE WHEN v.class = 'attributable' THEN 1.0 ELSE 0.0 END) AS attributable_share,
  avg(CASE WHEN v.class = 'extrapolatory' THEN 1.0 ELSE 0.0 END) AS extrapolatory_share,
  avg(CASE WHEN v.class = 'contradictory' THEN 1.0 ELSE 0.0 END) AS contradictory_share,
  avg(CASE WHEN v.class = 'unparsed' THEN 1.0 ELSE 0.0 END) AS unparsed_share
FROM verifications v
JOIN runs r USING (run_id)
GROUP BY ALL;

-- ---------------------------------------------------------------- run_metric_wide (as of migration 018)
-- run_metrics' per-run numbers: one row per run with answers, from run_metric_summary. The
-- writer keeps these rows in run_metric_rows (store/kept_metrics.py).
CREATE OR REPLACE VIEW run_metric_wide AS
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
FROM run_metric_summary GROUP BY run_id;

-- ---------------------------------------------------------------- run_metrics (as of migration 022)
-- One row per run (every status; filter on it): provenance, the labels on relevant and
-- non-relevant documents, n answers, per metric its mean and 95% interval, and the verification
-- shares of one judge. run_metrics_over(false) computes the numbers (run_metric_wide);
-- run_metrics_over(true) reads those the writer kept (run_metric_rows), which hold only while the
-- run's count of generations equals their n_answers: store/kept_metrics.py reads through it for
-- such runs, and through run_metrics for the others. query_table names the one source asked
-- for, so the other is never bound: binding run_metric_wide costs ~25 ms of every kept read
-- (`report` on the whole store), and the kept rows' extra columns are left out by name.
CREATE OR REPLACE MACRO run_metrics_over(kept) AS TABLE
WITH w AS (
  SELECT COLUMNS(lambda c: c NOT IN ('n_answers', 'computed_utc'))
  FROM query_table(CASE WHEN kept THEN 'run_metric_rows' ELSE 'run_metric_wide' END)
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
       label_relevant(r.rag_mode, r.config_json, r.metadata_type) AS label_relevant,
       label_nonrelevant(r.rag_mode, r.config_json, r.metadata_type) AS label_nonrelevant,
       coalesce(w.n, 0) AS n, coalesce(w.n_gold, 0) AS n_gold,
       w.* EXCLUDE (run_id, n, n_gold),
       v.* EXCLUDE (run_id)
FROM runs r LEFT JOIN w USING (run_id) LEFT JOIN v USING (run_id);

CREATE OR REPLACE VIEW run_metrics AS FROM run_metrics_over(false);

-- ---------------------------------------------------------------- bias_pairs (as of migration 018)
-- The runs the bias view compares: per experiment and mode the newest complete run, paired
-- vanilla-base (CAS) and base-cf (CAB). The writer keeps the bias rows of these pairs
-- (store/kept_metrics.py), and readers use a kept row only while its pair is still one of these.
CREATE OR REPLACE VIEW bias_pairs AS
WITH chosen AS (
  SELECT experiment_id, rag_mode, arg_max(run_id, created_utc) AS run_id
  FROM runs WHERE status = 'complete' GROUP BY experiment_id, rag_mode
)
SELECT a.experiment_id, m.measure, a.run_id AS run_a, b.run_id AS run_b
FROM (VALUES ('CAS', 'vanilla', 'base'), ('CAB', 'base', 'cf')) AS m(measure, mode_a, mode_b)
JOIN chosen a ON a.rag_mode = m.mode_a
JOIN chosen b ON b.experiment_id = a.experiment_id AND b.rag_mode = m.mode_b;

-- ---------------------------------------------------------------- bias (as of migration 018)
-- CAS = mean |M_vanilla - M_base| and CAB = mean (M_base - M_cf), x100, per experiment and
-- metric, over the items both runs hold: the arithmetic, and what engine/statistics/bias.py's test reads.
-- Intervals, p values and verdicts are engine/statistics/bias.py's alone (`python -m engine bias`, report,
-- the app, engine.api), so every face prints the same ones: no t-interval here.
-- value is NULL, and undefined_reason says why, where no answer of either run cites a shown
-- document (every M is then 0: not "no bias"); n_cite_a / n_cite_b count the paired items whose
-- answer cites one. The test's inputs: the signed differences M_a - M_b (for CAS too: its test is
-- of vanilla against base, not of CAS): n_differ non-zero, mean_diff, sd_diff, and `differences`,
-- the non-zero ones in item_id order while n_differ <= 1000 (engine.statistics.bias.PERMUTATION_MAX), NULL above.
CREATE OR REPLACE VIEW bias AS
WITH diffs AS (
  SELECT p.experiment_id, p.measure, p.run_a, p.run_b, qa.item_id,
         qa.n_citations > qa.out_of_range_citations AS cites_a,
         qb.n_citations > qb.out_of_range_citations AS cites_b,
         unnest([
    {'metric': 'precision', 'd': 100 * (qa.precision - qb.precision)},
    {'metric': 'recall', 'd': 100 * (qa.recall - qb.recall)},
    {'metric': 'f1', 'd': 100 * (qa.f1 - qb.f1)}
  ], recursive := true)
  FROM bias_pairs p
  JOIN query_metrics qa ON qa.run_id = p.run_a
  JOIN query_metrics qb ON qb.run_id = p.run_b AND qb.item_id = qa.item_id
),
agg AS (
  SELECT experiment_id, measure, metric, run_a, run_b,
         count(d) AS n,
         avg(CASE measure WHEN 'CAS' THEN abs(d) ELSE d END) AS value,
         count(*) FILTER (WHERE cites_a) AS n_cite_a,
         count(*) FILTER (WHERE cites_b) AS n_cite_b,
         count(*) FILTER (WHERE d <> 0) AS n_differ,
         avg(d) AS mean_diff,
         stddev_samp(d) AS sd_diff,
         list(d ORDER BY item_id) FILTER (WHERE d <> 0) AS nonzero
  FROM diffs GROUP BY ALL
),
counts AS (SELECT run_id, count(*) AS n_items FROM generations GROUP BY run_id)
SELECT t.experiment_id, r.model, r.dataset, r.metadata_type, t.measure, t.metric,
       CASE WHEN t.n_cite_a + t.n_cite_b > 0 THEN t.value END AS value,
       t.n, ca.n_items AS n_a, cb.n_items AS n_b, t.n_cite_a, t.n_cite_b,
       CASE WHEN t.n_cite_a + t.n_cite_b = 0
            THEN 'no answer in runs ' || t.run_a || '/' || t.run_b || ' cites a shown document' END AS undefined_reason,
       t.n_differ, t.mean_diff, t.sd_diff,
       CASE WHEN t.n_differ <= 1000 THEN coalesce(t.nonzero, []::DOUBLE[]) END AS differences,
       t.run_a, t.run_b
FROM agg t
JOIN runs r ON r.run_id = CASE t.measure WHEN 'CAS' THEN t.run_b ELSE t.run_a END  -- the base run
LEFT JOIN counts ca ON ca.run_id = t.run_a
LEFT JOIN counts cb ON cb.run_id = t.run_b;

-- ---------------------------------------------------------------- rerun_floor (as of migration 026)
-- Each measure's rerun floor (`run --reruns`): CAS and CAB between a mode and its reruns, x100,
-- what the measure reads when only the engine's noise differs; the arithmetic of
-- engine/statistics/rerun_floor.py's rerun_floors (docs/method.md, "The rerun floor"), whose
-- interval and test (CAS against its floor) are the engine's alone, as for the bias view.
-- Per experiment (not itself a rerun) and mode, the newest complete run; its reruns are the newest
-- complete run of that mode in each experiment whose runs say rerun.of = the experiment. CAS's
-- floor comes from vanilla's reruns where there are any, else base's: per item the mean over the
-- K reruns of |M - M_k|. CAB's from base's (M - mean_k M_k), else cf's (mean_k M_k - M). value is
-- NULL, and undefined_reason says why, where the runs and reruns do not all hold the same number
-- of items as they pair (the engine refuses to pair them), or no answer of the mode and its
-- reruns cites a shown document.
CREATE OR REPLACE VIEW rerun_floor AS
WITH chosen AS (
  SELECT experiment_id, rag_mode, arg_max(run_id, created_utc) AS run_id,
         any_value(json_extract_string(config_json, '$.rerun.of')) AS rerun_of
  FROM runs WHERE status = 'complete' GROUP BY experiment_id, rag_mode
),
reruns AS (
  SELECT o.experiment_id, o.rag_mode, o.run_id, r.run_id AS rerun_run_id
  FROM chosen o JOIN chosen r ON r.rerun_of = o.experiment_id AND r.rag_mode = o.rag_mode
  WHERE o.rerun_of IS NULL
),
plan AS (
  SELECT a.experiment_id, m.measure,
         CASE WHEN list_contains(h.modes, m.mode_a) THEN m.mode_a WHEN list_contains(h.modes, m.mode_b) THEN m.mode_b END AS mode,
         m.mode_a
  FROM (VALUES ('CAS', 'vanilla', 'base'), ('CAB', 'base', 'cf')) AS m(measure, mode_a, mode_b)
  JOIN chosen a ON a.rag_mode = m.mode_a AND a.rerun_of IS NULL
  JOIN chosen b ON b.experiment_id = a.experiment_id AND b.rag_mode = m.mode_b
  JOIN (SELECT experiment_id, list(DISTINCT rag_mode) AS modes FROM reruns GROUP BY experiment_id) h
    ON h.experiment_id = a.experiment_id
),
held AS (  -- answers per run of the experiment and of its reruns
  SELECT x.experiment_id, x.run_id, count(g.item_id) AS n_items
  FROM (SELECT experiment_id, run_id FROM chosen WHERE rerun_of IS NULL
        UNION SELECT experiment_id, rerun_run_id FROM reruns) x
  LEFT JOIN generations g ON g.run_id = x.run_id
  GROUP BY ALL
),
diffs AS (
  SELECT p.experiment_id, p.measure, p.mode, p.mode_a, s.rerun_run_id, qa.item_id,
         qa.n_citations > qa.out_of_range_citations OR qk.n_citations > qk.out_of_range_citations AS cites,
         unnest([
    {'metric': 'precision', 'd': 100 * (qa.precision - qk.precision)},
    {'metric': 'recall', 'd': 100 * (qa.recall - qk.recall)},
    {'metric': 'f1', 'd': 100 * (qa.f1 - qk.f1)}
  ], recursive := true)
  FROM plan p
  JOIN reruns s ON s.experiment_id = p.experiment_id AND s.rag_mode = p.mode
  JOIN query_metrics qa ON qa.run_id = s.run_id
  JOIN query_metrics qk ON qk.run_id = s.rerun_run_id AND qk.item_id = qa.item_id
),
per_item AS (
  SELECT experiment_id, measure, mode, mode_a, metric, item_id, count(DISTINCT rerun_run_id) AS k,
         bool_or(cites) AS cites,
         CASE WHEN measure = 'CAS' THEN avg(abs(d)) WHEN mode = mode_a THEN avg(d) ELSE -avg(d) END AS floor
  FROM diffs GROUP BY experiment_id, measure, mode, mode_a, metric, item_id
),
agg AS (
  SELECT experiment_id, measure, mode, metric, count(floor) AS n, max(k) AS n_reruns, avg(floor) AS value,
         bool_or(cites) AS cites
  FROM per_item GROUP BY ALL
),
paired AS (  -- every run of the experiment and of its reruns holds as many items as are paired
  SELECT a.experiment_id, a.measure, a.metric, bool_and(h.n_items = a.n) AS same_items
  FROM agg a JOIN held h USING (experiment_id) GROUP BY ALL
)
SELECT p.experiment_id, p.measure, a.metric, p.mode, a.n_reruns,
       CASE WHEN c.same_items AND a.cites THEN a.value END AS value, a.n,
       CASE WHEN NOT c.same_items THEN 'the runs and reruns of experiment ' || p.experiment_id || ' hold different items'
            WHEN NOT a.cites THEN 'no answer in ' || p.mode || ' or its reruns cites a shown document' END
         AS undefined_reason
FROM plan p
JOIN agg a ON a.experiment_id = p.experiment_id AND a.measure = p.measure
JOIN paired c ON c.experiment_id = p.experiment_id AND c.measure = p.measure AND c.metric = a.metric;

-- ---------------------------------------------------------------- citation_confidence (as of migration 002)
-- The mean probability the model gave the cited number, over all citation marks of a run to
-- relevant and to non-relevant shown documents, with the label those documents carried (short
-- name; NULL for vanilla). Imported answers have no probabilities (n_with_probability = 0).
CREATE OR REPLACE VIEW citation_confidence AS
WITH marks AS (
  -- citations.relevant is the shown document's flag from the dataset item, NULL when the
  -- number was not shown: the same test as membership in query_metrics.gold.
  SELECT run_id, probability, relevant AS to_relevant FROM citations WHERE relevant IS NOT NULL
),
kinds AS (SELECT * FROM (VALUES ('relevant', true), ('non-relevant', false)) AS k(cited_docs, to_relevant))
SELECT r.run_id, r.experiment_id, r.model, r.metadata_type, r.rag_mode, k.cited_docs,
       CASE WHEN r.rag_mode = 'base' AND k.to_relevant OR r.rag_mode = 'cf' AND NOT k.to_relevant
              THEN label_short_a(r.config_json, r.metadata_type)
            WHEN r.rag_mode IN ('base', 'cf') THEN label_short_b(r.config_json, r.metadata_type) END AS label,
       avg(m.probability) AS mean_probability,
       count(m.probability) AS n_with_probability,
       count(m.run_id) AS n_citations
FROM runs r CROSS JOIN kinds k
LEFT JOIN marks m ON m.run_id = r.run_id AND m.to_relevant = k.to_relevant
GROUP BY ALL;

-- ---------------------------------------------------------------- explanation_mentions (as of migration 008)
-- One row per document an explanation mentions: its number as shown, the document id, whether
-- it holds the answer, the label shown after it (NULL in vanilla), and whether the answer cited it.
CREATE OR REPLACE VIEW explanation_mentions AS
WITH m AS (
  SELECT e.run_id, e.item_id, e.explainer_model, unnest(e.mentioned_docs) AS position
  FROM explanations e
), shown AS (
  SELECT m.*, r.experiment_id, r.model, r.rag_mode, r.metadata_type, r.config_json,
    g.shown_doc_ids[m.position] AS doc_id,
    -- A repeated id is relevant if any copy is, as in query_metrics.
    coalesce(list_bool_or(list_transform(
      list_filter(i.documents, lambda d: d.id = g.shown_doc_ids[m.position]), lambda d: d.relevant)), false) AS relevant
  FROM m
  JOIN runs r USING (run_id)
  JOIN generations g ON g.run_id = m.run_id AND g.item_id = m.item_id
  LEFT JOIN items i ON i.dataset_sha = r.dataset_sha AND i.item_id = m.item_id
)
SELECT
  s.run_id, s.item_id, s.explainer_model, s.experiment_id, s.model, s.rag_mode, s.metadata_type,
  s.position, s.doc_id, s.relevant,
  -- The label as engine.prompting.prompts writes it: relevant documents get label A in base, B in cf.
  CASE WHEN s.rag_mode NOT IN ('base', 'cf') THEN NULL
       WHEN s.relevant = (s.rag_mode = 'base')
       THEN coalesce(s.config_json->'prompt'->'metadata'->>'label_a', s.config_json->'metadata'->>'label_a')
       ELSE coalesce(s.config_json->'prompt'->'metadata'->>'label_b', s.config_json->'metadata'->>'label_b')
  END AS label,
  EXISTS (SELECT 1 FROM citations c
          WHERE c.run_id = s.run_id AND c.item_id = s.item_id AND c.position = s.position) AS cited
FROM shown s;

-- ---------------------------------------------------------------- explanation_rates (as of migration 008)
-- Per run and explainer: how many explanations, how many give a label as a reason, and the share.
CREATE OR REPLACE VIEW explanation_rates AS
SELECT
  e.run_id, e.explainer_model, r.experiment_id, r.model, r.rag_mode, r.metadata_type,
  count(*) AS n_explanations,
  count(*) FILTER (WHERE e.mentions_label) AS n_mention_label,
  avg(CASE WHEN e.mentions_label THEN 1.0 ELSE 0.0 END) AS label_share,
  avg(CASE WHEN len(e.mentioned_docs) > 0 THEN 1.0 ELSE 0.0 END) AS document_share
FROM explanations e
JOIN runs r USING (run_id)
GROUP BY ALL;

-- ---------------------------------------------------------------- compare (as of migration 012)
-- Two runs' per-item metrics paired by item id, for the SQL tab and notebooks. The same columns
-- `python -m engine compare` reads (store/queries/compare.py); tests/engine/usecases/compare/test_compare.py checks the
-- two agree. Metrics are query_metrics', plus two per item:
--   cites_nothing     1.0 when the answer cites nothing, else 0.0
--   mean_probability  mean probability of its citations; NULL where none was recorded
--   cites_in_range    true when it cites a document it was shown (migration 024; what the Bias
--                     report's counts of citing answers use)
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
-- the CLI's and the Python API's: engine.usecases.compare.compare.

CREATE OR REPLACE VIEW compare_item_metrics AS
SELECT q.run_id, q.item_id, q.precision, q.recall, q.f1, q.exact_match, q.squad_em, q.answer_recall,
       CAST(q.n_citations AS DOUBLE) AS n_citations,
       CASE WHEN q.n_citations = 0 THEN 1.0 ELSE 0.0 END AS cites_nothing,
       p.mean_probability,
       q.n_citations > q.out_of_range_citations AS cites_in_range
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

-- ---------------------------------------------------------------- citation_decisions (as of migration 014)
-- One row per run: the label pair its prompt shows after "written by" (label A on relevant
-- documents in base, B in cf; NULL where the run has none), read from its config once per run.
-- citation_decisions takes its labels from here: read per row, the JSON was half the cost of its
-- label column. store.queries.decisions lists a request's labels from here too.
CREATE OR REPLACE VIEW run_labels AS
SELECT run_id,
       json_extract_string(config_json, '$.prompt.metadata.label_a') AS label_a,
       json_extract_string(config_json, '$.prompt.metadata.label_b') AS label_b
FROM runs;

-- One row per shown document per answer: every citation decision the model made, with what it
-- saw at that place (docs/store.md). The citation choice model
-- (`python -m engine why-cited`, engine.statistics.choice_model) reads these rows.
--   position            1-based place in the prompt ([position] cites it)
--   position_group      'first', 'middle' or 'last' (a single shown document is 'first')
--   label               the label shown after "written by"; NULL: none (vanilla, or a document the
--                       label scope leaves unlabelled)
--   repeated            the same document (id) is shown more than once in this prompt
--   cited, n_cited      whether and how often the answer cites this place
--   citation_probability  the largest recorded probability of the number tokens of those
--                       citations; NULL when none was recorded (imported answers, or not cited)
--   answer_cites_any    the answer cites at least one shown document
--   relevant_at, repetition, label_scope  the run's battery settings (defaults: ranked, none, all)
-- Example (how often labelled documents are cited, by label and relevance):
--   SELECT label, relevant, avg(cited::INT) AS cite_rate, count(*) FROM citation_decisions
--   WHERE experiment_id = 'EXP' GROUP BY ALL ORDER BY ALL;
CREATE OR REPLACE VIEW citation_decisions AS
WITH shown AS NOT MATERIALIZED (
  SELECT g.run_id, g.item_id, r.experiment_id, r.model, r.rag_mode, r.metadata_type, r.dataset_sha,
         r.config_json, l.label_a, l.label_b, g.shown_doc_ids, g.shown_labels IS NOT NULL AS labels_stored,
         len(g.shown_doc_ids) AS n_shown,
         unnest(range(1, len(g.shown_doc_ids) + 1)) AS position,
         unnest(g.shown_doc_ids) AS doc_id,
         unnest(coalesce(g.shown_labels, list_transform(g.shown_doc_ids, lambda x: NULL::VARCHAR))) AS stored_label
  FROM generations g JOIN runs r USING (run_id) JOIN run_labels l USING (run_id)
),
relevance AS NOT MATERIALIZED (
  SELECT s.*,
         coalesce(list_bool_or(list_transform(list_filter(i.documents, lambda d: d.id = s.doc_id),
                                              lambda d: coalesce(d.relevant, false))), false) AS relevant
  FROM shown s
  LEFT JOIN items i ON i.dataset_sha = s.dataset_sha AND i.item_id = s.item_id
),
cited AS NOT MATERIALIZED (
  SELECT run_id, item_id, position, count(*) AS n_cited, max(probability) AS citation_probability
  FROM citations WHERE doc_id IS NOT NULL
  GROUP BY run_id, item_id, position
),
citing AS NOT MATERIALIZED (
  SELECT DISTINCT run_id, item_id FROM citations WHERE doc_id IS NOT NULL
)
SELECT
  s.run_id, s.experiment_id, s.item_id, s.model, s.rag_mode, s.metadata_type,
  s.position, s.n_shown,
  CASE WHEN s.position = 1 THEN 'first' WHEN s.position = s.n_shown THEN 'last' ELSE 'middle' END AS position_group,
  s.doc_id,
  CASE WHEN s.labels_stored THEN s.stored_label
       WHEN s.rag_mode = 'vanilla' THEN NULL
       WHEN (s.rag_mode = 'base') = s.relevant THEN s.label_a
       ELSE s.label_b END AS label,
  s.relevant,
  len(list_filter(s.shown_doc_ids, lambda x: x = s.doc_id)) > 1 AS repeated,
  c.n_cited IS NOT NULL AS cited,
  coalesce(c.n_cited, 0) AS n_cited,
  c.citation_probability,
  a.run_id IS NOT NULL AS answer_cites_any,
  coalesce(json_extract_string(s.config_json, '$.prompt.relevant_at'), 'ranked') AS relevant_at,
  coalesce(json_extract_string(s.config_json, '$.prompt.repetition'), 'none') AS repetition,
  coalesce(json_extract_string(s.config_json, '$.prompt.label_scope'), 'all') AS label_scope
FROM relevance s
LEFT JOIN cited c ON c.run_id = s.run_id AND c.item_id = s.item_id AND c.position = s.position
LEFT JOIN citing a ON a.run_id = s.run_id AND a.item_id = s.item_id;

-- ---------------------------------------------------------------- judgements (as of migration 019)
-- Every judge's verdict per (run, item, cited document): a model's from its sentence-level rows
-- in verifications (attributable only where every sentence citing the document is judged
-- attributable; NULL where any of them is unparsed), a person's from judge_labels. `kind` is
-- judges.kind, 'llm' for a judge stored before 019.
CREATE OR REPLACE VIEW judgements AS
SELECT v.run_id, v.item_id, v.position, v.judge_model AS judge, coalesce(any_value(j.kind), 'llm') AS kind,
       any_value(v.doc_id) AS doc_id, count(*) AS n_sentences,
       CASE WHEN bool_or(v.class = 'unparsed') THEN NULL ELSE bool_and(v.class = 'attributable') END AS attributable
FROM verifications v LEFT JOIN judges j ON j.judge = v.judge_model
GROUP BY v.run_id, v.item_id, v.position, v.judge_model
UNION ALL
SELECT run_id, item_id, position, judge, 'human' AS kind, doc_id, NULL AS n_sentences,
       label = 'attributable' AS attributable
FROM judge_labels;

-- ---------------------------------------------------------------- judge_agreement (as of migration 019)
-- Per pair of judges (judge_a < judge_b): the cited documents both gave a verdict on, how many
-- each called attributable, and how many they agree on (raw agreement). Cohen's kappa and its
-- interval come from `python -m engine agreement` (statsmodels), not from SQL.
CREATE OR REPLACE VIEW judge_agreement AS
SELECT a.judge AS judge_a, b.judge AS judge_b, count(*) AS n,
       count(*) FILTER (WHERE a.attributable AND b.attributable) AS n_both_attributable,
       count(*) FILTER (WHERE a.attributable AND NOT b.attributable) AS n_only_a,
       count(*) FILTER (WHERE NOT a.attributable AND b.attributable) AS n_only_b,
       count(*) FILTER (WHERE NOT a.attributable AND NOT b.attributable) AS n_neither,
       avg(CASE WHEN a.attributable = b.attributable THEN 1.0 ELSE 0.0 END) AS raw_agreement
FROM judgements a
JOIN judgements b ON a.run_id = b.run_id AND a.item_id = b.item_id AND a.position = b.position
                 AND a.judge < b.judge
WHERE a.attributable IS NOT NULL AND b.attributable IS NOT NULL
GROUP BY a.judge, b.judge;

-- ---------------------------------------------------------------- citation_use (as of migration 020)
-- Per (run, item, shown document, model) that `python -m engine used` measured: whether the answer
-- cites it, its necessity (log P(answer | full prompt) - log P(answer | prompt without it), in
-- nats) and whether it is used: necessity > 0.5, the answer at least e^0.5 = 1.65 times less
-- likely without it (the default of `used --threshold`; docs/method.md, "Cited or used").
CREATE OR REPLACE VIEW citation_use AS
SELECT run_id, item_id, position, model, cited, necessity, sufficiency, necessity > 0.5 AS used,
       cited AND NOT necessity > 0.5 AS post_rationalised
FROM document_use;
