package coordinator_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/batonhq/baton/coordinator"
)

func TestBranchSmoke(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(2))
		rec := record(s)
		err := s.Submit(
			coordinator.Task{ID: "b", Run: func(ctx context.Context) error { return coordinator.Choose(ctx, "yes") }},
			coordinator.Task{ID: "yes", Deps: []string{"b"}, Run: ok},
			coordinator.Task{ID: "no", Deps: []string{"b"}, Run: ok},
			coordinator.Task{ID: "no2", Deps: []string{"no"}, Run: ok},
			coordinator.Task{ID: "join", Deps: []string{"yes", "no2"}, When: coordinator.NoneFailedMinOneSuccess, Run: ok},
		)
		if err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		s.Submit(coordinator.Task{ID: "late", Deps: []string{"b"}, Run: ok})
		settle(t, s)
		for _, l := range rec.all() {
			t.Log(l.TaskID, l.Kind, l.Cause, l.Err)
		}
	})
}
