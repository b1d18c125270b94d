-- 010_verifications: AttrScore attribution verification of stored answers
-- (`python -m engine verify`), and per run the shares of each class.
-- Append-only: never edit this file once released; add NNN_name.sql files instead.
--
-- One row per (run, item, answer sentence, cited document, judge model): whether the document
-- cited by that sentence supports the claim (question + sentence), as judged by `judge_model`
-- (by default the model that answered). `class` is engine.judges.verify.parse_class of the output,
-- computed when the row is written; a later parser change needs a backfill migration, like 007's.

CREATE TABLE verifications(
  run_id VARCHAR,
  item_id VARCHAR,
  sentence_index INTEGER,          -- 0-based, engine.judges.verify.split_sentences of generations.answer
  position INTEGER,                -- the cited document's number as shown (1-based)
  judge_model VARCHAR,
  doc_id VARCHAR NOT NULL,         -- generations.shown_doc_ids[position]
  prompt VARCHAR NOT NULL,         -- AttrScore's validator instruction, claim and reference (user turn, no chat template)
  raw_output VARCHAR NOT NULL,
  class VARCHAR NOT NULL,          -- attributable | extrapolatory | contradictory | unparsed
  p_attributable DOUBLE,           -- probability of a token starting each class word at the step the
  p_extrapolatory DOUBLE,          -- verdict starts, over the recorded top-n (lower bounds);
  p_contradictory DOUBLE,          -- NULL when unparsed (see engine.judges.verify.class_probabilities)
  created_utc TIMESTAMP NOT NULL,
  PRIMARY KEY(run_id, item_id, sentence_index, position, judge_model),
  CHECK (class IN ('attributable', 'extrapolatory', 'contradictory', 'unparsed'))
);

-- Per run and judge: how many citations (sentence, document pairs) were judged, and the share
-- of each class, unparsed included (the four shares sum to 1).
CREATE VIEW verification_shares AS
SELECT
  v.run_id, v.judge_model, r.experiment_id, r.model, r.rag_mode, r.metadata_type,
  count(*) AS n_citations,
  count(*) FILTER (WHERE v.class = 'attributable') AS n_attributable,
  count(*) FILTER (WHERE v.class = 'extrapolatory') AS n_extrapolatory,
  count(*) FILTER (WHERE v.class = 'contradictory') AS n_contradictory,
  count(*) FILTER (WHERE v.class = 'unparsed') AS n_unparsed,
  avg(CASE WHEN v.class = 'attributable' THEN 1.0 ELSE 0.0 END) AS attributable_share,
  avg(CASE WHEN v.class = 'extrapolatory' THEN 1.0 ELSE 0.0 END) AS extrapolatory_share,
  avg(CASE WHEN v.class = 'contradictory' THEN 1.0 ELSE 0.0 END) AS contradictory_share,
  avg(CASE WHEN v.class = 'unparsed' THEN 1.0 ELSE 0.0 END) AS unparsed_share
FROM verifications v
JOIN runs r USING (run_id)
GROUP BY ALL;
