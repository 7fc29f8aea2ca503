package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

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
