// Command dynamic shows a graph that grows and chooses while it runs: a
// task lists the inputs, Map runs one task per input and a reducer after
// them, a branch chooses one of two paths by the reducer's result, and a
// join after the branch (NoneFailedMinOneSuccess) reports. One worker, so
// the order printed is the scheduler's.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/batonhq/baton/coordinator"
)

// files stands for a bucket: what "list" finds and "count" reads.
var files = map[string]string{
	"a.txt": "the quick brown fox",
	"b.txt": "jumps over",
	"c.txt": "the lazy dog",
}

// line turns an event into the demo's line ("" for none).
func line(e coordinator.Event) string {
	switch e.Kind {
	case coordinator.EventSpawned:
		return fmt.Sprintf("%s spawned by %s", e.TaskID, e.Parent)
	case coordinator.EventJoining:
		return e.TaskID + " joining its children"
	case coordinator.EventSucceeded:
		return e.TaskID + " succeeded"
	case coordinator.EventFailed:
		return fmt.Sprintf("%s failed (%v)", e.TaskID, e.Err)
	case coordinator.EventSkipped:
		if errors.Is(e.Err, coordinator.ErrNotChosen) {
			return fmt.Sprintf("%s skipped: not chosen by %s", e.TaskID, e.Cause)
		}
		return fmt.Sprintf("%s skipped because of %s", e.TaskID, e.Cause)
	}
	return ""
}

func run(out io.Writer) error {
	s, err := coordinator.New(coordinator.WithWorkers(1))
	if err != nil {
		return err
	}
	// The callback runs on a goroutine of its own, one event after the
	// other, and Shutdown returns once it has had the last one: it writes
	// the lines itself. (Sending them to a buffered channel read only
	// after Shutdown would block the callback once the buffer is full,
	// and Shutdown with it.)
	s.Subscribe(func(e coordinator.Event) {
		if l := line(e); l != "" {
			fmt.Fprintln(out, l)
		}
	})
	words := func(_ context.Context, name string) (int, error) {
		return len(strings.Fields(files[name])), nil
	}
	total := func(_ context.Context, counts []coordinator.Mapped[int]) (int, error) {
		n := 0
		for _, c := range counts {
			n += c.Value
		}
		return n, nil
	}
	var report string
	act := func(verb string) func(context.Context) error {
		return func(ctx context.Context) error {
			n, err := coordinator.Result[int](ctx, "decide")
			if err != nil {
				return err
			}
			return coordinator.SetResult(ctx, fmt.Sprintf("%s %d words from %d files", verb, n, len(files)))
		}
	}
	err = s.Submit(
		coordinator.Task{ID: "list", Run: func(ctx context.Context) error {
			return coordinator.SetResult(ctx, []string{"a.txt", "b.txt", "c.txt"})
		}},
		coordinator.Map("count", "list", words, total),
		coordinator.Task{ID: "decide", Deps: []string{"count"}, Run: func(ctx context.Context) error {
			n, err := coordinator.Result[int](ctx, "count")
			if err != nil {
				return err
			}
			path := "archive"
			if n > 5 {
				path = "publish"
			}
			if err := coordinator.Choose(ctx, path); err != nil {
				return err
			}
			return coordinator.SetResult(ctx, n)
		}},
		coordinator.Task{ID: "publish", Deps: []string{"decide"}, Run: act("published")},
		coordinator.Task{ID: "archive", Deps: []string{"decide"}, Run: act("archived")},
		coordinator.Task{ID: "report", Deps: []string{"publish", "archive"}, When: coordinator.NoneFailedMinOneSuccess,
			Run: func(ctx context.Context) error {
				up, err := coordinator.Upstream(ctx)
				for _, ti := range up {
					if ti.Status == coordinator.Succeeded {
						report = fmt.Sprintf("report: %s", ti.Result)
					}
				}
				return err
			}},
	)
	if err == nil {
		err = s.Wait(context.Background())
	}
	if serr := s.Shutdown(context.Background()); err == nil {
		err = serr
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(out, report)
	return nil
}

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
