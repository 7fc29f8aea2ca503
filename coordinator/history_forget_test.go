package coordinator_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/batonhq/baton/coordinator"
)

// Retention forgets two tasks before a Feed reads their ends: the plain
// first success is told (its record, shared, stays; no ID), the failure
// counted as dropped; together, every end.
func TestFeedCountsEndsOfForgottenTasks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(1), coordinator.WithRetention(0))
		f := s.Feed()
		defer f.Close()
		drain(t, f, 1000)
		fail := func(context.Context) error { return errors.New("planned") }
		if err := s.Submit(coordinator.Task{ID: "good", Run: ok}, coordinator.Task{ID: "bad", Run: fail}); err != nil {
			t.Fatal(err)
		}
		s.Wait(context.Background())
		synctest.Wait()
		if _, known := s.Info("good"); known {
			t.Fatal("not forgotten")
		}
		told, dropped, es := drain(t, f, 1000)
		for _, e := range es {
			t.Logf("entry %+v", e)
		}
		if told+int(dropped) != 2 {
			t.Errorf("told %d, dropped %d; 2 attempts ended", told, dropped)
		}
	})
}
