-- 008_explanations: Prompt 5 explanations of stored answers (`python -m engine explain`), what
-- each one mentions, and per run the share that gives a label as a reason.
-- Append-only: never edit this file once released; add NNN_name.sql files instead.
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

-- One row per document an explanation mentions: its number as shown, the document id, whether
-- it holds the answer, the label shown after it (NULL in vanilla), and whether the answer cited it.
CREATE VIEW explanation_mentions AS
WITH m AS (
  SELECT e.run_id, e.item_id, e.explainer_model, unnest(e.mentioned_docs) AS position
  FROM explanations e
), shown AS (
  SELECT m.*, r.experiment_id, r.model, r.rag_mode, r.metadata_type, r.config_json,
    g.shown_doc_ids[m.position] AS doc_id,
    -- A repeated id is relevant if any copy is, as in query_metrics.
    coalesce(list_bool_or(list_transform(
      list_filter(i.documents, lambda d: d.id = g.shown_doc_ids[m.position]), lambda d: d.relevant)), false) AS relevant
  FROM m
  JOIN runs r USING (run_id)
  JOIN generations g ON g.run_id = m.run_id AND g.item_id = m.item_id
  LEFT JOIN items i ON i.dataset_sha = r.dataset_sha AND i.item_id = m.item_id
)
SELECT
  s.run_id, s.item_id, s.explainer_model, s.experiment_id, s.model, s.rag_mode, s.metadata_type,
  s.position, s.doc_id, s.relevant,
  -- The label as engine.prompting.prompts writes it: relevant documents get label A in base, B in cf.
  CASE WHEN s.rag_mode NOT IN ('base', 'cf') THEN NULL
       WHEN s.relevant = (s.rag_mode = 'base')
       THEN coalesce(s.config_json->'prompt'->'metadata'->>'label_a', s.config_json->'metadata'->>'label_a')
       ELSE coalesce(s.config_json->'prompt'->'metadata'->>'label_b', s.config_json->'metadata'->>'label_b')
  END AS label,
  EXISTS (SELECT 1 FROM citations c
          WHERE c.run_id = s.run_id AND c.item_id = s.item_id AND c.position = s.position) AS cited
FROM shown s;

-- Per run and explainer: how many explanations, how many give a label as a reason, and the share.
CREATE VIEW explanation_rates AS
SELECT
  e.run_id, e.explainer_model, r.experiment_id, r.model, r.rag_mode, r.metadata_type,
  count(*) AS n_explanations,
  count(*) FILTER (WHERE e.mentions_label) AS n_mention_label,
  avg(CASE WHEN e.mentions_label THEN 1.0 ELSE 0.0 END) AS label_share,
  avg(CASE WHEN len(e.mentioned_docs) > 0 THEN 1.0 ELSE 0.0 END) AS document_share
FROM explanations e
JOIN runs r USING (run_id)
GROUP BY ALL;
