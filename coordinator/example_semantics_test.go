package coordinator_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/batonhq/baton/coordinator"
)

// Trigger rules: cleanup runs whatever happened to deploy (AllDone), alert
// runs only because deploy failed (AnyFailed), and announce, which needs
// deploy to have succeeded, is skipped. Upstream shows a rule task how its
// dependencies ended.
func ExampleTrigger() {
	s, err := coordinator.New(coordinator.WithWorkers(2))
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())

	err = s.Submit(
		coordinator.Task{ID: "deploy", Run: func(context.Context) error { return errors.New("quota exceeded") }},
		coordinator.Task{ID: "cleanup", Deps: []string{"deploy"}, When: coordinator.AllDone,
			Run: func(context.Context) error { return nil }},
		coordinator.Task{ID: "alert", Deps: []string{"deploy"}, When: coordinator.AnyFailed,
			Run: func(ctx context.Context) error {
				deps, err := coordinator.Upstream(ctx)
				if err != nil {
					return err
				}
				for _, dep := range deps {
					fmt.Printf("alert: %s %v: %v\n", dep.ID, dep.Status, dep.Err)
				}
				return nil
			}},
		coordinator.Task{ID: "announce", Deps: []string{"deploy"}, Run: func(context.Context) error { return nil }},
	)
	if err != nil {
		panic(err)
	}
	if err := s.Wait(context.Background()); err != nil {
		panic(err)
	}
	for _, id := range []string{"cleanup", "alert", "announce"} {
		info, _ := s.Info(id)
		fmt.Println(id, info.Status)
	}
	// Output:
	// alert: deploy failed: quota exceeded
	// cleanup succeeded
	// alert succeeded
	// announce skipped
}

// WaitTasks waits for some tasks only, and says which of them did not
// succeed and why.
func ExampleScheduler_WaitTasks() {
	s, err := coordinator.New(coordinator.WithWorkers(2))
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())

	err = s.Submit(
		coordinator.Task{ID: "compile", Run: func(context.Context) error { return nil }},
		coordinator.Task{ID: "vet", Run: func(context.Context) error { return errors.New("unreachable code") }},
		coordinator.Task{ID: "test", Deps: []string{"vet"}, Run: func(context.Context) error { return nil }},
	)
	if err != nil {
		panic(err)
	}
	err = s.WaitTasks(context.Background(), "compile", "test")
	var te *coordinator.TasksError
	if errors.As(err, &te) {
		for _, info := range te.Tasks {
			fmt.Printf("%s: %v (cause %s)\n", info.ID, info.Status, info.Cause)
		}
	}
	fmt.Println(errors.Is(s.WaitTasks(context.Background(), "deploy"), coordinator.ErrUnknownTask))
	// Output:
	// test: skipped (cause vet)
	// true
}

type traceKey struct{}

// The values of the context given to SubmitContext reach every attempt of
// those tasks; its cancellation bounds only the call.
func ExampleScheduler_SubmitContext() {
	s, err := coordinator.New()
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())

	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), traceKey{}, "req-42"))
	err = s.SubmitContext(ctx, coordinator.Task{ID: "charge", Run: func(ctx context.Context) error {
		fmt.Println("charging for", ctx.Value(traceKey{}))
		return nil
	}})
	cancel() // the request is over; the task it submitted is not cancelled
	if err != nil {
		panic(err)
	}
	if err := s.WaitTasks(context.Background(), "charge"); err != nil {
		panic(err)
	}
	// Output:
	// charging for req-42
}
