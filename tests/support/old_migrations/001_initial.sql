-- 001_initial: runs, dataset items, generations, citations, and the `tokens` view.
-- Append-only: never edit this file once released; add NNN_name.sql files instead.

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

-- One row per generated token; step 0 is the first generated token.
-- Parallel unnests in one SELECT zip element-wise; `top` is NULL where alternatives were not recorded.
CREATE VIEW tokens AS
SELECT
  run_id,
  item_id,
  unnest(range(len(tokens))) AS step,
  unnest(token_ids) AS token_id,
  unnest(tokens) AS token,
  unnest(logprobs) AS logprob,
  unnest(CAST(top_logprobs AS JSON[])) AS top
FROM generations;
