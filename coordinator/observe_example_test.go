package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/worker"
	"github.com/benbjohnson/clock"
)

// Task-life logs: give the scheduler a logger. At Warn, a retry and a
// failure are logged; Debug would add every start and success.
func ExampleWithLogger() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level: slog.LevelWarn,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{} // for a stable output
			}
			return a
		},
	}))
	s, err := coordinator.New(coordinator.WithWorkers(1), coordinator.WithLogger(logger), coordinator.WithClock(clock.NewMock()))
	if err != nil {
		panic(err)
	}
	err = s.Submit(coordinator.Task{ID: "upload", Run: func(context.Context) error { return errors.New("disk full") },
		Retry: coordinator.RetryPolicy{MaxAttempts: 2}})
	if err != nil {
		panic(err)
	}
	s.Wait(context.Background())
	s.Shutdown(context.Background()) // writes the last lines
	// Output:
	// level=WARN msg="task retrying" task=upload attempt=1 run=1 error="disk full" wait=0s
	// level=ERROR msg="task failed" task=upload attempt=2 run=1 error="disk full"
}

// A middleware sees every attempt of every pool and can put values in the
// task's context: here, a prefix for the task's output.
func ExampleWithMiddleware() {
	type prefixKey struct{}
	tag := func(pool string, next worker.Worker) worker.Worker {
		return workerFunc(func(ctx context.Context, j worker.Job) error {
			ctx = context.WithValue(ctx, prefixKey{}, fmt.Sprintf("[%s#%d]", j.ID, j.Attempt))
			return next.Do(ctx, j)
		})
	}
	s, err := coordinator.New(coordinator.WithWorkers(1), coordinator.WithMiddleware(tag))
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())
	s.Submit(coordinator.Task{ID: "hello", Run: func(ctx context.Context) error {
		fmt.Println(ctx.Value(prefixKey{}), "hello")
		return nil
	}})
	s.Wait(context.Background())
	// Output:
	// [hello#1] hello
}

// What is a task waiting for? A snapshot of it and its ancestors, drawn
// as Graphviz DOT.
func ExampleScheduler_Snapshot() {
	s, err := coordinator.New(coordinator.WithWorkers(1))
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())
	hold := make(chan struct{})
	defer close(hold)
	running := make(chan struct{})
	s.Submit(
		coordinator.Task{ID: "fetch", Run: func(context.Context) error { close(running); <-hold; return nil }},
		coordinator.Task{ID: "build", Deps: []string{"fetch"}, Run: func(context.Context) error { return nil }},
		coordinator.Task{ID: "unrelated", Delay: 1 << 40, Run: func(context.Context) error { return nil }},
	)
	<-running
	snap, err := s.Snapshot(context.Background(), coordinator.SnapshotFilter{Roots: []string{"build"}, Ancestors: true})
	if err != nil {
		panic(err)
	}
	var dot strings.Builder
	snap.WriteDOT(&dot)
	fmt.Print(dot.String())
	// Output:
	// digraph baton {
	// 	rankdir=LR;
	// 	node [shape=box, style="rounded,filled", fontname="Helvetica"];
	// 	"fetch" [label="fetch\nrunning", fillcolor="#bbdefb", color="#1565c0"];
	// 	"build" [label="build\npending", fillcolor="#eeeeee", color="#757575"];
	// 	"fetch" -> "build";
	// }
}
