package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/pgstore"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestBadOptionsAreRefused: every constructor refuses what it cannot
// honour with ErrInvalidOption, before touching the database.
func TestBadOptionsAreRefused(t *testing.T) {
	// A pool that connects lazily to nowhere: nothing may reach it.
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	cases := []struct {
		what string
		pool *pgxpool.Pool
		name string
		opts []pgstore.Option
	}{
		{"a nil pool", nil, "s", nil},
		{"an empty name", pool, "", nil},
		{"a name with a space", pool, "a b", nil},
		{"a name of 64 bytes", pool, strings.Repeat("x", 64), nil},
		{"a lease under MinLease", pool, "s", []pgstore.Option{pgstore.WithLease(pgstore.MinLease - 1)}},
		{"a poll of 0", pool, "s", []pgstore.Option{pgstore.WithPoll(0)}},
		{"a negative lock wait", pool, "s", []pgstore.Option{pgstore.WithLockWait(-time.Second)}},
		{"an outage limit of 0", pool, "s", []pgstore.Option{pgstore.WithMaxOutage(0)}},
		{"a retention of 0", pool, "s", []pgstore.Option{pgstore.WithOutcomeRetention(0)}},
		{"an empty instance name", pool, "s", []pgstore.Option{pgstore.WithInstance("")}},
		{"a nil clock", pool, "s", []pgstore.Option{pgstore.WithClock(nil)}},
		{"a nil option", pool, "s", []pgstore.Option{nil}},
	}
	for _, c := range cases {
		if _, err := pgstore.NewStore(c.pool, c.name, c.opts...); !errors.Is(err, pgstore.ErrInvalidOption) {
			t.Errorf("NewStore with %s = %v; want ErrInvalidOption", c.what, err)
		}
		if _, err := pgstore.NewClient(c.pool, c.name, c.opts...); !errors.Is(err, pgstore.ErrInvalidOption) {
			t.Errorf("NewClient with %s = %v; want ErrInvalidOption", c.what, err)
		}
		if _, err := pgstore.New(c.pool, c.name, c.opts...); !errors.Is(err, pgstore.ErrInvalidOption) {
			t.Errorf("New with %s = %v; want ErrInvalidOption", c.what, err)
		}
	}
	if err := pgstore.Migrate(context.Background(), nil); !errors.Is(err, pgstore.ErrInvalidOption) {
		t.Errorf("Migrate(nil) = %v; want ErrInvalidOption", err)
	}
	if err := pgstore.CreateRoles(context.Background(), nil); !errors.Is(err, pgstore.ErrInvalidOption) {
		t.Errorf("CreateRoles(nil) = %v; want ErrInvalidOption", err)
	}
}
