-- store/macros.sql: every scalar SQL macro's current definition, once. Applied (CREATE OR REPLACE)
-- with store/views.sql, before it, whenever a store applies migrations (store/migrations/__init__.py),
-- and before a migration that reads a view (its `-- reads views:` line): a new store, and every
-- upgrade, ends with exactly these macros whatever its version was.
--
-- Edit a macro HERE, not in a migration. A change must ship with a new migration file (a comment
-- naming the changed macro is enough), as a change to a view does (store/views.sql), and a change
-- to what query_metrics computes must also say what it does to the kept numbers (007, 013).
-- Migrations 002, 003 and 014 defined these as they went (tests/support/old_migrations holds those texts).
-- Table macros that read views (compare_runs, run_metrics_over) are in store/views.sql.
--
-- Facts spelt here have their home in Python; tests/store/test_views.py checks that the two agree:
-- normalize_answer against tests/support/metrics_oracle.py over every code point, the t macros against scipy,
-- the built-in short labels against engine.prompting.prompts.METADATA_TYPES.


-- ---------------------------------------------------------------- Python's lower()
-- DuckDB's lower() equals Python's on every single code point except U+0130, which DuckDB maps
-- to "i" and Python to "i" + U+0307; U+0307 is a combining mark, deleted below, so the two
-- agree after normalisation. What lower() alone cannot do is Python's one context rule: a
-- capital sigma becomes final sigma (U+03C2) when the nearest non-case-ignorable character
-- before it is cased and the nearest one after it is not (or the text ends), Unicode's
-- Final_Sigma. RE2 has no look-around, so the regex carries both contexts and puts them back;
-- matches cannot overlap wrongly, because a match ends on an uncased character or the end.
-- The classes are Unicode's derived properties as Python computes them:
--   cased, not case-ignorable: Lu, Ll, Lt, plus Other_Lowercase / Other_Uppercase outside Lm
--     and Mn (ª º, Roman numerals, circled and squared Latin letters);
--   case-ignorable: Mn, Me, Cf, Lm, Sk, plus the Word_Break MidLetter / MidNumLet /
--     Single_Quote punctuation (' . : · and their variants).
CREATE OR REPLACE MACRO python_lower(s) AS
  lower(CASE WHEN contains(s, 'Σ') THEN regexp_replace(s,
    '([\p{Lu}\p{Ll}\p{Lt}\x{AA}\x{BA}\x{2160}-\x{217F}\x{24B6}-\x{24E9}\x{1F130}-\x{1F149}\x{1F150}-\x{1F169}\x{1F170}-\x{1F189}]'
    || '[\p{Mn}\p{Me}\p{Cf}\p{Lm}\p{Sk}\x{27}.:\x{B7}\x{387}\x{55F}\x{5F4}\x{2018}\x{2019}\x{2024}\x{2027}\x{FE13}\x{FE52}\x{FE55}\x{FF07}\x{FF0E}\x{FF1A}]*)'
    || '\x{3A3}'
    || '([\p{Mn}\p{Me}\p{Cf}\p{Lm}\p{Sk}\x{27}.:\x{B7}\x{387}\x{55F}\x{5F4}\x{2018}\x{2019}\x{2024}\x{2027}\x{FE13}\x{FE52}\x{FE55}\x{FF07}\x{FF0E}\x{FF1A}]*'
    || '(?:[^\p{Lu}\p{Ll}\p{Lt}\x{AA}\x{BA}\x{2160}-\x{217F}\x{24B6}-\x{24E9}\x{1F130}-\x{1F149}\x{1F150}-\x{1F169}\x{1F170}-\x{1F189}'
    || '\p{Mn}\p{Me}\p{Cf}\p{Lm}\p{Sk}\x{27}.:\x{B7}\x{387}\x{55F}\x{5F4}\x{2018}\x{2019}\x{2024}\x{2027}\x{FE13}\x{FE52}\x{FE55}\x{FF07}\x{FF0E}\x{FF1A}]|$))',
    '\1ς\2', 'g') ELSE s END);

-- ---------------------------------------------------------------- the paper's normalisation
-- Python's \w on str is exactly the categories L*, N* and "_" (str.isalnum() plus "_"), and
-- \s is str.isspace(): \t \n \v \f \r, U+001C-U+001F, U+0085 and Z*. Checked over every code
-- point; the only differences are code points the running Python's Unicode database does not
-- assign yet (RE2 in DuckDB 2.0 knows Unicode 15.0, Python 3.11 knows 14.0): no real answer
-- text is affected, and which Python the seed ran on is not recorded anyway.
CREATE OR REPLACE MACRO normalize_answer(s) AS
  trim(regexp_replace(
         regexp_replace(python_lower(s), '[^\p{L}\p{N}_\t\n\x{0b}\f\r\x{1c}-\x{1f}\x{85}\p{Z}]', '', 'g'),
         '[\t\n\x{0b}\f\r\x{1c}-\x{1f}\x{85}\p{Z}]+', ' ', 'g'), ' ');

-- ---------------------------------------------------------------- dataset names
-- How tables name a dataset: the file (or folder) name of the path it was loaded from, and the
-- first 8 hex digits of its content hash, e.g. "sample_nq.jsonl (3f2a9c1d)". The path as typed
-- differs between machines and working directories; the hash says which content it was.
CREATE OR REPLACE MACRO dataset_name(dataset) AS regexp_extract(rtrim(dataset, '/'), '[^/]*$');

CREATE OR REPLACE MACRO dataset_label(dataset, dataset_sha) AS
  coalesce(nullif(dataset_name(dataset), '') || ' ', '') || '(' || left(dataset_sha, 8) || ')';

-- ---------------------------------------------------------------- SQuAD normalisation and token F1
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
-- run's stored prompt configuration, else the built-in types (engine/prompting/prompts.py
-- METADATA_TYPES; tests/store/test_views.py checks the two agree).
CREATE OR REPLACE MACRO label_short_a(config_json, metadata_type) AS
  coalesce(
    json_extract_string(config_json, '$.prompt.metadata.short_a'),
    json_extract_string(config_json, '$.metadata.short_a'),
    CASE metadata_type WHEN 'hai' THEN 'Human' WHEN 'gender' THEN 'Woman' WHEN 'race' THEN 'White'
                       WHEN 'publisher' THEN 'Wikipedia' END);

CREATE OR REPLACE MACRO label_short_b(config_json, metadata_type) AS
  coalesce(
    json_extract_string(config_json, '$.prompt.metadata.short_b'),
    json_extract_string(config_json, '$.metadata.short_b'),
    CASE metadata_type WHEN 'hai' THEN 'LLM' WHEN 'gender' THEN 'Man' WHEN 'race' THEN 'Black'
                       WHEN 'publisher' THEN 'Blog' END);

-- The short label on a run's relevant and on its non-relevant documents: A on relevant ones in
-- base, B in cf (counterfactual), none in vanilla. run_metrics' label columns and Table 1's.
CREATE OR REPLACE MACRO label_relevant(rag_mode, config_json, metadata_type) AS
  CASE rag_mode WHEN 'base' THEN label_short_a(config_json, metadata_type)
                WHEN 'cf' THEN label_short_b(config_json, metadata_type) END;

CREATE OR REPLACE MACRO label_nonrelevant(rag_mode, config_json, metadata_type) AS
  CASE rag_mode WHEN 'base' THEN label_short_b(config_json, metadata_type)
                WHEN 'cf' THEN label_short_a(config_json, metadata_type) END;
