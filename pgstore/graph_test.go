package pgstore_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/batonhq/baton/coordinator"
	"github.com/jackc/pgx/v5/pgxpool"
)

// randomGraph returns batches of "work" tasks, each task depending on up
// to two earlier ones (of its batch or an earlier one), with retries
// enough that crashes never exhaust them.
func randomGraph(rng *rand.Rand, prefix string, batches, size int) [][]coordinator.Task {
	var all []string
	out := make([][]coordinator.Task, batches)
	for b := range batches {
		for i := range size {
			id := fmt.Sprintf("%s%d.%d", prefix, b, i)
			var deps []string
			for range rng.IntN(3) {
				if len(all) > 0 {
					d := all[len(all)-1-rng.IntN(min(len(all), 40))]
					if !strings.Contains(strings.Join(deps, ","), d) {
						deps = append(deps, d)
					}
				}
			}
			out[b] = append(out[b], coordinator.Task{ID: id, Func: "work", Payload: []byte(id), Deps: deps,
				Retry: coordinator.RetryPolicy{MaxAttempts: 1000}})
			all = append(all, id)
		}
	}
	return out
}

// checkRun checks what a run of the graph left: every batch accepted
// once, every task stored once and succeeded, and, in the children's
// log, every start of a task after an end of each of its dependencies
// (a dependent starts only once its dependency's success is committed,
// which comes after its function returned).
func checkRun(ctx context.Context, t *testing.T, pool *pgxpool.Pool, name, logPath string, graph [][]coordinator.Task) {
	t.Helper()
	var accepted, other int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE outcome = 'accepted'), count(*) FILTER (WHERE outcome IS DISTINCT FROM 'accepted')
		FROM baton.inbox WHERE store = $1 AND kind = 'submit'`, name).Scan(&accepted, &other); err != nil {
		t.Fatal(err)
	}
	if accepted != len(graph) || other != 0 {
		t.Errorf("inbox: %d batches accepted, %d not; want %d accepted, none other", accepted, other, len(graph))
	}
	n := 0
	deps := map[string][]string{}
	for _, b := range graph {
		n += len(b)
		for _, task := range b {
			deps[task.ID] = task.Deps
		}
	}
	var rows, ids, succeeded int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT id), count(*) FILTER (WHERE status = 'succeeded')
		FROM baton.tasks WHERE store = $1`, name).Scan(&rows, &ids, &succeeded); err != nil {
		t.Fatal(err)
	}
	if rows != n || ids != n || succeeded != n {
		t.Errorf("baton.tasks: %d rows, %d IDs, %d succeeded; want %d of each", rows, ids, succeeded, n)
	}
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ended := map[string]bool{}
	starts := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			t.Fatalf("log line %q", sc.Text())
		}
		switch fields[0] {
		case "start":
			starts++
			for _, d := range deps[fields[1]] {
				if !ended[d] {
					t.Errorf("%s started (on %s) before its dependency %s had ended", fields[1], fields[2], d)
				}
			}
		case "end":
			ended[fields[1]] = true
		}
	}
	for id := range deps {
		if !ended[id] {
			t.Errorf("%s never ran to its end", id)
		}
	}
	t.Logf("%d tasks, %d starts (%d more than once: restarts)", n, starts, starts-n)
}
