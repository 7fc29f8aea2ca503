package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/worker"
)

// Counts, CountsByPool and Tasks agree with Info, task by task, in every
// status, over two pools, and after Shutdown.
func TestCountsAgreeWithInfo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gpu := &countingWorker{block: make(chan struct{})}
		s := newScheduler(t, coordinator.WithWorkers(2), coordinator.WithPool("gpu", 1, gpu))
		g := newGate()
		err := s.Submit(
			coordinator.Task{ID: "run1", Run: g.run},
			coordinator.Task{ID: "run2", Run: g.run},
			coordinator.Task{ID: "ready", Run: ok},
			coordinator.Task{ID: "waiting", Deps: []string{"run1"}, Run: ok},
			coordinator.Task{ID: "delayed", Delay: time.Hour, Run: ok},
			coordinator.Task{ID: "done", Run: ok, Priority: -1},
			coordinator.Task{ID: "bad", Run: func(context.Context) error { return errors.New("x") }, Priority: -1},
			coordinator.Task{ID: "skipped", Deps: []string{"bad"}, Run: ok},
			coordinator.Task{ID: "gpu-run", Pool: "gpu", Payload: "block"},
			coordinator.Task{ID: "gpu-ready", Pool: "gpu", Payload: "job"},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		synctest.Wait()
		s.Cancel("delayed")
		if err := s.Submit(coordinator.Task{ID: "later", Delay: time.Hour, Run: ok}); err != nil {
			t.Fatal(err)
		}
		check := func(when string) {
			t.Helper()
			ids := []string{"run1", "run2", "ready", "waiting", "delayed", "done", "bad", "skipped", "gpu-run", "gpu-ready", "later"}
			var want coordinator.Counts
			wantPools := map[string]coordinator.Counts{"": {}, "gpu": {}}
			byStatus := map[coordinator.Status][]string{}
			for _, id := range ids {
				info, _ := s.Info(id)
				add(&want, info.Status)
				c := wantPools[info.Pool]
				add(&c, info.Status)
				wantPools[info.Pool] = c
				byStatus[info.Status] = append(byStatus[info.Status], id)
			}
			if got := s.Counts(); got != want || got.Total() != len(ids) {
				t.Fatalf("%s: Counts = %+v; Info says %+v", when, got, want)
			}
			if got := s.CountsByPool(); len(got) != 2 || got[""] != wantPools[""] || got["gpu"] != wantPools["gpu"] {
				t.Fatalf("%s: CountsByPool = %+v; Info says %+v", when, got, wantPools)
			}
			for st := coordinator.Pending; st <= coordinator.Skipped; st++ {
				got := s.Tasks(st, 0)
				slices.Sort(got)
				slices.Sort(byStatus[st])
				if !slices.Equal(got, byStatus[st]) || s.Counts().Of(st) != len(got) {
					t.Fatalf("%s: Tasks(%v) = %v; Info says %v", when, st, got, byStatus[st])
				}
				if n := len(byStatus[st]); n > 1 && len(s.Tasks(st, 1)) != 1 {
					t.Fatalf("%s: Tasks(%v, 1) returned more than 1", when, st)
				}
			}
		}
		check("while running")
		if c := s.Counts(); c.Running != 3 || c.Pending != 2 || c.Cancelled != 1 {
			t.Fatalf("Counts = %+v; want 3 running (run1, run2, gpu-run), 2 pending (waiting, later), 1 cancelled", c)
		}
		g.release()
		close(gpu.block)
		s.Cancel("later")
		settle(t, s)
		check("settled")
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		check("after Shutdown")
	})
}

func add(c *coordinator.Counts, st coordinator.Status) {
	switch st {
	case coordinator.Pending:
		c.Pending++
	case coordinator.Ready:
		c.Ready++
	case coordinator.Running:
		c.Running++
	case coordinator.Succeeded:
		c.Succeeded++
	case coordinator.Failed:
		c.Failed++
	case coordinator.Cancelled:
		c.Cancelled++
	case coordinator.Skipped:
		c.Skipped++
	}
}

// Retention: forgotten tasks are not counted.
func TestCountsForgetWithRetention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithRetention(time.Minute))
		if err := s.Submit(coordinator.Task{ID: "a", Run: ok}, coordinator.Task{ID: "b", Run: ok}); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		if c := s.Counts(); c.Succeeded != 2 {
			t.Fatalf("Counts = %+v; want 2 succeeded", c)
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if c := s.Counts(); c.Total() != 0 || len(s.Tasks(coordinator.Succeeded, 0)) != 0 {
			t.Fatalf("Counts = %+v after retention; want none", c)
		}
	})
}

func TestPoolSizes(t *testing.T) {
	s := newScheduler(t, coordinator.WithWorkers(3), coordinator.WithPool("gpu", 2, worker.Func{}))
	want := map[string]int{"": 3, "gpu": 2}
	got := s.PoolSizes()
	if !maps.Equal(got, want) {
		t.Fatalf("PoolSizes() = %v; want %v", got, want)
	}
	got["gpu"] = 99 // the caller's map
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := s.PoolSizes(); !maps.Equal(got, want) {
		t.Errorf("PoolSizes() after Shutdown = %v; want %v", got, want)
	}
}

// After Shutdown every query answers from the final state, and is safe
// for concurrent use there too: scans of every task (Counts, Tasks,
// Snapshot, a Feed's read) write the state's scratch as they did on the
// loop, and took no turns (the race detector found them racing).
func TestQueriesAfterShutdownAreSafeForConcurrentUse(t *testing.T) {
	s, err := coordinator.New(coordinator.WithWorkers(2))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if err := s.Submit(coordinator.Task{ID: fmt.Sprint(i), Run: ok}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	if err := s.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	queries := []func(){
		func() { s.Counts() },
		func() { s.CountsByPool() },
		func() { s.Tasks(coordinator.Succeeded, 0) },
		func() { _, _ = s.Snapshot(ctx, coordinator.SnapshotFilter{}) },
		func() { s.Info("7") },
		func() { s.History("7") },
		func() { s.Detail("7") },
		func() { s.Totals() },
		func() {
			f := s.Feed()
			defer f.Close()
			_, _ = f.Next(ctx, 1000)
		},
	}
	var wg sync.WaitGroup
	for range 2 {
		for _, q := range queries {
			wg.Go(func() {
				for range 20 {
					q()
				}
			})
		}
	}
	wg.Wait()
	if c := s.Counts(); c.Succeeded != 100 || c.Total() != 100 {
		t.Errorf("Counts after Shutdown = %+v; want 100 succeeded", c)
	}
}
