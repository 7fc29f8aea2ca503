package pgstore_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/pgstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// loginAs creates a login role in the given group role for this test
// (dropped at its end) and returns the test database's URL as it. The
// test server trusts 127.0.0.1: no password.
func loginAs(t *testing.T, group string) string {
	t.Helper()
	ctx := context.Background()
	admin := newPool(t)
	if err := pgstore.CreateRoles(ctx, admin); err != nil {
		t.Fatalf("CreateRoles = %v", err)
	}
	role := strings.ReplaceAll(uniqueName("t_"+group), "-", "_")
	if _, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN IN ROLE "+group); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin, err := pgx.Connect(ctx, needDB(t))
		if err != nil {
			t.Error(err)
			return
		}
		defer admin.Close(ctx)
		// Its sessions first: a role with sessions cannot be dropped.
		admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role)
		if _, err := admin.Exec(ctx, "DROP OWNED BY "+role+"; DROP ROLE "+role); err != nil {
			t.Error(err)
		}
	})
	u, _ := url.Parse(needDB(t))
	u.User = url.User(role)
	return u.String()
}

// denied asserts that sql, run as the pool's role, fails for want of a
// privilege (SQLSTATE 42501).
func denied(t *testing.T, conn *pgx.Conn, what, sql string, args ...any) {
	t.Helper()
	_, err := conn.Exec(context.Background(), sql, args...)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42501" {
		t.Errorf("%s: %s = %v; want permission denied (42501)", what, sql, err)
	}
}

