-- 014_citation_decisions: the label each shown document carried, and the citation_decisions view
-- (issue 19). Append-only: never edit this file once released; add NNN_name.sql files instead.
--
-- generations.shown_labels holds, per shown document, the label text as the prompt rendered it
-- after "written by" (NULL entries: that document carried none). It is NULL for answers stored
-- before this migration; the view then derives the label from the run's mode and labels, which
-- is exactly what every prompt before the battery (relevant_at, repetition, label_scope and
-- many-valued types) showed.
-- IF NOT EXISTS: tests that take a store back to an older version drop only the tables they know.
ALTER TABLE generations ADD COLUMN IF NOT EXISTS shown_labels VARCHAR[];
-- View: citation_decisions, defined in store/views.sql, which every migration applies.

-- The built-in types' short label names, as 002 spelt them, with the battery's publisher type
-- (engine/prompting/prompts.py METADATA_TYPES; tests/test_views.py checks the two agree).
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
