package coordinator_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
)

// A Feed opened before a series runs, read after: each run's end is told
// once, or counted as dropped (perTask cut it before the feed read it).
func TestFeedCountsRunsAPerTaskCutHid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(1), coordinator.WithHistory(1, 100))
		f := s.Feed()
		defer f.Close()
		drain(t, f, 1000)
		if err := s.Submit(coordinator.Task{ID: "series", Every: time.Minute, Times: 3, Run: ok}); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		tasks, dropped, es := drain(t, f, 1000)
		for _, e := range es {
			t.Logf("entry: ID %q Tasks %d run %d", e.ID, e.Tasks, e.Run)
		}
		if tasks+int(dropped) != 3 {
			t.Errorf("told %d, dropped %d; 3 runs ended", tasks, dropped)
		}
		for _, e := range es {
			// Run 1 was a first success, shared; the cut let go of it (its
			// record names no task then: EndedAttempt.ID).
			if e.Tasks != 1 || (e.ID != "series" && !(e.ID == "" && e.Run == 1)) {
				t.Errorf("entry %+v: want the series' runs, by its ID but a first success the cut let go of", e)
			}
		}
	})
}

// The same with retries: the history's perTask cut hides attempts from a
// Feed that had not read them yet.
func TestFeedCountsRetriesAPerTaskCutHid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(1), coordinator.WithHistory(1, 100))
		f := s.Feed()
		defer f.Close()
		drain(t, f, 1000)
		fail := func(context.Context) error { return errors.New("planned") }
		if err := s.Submit(coordinator.Task{ID: "bad", Retry: coordinator.RetryPolicy{MaxAttempts: 3}, Run: fail}); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		tasks, dropped, _ := drain(t, f, 1000)
		if tasks+int(dropped) != 3 {
			t.Errorf("told %d, dropped %d; 3 attempts ended", tasks, dropped)
		}
	})
}
