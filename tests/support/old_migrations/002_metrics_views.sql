-- 002_metrics_views: per-item metrics, per-run summaries, CAS/CAB and citation confidence as views.
-- Append-only: never edit this file once released; replace a view in a later NNN_name.sql.
--
-- The definitions are engine/metrics.py's and engine/statistics/bias.py's; tests/test_views.py checks
-- every view against them on random runs.
--   query_metrics        one row per stored answer (run_id, item_id)
--   run_metrics          one row per run: means with t-based 95% intervals
--   bias                 CAS and CAB per experiment and metric, with a t-test
--   citation_confidence  mean probability of citations to relevant / non-relevant documents
-- Caveats, where SQL differs from `python -m engine bias`:
--   * `bias` intervals are t-based (mean +/- t * sd / sqrt(n)); the CLI's are bootstrap
--     percentile intervals. t and p are the same (p from the exact Student-t CDF below).
--   * `bias` pairs the items both runs hold (inner join) and shows n_a and n_b; the CLI refuses
--     runs that do not cover the same items.
--   * Per experiment and mode, the newest complete run is used; other runs are ignored.

-- ---------------------------------------------------------------- text normalisation
-- The paper's EM normalisation: lowercase, ASCII punctuation to a space, whitespace folded.
-- The whitespace class is Python's str whitespace spelled for RE2; the final sigma is folded
-- because Python's lower() has a final-sigma rule and DuckDB's has not.
CREATE OR REPLACE MACRO normalize_answer(s) AS
  trim(regexp_replace(
         regexp_replace(replace(lower(s), 'ς', 'σ'), '[[:punct:]]', ' ', 'g'),
         '[\t\n\x{0b}\f\r\x{1c}-\x{1f}\x{85}\p{Z}]+', ' ', 'g'), ' ');

-- The SQuAD normalisation: lowercase, punctuation deleted, articles a/an/the dropped, folded.
CREATE OR REPLACE MACRO normalize_squad(s) AS
  trim(regexp_replace(
         regexp_replace(
           regexp_replace(replace(lower(s), 'ς', 'σ'), '[[:punct:]]', '', 'g'),
           '\b(a|an|the)\b', ' ', 'g'),
         '[\t\n\x{0b}\f\r\x{1c}-\x{1f}\x{85}\p{Z}]+', ' ', 'g'), ' ');

-- Tokens as Python's str.split() gives them for a normalised string ('' has none).
CREATE OR REPLACE MACRO normalized_tokens(s) AS
  CASE WHEN s = '' THEN []::VARCHAR[] ELSE string_split(s, ' ') END;

-- SQuAD token F1 of two token lists (both empty: 1; one empty: 0; else 2*common/(|p|+|g|)).
CREATE OR REPLACE MACRO squad_token_f1(pt, gt) AS
  CASE
    WHEN len(pt) = 0 OR len(gt) = 0 THEN CASE WHEN len(pt) = len(gt) THEN 1.0::DOUBLE ELSE 0.0::DOUBLE END
    ELSE 2 * list_sum(list_transform(list_distinct(gt), lambda u:
           least(len(list_filter(pt, lambda x: x = u)), len(list_filter(gt, lambda x: x = u)))))
         / (len(pt) + len(gt))
  END;

-- ---------------------------------------------------------------- Student t
-- 0.975 quantile of Student's t: exact values (from scipy) up to 100 degrees of freedom, then
-- the Cornish-Fisher expansion in 1/df to the 4th order (error below 1e-10 there).
CREATE OR REPLACE MACRO t_quantile_expansion(z, df) AS
  z + (pow(z, 3) + z) / (4 * df)
    + (5 * pow(z, 5) + 16 * pow(z, 3) + 3 * z) / (96 * pow(df, 2))
    + (3 * pow(z, 7) + 19 * pow(z, 5) + 17 * pow(z, 3) - 15 * z) / (384 * pow(df, 3))
    + (79 * pow(z, 9) + 776 * pow(z, 7) + 1482 * pow(z, 5) - 1920 * pow(z, 3) - 945 * z) / (92160 * pow(df, 4));

