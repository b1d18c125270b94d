-- 014_citation_decisions: the label each shown document carried, and the citation_decisions view
--. Do not change what this file does once released: add NNN_name.sql files instead.
-- Edited since release: IF NOT EXISTS added (2ee901b), the short label macros added (77abdf6) and
-- moved to store/macros.sql (migration 018); the text before that is tests/support/old_migrations/014_citation_decisions.sql.
--
-- generations.shown_labels holds, per shown document, the label text as the prompt rendered it
-- after "written by" (NULL entries: that document carried none). It is NULL for answers stored
-- before this migration; the view then derives the label from the run's mode and labels, which
-- is exactly what every prompt before the battery (relevant_at, repetition, label_scope and
-- many-valued types) showed.
-- IF NOT EXISTS: tests that take a store back to an older version drop only the tables they know.
ALTER TABLE generations ADD COLUMN IF NOT EXISTS shown_labels VARCHAR[];
-- View: citation_decisions, defined in store/views.sql, which every migration applies.

-- The short label names know the battery's publisher type: label_short_a and label_short_b,
-- defined in store/macros.sql now (applied after the migrations).
