-- 014_citation_decisions: the label each shown document carried, and the citation_decisions view
-- (issue 19). Append-only: never edit this file once released; add NNN_name.sql files instead.
--
-- generations.shown_labels holds, per shown document, the label text as the prompt rendered it
-- after "written by" (NULL entries: that document carried none). It is NULL for answers stored
-- before this migration; the view then derives the label from the run's mode and labels, which
-- is exactly what every prompt before the battery (relevant_at, repetition, label_scope and
-- many-valued types) showed.
ALTER TABLE generations ADD COLUMN shown_labels VARCHAR[];
-- View: citation_decisions, defined in store/views.sql, which every migration applies.