CREATE OR REPLACE MACRO t_quantile_975(df) AS
  CASE
    WHEN df IS NULL OR df < 1 THEN NULL
    WHEN df <= 100 THEN (CAST([
      12.7062047361747, 4.30265272974946, 3.18244630528371, 2.77644510519779, 2.57058183563631, 2.44691185114498,
      2.36462425159278, 2.30600413520417, 2.2621571627982, 2.22813885198627, 2.20098516009164, 2.17881282966723,
      2.16036865646279, 2.1447866879178, 2.13144954555978, 2.11990529922125, 2.10981557783332, 2.10092204024104,
      2.09302405440831, 2.08596344726586, 2.07961384472768, 2.07387306790403, 2.06865761041905, 2.06389856162802,
      2.0595385527533, 2.05552943864287, 2.05183051648028, 2.04840714179525, 2.0452296421327, 2.04227245630124,
      2.03951344639641, 2.0369333434601, 2.03451529744934, 2.03224450931772, 2.03010792825034, 2.02809400098045,
      2.02619246302911, 2.02439416391197, 2.02269092003676, 2.02107539030627, 2.01954097044138, 2.01808170281844,
      2.01669219922782, 2.01536757444376, 2.01410338888085, 2.01289559891943, 2.01174051372977, 2.01063475762423,
      2.00957523712924, 2.00855911210076, 2.00758377031584, 2.00664680506169, 2.00574599531787, 2.00487928818806,
      2.00404478328915, 2.00324071884787, 2.00246545929101, 2.00171748414524, 2.00099537808827, 2.00029782201426,
      1.99962358499494, 1.99897151703338, 1.99834054252074, 1.99772965431769, 1.997137908392, 1.99656441895231,
      1.9960083540253, 1.99546893142984, 1.99494541510724, 1.99443711177119, 1.99394336784563, 1.99346356666187,
      1.99299712588985, 1.99254349518093, 1.99210215400224, 1.99167260964466, 1.99125439538838, 1.99084706881169,
      1.99045021023013, 1.99006342125445, 1.9896863234569, 1.98931855713657, 1.98895978017516, 1.98860966697571,
      1.98826790747722, 1.98793420623902, 1.98760828158907, 1.98728986483117, 1.98697869950628, 1.98667454070377,
      1.98637715441862, 1.98608631695113, 1.98580181434582, 1.9855234418666, 1.9852510035055, 1.98498431152246,
      1.98472318601398, 1.98446745450848, 1.98421695158642, 1.98397151852355
    ] AS DOUBLE[]))[CAST(df AS BIGINT)]
    ELSE t_quantile_expansion(1.959963984540054::DOUBLE, df)
  END;

