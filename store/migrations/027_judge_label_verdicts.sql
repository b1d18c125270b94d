-- 027_judge_label_verdicts: the judge's own label bias measured on one sentence at a time
-- (`python -m engine verify --show-label`).
-- Append-only: never edit this file once released; add NNN_name.sql files instead.
--
-- A base run's (answer sentence, cited document) pair is judged four times by one judge: with the
-- label the base prompt showed after that document, with the label the cf prompt of the same
-- experiment showed after it (the other one), and twice with no label, once in each of those two
-- passes (the same input beside other neighbours in its batch: what the judge's own noise reads).
-- Only the label differs between the first two, so base - cf share judged attributable is the
-- judge's label bias; the two hidden verdicts are its control. The verdicts of a judge on each
-- run's own sentences stay in `verifications`: there the sentences of base and cf may differ.

CREATE TABLE IF NOT EXISTS judge_label_verdicts(
  run_id VARCHAR,                  -- the base run whose answer sentence is judged
  item_id VARCHAR,
  sentence_index INTEGER,          -- as in verifications
  position INTEGER,                -- the cited document's number as the base run showed it (1-based)
  judge_model VARCHAR,             -- the judge as `verify --show-label` names it (JUDGE+label)
  label_from VARCHAR,              -- base | cf: whose label of the document the prompt shows (or, hidden, whose pass judged it)
  label_shown BOOLEAN,             -- false: the control, the same prompt with no label
  cf_run VARCHAR NOT NULL,         -- the cf run whose label label_from 'cf' shows
  doc_id VARCHAR NOT NULL,
  label VARCHAR,                   -- the label shown after "written by"; NULL when hidden
  prompt VARCHAR NOT NULL,         -- as in verifications: AttrScore's user turn, or an NLI premise and hypothesis (JSON)
  raw_output VARCHAR NOT NULL,
  class VARCHAR NOT NULL,          -- attributable | extrapolatory | contradictory | unparsed
  p_attributable DOUBLE,
  p_extrapolatory DOUBLE,
  p_contradictory DOUBLE,
  created_utc TIMESTAMP NOT NULL,
  PRIMARY KEY(run_id, item_id, sentence_index, position, judge_model, label_from, label_shown),
  CHECK (label_from IN ('base', 'cf')),
  CHECK (label_shown = (label IS NOT NULL)),
  CHECK (class IN ('attributable', 'extrapolatory', 'contradictory', 'unparsed'))
);
