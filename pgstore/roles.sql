-- Roles of a Baton deployment on PostgreSQL (pgstore), least privilege.
-- Run it after pgstore.Migrate, as the owner of the baton schema (the role
-- that migrated), in each database that holds one; psql -f roles.sql, or
-- pgstore.CreateRoles. It may run again: it creates what is missing and
-- grants again. The three roles log in to nothing: grant them to the
-- login roles of your services, for example
--
--   CREATE ROLE orders_app LOGIN PASSWORD '...' IN ROLE baton_scheduler;
--   CREATE ROLE web LOGIN PASSWORD '...' IN ROLE baton_submitter;
--   CREATE ROLE grafana LOGIN PASSWORD '...' IN ROLE baton_reader;
--
-- baton_scheduler: the instances that run a pgstore.Service (or a Store):
--   claim and renew a store's lease, write its records and task columns,
--   take and answer requests, and submit as a client does.
-- baton_submitter: processes that submit, cancel and wait (a Client,
--   SubmitTx): read the tasks and the inbox, add requests (the columns of
--   a request, never its outcome). It changes no task, record or lease:
--   only the leader does, on its requests.
-- baton_reader: dashboards and people with SQL: read everything, write
--   nothing.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'baton_scheduler') THEN
        CREATE ROLE baton_scheduler NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'baton_submitter') THEN
        CREATE ROLE baton_submitter NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'baton_reader') THEN
        CREATE ROLE baton_reader NOLOGIN;
    END IF;
END
$$;

GRANT USAGE ON SCHEMA baton TO baton_scheduler, baton_submitter, baton_reader;
GRANT SELECT ON baton.migrations TO baton_scheduler, baton_submitter, baton_reader;

GRANT SELECT, INSERT, UPDATE, DELETE ON baton.stores, baton.records, baton.tasks, baton.inbox, baton.pending TO baton_scheduler;
GRANT SELECT, INSERT, UPDATE ON baton.beats TO baton_scheduler;
GRANT EXECUTE ON FUNCTION baton.fence(text, bigint) TO baton_scheduler;

GRANT SELECT ON baton.tasks, baton.inbox, baton.pending TO baton_submitter;
GRANT INSERT (store, kind, body, ids) ON baton.inbox TO baton_submitter;
GRANT INSERT ON baton.pending TO baton_submitter;

GRANT SELECT ON baton.stores, baton.records, baton.tasks, baton.inbox, baton.pending, baton.beats TO baton_reader;
