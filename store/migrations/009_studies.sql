-- 009_studies: a study is a named grid of experiments run by one `run` command with comma
-- lists (`run --study NAME --top-k 5,10 --metadata gender,race ...`). An experiment stays what
-- migration 004 made it (found by its key); a study only groups experiments, and one
-- experiment can belong to several studies (two grids that share a configuration).
-- Append-only: never edit this file once released; add NNN_name.sql files instead.

CREATE TABLE studies(
  name VARCHAR PRIMARY KEY,  -- `run --study NAME`, or generated from the grid's experiment keys
  created_utc TIMESTAMP NOT NULL,
  axes_json JSON             -- the lists as given: {"model": [...], "metadata": [...], "top_k": [...], ...}
);

CREATE TABLE study_experiments(
  study VARCHAR NOT NULL,
  experiment_id VARCHAR NOT NULL,
  position INTEGER NOT NULL, -- the configuration's place in the grid (models, then metadata, top-k, order, few-shot, xai)
  PRIMARY KEY(study, experiment_id)
);
