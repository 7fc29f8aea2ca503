package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/benbjohnson/clock"
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

// A scheduler that lives as long as a service forgets finished tasks, so
// its memory follows the live ones; a forgotten ID can be used again.
func ExampleWithRetention() {
	s, err := coordinator.New(coordinator.WithRetention(0)) // forget as soon as nothing refers to it
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())
	run := func(context.Context) error { return nil }
	for round := 1; round <= 2; round++ {
		if err := s.Submit(coordinator.Task{ID: "nightly-backup", Run: run}); err != nil {
			panic(err)
		}
		if err := s.Wait(context.Background()); err != nil {
			panic(err)
		}
		_, known := s.Info("nightly-backup")
		fmt.Printf("round %d: still known after it finished: %v\n", round, known)
	}
	// Output:
	// round 1: still known after it finished: false
	// round 2: still known after it finished: false
}

// Events arrive in the order the coordinator decided them, on the
// subscriber's own goroutine.
func ExampleScheduler_Subscribe() {
	s, err := coordinator.New(coordinator.WithWorkers(1))
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())
	events := make(chan coordinator.Event, 16)
	unsubscribe := s.Subscribe(func(e coordinator.Event) { events <- e })
	defer unsubscribe()
	err = s.Submit(
		coordinator.Task{ID: "compile", Run: func(context.Context) error { return errors.New("syntax error") }},
		coordinator.Task{ID: "link", Deps: []string{"compile"}, Run: func(context.Context) error { return nil }},
	)
	if err != nil {
		panic(err)
	}
	for range 3 {
		switch e := <-events; e.Kind {
		case coordinator.EventFailed:
			fmt.Printf("%s %s: %v\n", e.TaskID, e.Kind, e.Err)
		case coordinator.EventSkipped:
			fmt.Printf("%s %s because of %s\n", e.TaskID, e.Kind, e.Cause)
		default:
			fmt.Println(e.TaskID, e.Kind)
		}
	}
	// Output:
	// compile started
	// compile failed: syntax error
	// link skipped because of compile
}

// A task's function records a result with SetResult; its direct dependents
// read it, typed, with Result.
func ExampleResult() {
	s, err := coordinator.New(coordinator.WithWorkers(2))
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())

	err = s.Submit(
		coordinator.Task{ID: "count", Run: func(ctx context.Context) error {
			return coordinator.SetResult(ctx, 3)
		}},
		coordinator.Task{ID: "name", Run: func(ctx context.Context) error {
			return coordinator.SetResult(ctx, "gopher")
		}},
		coordinator.Task{ID: "greet", Deps: []string{"count", "name"}, Run: func(ctx context.Context) error {
			n, err := coordinator.Result[int](ctx, "count")
			if err != nil {
				return err
			}
			who, err := coordinator.Result[string](ctx, "name")
			if err != nil {
				return err
			}
			if _, err := coordinator.Result[string](ctx, "count"); err != nil {
				fmt.Println(err)
			}
			return coordinator.SetResult(ctx, fmt.Sprintf("hello, %d %ss", n, who))
		}},
	)
	if err != nil {
		panic(err)
	}
	if err := s.Wait(context.Background()); err != nil {
		panic(err)
	}
	info, _ := s.Info("greet")
	fmt.Println(info.Result)
	// Output:
	// coordinator: result of another type: count holds a value of type int, not string
	// hello, 3 gophers
}

// With a mock clock, a test waits until the scheduler has armed its timer
// before it moves the clock: WithTimerArmed says when, and for which time.
func ExampleWithTimerArmed() {
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	armed := make(chan time.Time, 16)
	s, err := coordinator.New(coordinator.WithClock(mock), coordinator.WithTimerArmed(func(due time.Time) {
		armed <- due // the zero time: nothing delayed any more
	}))
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())

	runs := 0
	err = s.Submit(coordinator.Task{ID: "poll", Every: 10 * time.Minute, Times: 3, Run: func(context.Context) error {
		runs++
		return nil
	}})
	if err != nil {
		panic(err)
	}
	for {
		due := <-armed
		if due.IsZero() {
			break
		}
		fmt.Println("armed for", due.Format("15:04"), "after", runs, "run(s)")
		mock.Set(due)
	}
	if err := s.Wait(context.Background()); err != nil {
		panic(err)
	}
	fmt.Println("runs:", runs)
	// Output:
	// armed for 00:10 after 1 run(s)
	// armed for 00:20 after 2 run(s)
	// runs: 3
}
