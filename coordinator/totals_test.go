package coordinator_test

import (
	"context"
	"errors"
	"testing"

	"github.com/batonhq/baton/coordinator"
)

// Totals count every final status and every retry, per pool, and keep
// counting after retention forgets the tasks.
func TestTotals(t *testing.T) {
	s := newScheduler(t, coordinator.WithWorkers(1), coordinator.WithPool("io", 1, echo{}), coordinator.WithRetention(0))
	ok := func(context.Context) error { return nil }
	tries := 0
	err := s.Submit(
		coordinator.Task{ID: "a", Run: ok},
		coordinator.Task{ID: "b", Run: ok, Pool: "io"},
		coordinator.Task{ID: "flaky", Run: func(context.Context) error {
			if tries++; tries < 3 {
				return errors.New("again")
			}
			return nil
		}, Retry: coordinator.RetryPolicy{MaxAttempts: 3}},
		coordinator.Task{ID: "lint", Run: func(context.Context) error { return errors.New("style") }},
		coordinator.Task{ID: "report", Run: ok, Deps: []string{"lint"}},
		coordinator.Task{ID: "nightly", Run: ok, Delay: 1 << 40, Pool: "io"},
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WaitTasks(context.Background(), "a", "b", "flaky", "report"); err == nil {
		t.Fatal("WaitTasks = nil; want report skipped")
	}
	s.Cancel("nightly")
	if err := s.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[string]coordinator.Totals{
		"":   {Succeeded: 2, Failed: 1, Skipped: 1, Retries: 2},
		"io": {Succeeded: 1, Cancelled: 1},
	}
	got := s.Totals()
	if len(got) != 2 || got[""] != want[""] || got["io"] != want["io"] {
		t.Errorf("Totals = %+v; want %+v", got, want)
	}
	if c := s.Counts(); c.Total() != 0 {
		t.Errorf("Counts after retention = %+v; want every task forgotten", c)
	}
	if got[""].Of(coordinator.Skipped) != 1 || got[""].Of(coordinator.Running) != 0 {
		t.Errorf("Of: %d, %d", got[""].Of(coordinator.Skipped), got[""].Of(coordinator.Running))
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if after := s.Totals(); after[""] != want[""] {
		t.Errorf("Totals after Shutdown = %+v", after)
	}
}
