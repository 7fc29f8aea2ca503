package bench

import (
	"context"
	"testing"

	"github.com/batonhq/baton/coordinator"
)

// BenchmarkFeed: what a change feed's read costs the coordinator with
// -baton.n tasks held (the dashboard reads 1,000 rows at a time): a read
// of the first pass, and a read when nothing changed (the scan of a bit
// per task and of the lanes). A read is a round trip, during which the
// coordinator does nothing else.
func BenchmarkFeed(b *testing.B) {
	g := Random(*benchN, 1)
	tasks := stringTasks(g)
	s, err := coordinator.New(coordinator.WithWorkers(2))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	gate := make(chan struct{})
	defer close(gate)
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
	ctx := context.Background()
	b.Run("first-pass-1000-rows", func(b *testing.B) {
		f := s.Feed()
		for b.Loop() {
			p, err := f.Next(ctx, 1000)
			if err != nil {
				b.Fatal(err)
			}
			if !p.More {
				f.Close()
				f = s.Feed()
			}
		}
		f.Close()
	})
	b.Run("nothing-changed", func(b *testing.B) {
		f := s.Feed()
		defer f.Close()
		for p, err := f.Next(ctx, 100_000); p.More; p, err = f.Next(ctx, 100_000) {
			if err != nil {
				b.Fatal(err)
			}
		}
		for b.Loop() {
			if _, err := f.Next(ctx, 1000); err != nil {
				b.Fatal(err)
			}
		}
	})
}
