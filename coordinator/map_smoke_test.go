package coordinator_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/batonhq/baton/coordinator"
)

func TestMapSmoke(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(2))
		sq := func(ctx context.Context, x int) (int, error) {
			if x == 3 {
				return 0, errors.New("three")
			}
			return x * x, nil
		}
		sum := func(ctx context.Context, rs []coordinator.Mapped[int]) (int, error) {
			n := 0
			for _, r := range rs {
				n += r.Value
			}
			return n, nil
		}
		err := s.Submit(
			coordinator.Task{ID: "list", Run: func(ctx context.Context) error { return coordinator.SetResult(ctx, []int{1, 2, 4}) }},
			coordinator.Task{ID: "list3", Run: func(ctx context.Context) error { return coordinator.SetResult(ctx, []int{1, 2, 3}) }},
			coordinator.Task{ID: "empty", Run: func(ctx context.Context) error { return coordinator.SetResult(ctx, []int{}) }},
			coordinator.Map("m", "list", sq, sum),
			coordinator.Map("m3", "list3", sq, sum),
			coordinator.Map("m3t", "list3", sq, sum, coordinator.MapReduce(coordinator.Task{When: coordinator.AllDone})),
			coordinator.Map("me", "empty", sq, sum),
			coordinator.Task{ID: "use", Deps: []string{"m"}, Run: func(ctx context.Context) error {
				v, err := coordinator.Result[int](ctx, "m")
				if err != nil {
					return err
				}
				return coordinator.SetResult(ctx, v+1000)
			}},
		)
		if err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		for _, id := range []string{"m", "m3", "m3t", "me", "use", "m3/reduce"} {
			info, _ := s.Info(id)
			t.Logf("%s %v %v err=%v children=%d", id, info.Status, info.Result, info.Err, info.Children)
		}
	})
}
