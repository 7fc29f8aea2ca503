package bench

import (
	"context"
	"io"
	"strconv"
	"testing"

	"github.com/batonhq/baton/coordinator"
)

// heldGraph returns a scheduler holding a random graph of -baton.n tasks
// whose roots wait for a gate task that runs until the benchmark ends:
// every task held, none final.
func heldGraph(b *testing.B) *coordinator.Scheduler {
	g := Random(*benchN, 1)
	tasks := stringTasks(g)
	s, err := coordinator.New(coordinator.WithWorkers(2))
	if err != nil {
		b.Fatal(err)
	}
	gate := make(chan struct{})
	b.Cleanup(func() {
		close(gate)
		_ = s.Shutdown(context.Background())
	})
	if err := s.Submit(coordinator.Task{ID: "gate", Run: func(context.Context) error { <-gate; return nil }}); err != nil {
		b.Fatal(err)
	}
	for i := range tasks {
		if len(tasks[i].Deps) == 0 {
			tasks[i].Deps = []string{"gate"}
		}
	}
	if err := s.Submit(tasks...); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkSnapshot: Snapshot on a scheduler holding -baton.n tasks (a
// random graph behind a gate, as BenchmarkCounts), one call per op: every
// task; every task rendered as Mermaid; the first 1,000; the last task
// and its ancestors; the gate and its direct and indirect dependents
// (every task: the worst case of a filter).
func BenchmarkSnapshot(b *testing.B) {
	s := heldGraph(b)
	last := strconv.Itoa(*benchN - 1)
	ctx := context.Background()
	cases := []struct {
		name   string
		f      coordinator.SnapshotFilter
		render bool
	}{
		{"all", coordinator.SnapshotFilter{}, false},
		{"all+mermaid", coordinator.SnapshotFilter{}, true},
		{"limit=1000", coordinator.SnapshotFilter{Limit: 1000}, false},
		{"ancestors-of-100", coordinator.SnapshotFilter{Roots: []string{"100"}, Ancestors: true}, false},
		{"ancestors-of-last", coordinator.SnapshotFilter{Roots: []string{last}, Ancestors: true}, false},
		{"descendants-of-gate", coordinator.SnapshotFilter{Roots: []string{"gate"}, Descendants: true}, false},
		// The dashboard's graph read: the 2,000 nearest, both ways.
		{"around-gate-limit=2000", coordinator.SnapshotFilter{Roots: []string{"gate"}, Ancestors: true, Descendants: true, Children: true, Depth: 10, Limit: 2000}, false},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			tasks := 0
			for b.Loop() {
				snap, err := s.Snapshot(ctx, c.f)
				if err != nil {
					b.Fatal(err)
				}
				tasks = len(snap.Tasks)
				if c.render {
					if err := snap.WriteMermaid(io.Discard); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(tasks), "tasks")
		})
	}
}
