package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migration is one file of migrations/: NNNN_name.sql, version NNNN.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded migrations in version order. Their
// versions are 1, 2, ... without gaps (TestMigrationsAreNumbered).
func migrations() []migration {
	ents, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		panic("pgstore: embedded migrations: " + err.Error())
	}
	var ms []migration
	for _, e := range ents {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			panic("pgstore: embedded migration without a version: " + e.Name())
		}
		b, err := migrationFiles.ReadFile("migrations/" + e.Name())
		if err != nil {
			panic("pgstore: embedded migrations: " + err.Error())
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(b)})
	}
	slices.SortFunc(ms, func(a, b migration) int { return a.version - b.version })
	return ms
}

// SchemaVersion is the schema version this package uses and Migrate
// brings a database to.
var SchemaVersion = len(migrations())

// migrateLock is the transaction-level advisory lock that serializes
// Migrate calls on one database (several instances starting at once).
const migrateLock = 0x6261746f6e6d6967 // "batonmig"

// Migrate brings the database's Baton schema (schema "baton") to
// SchemaVersion: it applies, in one transaction, every embedded
// migration the database lacks, in order, and records each in
// baton.migrations. Migrations only go forward: a database migrated by a
// newer version of this package is left as it is, and Migrate returns a
// *SchemaError matching ErrSchemaNewer. It is safe to call from several
// instances at once (they wait for each other on an advisory lock) and
// again on a migrated database (it changes nothing). It needs a role that
// may create schemas and tables (the database's owner, say), not the
// scheduler's role of the roles script. It blocks for the transaction.
//
// A migration that changes a table waits for every transaction that read
// it (a SubmitTx left open, a dashboard's query), and everything that
// would use the table queues behind it, the leader's commits included.
// Migrate waits for such a table a second at most (lock_timeout), rolls
// back so that the queue drains, and tries again a moment later, until
// ctx ends: a long transaction delays the migration, never the store.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	if pool == nil {
		return fmt.Errorf("%w: Migrate with a nil pool", ErrInvalidOption)
	}
	wait := 0.1 // seconds
	for {
		err := migrate(ctx, pool)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "55P03" { // lock_timeout
			return err
		}
		// A pause on the server's clock (no clock of this process: Migrate
		// takes no options), in which the queue behind the table drains.
		if _, serr := pool.Exec(ctx, `SELECT pg_sleep($1)`, wait); serr != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("pgstore: migrate: a transaction kept a table the migration changes, until: %w (%v)", ctx.Err(), err)
			}
			return fmt.Errorf("pgstore: migrate: %w", serr)
		}
		wait = min(2*wait, 2)
	}
}

// migrate is one try of Migrate.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrateLock)); err != nil {
			return fmt.Errorf("pgstore: migrate: %w", err)
		}
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '1s'`); err != nil {
			return fmt.Errorf("pgstore: migrate: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS baton;
			CREATE TABLE IF NOT EXISTS baton.migrations (
				version    integer PRIMARY KEY,
				name       text NOT NULL,
				applied_at timestamptz NOT NULL DEFAULT now()
			)`); err != nil {
			return fmt.Errorf("pgstore: migrate: %w", err)
		}
		have, err := schemaVersion(ctx, tx)
		if err != nil {
			return err
		}
		ms := migrations()
		if have > len(ms) {
			return &SchemaError{Have: have, Know: len(ms)}
		}
		for _, m := range ms[have:] {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("pgstore: migration %s: %w", m.name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO baton.migrations (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
				return fmt.Errorf("pgstore: migration %s: %w", m.name, err)
			}
		}
		return nil
	})
}

// queryer is what schemaVersion needs of a connection, a pool or a
// transaction.
type queryer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// schemaVersion returns the database's schema version: 0 without
// baton.migrations.
func schemaVersion(ctx context.Context, q queryer) (int, error) {
	var v int
	err := q.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM baton.migrations`).Scan(&v)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "3F000") { // undefined table, schema
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("pgstore: reading the schema version: %w", err)
	}
	return v, nil
}

// checkSchema returns nil if the database's schema is the one this
// package uses, and a *SchemaError otherwise.
func checkSchema(ctx context.Context, q queryer) error {
	v, err := schemaVersion(ctx, q)
	if err != nil {
		return err
	}
	if v != SchemaVersion {
		return &SchemaError{Have: v, Know: SchemaVersion}
	}
	return nil
}
