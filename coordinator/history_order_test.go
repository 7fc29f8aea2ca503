package coordinator_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/batonhq/baton/coordinator"
)

// A Feed tells ends in the order the coordinator recorded them: one
// worker runs a, b (fails), c; c's first success once joined a's shared
// record, and was told before b's failure.
func TestFeedKeepsTheOrderOfEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(1))
		r := record(s)
		f := s.Feed()
		defer f.Close()
		drain(t, f, 1000)
		fail := func(context.Context) error { return errors.New("planned") }
		if err := s.Submit(coordinator.Task{ID: "a", Run: ok}, coordinator.Task{ID: "b", Run: fail}, coordinator.Task{ID: "c", Run: ok}); err != nil {
			t.Fatal(err)
		}
		s.Wait(context.Background())
		synctest.Wait()
		t.Logf("events: %v", r.lines(coordinator.EventSucceeded, coordinator.EventFailed))
		_, _, es := drain(t, f, 1000)
		for _, e := range es {
			t.Logf("entry ID %q Tasks %d %v", e.ID, e.Tasks, e.Outcome)
		}
		if len(es) != 3 {
			t.Errorf("%d entries; want a's, b's, c's in order", len(es))
		}
	})
}
