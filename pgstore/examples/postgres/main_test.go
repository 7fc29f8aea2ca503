package main

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDemo runs the demo on BATON_PG_URL's server (.ci/postgres): every
// order is invoiced once, through a leader that changed halfway.
func TestDemo(t *testing.T) {
	db := os.Getenv("BATON_PG_URL")
	if db == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("BATON_PG_URL is not set (.ci/postgres start DIR)")
		}
		t.Skip("BATON_PG_URL is not set (.ci/postgres start DIR)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A database of its own, dropped at the end.
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("baton_example_%d", time.Now().UnixNano())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	defer func() {
		conn.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)")
		conn.Close(context.Background())
	}()
	u, _ := url.Parse(db)
	u.Path = "/" + name
	db = u.String()
	var out bytes.Buffer
	if err := run(ctx, db, &out); err != nil {
		t.Fatalf("run = %v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	for _, want := range []string{"shut down", "leads now", "12 orders invoiced, 12 tasks succeeded with their order"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the demo did not say %q", want)
		}
	}
}
