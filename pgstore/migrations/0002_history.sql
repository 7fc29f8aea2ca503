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

-- The leader's heartbeat, beside its lease row: written every third of a
-- lease, even while the leader's own commit holds baton.stores' row, so
-- that a claim can tell a leader slow to send a long commit (it beats)
-- from one stopped or cut off in the middle of one (it does not), whose
-- session the claim ends (docs/postgres.md).
CREATE TABLE baton.beats (
    store text PRIMARY KEY,
    term  bigint NOT NULL,      -- the term of the leader that beat
    at    timestamptz NOT NULL  -- when, on the database's clock
);
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'baton_scheduler') THEN
        GRANT SELECT, INSERT, UPDATE ON baton.beats TO baton_scheduler;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'baton_reader') THEN
        GRANT SELECT ON baton.beats TO baton_reader;
    END IF;
END
$$;
