package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"net/url"
	"os"
	"testing"

	"github.com/batonhq/baton/pgstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"
)

// The tests run against a real PostgreSQL server: BATON_PG_URL names a
// superuser's connection to it (.ci/postgres starts one and prints it).
// Each run of the test binary creates a database of its own on it,
// migrated, and drops it at the end. Without BATON_PG_URL the tests skip,
// and fail under CI=true.
var (
	adminURL string // the server's superuser URL, from BATON_PG_URL
	dbURL    string // the test database's, as its owner (a superuser)
	dbName   string
)

func TestMain(m *testing.M) {
	flag.Parse()
	if child := os.Getenv(childEnv); child != "" {
		os.Exit(childMain(child))
	}
	adminURL = os.Getenv("BATON_PG_URL")
	code := 0
	if adminURL != "" {
		var err error
		if err = setupDB(); err != nil {
			fmt.Fprintln(os.Stderr, "pgstore tests:", err)
			os.Exit(1)
		}
		code = m.Run()
		if err := dropDB(); err != nil {
			fmt.Fprintln(os.Stderr, "pgstore tests: dropping the test database:", err)
		}
	} else {
		code = m.Run()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak: errors on successful test run:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func setupDB() error {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("BATON_PG_URL: %w", err)
	}
	defer conn.Close(ctx)
	b := make([]byte, 6)
	rand.Read(b)
	dbName = "baton_test_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+dbName); err != nil {
		return err
	}
	u, err := url.Parse(adminURL)
	if err != nil {
		return err
	}
	u.Path = "/" + dbName
	dbURL = u.String()
	os.Setenv("BATON_PGSTORE_TEST_DB", dbURL) // for the tests inside the package
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	return pgstore.Migrate(ctx, pool)
}

func dropDB() error {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP DATABASE "+dbName+" WITH (FORCE)")
	return err
}

// needDB returns the test database's URL, skipping the test without a
// server, or failing it under CI=true.
func needDB(t testing.TB) string {
	t.Helper()
	if dbURL == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("BATON_PG_URL is not set: CI must run these tests against a real PostgreSQL server (.ci/postgres start DIR)")
		}
		t.Skip("BATON_PG_URL is not set: start a server with .ci/postgres start DIR and export what it prints")
	}
	return dbURL
}

// newPool returns a pool on the test database, as its owner, closed at
// the end of the test.
func newPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return poolAs(t, needDB(t))
}

func poolAs(t testing.TB, u string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// uniqueName returns a store name no other test uses.
func uniqueName(prefix string) string {
	b := make([]byte, 4)
	rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// freshDB creates an empty database for one test, dropped at its end,
// and returns its URL (as the superuser).
func freshDB(t testing.TB) string {
	t.Helper()
	needDB(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	name := "baton_fresh_" + hex.EncodeToString(func() []byte { b := make([]byte, 6); rand.Read(b); return b }())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Error(err)
		}
	})
	u, _ := url.Parse(adminURL)
	u.Path = "/" + name
	return u.String()
}
