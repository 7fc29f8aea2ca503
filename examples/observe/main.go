// Command observe shows what a running Baton scheduler tells its
// operators without OpenTelemetry: the task-life log lines of a logger
// given with WithLogger, and a Snapshot of the graph rendered as Mermaid
// while one task still runs. README's "Observing Baton" shows its output.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/batonhq/baton/coordinator"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// lockedBuffer collects the log lines, written by the scheduler's log
// goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func run(out io.Writer) error {
	var logs lockedBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{
		Level: slog.LevelInfo, // Debug adds a line per start and per success
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{} // so that the output is the same every run
			}
			return a
		},
	}))
	s, err := coordinator.New(coordinator.WithWorkers(2), coordinator.WithLogger(logger))
	if err != nil {
		return err
	}
	defer s.Shutdown(context.Background())

	ok := func(context.Context) error { return nil }
	testing, release := make(chan struct{}), make(chan struct{})
	tries := 0
	err = s.Submit(
		coordinator.Task{ID: "fetch", Run: ok},
		coordinator.Task{ID: "build", Run: ok, Deps: []string{"fetch"}},
		coordinator.Task{ID: "test", Deps: []string{"build"}, Run: func(context.Context) error {
			close(testing)
			<-release
			return nil
		}},
		coordinator.Task{ID: "package", Run: ok, Deps: []string{"test"}},
		coordinator.Task{ID: "vet", Run: func(context.Context) error {
			if tries++; tries == 1 {
				return errors.New("connection reset")
			}
			return nil
		}, Retry: coordinator.RetryPolicy{MaxAttempts: 2, BaseDelay: 10 * time.Millisecond}},
		coordinator.Task{ID: "lint", Deps: []string{"vet"}, Run: func(context.Context) error { return errors.New("style") }},
		coordinator.Task{ID: "docs", Run: ok, Deps: []string{"lint"}},
		coordinator.Task{ID: "nightly", Run: ok, Delay: 24 * time.Hour},
	)
	if err != nil {
		return err
	}

	// While test runs: what is running, and what waits on what?
	<-testing
	if err := s.WaitTasks(context.Background(), "vet", "lint", "docs"); !errors.As(err, new(*coordinator.TasksError)) {
		return fmt.Errorf("lint should have failed: %v", err)
	}
	s.Cancel("nightly")
	snap, err := s.Snapshot(context.Background(), coordinator.SnapshotFilter{})
	if err != nil {
		return err
	}
	var graph bytes.Buffer
	if err := snap.WriteMermaid(&graph); err != nil {
		return err
	}

	close(release)
	if err := s.Wait(context.Background()); err != nil {
		return err
	}
	if err := s.Shutdown(context.Background()); err != nil { // writes the last log lines
		return err
	}
	fmt.Fprintf(out, "log:\n%s\ngraph while test ran:\n%s", logs.b.String(), graph.String())
	return nil
}
