// Package pgstore keeps a durable Baton scheduler's state in PostgreSQL
// (13 and later): a coordinator.Store on a table of records (Store), a
// service of several instances on one database of which one leads
// (Service), submits from anywhere through the database (Client), and
// batches submitted inside the caller's own transaction (SubmitTx).
// docs/postgres.md describes the schema, leadership and fencing, the
// roles and the figures.
package pgstore
