-- 008_explanations: Prompt 5 explanations of stored answers (`python -m engine explain`), what
-- each one mentions, and per run the share that gives a label as a reason.
-- Do not change what this file does once released: add NNN_name.sql files instead.
-- Edited since release (62e7936: its view statements removed, store/views.sql defines the views;
-- tests/support/old_migrations holds the text as it shipped).
--
-- One explanation per (run, item, explainer model): the answer of generations(run_id, item_id)
-- explained by `explainer_model` (by default the model that answered). The mention columns are
-- computed by engine.judges.explain when the row is written, from the text and the labels the answering
-- model saw; a later parser change needs a backfill migration, like 007's.

CREATE TABLE explanations(
  run_id VARCHAR,
  item_id VARCHAR,
  explainer_model VARCHAR,
  prompt VARCHAR NOT NULL,           -- Prompt 5 as given to the explainer (user turn, no chat template)
  text VARCHAR NOT NULL,
  n_prompt_tokens INTEGER,
  n_tokens INTEGER,
  finish_reason VARCHAR,             -- stop | length
  token_ids INTEGER[],
  tokens VARCHAR[],
  logprobs DOUBLE[],                 -- raw log-probs of the chosen tokens, as in generations
  mentioned_docs INTEGER[] NOT NULL, -- document numbers n the text names ([n], "document n"), as shown, ascending
  mentions_label BOOLEAN NOT NULL,   -- gives a label as a reason: a label's text or its category
  mentioned_labels VARCHAR[] NOT NULL, -- which: label texts as configured ("a woman"), then categories ("gender")
  created_utc TIMESTAMP NOT NULL,
  PRIMARY KEY(run_id, item_id, explainer_model)
);

-- The view explanation_mentions that this migration created is defined in store/views.sql now (applied after the migrations).

-- The view explanation_rates that this migration created is defined in store/views.sql now (applied after the migrations).
