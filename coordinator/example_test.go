package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/batonhq/baton/coordinator"
)

// A small graph: build waits for fetch, test retries once, and report is
// skipped because lint fails.
func Example() {
	s, err := coordinator.New(coordinator.WithWorkers(2))
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())

	tries := 0
	err = s.Submit(
		coordinator.Task{ID: "fetch", Run: func(context.Context) error { return nil }},
		coordinator.Task{ID: "build", Deps: []string{"fetch"}, Run: func(context.Context) error { return nil }},
		coordinator.Task{ID: "test", Deps: []string{"build"},
			Run: func(context.Context) error {
				if tries++; tries == 1 {
					return errors.New("flaky")
				}
				return nil
			},
			Retry: coordinator.RetryPolicy{MaxAttempts: 2, BaseDelay: time.Millisecond}},
		coordinator.Task{ID: "lint", Run: func(context.Context) error { return errors.New("style") }},
		coordinator.Task{ID: "report", Deps: []string{"test", "lint"}, Run: func(context.Context) error { return nil }},
	)
	if err != nil {
		panic(err)
	}
	if err := s.Wait(context.Background()); err != nil {
		panic(err)
	}
	for _, id := range []string{"fetch", "build", "test", "lint", "report"} {
		info, _ := s.Info(id)
		fmt.Printf("%s: %v after %d attempt(s)", id, info.Status, info.Attempts)
		if info.Cause != "" {
			fmt.Printf(", because %s failed", info.Cause)
		}
		fmt.Println()
	}
	// Output:
	// fetch: succeeded after 1 attempt(s)
	// build: succeeded after 1 attempt(s)
	// test: succeeded after 2 attempt(s)
	// lint: failed after 1 attempt(s)
	// report: skipped after 0 attempt(s), because lint failed
}

// A cycle is refused before anything is stored, naming the tasks on it and
// those waiting behind it.
func ExampleCycleError() {
	s, err := coordinator.New()
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())
	run := func(context.Context) error { return nil }
	err = s.Submit(
		coordinator.Task{ID: "a", Run: run, Deps: []string{"c"}},
		coordinator.Task{ID: "b", Run: run, Deps: []string{"a"}},
		coordinator.Task{ID: "c", Run: run, Deps: []string{"b"}},
		coordinator.Task{ID: "d", Run: run, Deps: []string{"c"}},
	)
	var cycle *coordinator.CycleError
	if errors.As(err, &cycle) {
		fmt.Println("on the cycle:", cycle.InCycle, "behind it:", cycle.Behind)
	}
	// Output: on the cycle: [a b c] behind it: [d]
}
