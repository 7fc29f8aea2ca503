package pgstore_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/pgstore"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ownServer starts a PostgreSQL server of the test's own with the repo's
// script (.ci/postgres; it needs root, as CI runs), stopped at the end of
// the test, and returns its directory and URL.
func ownServer(t *testing.T) (dir, url string) {
	t.Helper()
	needDB(t)
	script, err := filepath.Abs("../.ci/postgres")
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("the restart test runs its own server as the postgres user: it needs root")
		}
		t.Skip("the restart test runs its own server as the postgres user: it needs root")
	}
	// Not t.TempDir: its parents are closed to the postgres user.
	dir, err = os.MkdirTemp("/tmp", "pgstore-restart-")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(script, "start", dir).Output()
	t.Cleanup(func() {
		if err := exec.Command(script, "stop", dir).Run(); err != nil {
			t.Errorf("stopping the server: %v", err)
		}
	})
	if err != nil {
		t.Fatalf("%s start: %v", script, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "BATON_PG_URL="); ok {
			url = v
		}
	}
	if url == "" {
		t.Fatalf("%s start said %q", script, out)
	}
	return dir, url
}

// TestDatabaseRestart stops the database in immediate mode (a crash: no
// checkpoint, every connection cut) while a service runs a graph, and
// starts it again: the leader waits (its commit tries again, its
// attempts are held while its lease is not renewed), goes on in the same
// term, and nothing is lost or done twice.
func TestDatabaseRestart(t *testing.T) {
	dir, url := ownServer(t)
	script, _ := filepath.Abs("../.ci/postgres")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	var ended atomic.Int64
	halfway := make(chan struct{})
	var once sync.Once
	const chain, wide = 200, 200
	var mu sync.Mutex
	runs := map[string]int{}
	work := func(ctx context.Context, p []byte) error {
		mu.Lock()
		runs[string(p)]++
		mu.Unlock()
		if ended.Add(1) == chain/4 {
			once.Do(func() { close(halfway) })
		}
		return nil
	}
	sv, err := pgstore.New(pool, "restart", pgstore.WithLease(time.Second), pgstore.WithPoll(100*time.Millisecond),
		pgstore.WithScheduler(coordinator.WithFunc("work", work)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := sv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown = %v", err)
		}
	}()
	<-sv.Leading()
	_, term := sv.Role()
	var tasks []coordinator.Task
	var ids []string
	for i := range chain {
		id := fmt.Sprintf("c%d", i)
		task := coordinator.Task{ID: id, Func: "work", Payload: []byte(id), Retry: coordinator.RetryPolicy{MaxAttempts: 100}}
		if i > 0 {
			task.Deps = []string{fmt.Sprintf("c%d", i-1)}
		}
		tasks, ids = append(tasks, task), append(ids, id)
	}
	for i := range wide {
		id := fmt.Sprintf("w%d", i)
		tasks, ids = append(tasks, coordinator.Task{ID: id, Func: "work", Payload: []byte(id), Delay: 50 * time.Millisecond}), append(ids, id)
	}
	if err := sv.Submit(ctx, tasks...); err != nil {
		t.Fatal(err)
	}
	<-halfway
	if out, err := exec.Command(script, "crash", dir).CombinedOutput(); err != nil {
		t.Fatalf("crash: %v: %s", err, out)
	}
	at := ended.Load()
	if out, err := exec.Command(script, "restart", dir).CombinedOutput(); err != nil {
		t.Fatalf("restart: %v: %s", err, out)
	}
	t.Logf("the database crashed after %d ends, and came back", at)
	// A submit and a wait from another client, after the restart.
	cl, err := pgstore.NewClient(pool, "restart", pgstore.WithPoll(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.Submit(ctx, coordinator.Task{ID: "after", Func: "work", Payload: []byte("after"), Deps: []string{"c199"}}); err != nil {
		t.Fatalf("Submit after the restart = %v", err)
	}
	if err := cl.WaitTasks(ctx, append(ids, "after")...); err != nil {
		t.Fatalf("WaitTasks = %v", err)
	}
	if r, now := sv.Role(); r != pgstore.Leader || now != term {
		t.Errorf("after the restart the service is %v in term %d; want the leader of term %d still", r, now, term)
	}
	var rows, distinct, succeeded int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT id), count(*) FILTER (WHERE status = 'succeeded') FROM baton.tasks WHERE store = 'restart'`).Scan(&rows, &distinct, &succeeded); err != nil {
		t.Fatal(err)
	}
	if want := chain + wide + 1; rows != want || distinct != want || succeeded != want {
		t.Errorf("baton.tasks: %d rows, %d IDs, %d succeeded; want %d", rows, distinct, succeeded, want)
	}
	mu.Lock()
	defer mu.Unlock()
	twice := 0
	for _, n := range runs {
		if n > 1 {
			twice++
		}
	}
	t.Logf("%d tasks ran, %d of them more than once (started before the crash, their end not committed)", len(runs), twice)
}
