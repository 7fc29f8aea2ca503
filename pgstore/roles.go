package pgstore

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// RolesSQL is the script that creates the roles a deployment needs,
// baton_scheduler, baton_submitter and baton_reader, and grants each the
// least it needs on the baton schema (the file roles.sql of this module;
// docs/postgres.md explains it). Run it after Migrate, as the schema's
// owner; it may run again.
//
//go:embed roles.sql
var RolesSQL string

// CreateRoles runs RolesSQL on the database pool reaches, in one
// transaction. It blocks for it; roles are the server's, grants the
// database's.
func CreateRoles(ctx context.Context, pool *pgxpool.Pool) error {
	if pool == nil {
		return fmt.Errorf("%w: CreateRoles with a nil pool", ErrInvalidOption)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: CreateRoles: %w", err)
	}
	defer tx.Rollback(ctx)
	// Two sessions creating the roles at once would race on pg_roles.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrateLock)); err != nil {
		return fmt.Errorf("pgstore: CreateRoles: %w", err)
	}
	if _, err := tx.Exec(ctx, RolesSQL); err != nil {
		return fmt.Errorf("pgstore: CreateRoles: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: CreateRoles: %w", err)
	}
	return nil
}
