// Command quickstart is the README's quick start: a small build pipeline
// with a result passed downstream, a retry, a cleanup that runs whatever
// happens, and a wait on the tasks that matter.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/batonhq/baton/coordinator"
)

func main() {
	s, err := coordinator.New(coordinator.WithWorkers(4))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Shutdown(context.Background())

	flaky := 0
	err = s.Submit(
		coordinator.Task{ID: "checkout", Run: func(ctx context.Context) error { return nil }},
		coordinator.Task{ID: "build", Deps: []string{"checkout"}, Run: func(ctx context.Context) error {
			return coordinator.SetResult(ctx, "bin/app") // the artifact, for the tasks that depend on build
		}},
		coordinator.Task{ID: "test", Deps: []string{"build"},
			Retry: coordinator.RetryPolicy{MaxAttempts: 3, BaseDelay: 10 * time.Millisecond},
			Run: func(ctx context.Context) error {
				if flaky++; flaky == 1 {
					return errors.New("flaky test")
				}
				return nil
			}},
		coordinator.Task{ID: "package", Deps: []string{"build", "test"}, Run: func(ctx context.Context) error {
			artifact, err := coordinator.Result[string](ctx, "build")
			if err != nil {
				return err
			}
			return coordinator.SetResult(ctx, artifact+".tar.gz")
		}},
		coordinator.Task{ID: "cleanup", Deps: []string{"package"}, When: coordinator.AllDone,
			Run: func(ctx context.Context) error { return nil }},
	)
	if err != nil {
		log.Fatal(err) // nothing of a rejected batch is stored
	}
	if err := s.WaitTasks(context.Background(), "package", "cleanup"); err != nil {
		log.Fatal(err) // a *coordinator.TasksError names each task that did not succeed
	}
	for _, id := range []string{"checkout", "build", "test", "package", "cleanup"} {
		info, _ := s.Info(id)
		fmt.Printf("%-8s %v after %d attempt(s), result %v\n", id, info.Status, info.Attempts, info.Result)
	}
}
