package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/batonhq/baton/coordinator"
)

func TestSpawnSmoke(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(2))
		rec := record(s)
		err := s.Submit(
			coordinator.Task{ID: "p", Run: func(ctx context.Context) error {
				var kids []coordinator.Task
				for i := range 3 {
					kids = append(kids, coordinator.Task{ID: fmt.Sprint("p.", i), Run: ok})
				}
				kids = append(kids, coordinator.Task{ID: "p.bad", Run: func(context.Context) error { return errors.New("no") }, Deps: []string{"p.0"}})
				return coordinator.Spawn(ctx, kids...)
			}},
			coordinator.Task{ID: "after", Deps: []string{"p"}, Run: ok},
		)
		if err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		for _, l := range rec.lines() {
			t.Log(l)
		}
		info, _ := s.Info("p")
		t.Logf("%+v", info)
		info, _ = s.Info("after")
		t.Logf("%+v", info)
	})
}
