-- pgstore schema, version 1. Applied by pgstore.Migrate, in one
-- transaction, with baton.migrations recording it. Forward only: a later
-- version adds a file 0002_....sql; none is ever edited once released.

CREATE SCHEMA IF NOT EXISTS baton;

-- One row per store (a scheduler's data set; several may share the
-- database): who leads it, in which term, until when.
CREATE TABLE baton.stores (
    store      text PRIMARY KEY CHECK (store <> ''),
    term       bigint NOT NULL DEFAULT 0,            -- the current leader's term; 0: never led
    holder     text NOT NULL DEFAULT '',             -- the instance holding the term ('' once it resigned)
    expires    timestamptz NOT NULL DEFAULT '-infinity', -- the lease's end, on the database's clock
    lease      interval NOT NULL DEFAULT '0',        -- the holder's lease, renewed by every commit
    claimed_at timestamptz                           -- when the current term began
);

-- Every record the scheduler commits, as it gave it: the store keeps
-- records of kinds it does not know, so that a newer record format needs
-- no schema change to be stored.
CREATE TABLE baton.records (
    store text NOT NULL,
    key   bytea NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (store, key)
);

-- A task's record decoded into columns, written in the same commit as
-- its records: what a person or a dashboard reads with SQL. Columns a
-- record does not fill (a task whose state record is not written yet, a
-- record of a newer format) are NULL.
CREATE TABLE baton.tasks (
    store        text NOT NULL,
    seq          bigint NOT NULL,     -- submission order
    id           text,
    func         text,
    pool         text,
    parent       text,                -- the task whose attempt spawned it (NULL: submitted)
    deps         text[],
    priority     integer,
    max_attempts integer,
    key          text,
    payload      bytea,
    status       text,                -- pending, ready, running, succeeded, failed, cancelled, skipped
    attempts     integer,
    runs         integer,
    error_kind   text,                -- cancelled, closed, interrupted, error, timeout, join
    error        text,
    cause        text,                -- skipped: the task to blame
    result       bytea,
    due          timestamptz,
    updated_at   timestamptz,         -- when the scheduler wrote the state
    PRIMARY KEY (store, seq)
);
CREATE INDEX tasks_by_id ON baton.tasks (store, id);
CREATE INDEX tasks_by_parent ON baton.tasks (store, parent) WHERE parent IS NOT NULL;
CREATE INDEX tasks_by_status ON baton.tasks (store, status);

-- Requests to the leader from any instance or transaction: a batch to
-- submit, a task to cancel. The leader takes them in id order; outcome
-- stays NULL until it has (an accepted batch's outcome is written in the
-- commit that stores its tasks).
CREATE TABLE baton.inbox (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    store      text NOT NULL,
    kind       text NOT NULL CHECK (kind IN ('submit', 'cancel')),
    body       bytea NOT NULL,                -- JSON: the tasks, or the ID to cancel
    ids        text[] NOT NULL,               -- the task IDs it names
    created_at timestamptz NOT NULL DEFAULT now(),
    outcome    text CHECK (outcome IN ('accepted', 'refused', 'cancelled', 'not_cancelled')),
    code       text,                          -- refused: the error's kind (duplicate, unknown_dependency, ...)
    error      text,                          -- refused: the error's text
    detail     jsonb,                         -- refused: the error's parts (task, detail, cycle), for Outcome
    done_at    timestamptz,
    term       bigint                         -- the term that decided it
);
CREATE INDEX inbox_pending ON baton.inbox (store, id) WHERE outcome IS NULL;
-- Bodies are read once, by the leader: not worth compressing.
ALTER TABLE baton.inbox ALTER COLUMN body SET STORAGE EXTERNAL;

-- The task IDs of the submitted batches the leader has not decided yet,
-- one row each: SubmitTx checks IDs and dependencies against them, and
-- its insert waits for, then conflicts with, a concurrent transaction
-- that submits the same ID (the unique key). The leader deletes a
-- batch's rows in the commit that decides it.
CREATE TABLE baton.pending (
    store text NOT NULL,
    id    text NOT NULL,
    inbox bigint NOT NULL,  -- its batch's baton.inbox.id (no foreign key: a check per ID halved SubmitTx's speed)
    PRIMARY KEY (store, id)
);
CREATE INDEX pending_by_inbox ON baton.pending (inbox);
CREATE INDEX inbox_done ON baton.inbox (store, done_at) WHERE outcome IS NOT NULL;

-- fence is the first statement of every commit of a leader: it renews
-- the lease of term p_term and fails the transaction (SQLSTATE BF001) if
-- another term has begun since: a deposed leader commits nothing. The
-- row lock it takes orders every commit against a standby's claim.
CREATE FUNCTION baton.fence(p_store text, p_term bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE baton.stores SET expires = now() + lease
     WHERE store = p_store AND term = p_term;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'baton: store % is no longer led by term %', p_store, p_term
            USING ERRCODE = 'BF001';
    END IF;
END
$$;
REVOKE ALL ON FUNCTION baton.fence(text, bigint) FROM PUBLIC;