-- Two-sided p = P(|T| >= |t|) for integer df, exactly: Abramowitz & Stegun 26.7.3 (odd df) and
-- 26.7.4 (even df) with theta = atan(|t| / sqrt(df)); the series has about df/2 terms, whose
-- coefficients come from lgamma. Accurate to ~1e-12 absolute (p below that reads as ~0).
CREATE OR REPLACE MACRO t_sf2_theta(th, df) AS
  CASE WHEN df % 2 = 0 THEN
    1 - sin(th) * list_sum([exp(lgamma(k + 0.5) - lgamma(k + 1) - lgamma(0.5)) * pow(cos(th), 2 * k)
                            FOR k IN range(0, df // 2)])
  ELSE
    1 - 2 / pi() * (th + sin(th) * coalesce(list_sum([exp(lgamma(k + 1) + lgamma(1.5) - lgamma(k + 1.5))
                                                      * pow(cos(th), 2 * k + 1)
                                                      FOR k IN range(0, (df - 1) // 2)]), 0))
  END;

CREATE OR REPLACE MACRO t_sf2(t, df) AS
  CASE
    WHEN t IS NULL OR df IS NULL OR df < 1 OR isnan(t) THEN NULL
    WHEN isinf(t) THEN 0.0::DOUBLE
    ELSE greatest(0.0::DOUBLE, least(1.0::DOUBLE, t_sf2_theta(atan(abs(t) / sqrt(df)), CAST(df AS BIGINT))))
  END;

-- ---------------------------------------------------------------- labels
-- The short name of label A (relevant documents in base) and B, as tables print them: from the
-- run's stored prompt configuration, else the built-in types of engine/prompting/prompts.py.
CREATE OR REPLACE MACRO label_short_a(config_json, metadata_type) AS
  coalesce(
    json_extract_string(config_json, '$.prompt.metadata.short_a'),
    json_extract_string(config_json, '$.metadata.short_a'),
    CASE metadata_type WHEN 'hai' THEN 'Human' WHEN 'gender' THEN 'Woman' WHEN 'race' THEN 'White' END);

CREATE OR REPLACE MACRO label_short_b(config_json, metadata_type) AS
  coalesce(
    json_extract_string(config_json, '$.prompt.metadata.short_b'),
    json_extract_string(config_json, '$.metadata.short_b'),
    CASE metadata_type WHEN 'hai' THEN 'LLM' WHEN 'gender' THEN 'Man' WHEN 'race' THEN 'Black' END);

-- ---------------------------------------------------------------- query_metrics
-- Citations come from the citations table (the parsed form of the answer, written with it);
-- gold positions from the dataset item's relevance flags, looked up by the shown document ids.
CREATE OR REPLACE VIEW query_metrics AS
WITH gen AS (
  SELECT g.run_id, g.item_id, g.answer, g.shown_doc_ids, len(g.shown_doc_ids) AS n_shown, r.dataset_sha
  FROM generations g JOIN runs r USING (run_id)
),
doc_flags AS (
  SELECT i.dataset_sha, i.item_id, u.d.id AS doc_id, bool_or(coalesce(u.d.relevant, false)) AS relevant
  FROM items i, unnest(i.documents) AS u(d)
  GROUP BY ALL
),
shown AS (
  SELECT run_id, item_id, dataset_sha,
         unnest(shown_doc_ids) AS doc_id,
         CAST(unnest(range(1, n_shown + 1)) AS INTEGER) AS position
  FROM gen
),
gold AS (
  SELECT s.run_id, s.item_id, list(s.position ORDER BY s.position) FILTER (WHERE f.relevant) AS gold
  FROM shown s
  LEFT JOIN doc_flags f ON f.dataset_sha = s.dataset_sha AND f.item_id = s.item_id AND f.doc_id = s.doc_id
  GROUP BY s.run_id, s.item_id
),
base AS (
  SELECT g.run_id, g.item_id, g.answer, g.n_shown, coalesce(gd.gold, []::INTEGER[]) AS gold, i.answers AS golds
  FROM gen g
  LEFT JOIN gold gd USING (run_id, item_id)
  LEFT JOIN items i ON i.dataset_sha = g.dataset_sha AND i.item_id = g.item_id
),
cites AS (
  SELECT c.run_id, c.item_id,
         list_sort(list_distinct(list(c.position))) AS cited,
         count(*) AS n_citations,
         count(*) FILTER (WHERE c.position < 1 OR c.position > b.n_shown) AS out_of_range_citations,
         -- Out-of-range marks name no document, so they are in neither mean.
         avg(c.probability) FILTER (WHERE list_contains(b.gold, c.position)) AS p_relevant,
         avg(c.probability) FILTER (WHERE c.position BETWEEN 1 AND b.n_shown
                                      AND NOT list_contains(b.gold, c.position)) AS p_nonrelevant
  FROM citations c JOIN base b USING (run_id, item_id)
  GROUP BY c.run_id, c.item_id
),
scored AS (
  SELECT b.run_id, b.item_id, coalesce(c.cited, []::INTEGER[]) AS cited, b.gold,
         len(list_intersect(coalesce(c.cited, []::INTEGER[]), b.gold)) AS hits,
         coalesce(c.n_citations, 0) AS n_citations,
         coalesce(c.out_of_range_citations, 0) AS out_of_range_citations,
         c.p_relevant, c.p_nonrelevant,
         normalize_answer(b.answer) AS answer_norm,
         normalize_squad(b.answer) AS answer_squad,
         normalized_tokens(normalize_squad(b.answer)) AS answer_tokens,
         b.golds,
         list_filter(list_transform(b.golds, lambda x: normalize_answer(x)), lambda x: x <> '') AS golds_norm,
         list_transform(b.golds, lambda x: normalize_squad(x)) AS golds_squad
  FROM base b LEFT JOIN cites c USING (run_id, item_id)
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

-- ---------------------------------------------------------------- run_metrics
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

-- One row per run (every status; filter on it): provenance, the labels on relevant and
-- non-relevant documents (short names; NULL for vanilla), n answers, and per metric its mean
-- and 95% interval. n_gold counts the answers with a usable gold answer (EM is defined).
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
)
SELECT r.run_id, r.experiment_id, r.created_utc, r.status, r.model, r.quantization, r.dataset,
       r.dataset_sha, r.metadata_type, r.rag_mode,
       CASE r.rag_mode WHEN 'base' THEN label_short_a(r.config_json, r.metadata_type)
                       WHEN 'cf' THEN label_short_b(r.config_json, r.metadata_type) END AS label_relevant,
       CASE r.rag_mode WHEN 'base' THEN label_short_b(r.config_json, r.metadata_type)
                       WHEN 'cf' THEN label_short_a(r.config_json, r.metadata_type) END AS label_nonrelevant,
       coalesce(w.n, 0) AS n, coalesce(w.n_gold, 0) AS n_gold,
       w.* EXCLUDE (run_id, n, n_gold)
FROM runs r LEFT JOIN w USING (run_id);

-- ---------------------------------------------------------------- bias
-- CAS = mean |M_vanilla - M_base| and CAB = mean (M_base - M_cf), x100, per experiment and
-- metric, over the items both runs hold. CAS is tested with a one-sample t-test of the
-- absolute differences against 0 (is there any sensitivity?), CAB with a paired t-test; the
-- interval is t-based. direction: CAB > 0 favours label A (relevant documents' label in base).
CREATE OR REPLACE VIEW bias AS
WITH chosen AS (
  SELECT experiment_id, rag_mode, arg_max(run_id, created_utc) AS run_id
  FROM runs WHERE status = 'complete' GROUP BY experiment_id, rag_mode
),
pairs AS (
  SELECT a.experiment_id, m.measure, a.run_id AS run_a, b.run_id AS run_b
  FROM (VALUES ('CAS', 'vanilla', 'base'), ('CAB', 'base', 'cf')) AS m(measure, mode_a, mode_b)
  JOIN chosen a ON a.rag_mode = m.mode_a
  JOIN chosen b ON b.experiment_id = a.experiment_id AND b.rag_mode = m.mode_b
),
diffs AS (
  SELECT p.experiment_id, p.measure, p.run_a, p.run_b, unnest([
    {'metric': 'precision', 'd': 100 * CASE p.measure WHEN 'CAS' THEN abs(qa.precision - qb.precision) ELSE qa.precision - qb.precision END},
    {'metric': 'recall', 'd': 100 * CASE p.measure WHEN 'CAS' THEN abs(qa.recall - qb.recall) ELSE qa.recall - qb.recall END},
    {'metric': 'f1', 'd': 100 * CASE p.measure WHEN 'CAS' THEN abs(qa.f1 - qb.f1) ELSE qa.f1 - qb.f1 END}
  ], recursive := true)
  FROM pairs p
  JOIN query_metrics qa ON qa.run_id = p.run_a
  JOIN query_metrics qb ON qb.run_id = p.run_b AND qb.item_id = qa.item_id
),
agg AS (
  SELECT experiment_id, measure, metric, run_a, run_b,
         count(d) AS n, avg(d) AS value, stddev_samp(d) AS sd
  FROM diffs GROUP BY ALL
),
tested AS (
  SELECT *,
    CASE WHEN n < 2 THEN NULL
         WHEN sd = 0 THEN CASE WHEN value = 0 THEN NULL ELSE sign(value) * 'inf'::DOUBLE END
         ELSE value / (sd / sqrt(n)) END AS t
  FROM agg
),
counts AS (SELECT run_id, count(*) AS n_items FROM generations GROUP BY run_id)
SELECT t.experiment_id, r.model, r.dataset, r.metadata_type, t.measure, t.metric,
       t.value, t.value - t_quantile_975(t.n - 1) * t.sd / sqrt(t.n) AS ci_low,
       t.value + t_quantile_975(t.n - 1) * t.sd / sqrt(t.n) AS ci_high,
       t.t, t.n - 1 AS df, t_sf2(t.t, t.n - 1) AS p, t.n,
       ca.n_items AS n_a, cb.n_items AS n_b,
       CASE WHEN t.measure = 'CAS' THEN NULL
            WHEN abs(t.value) < 1e-9 THEN 'no difference'
            WHEN t.value > 0 THEN 'favours ' || coalesce(label_short_a(r.config_json, r.metadata_type), 'label A')
            ELSE 'favours ' || coalesce(label_short_b(r.config_json, r.metadata_type), 'label B') END AS direction,
       t.run_a, t.run_b
FROM tested t
JOIN runs r ON r.run_id = CASE t.measure WHEN 'CAS' THEN t.run_b ELSE t.run_a END  -- the base run
LEFT JOIN counts ca ON ca.run_id = t.run_a
LEFT JOIN counts cb ON cb.run_id = t.run_b;

-- ---------------------------------------------------------------- citation_confidence
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
