-- 021_study_effects: the label effect per configuration of a study, from one model across the
-- study (`python -m engine why-cited --study NAME --save`, engine/statistics/study_model.py).
-- Do not change what this file does once released: add NNN_name.sql files instead.
--
-- A fitted model is no SQL view: the conditional logit across the study's citation decisions,
-- with its cluster-robust covariance by item, is fitted in Python, and `--save` keeps its
-- per-configuration effects here. A save replaces the study's rows (of the same modes) in one
-- transaction. The rows say what they were fitted on (the number of answers and items) and when;
-- refit after adding runs. Not merged by `merge` (a derived value: refit in the merged store).

-- IF NOT EXISTS: tests that take a store back to an older version drop only the tables they know.
CREATE TABLE IF NOT EXISTS study_label_effects(
  study VARCHAR,                   -- studies.name
  modes VARCHAR,                   -- the modes fitted, comma-separated ('all' when every mode)
  configuration VARCHAR,           -- 'model=m1, order=ranked': the level of each axis the study varies
  configuration_json JSON,         -- the same as {axis: level}
  label_a VARCHAR NOT NULL,        -- the labels compared: label A (the side CAB > 0 favours) against B
  label_b VARCHAR NOT NULL,
  n_answers INTEGER NOT NULL,      -- informative answers of the configuration (cite some but not all)
  n_items INTEGER NOT NULL,
  log_odds DOUBLE NOT NULL,        -- log odds ratio of citing a label-A document against a label-B one
  se DOUBLE NOT NULL,              -- cluster-robust (sandwich) by item, across the whole study
  ci_low DOUBLE NOT NULL,          -- 95% Wald interval of the log odds ratio
  ci_high DOUBLE NOT NULL,
  odds_ratio DOUBLE NOT NULL,      -- exp(log_odds), and its interval
  or_low DOUBLE NOT NULL,
  or_high DOUBLE NOT NULL,
  p DOUBLE,
  interaction_chi2 DOUBLE,         -- the study's Wald test that the label effect is the same in every
  interaction_df INTEGER,          -- configuration (repeated on each row; NULL with one configuration)
  interaction_p DOUBLE,
  fitted_utc TIMESTAMP NOT NULL,
  PRIMARY KEY(study, modes, configuration)
);
