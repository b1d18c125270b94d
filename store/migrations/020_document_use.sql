-- 020_document_use: cited or used? (`python -m engine used`, engine/judges/document_use.py):
-- with a stored answer's text held fixed, its log-probability with the full prompt, without one
-- shown document, and with only the cited documents.
-- Do not change what this file does once released: add NNN_name.sql files instead.
--
-- One row per (run, item, shown position, model). The prompt is the stored one
-- (generations.prompt), chat-templated as generation fed it; "without" leaves out that
-- document's line only, the others keep their numbers (engine/prompting/ablation.py), so "[n]" in
-- the answer names the same document in every variant. logp_full and logp_cited_only belong to
-- the answer and repeat on each of its rows. An item's rows are written in one transaction, so a
-- re-run skips the items already stored. The view citation_use (store/views.sql) says which
-- citations are used.

-- IF NOT EXISTS: tests that take a store back to an older version drop only the tables they know.
CREATE TABLE IF NOT EXISTS document_use(
  run_id VARCHAR,
  item_id VARCHAR,
  position INTEGER,                -- the shown document's number (1-based)
  model VARCHAR,                   -- the model that read it, as the store names models
  logp_full DOUBLE NOT NULL,       -- log P(answer | full prompt), summed over the answer's tokens
  logp_without DOUBLE NOT NULL,    -- log P(answer | prompt without this document's line)
  logp_cited_only DOUBLE NOT NULL, -- log P(answer | prompt with only the cited documents' lines)
  necessity DOUBLE NOT NULL,       -- logp_full - logp_without: > 0 where leaving it out costs the answer
  sufficiency DOUBLE NOT NULL,     -- logp_cited_only - logp_full: near 0 where the cited ones suffice
  cited BOOLEAN NOT NULL,          -- the answer cites this position (table citations, in range)
  created_utc TIMESTAMP NOT NULL,
  PRIMARY KEY(run_id, item_id, position, model)
);
