package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/pgstore"
)

// TestMigrateFreshTwiceAndConcurrently: Migrate creates the schema on an
// empty database, changes nothing when run again, and instances
// migrating at once wait for each other.
func TestMigrateFreshTwiceAndConcurrently(t *testing.T) {
	ctx := context.Background()
	pool := poolAs(t, freshDB(t))
	st, err := pgstore.NewStore(pool, "m")
	if err != nil {
		t.Fatal(err)
	}
	err = st.Load(func(k, v []byte) error { return nil })
	var se *pgstore.SchemaError
	if !errors.Is(err, pgstore.ErrNotMigrated) || !errors.As(err, &se) || se.Have != 0 {
		t.Fatalf("Load on an empty database = %v; want a *SchemaError matching ErrNotMigrated with Have 0", err)
	}
	errs := make(chan error, 4)
	for range 4 {
		go func() { errs <- pgstore.Migrate(ctx, pool) }()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent Migrate = %v", err)
		}
	}
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatalf("Migrate again = %v", err)
	}
	var n, max int
	if err := pool.QueryRow(ctx, `SELECT count(*), max(version) FROM baton.migrations`).Scan(&n, &max); err != nil {
		t.Fatal(err)
	}
	if n != pgstore.SchemaVersion || max != pgstore.SchemaVersion {
		t.Errorf("baton.migrations has %d rows up to version %d; want %d of each", n, max, pgstore.SchemaVersion)
	}
	if err := st.Load(func(k, v []byte) error { return nil }); err != nil {
		t.Fatalf("Load after Migrate = %v", err)
	}
	st.Close()
}

// TestMigrateRefusesNewerSchema: a database migrated by a newer pgstore
// is neither migrated nor used, with an error that says so.
func TestMigrateRefusesNewerSchema(t *testing.T) {
	ctx := context.Background()
	pool := poolAs(t, freshDB(t))
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	newer := pgstore.SchemaVersion + 1
	if _, err := pool.Exec(ctx, `INSERT INTO baton.migrations (version, name) VALUES ($1, 'from the future')`, newer); err != nil {
		t.Fatal(err)
	}
	err := pgstore.Migrate(ctx, pool)
	var se *pgstore.SchemaError
	if !errors.Is(err, pgstore.ErrSchemaNewer) || !errors.As(err, &se) || se.Have != newer || se.Know != pgstore.SchemaVersion {
		t.Fatalf("Migrate on a newer schema = %v; want a *SchemaError{Have: %d, Know: %d} matching ErrSchemaNewer", err, newer, pgstore.SchemaVersion)
	}
	if !strings.Contains(err.Error(), "newer") {
		t.Errorf("the error does not say the schema is newer: %v", err)
	}
	st, _ := pgstore.NewStore(pool, "m")
	_, err = coordinator.New(coordinator.WithStore(st))
	if !errors.Is(err, pgstore.ErrSchemaNewer) {
		t.Errorf("coordinator.New on a newer schema = %v; want ErrSchemaNewer", err)
	}
}

// A migration that changes a table waits for every transaction that read
// it, and everything that would use the table queues behind it: with a
// reader's transaction left open, the store froze (the leader's commit
// queued behind the migration, holding the lease row). Migrate gives way
// (lock_timeout) and tries again: writes go through meanwhile, and the
// migration lands once the transaction ends.
func TestMigrateGivesWayToOpenTransactions(t *testing.T) {
	ctx := testCtx(t)
	pool := poolAs(t, freshDB(t))
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	// Back to version 1, as a database migrated before version 2 is.
	if _, err := pool.Exec(ctx, `DELETE FROM baton.migrations WHERE version >= 2;
		ALTER TABLE baton.tasks DROP COLUMN history, DROP COLUMN last_attempt;
		CREATE INDEX pending_by_inbox ON baton.pending (inbox);
		DROP TABLE baton.beats`); err != nil {
		t.Fatal(err)
	}
	open, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { open.Rollback(context.Background()) }) // before the pool closes, if the test fails
	if _, err := open.Exec(ctx, `SELECT count(*) FROM baton.tasks`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- pgstore.Migrate(ctx, pool) }()
	for i := range 3 { // over several of Migrate's tries
		// Once the migration waits for the table (its lock request
		// queued), a write goes through within Migrate's lock_timeout.
		for queued := false; !queued; {
			if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks
				WHERE relation = 'baton.tasks'::regclass AND mode = 'AccessExclusiveLock' AND NOT granted)`).Scan(&queued); err != nil {
				t.Fatal(err)
			}
		}
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := pool.Exec(wctx, `INSERT INTO baton.tasks (store, seq, id) VALUES ('m', $1, 'x')`, i)
		cancel()
		if err != nil {
			t.Fatalf("a write while Migrate waits for an open transaction = %v; want it through", err)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("Migrate = %v while a transaction reads the table it changes; want it waiting", err)
	default:
	}
	if err := open.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Migrate once the transaction ended = %v", err)
	}
	var v int
	if err := pool.QueryRow(ctx, `SELECT max(version) FROM baton.migrations`).Scan(&v); err != nil || v != pgstore.SchemaVersion {
		t.Fatalf("schema version %d, %v; want %d", v, err, pgstore.SchemaVersion)
	}
}
