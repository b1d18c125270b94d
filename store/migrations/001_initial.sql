-- 001_initial: runs, dataset items, generations, citations, and the `tokens` view.
-- Do not change what this file does once released: add NNN_name.sql files instead.
-- Edited since release (62e7936: its view statements removed, store/views.sql defines the views;
-- tests/support/old_migrations/001_initial.sql is the text as it shipped).

CREATE TABLE runs(
  run_id VARCHAR PRIMARY KEY,
  experiment_id VARCHAR NOT NULL,
  config_hash VARCHAR NOT NULL,
  created_utc TIMESTAMP NOT NULL,
  finished_utc TIMESTAMP,
  status VARCHAR NOT NULL,  -- running | complete | failed
  model VARCHAR NOT NULL,
  model_revision VARCHAR,
  quantization VARCHAR,
  dtype VARCHAR,
  device VARCHAR,
  dataset VARCHAR,
  dataset_sha VARCHAR NOT NULL,
  metadata_type VARCHAR,
  rag_mode VARCHAR NOT NULL,
  seed INTEGER,
  prompt_version VARCHAR,
  git_sha VARCHAR,
  library_versions JSON,
  config_json JSON,
  n_items INTEGER
);

CREATE TABLE items(
  dataset_sha VARCHAR,
  item_id VARCHAR,
  question VARCHAR NOT NULL,
  answers VARCHAR[] NOT NULL,
  documents STRUCT(id VARCHAR, title VARCHAR, text VARCHAR, relevant BOOLEAN)[] NOT NULL,  -- ranked order as in the dataset
  PRIMARY KEY(dataset_sha, item_id)
);

CREATE TABLE generations(
  run_id VARCHAR,
  item_id VARCHAR,
  prompt VARCHAR,
  answer VARCHAR NOT NULL,
  shown_doc_ids VARCHAR[] NOT NULL,  -- in the order shown: [1] is shown_doc_ids[1] (DuckDB lists are 1-based)
  n_prompt_tokens INTEGER,
  n_tokens INTEGER,
  finish_reason VARCHAR,
  token_ids INTEGER[],
  tokens VARCHAR[],
  logprobs DOUBLE[],  -- raw log-probs of the chosen tokens (before temperature, top-k, top-p)
  top_logprobs JSON,  -- per step: [[{"id":..,"token":..,"logprob":..}, ...], ...]; NULL when not recorded
  created_utc TIMESTAMP NOT NULL,
  PRIMARY KEY(run_id, item_id)
);

CREATE TABLE citations(
  run_id VARCHAR,
  item_id VARCHAR,
  citation_index INTEGER,  -- order in the answer, from 0
  position INTEGER,        -- the cited number n: 1-based position as shown
  doc_id VARCHAR,          -- NULL when n was not shown (out of range)
  relevant BOOLEAN,        -- NULL when n was not shown (out of range)
  probability DOUBLE,      -- P(number token(s) of n); NULL for imported answers
  PRIMARY KEY(run_id, item_id, citation_index)
);

-- The view tokens that this migration created is defined in store/views.sql now (applied after the migrations).
