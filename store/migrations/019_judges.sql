-- 019_judges: a panel of judges of the same citations (`python -m engine verify --judge`,
-- `import-labels`, `agreement`).
-- Do not change what this file does once released: add NNN_name.sql files instead.
--
-- A judge is an LLM judging with AttrScore's prompt (rows in verifications, as since 010), an
-- NLI model (rows in verifications too: entailment -> attributable, contradiction ->
-- contradictory, anything else -> extrapolatory, its label probabilities as raw_output), or a
-- person whose labels were imported (rows in judge_labels: one verdict per cited document of an
-- answer, no sentence). `judges` holds what each judge is; the view `judgements` (store/views.sql)
-- puts every verdict on one (run, item, cited document) footing.

-- IF NOT EXISTS: tests that take a store back to an older version drop only the tables they know.
CREATE TABLE IF NOT EXISTS judges(
  judge VARCHAR PRIMARY KEY,       -- the name in verifications.judge_model and judge_labels.judge
  kind VARCHAR NOT NULL,           -- llm | nli | human
  model_id VARCHAR,                -- Hugging Face id or folder (llm, nli); NULL for a person
  mapping VARCHAR,                 -- nli: the config's labels -> classes (JSON); llm: the prompt's name
  provenance VARCHAR,              -- JSON: library versions, the file labels came from, ...
  created_utc TIMESTAMP NOT NULL,
  CHECK (kind IN ('llm', 'nli', 'human'))
);

CREATE TABLE IF NOT EXISTS judge_labels(
  run_id VARCHAR,
  item_id VARCHAR,
  position INTEGER,                -- the cited document's number as shown (1-based)
  judge VARCHAR,                   -- judges.judge (kind 'human')
  doc_id VARCHAR NOT NULL,         -- generations.shown_doc_ids[position]
  label VARCHAR NOT NULL,          -- attributable | not_attributable
  source VARCHAR NOT NULL,         -- the file and line it was imported from
  created_utc TIMESTAMP NOT NULL,
  PRIMARY KEY(run_id, item_id, position, judge),
  CHECK (label IN ('attributable', 'not_attributable'))
);
