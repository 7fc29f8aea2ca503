package coordinator_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/batonhq/baton/coordinator"
)

// A task spawns one child per shard; merge, its dependent, runs once they
// have all succeeded.
func ExampleSpawn() {
	s, err := coordinator.New(coordinator.WithWorkers(2))
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())

	err = s.Submit(
		coordinator.Task{ID: "split", Run: func(ctx context.Context) error {
			var shards []coordinator.Task
			for i := range 3 {
				shards = append(shards, coordinator.Task{ID: fmt.Sprintf("shard-%d", i), Run: func(context.Context) error { return nil }})
			}
			return coordinator.Spawn(ctx, shards...)
		}},
		coordinator.Task{ID: "merge", Deps: []string{"split"}, Run: func(context.Context) error { return nil }},
	)
	if err != nil {
		panic(err)
	}
	if err := s.Wait(context.Background()); err != nil {
		panic(err)
	}
	for _, id := range []string{"split", "shard-0", "shard-2", "merge"} {
		info, _ := s.Info(id)
		fmt.Printf("%s %v parent=%q children=%d\n", id, info.Status, info.Parent, info.Children)
	}
	// Output:
	// split succeeded parent="" children=3
	// shard-0 succeeded parent="split" children=0
	// shard-2 succeeded parent="split" children=0
	// merge succeeded parent="" children=0
}

// Map runs one task per element of a dependency's result and gives the
// reducer their results in the input's order.
func ExampleMap() {
	s, err := coordinator.New(coordinator.WithWorkers(2))
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())

	upper := func(_ context.Context, w string) (string, error) { return strings.ToUpper(w), nil }
	join := func(_ context.Context, rs []coordinator.Mapped[string]) (string, error) {
		var out []string
		for _, r := range rs {
			out = append(out, r.Value)
		}
		return strings.Join(out, " "), nil
	}
	err = s.Submit(
		coordinator.Task{ID: "words", Run: func(ctx context.Context) error {
			return coordinator.SetResult(ctx, []string{"graphs", "that", "grow"})
		}},
		coordinator.Map("shout", "words", upper, join),
	)
	if err != nil {
		panic(err)
	}
	if err := s.Wait(context.Background()); err != nil {
		panic(err)
	}
	info, _ := s.Info("shout")
	fmt.Println(info.Result)
	// Output: GRAPHS THAT GROW
}

// A branch chooses one of its dependents; the other is skipped as not
// chosen, and the join after them runs under NoneFailedMinOneSuccess.
func ExampleChoose() {
	s, err := coordinator.New()
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())

	run := func(context.Context) error { return nil }
	err = s.Submit(
		coordinator.Task{ID: "canary-healthy?", Run: func(ctx context.Context) error {
			return coordinator.Choose(ctx, "rollout")
		}},
		coordinator.Task{ID: "rollout", Deps: []string{"canary-healthy?"}, Run: run},
		coordinator.Task{ID: "rollback", Deps: []string{"canary-healthy?"}, Run: run},
		coordinator.Task{ID: "notify", Deps: []string{"rollout", "rollback"}, When: coordinator.NoneFailedMinOneSuccess, Run: run},
	)
	if err != nil {
		panic(err)
	}
	if err := s.Wait(context.Background()); err != nil {
		panic(err)
	}
	for _, id := range []string{"rollout", "rollback", "notify"} {
		info, _ := s.Info(id)
		fmt.Println(id, info.Status, info.Err)
	}
	// Output:
	// rollout succeeded <nil>
	// rollback skipped coordinator: not chosen by its branch
	// notify succeeded <nil>
}