// TestRolesLeastPrivilege runs a service as baton_scheduler, a client as
// baton_submitter and SQL as baton_reader, and tries as the submitter and
// the reader every write that would change a task, a record, a lease or
// an outcome: each is refused.
func TestRolesLeastPrivilege(t *testing.T) {
	ctx := testCtx(t)
	name := uniqueName("roles")
	schedURL, subURL, readURL := loginAs(t, "baton_scheduler"), loginAs(t, "baton_submitter"), loginAs(t, "baton_reader")

	sv, err := pgstore.New(poolAs(t, schedURL), name, pgstore.WithScheduler(
		coordinator.WithFunc("echo", func(ctx context.Context, p []byte) error { return coordinator.SetResult(ctx, p) })))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := sv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown = %v", err)
		}
	}()
	<-sv.Leading()

	subPool := poolAs(t, subURL)
	cl, err := pgstore.NewClient(subPool, name)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.Submit(ctx, coordinator.Task{ID: "a", Func: "echo", Payload: []byte("x")}, coordinator.Task{ID: "later", Func: "echo", Delay: 1 << 62}); err != nil {
		t.Fatalf("Submit as the submitter = %v", err)
	}
	if err := cl.WaitTasks(ctx, "a"); err != nil {
		t.Fatalf("WaitTasks as the submitter = %v", err)
	}
	tx, err := subPool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id, err := cl.SubmitTx(ctx, tx, coordinator.Task{ID: "b", Func: "echo", Deps: []string{"a"}})
	if err != nil {
		t.Fatalf("SubmitTx as the submitter = %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitBatch(ctx, id); err != nil {
		t.Fatalf("WaitBatch as the submitter = %v", err)
	}
	if ok, err := cl.Cancel(ctx, "later"); !ok || err != nil {
		t.Errorf("Cancel as the submitter = %v, %v", ok, err)
	}

	sub, err := pgx.Connect(ctx, subURL)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(ctx)
	attacks := []struct{ what, sql string }{
		{"mark a task succeeded", `UPDATE baton.tasks SET status = 'succeeded' WHERE store = '` + name + `'`},
		{"delete a task's columns", `DELETE FROM baton.tasks WHERE store = '` + name + `'`},
		{"rewrite a record", `UPDATE baton.records SET value = '\x00' WHERE store = '` + name + `'`},
		{"add a record", `INSERT INTO baton.records (store, key, value) VALUES ('` + name + `', '\x74', '\x00')`},
		{"delete records", `DELETE FROM baton.records WHERE store = '` + name + `'`},
		{"read records", `SELECT * FROM baton.records`},
		{"claim the lease", `UPDATE baton.stores SET term = term + 1, holder = 'me' WHERE store = '` + name + `'`},
		{"add a store", `INSERT INTO baton.stores (store) VALUES ('mine')`},
		{"renew or fence as the leader", `SELECT baton.fence('` + name + `', 1)`},
		{"answer a request", `UPDATE baton.inbox SET outcome = 'accepted' WHERE store = '` + name + `'`},
		{"add a request already answered", `INSERT INTO baton.inbox (store, kind, body, ids, outcome) VALUES ('` + name + `', 'submit', '\x7b7d', '{}', 'accepted')`},
		{"add a request with its own id", `INSERT INTO baton.inbox (id, store, kind, body, ids) OVERRIDING SYSTEM VALUE VALUES (1, '` + name + `', 'submit', '\x7b7d', '{}')`},
		{"delete a request", `DELETE FROM baton.inbox WHERE store = '` + name + `'`},
		{"lock requests", `SELECT id FROM baton.inbox FOR UPDATE`},
		{"free a pending ID", `DELETE FROM baton.pending WHERE store = '` + name + `'`},
		{"move a pending ID", `UPDATE baton.pending SET inbox = 1 WHERE store = '` + name + `'`},
		{"truncate the tasks", `TRUNCATE baton.tasks`},
		{"change the schema", `ALTER TABLE baton.tasks ADD COLUMN x int`},
		{"add a migration", `INSERT INTO baton.migrations (version, name) VALUES (99, 'x')`},
		{"create in the schema", `CREATE TABLE baton.mine (x int)`},
	}
	for _, a := range attacks {
		denied(t, sub, "the submitter may not "+a.what, a.sql)
	}

	// Requests a submitter writes by hand are checked by the leader:
	// refused, and the leader goes on.
	forged := []struct{ body, ids string }{
		{`not json`, `{}`},
		{`{"tasks":[{"id":"f1","func":"echo"}]}`, `{f2}`},                // ids that are not the body's
		{`{"tasks":[{"id":"f3","func":"echo"},{"id":"f3"}]}`, `{f3,f3}`}, // the same task twice
	}
	for _, f := range forged {
		var row int64
		if err := sub.QueryRow(ctx, `INSERT INTO baton.inbox (store, kind, body, ids) VALUES ($1, 'submit', $2, $3::text[]) RETURNING id`,
			name, []byte(f.body), f.ids).Scan(&row); err != nil {
			t.Fatal(err)
		}
		if err := cl.WaitBatch(ctx, pgstore.BatchID(row)); err == nil {
			t.Errorf("a forged request %s %s was accepted", f.body, f.ids)
		}
	}
	var row int64
	if err := sub.QueryRow(ctx, `INSERT INTO baton.inbox (store, kind, body, ids) VALUES ($1, 'cancel', 'garbage', '{}') RETURNING id`, name).Scan(&row); err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitBatch(ctx, pgstore.BatchID(row)); !errors.Is(err, pgstore.ErrCorruptRequest) {
		t.Errorf("a forged cancel = %v; want ErrCorruptRequest", err)
	}
	if err := cl.Submit(ctx, coordinator.Task{ID: "after", Func: "echo"}); err != nil {
		t.Fatalf("Submit after the forged requests = %v", err)
	}
	if err := cl.WaitTasks(ctx, "after", "b"); err != nil {
		t.Fatal(err)
	}
	// A forged notification only wakes waiters.
	if _, err := sub.Exec(ctx, `SELECT pg_notify('baton_lead', $1), pg_notify('baton_commit', $1), pg_notify('baton_inbox', $1)`, name); err != nil {
		t.Fatal(err)
	}
	if r, _ := sv.Role(); r != pgstore.Leader {
		t.Errorf("the service is %v after forged notifications; want leader", r)
	}

	// The reader reads, and writes nothing.
	rd, err := pgx.Connect(ctx, readURL)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close(ctx)
	var status, result string
	if err := rd.QueryRow(ctx, `SELECT status, convert_from(result, 'UTF8') FROM baton.tasks WHERE store = $1 AND id = 'a'`, name).Scan(&status, &result); err != nil || status != "succeeded" || result != "x" {
		t.Errorf("the reader reads task a: %q, %q, %v; want succeeded, x", status, result, err)
	}
	var n int
	if err := rd.QueryRow(ctx, `SELECT count(*) FROM baton.records WHERE store = $1`, name).Scan(&n); err != nil || n == 0 {
		t.Errorf("the reader counts records: %d, %v", n, err)
	}
	for _, a := range []struct{ what, sql string }{
		{"submit", `INSERT INTO baton.inbox (store, kind, body, ids) VALUES ('` + name + `', 'submit', '\x7b7d', '{}')`},
		{"mark a task", `UPDATE baton.tasks SET status = 'failed'`},
		{"delete records", `DELETE FROM baton.records`},
		{"claim the lease", `UPDATE baton.stores SET term = term + 1`},
		{"answer a request", `UPDATE baton.inbox SET outcome = 'refused'`},
		{"renew the lease", `SELECT baton.fence('` + name + `', 1)`},
		{"lock the lease", `SELECT * FROM baton.stores FOR UPDATE`},
	} {
		denied(t, rd, "the reader may not "+a.what, a.sql)
	}
	rc, err := pgstore.NewClient(poolAs(t, readURL), name)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if err := rc.Submit(ctx, coordinator.Task{ID: "r", Func: "echo"}); err == nil {
		t.Error("a Client as the reader submitted")
	}
	if err := rc.WaitTasks(ctx, "a"); err != nil {
		t.Errorf("WaitTasks as the reader = %v", err)
	}
}
