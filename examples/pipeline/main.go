// Command pipeline is Baton's demonstration: a small CI pipeline on one
// worker, so the order printed is the scheduler's choice, followed by a
// rejected cycle, a cancellation, a failure that skips its dependents, a
// recurring task, and a 40-task graph on four workers checked against its
// own start and end stamps.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/batonhq/baton/coordinator"
)

// ConnectionError and RuntimeError are the demo's failure kinds; lines print
// them as "Kind: message".
type ConnectionError struct{ msg string }

func (e ConnectionError) Error() string { return e.msg }

type RuntimeError struct{ msg string }

func (e RuntimeError) Error() string { return e.msg }

func describe(err error) string {
	return fmt.Sprintf("%s: %v", reflect.TypeOf(err).Name(), err)
}

// printer turns events into the demo's lines, in the coordinator's order.
type printer struct{ lines chan string }

func (p *printer) event(e coordinator.Event) {
	var line string
	switch e.Kind {
	case coordinator.EventSucceeded:
		line = e.TaskID + " succeeded"
	case coordinator.EventRetrying:
		line = fmt.Sprintf("%s retry in %.2fs (%s)", e.TaskID, e.Wait.Seconds(), describe(e.Err))
	case coordinator.EventFailed:
		line = fmt.Sprintf("%s failed (%s)", e.TaskID, describe(e.Err))
	case coordinator.EventCancelled:
		line = e.TaskID + " cancelled"
	case coordinator.EventSkipped:
		line = e.TaskID + " skipped"
	case coordinator.EventRecurred:
		line = fmt.Sprintf("%s run %d", e.TaskID, e.Run)
	default:
		return
	}
	p.lines <- line
}

// settle waits until the scheduler is idle and then prints every line the
// phase produced. Lines arrive in the coordinator's order; once Wait has
// returned, the phase's last line is its last final event.
func settle(ctx context.Context, out io.Writer, s *coordinator.Scheduler, p *printer, want int) error {
	if err := s.Wait(ctx); err != nil {
		return err
	}
	for range want {
		select {
		case line := <-p.lines:
			fmt.Fprintln(out, line)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func ok(context.Context) error { return nil }

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "pipeline:", err)
		os.Exit(1)
	}
}

func run(out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := coordinator.New(coordinator.WithWorkers(1))
	if err != nil {
		return err
	}
	defer s.Shutdown(ctx)
	p := &printer{lines: make(chan string, 100)}
	defer s.Subscribe(p.event)()

	// The pipeline. test fails twice before the database is up.
	testRuns := 0
	err = s.Submit(
		coordinator.Task{ID: "checkout", Run: ok},
		coordinator.Task{ID: "build", Run: ok, Deps: []string{"checkout"}},
		coordinator.Task{ID: "lint", Run: ok, Deps: []string{"checkout"}, Priority: 5},
		coordinator.Task{ID: "docs", Run: ok, Deps: []string{"checkout"}, Priority: 9},
		coordinator.Task{ID: "test", Deps: []string{"build"},
			Run: func(context.Context) error {
				if testRuns++; testRuns <= 2 {
					return ConnectionError{"test db not up yet"}
				}
				return nil
			},
			Retry: coordinator.RetryPolicy{MaxAttempts: 3, BaseDelay: 50 * time.Millisecond}},
		coordinator.Task{ID: "package", Run: ok, Deps: []string{"build", "test"}},
		coordinator.Task{ID: "deploy", Run: ok, Deps: []string{"package", "lint"}},
	)
	if err != nil {
		return err
	}
	if err := settle(ctx, out, s, p, 9); err != nil {
		return err
	}

	// A cycle is rejected whole, naming the tasks.
	err = s.Submit(
		coordinator.Task{ID: "a", Run: ok, Deps: []string{"c"}},
		coordinator.Task{ID: "b", Run: ok, Deps: []string{"a"}},
		coordinator.Task{ID: "c", Run: ok, Deps: []string{"b"}},
		coordinator.Task{ID: "d", Run: ok, Deps: []string{"c"}},
	)
	var cycle *coordinator.CycleError
	if !errors.As(err, &cycle) {
		return fmt.Errorf("cycle batch: got %v, want a *CycleError", err)
	}
	fmt.Fprintf(out, "rejected: a cycle leaves %v unable to start\n", slices.Sorted(slices.Values(append(cycle.InCycle, cycle.Behind...))))

	// Cancelling a delayed task skips what waits on it.
	err = s.Submit(
		coordinator.Task{ID: "report", Run: ok, Delay: 60 * time.Second},
		coordinator.Task{ID: "email", Run: ok, Deps: []string{"report"}},
	)
	if err != nil {
		return err
	}
	first, again := s.Cancel("report"), s.Cancel("report")
	fmt.Fprintf(out, "cancel report: %v | again: %v\n", first, again)
	if err := settle(ctx, out, s, p, 2); err != nil {
		return err
	}

	// A failure, after its retries, skips what waits on it.
	err = s.Submit(
		coordinator.Task{ID: "migrate", Run: func(context.Context) error { return RuntimeError{"disk full"} },
			Retry: coordinator.RetryPolicy{MaxAttempts: 2, BaseDelay: 50 * time.Millisecond}},
		coordinator.Task{ID: "notify", Run: ok, Deps: []string{"migrate"}},
	)
	if err != nil {
		return err
	}
	if err := settle(ctx, out, s, p, 3); err != nil {
		return err
	}

	// A recurring task.
	if err := s.Submit(coordinator.Task{ID: "heartbeat", Run: ok, Every: 50 * time.Millisecond, Times: 3}); err != nil {
		return err
	}
	if err := settle(ctx, out, s, p, 3); err != nil {
		return err
	}
	return layers(ctx, out)
}

// layers runs 5 layers of 8 tasks, each depending on two tasks of the layer
// above, on 4 workers, and checks from each task's own start and end stamps
// that it started after its dependencies ended.
func layers(ctx context.Context, out io.Writer) error {
	const width, depth = 8, 5
	s, err := coordinator.New(coordinator.WithWorkers(4))
	if err != nil {
		return err
	}
	defer s.Shutdown(ctx)
	var mu sync.Mutex
	var clock int64 // a logical clock: every start and end takes the next tick
	start, end := map[string]int64{}, map[string]int64{}
	stamp := func(m map[string]int64, id string) {
		mu.Lock()
		clock++
		m[id] = clock
		mu.Unlock()
	}
	var tasks []coordinator.Task
	deps := map[string][]string{}
	for l := range depth {
		for i := range width {
			id := fmt.Sprintf("L%d-%d", l, i)
			if l > 0 {
				deps[id] = []string{fmt.Sprintf("L%d-%d", l-1, i), fmt.Sprintf("L%d-%d", l-1, (i+1)%width)}
			}
			tasks = append(tasks, coordinator.Task{ID: id, Deps: deps[id], Run: func(context.Context) error {
				stamp(start, id)
				time.Sleep(time.Millisecond) // a little real work, so the four workers overlap
				stamp(end, id)
				return nil
			}})
		}
	}
	if err := s.Submit(tasks...); err != nil {
		return err
	}
	if err := s.Wait(ctx); err != nil {
		return err
	}
	allOK, respected := true, true
	for _, t := range tasks {
		info, _ := s.Info(t.ID)
		allOK = allOK && info.Status == coordinator.Succeeded
		for _, d := range deps[t.ID] {
			respected = respected && start[t.ID] > end[d]
		}
	}
	fmt.Fprintf(out, "%d tasks on 4 workers: all succeeded = %v | dependencies respected = %v\n", len(tasks), allOK, respected)
	return nil
}
