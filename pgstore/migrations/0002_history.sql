-- pgstore schema, version 2: each task's attempts in baton.tasks, for
-- SQL and Client.History. Both columns are JSON as docs/postgres.md
-- describes; a row written before this version has NULL in both until its
-- task's next attempt ends.

-- The attempts the scheduler keeps of the task (WithHistory), oldest
-- first, and how many older ones it dropped:
-- {"dropped": n, "attempts": [attempt, ...]}. NULL when last_attempt says
-- it all (the task's one attempt succeeded with no error or log line).
ALTER TABLE baton.tasks ADD COLUMN history jsonb;

-- The task's newest attempt that ended: {"attempt", "run", "rerun",
-- "outcome", "worker", "handed_out", "started", "ended", "error_kind",
-- "error", "logs_dropped"} (its log lines are in history).
ALTER TABLE baton.tasks ADD COLUMN last_attempt jsonb;
