-- 004_experiments: experiments as rows (named or found by their key), one run per mode per
-- experiment, and the process that is generating a run.
-- Do not change what this file does once released: add NNN_name.sql files instead.
-- Edited since release (27e7393: the unique index runs_one_per_mode removed (the store refuses a
-- second run of a mode instead); stores migrated before may hold it).

CREATE TABLE experiments(
  experiment_id VARCHAR PRIMARY KEY,
  name VARCHAR UNIQUE,       -- `run --experiment NAME`; NULL when unnamed
  experiment_key VARCHAR,    -- hash of model + dataset content + settings except the mode;
                             -- NULL for experiments older than this migration or made by `import`
  created_utc TIMESTAMP NOT NULL,
  model VARCHAR,
  dataset VARCHAR,           -- the path or name first given
  dataset_sha VARCHAR,
  settings_json JSON         -- the prompt and generation settings its runs share (mode left out)
);

-- Before this migration an experiment could hold two runs of one mode; from now on the store
-- refuses a second one inside the transaction that creates runs (DuckDB admits one writer per
-- file, so nothing can interleave). Keep in each experiment the run the bias view used (the
-- newest complete one, else the newest) and give every other run an experiment of its own.
-- (No unique index backs this up: DuckDB cannot create an index in the transaction that updates
-- the table, and a migration is one transaction.)
UPDATE runs SET experiment_id = experiment_id || '~' || run_id
WHERE run_id IN (
  SELECT run_id FROM (
    SELECT run_id, row_number() OVER (
             PARTITION BY experiment_id, rag_mode
             ORDER BY status = 'complete' DESC, created_utc DESC, run_id DESC) AS n
    FROM runs)
  WHERE n > 1);

INSERT INTO experiments (experiment_id, created_utc, model, dataset, dataset_sha)
SELECT experiment_id, min(created_utc), any_value(model), any_value(dataset), any_value(dataset_sha)
FROM runs GROUP BY experiment_id;

-- One row per run while a process generates it; deleted when the run finishes. A run whose
-- owner is gone (kill -9, a crash) is resumable; one whose owner lives is refused to others.
CREATE TABLE run_owners(
  run_id VARCHAR PRIMARY KEY,
  host VARCHAR NOT NULL,
  pid INTEGER NOT NULL,
  process_start VARCHAR,     -- boot id + start time of the process, so a reused pid is not taken for it
  heartbeat_utc TIMESTAMP NOT NULL  -- refreshed with every batch; judges owners on other hosts
);
