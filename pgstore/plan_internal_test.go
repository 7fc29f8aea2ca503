package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// needEnv returns environment variable name, set by the test binary's
// main (BATON_PGSTORE_TEST_DB) or by .ci/postgres (BATON_PG_URL); without
// it the test fails under CI and is skipped elsewhere.
func needEnv(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("BATON_PG_URL is not set")
		}
		t.Skip("BATON_PG_URL is not set")
	}
	return v
}

// planNodes returns every node of an EXPLAIN (FORMAT JSON) plan.
func planNodes(n map[string]any) []map[string]any {
	out := []map[string]any{n}
	if kids, ok := n["Plans"].([]any); ok {
		for _, k := range kids {
			out = append(out, planNodes(k.(map[string]any))...)
		}
	}
	return out
}

// TestCheckBatchProbesByID: SubmitTx's check reads baton.tasks and
// baton.pending only through their (store, id) keys, one probe per ID,
// whatever the planner knows of the tables: on a young table without
// statistics (where a planner chose the (store, status) index and
// compared every ID of a batch with every task of the store: 3 s per
// batch of 1,000 at 22,000 tasks) and once analyzed, with the generic
// plan a prepared statement ends up with. Its answer is checked too.
func TestCheckBatchProbesByID(t *testing.T) {
	admin := needEnv(t, "BATON_PG_URL")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	r := make([]byte, 6)
	rand.Read(r)
	name := "baton_plan_" + hex.EncodeToString(r)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)")
	u, _ := url.Parse(admin)
	u.Path = "/" + name
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = fmt.Sprintf("j%d", 21500+i) // the first 501 are stored
	}
	idsJSON, _ := json.Marshal(ids)
	deps := `["j7", "gone", "waiting"]`
	for _, analyzed := range []bool{false, true} {
		t.Run(fmt.Sprintf("analyzed=%v", analyzed), func(t *testing.T) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			if _, err := tx.Exec(ctx, `INSERT INTO baton.tasks (store, seq, id, status)
				SELECT 's', g, 'j' || g, 'succeeded' FROM generate_series(1, 22000) g;
				INSERT INTO baton.pending (store, id, inbox) SELECT 's', 'p' || g, 1 FROM generate_series(1, 5000) g;
				INSERT INTO baton.pending (store, id, inbox) VALUES ('s', 'waiting', 2);
				SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
				t.Fatal(err)
			}
			if analyzed {
				if _, err := tx.Exec(ctx, `ANALYZE baton.tasks; ANALYZE baton.pending`); err != nil {
					t.Fatal(err)
				}
			}
			stmt := fmt.Sprintf("check_batch_%v", analyzed) // a session's, whatever the transaction
			if _, err := tx.Exec(ctx, "PREPARE "+stmt+"(text, text, text) AS "+checkBatchSQL); err != nil {
				t.Fatal(err)
			}
			quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
			args := "('s', " + quote(string(idsJSON)) + ", " + quote(deps) + ")"
			var plan []map[string]any
			if err := tx.QueryRow(ctx, `EXPLAIN (FORMAT JSON) EXECUTE `+stmt+args).Scan(&plan); err != nil {
				t.Fatal(err)
			}
			for _, n := range planNodes(plan[0]["Plan"].(map[string]any)) {
				rel, _ := n["Relation Name"].(string)
				if rel != "tasks" && rel != "pending" {
					continue
				}
				want := map[string]string{"tasks": "tasks_by_id", "pending": "pending_pkey"}[rel]
				kind, _ := n["Node Type"].(string)
				index, _ := n["Index Name"].(string)
				if index != want || !slices.Contains([]string{"Index Scan", "Index Only Scan"}, kind) {
					t.Errorf("the check reads baton.%s by %s %q; want an index scan of %s, one probe per ID", rel, kind, index, want)
				}
			}
			var dups, missing string
			if err := tx.QueryRow(ctx, `EXECUTE `+stmt+args).Scan(&dups, &missing); err != nil {
				t.Fatal(err)
			}
			var d, m []string
			json.Unmarshal([]byte(dups), &d)
			json.Unmarshal([]byte(missing), &m)
			if len(d) != 501 || d[0] != "j21500" || d[500] != "j22000" || !slices.Equal(m, []string{"gone"}) {
				t.Errorf("check: %d stored (%v ... ), missing %v; want j21500..j22000 stored, gone missing", len(d), d[:min(len(d), 3)], m)
			}
		})
	}
}
