-- pgstore schema, version 3: baton.pending loses its index on inbox. A
-- batch's pending rows are deleted by their key (store, id), the IDs its
-- inbox row names; maintaining a second index for every pending ID took
-- about a third of SubmitTx's time on the server (bench/README.md).
DROP INDEX IF EXISTS baton.pending_by_inbox;
