-- 015_propensities: the citation propensity probe (`python -m engine propensity`,
-- engine/judges/propensity.py): with the vanilla answer's text held fixed, the probability the model
-- gives each shown document's number at each citation mark, under the base and the cf prompt.
-- Do not change what this file does once released: add NNN_name.sql files instead.
-- Edited since release (998f2e4: CREATE TABLE IF NOT EXISTS (a store gets the same table)).
--
-- One row per (experiment, mode, item, citation site, candidate number, probe model). The
-- answer is the experiment's vanilla answer of the item; the prompt is the stored prompt of the
-- `rag_mode` run (generations.prompt), chat-templated as generation fed it. An item's rows of
-- both modes are written in one transaction, so a re-run skips the items already stored.

-- IF NOT EXISTS: tests that take a store back to an older version drop only the tables they know.
CREATE TABLE IF NOT EXISTS citation_propensities(
  experiment_id VARCHAR,
  rag_mode VARCHAR,                -- the prompt read: base | cf
  item_id VARCHAR,
  site_index INTEGER,              -- 0-based citation site ("[" opening a mark) of the vanilla answer
  position INTEGER,                -- the candidate "[n]": the document's number as shown (1-based)
  logprob DOUBLE NOT NULL,         -- raw log P("[n]" | prompt + answer up to the site), summed over its tokens
  probability DOUBLE NOT NULL,     -- the same normalised over the candidates 1..n_shown
  probe_model VARCHAR,             -- the model that read it, as the store names models
  created_utc TIMESTAMP NOT NULL,
  PRIMARY KEY(experiment_id, rag_mode, item_id, site_index, position, probe_model)
);
