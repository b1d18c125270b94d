-- 010_verifications: AttrScore attribution verification of stored answers
-- (`python -m engine verify`), and per run the shares of each class.
-- Do not change what this file does once released: add NNN_name.sql files instead.
-- Edited since release (62e7936: its view statement removed, store/views.sql defines the view;
-- tests/support/old_migrations holds the text as it shipped).
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

-- The view verification_shares that this migration created is defined in store/views.sql now (applied after the migrations).
