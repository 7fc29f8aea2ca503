// Command operate shows what an operator does when a run fails at 3 a.m.:
// a nightly pipeline (extract, transform, load, report; notify beside
// them) fails in transform, whose three attempts each find a column
// missing from the warehouse's schema, so load and report are skipped.
// The operator reads transform's history (every attempt: when it ran, on
// which worker, how it ended, what it logged), fixes the cause (migrates
// the schema) and re-runs transform with its downstream: transform, load
// and report run again, with a fresh attempt budget, and nothing that
// succeeded runs twice.
//
// Run it with: go run ./examples/operate
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/coordinator"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "operate:", err)
		os.Exit(1)
	}
}

// warehouse stands for the system the pipeline writes to; its schema
// lacks a column until the operator migrates it.
type warehouse struct {
	migrated atomic.Bool
	loaded   atomic.Int64
}

// errSchema is the cause of the night's failure.
var errSchema = errors.New(`column "region" missing from table sales`)

func (w *warehouse) pipeline(runs map[string]*atomic.Int32) []coordinator.Task {
	count := func(id string, f func(ctx context.Context) error) func(ctx context.Context) error {
		runs[id] = new(atomic.Int32)
		return func(ctx context.Context) error {
			runs[id].Add(1)
			return f(ctx)
		}
	}
	retry := coordinator.RetryPolicy{MaxAttempts: 3, BaseDelay: 10 * time.Millisecond}
	return []coordinator.Task{
		{ID: "extract", Run: count("extract", func(ctx context.Context) error {
			coordinator.Logger(ctx).Info("fetched orders", "rows", 1200, "source", "orders-db")
			return coordinator.SetResult(ctx, 1200)
		})},
		{ID: "transform", Deps: []string{"extract"}, Retry: retry, Run: count("transform", func(ctx context.Context) error {
			log := coordinator.Logger(ctx) // this attempt's own log: kept with it, and passed to WithLogger
			rows, err := coordinator.Result[int](ctx, "extract")
			if err != nil {
				return err
			}
			log.Info("transforming", "rows", rows)
			if !w.migrated.Load() {
				log.Warn("schema check failed", "table", "sales", "want", "region")
				return fmt.Errorf("transform: %w", errSchema)
			}
			log.Info("transformed", "rows", rows, "regions", 4)
			return coordinator.SetResult(ctx, rows)
		})},
		{ID: "load", Deps: []string{"transform"}, Retry: retry, Run: count("load", func(ctx context.Context) error {
			rows, err := coordinator.Result[int](ctx, "transform")
			if err != nil {
				return err
			}
			w.loaded.Add(int64(rows))
			coordinator.Logger(ctx).Info("loaded", "rows", rows)
			return nil
		})},
		{ID: "report", Deps: []string{"load"}, Run: count("report", func(ctx context.Context) error {
			coordinator.Logger(ctx).Info("report sent", "to", "sales@example.com")
			return nil
		})},
		{ID: "notify", Deps: []string{"extract"}, Run: count("notify", func(ctx context.Context) error {
			return nil
		})},
	}
}

var ids = []string{"extract", "transform", "load", "report", "notify"}

func run(out io.Writer) error {
	s, err := coordinator.New(coordinator.WithWorkers(2))
	if err != nil {
		return err
	}
	defer s.Shutdown(context.Background())
	ctx := context.Background()

	var w warehouse
	runs := map[string]*atomic.Int32{}
	if err := s.Submit(w.pipeline(runs)...); err != nil {
		return err
	}

	// The night: transform fails three times, load and report are skipped.
	err = s.WaitTasks(ctx, "report", "notify")
	var te *coordinator.TasksError
	if !errors.As(err, &te) {
		return fmt.Errorf("the first run should fail in transform, WaitTasks = %v", err)
	}
	fmt.Fprintln(out, "== the night's run")
	if err := statuses(out, s, map[string]coordinator.Status{
		"extract": coordinator.Succeeded, "transform": coordinator.Failed,
		"load": coordinator.Skipped, "report": coordinator.Skipped, "notify": coordinator.Succeeded,
	}); err != nil {
		return err
	}

	// The morning: what happened to transform, and why?
	fmt.Fprintln(out, "\n== transform's history")
	h, ok := s.History("transform")
	if !ok {
		return errors.New("no history for transform")
	}
	history(out, h)
	if len(h.Attempts) != 3 {
		return fmt.Errorf("transform's history has %d attempts, want its 3", len(h.Attempts))
	}
	for _, a := range h.Attempts {
		if a.Outcome != coordinator.OutcomeFailed || !errors.Is(a.Err, errSchema) {
			return fmt.Errorf("attempt %d: %v, %v; want failed with the schema error", a.Attempt, a.Outcome, a.Err)
		}
		if !slices.ContainsFunc(a.Logs, func(l coordinator.LogLine) bool { return l.Message == "schema check failed" }) {
			return fmt.Errorf("attempt %d's log lacks its warning: %v", a.Attempt, a.Logs)
		}
	}

	// The fix, then the re-run of transform and everything downstream of it
	// that did not succeed.
	w.migrated.Store(true)
	fmt.Fprintln(out, "\n== schema migrated; re-running transform with its downstream")
	res, err := s.Rerun(ctx, coordinator.RerunRequest{
		IDs: []string{"transform"}, Downstream: true, By: "ops: runbook 12, schema migrated",
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "re-opened:", strings.Join(res.Reopened, ", "))
	if want := []string{"transform", "load", "report"}; !slices.Equal(res.Reopened, want) {
		return fmt.Errorf("re-opened %v, want %v", res.Reopened, want)
	}
	if err := s.WaitTasks(ctx, "report"); err != nil {
		return fmt.Errorf("the re-run should succeed: %w", err)
	}
	fmt.Fprintln(out, "\n== after the re-run")
	if err := statuses(out, s, map[string]coordinator.Status{
		"extract": coordinator.Succeeded, "transform": coordinator.Succeeded,
		"load": coordinator.Succeeded, "report": coordinator.Succeeded, "notify": coordinator.Succeeded,
	}); err != nil {
		return err
	}
	fmt.Fprintln(out, "\n== transform's history")
	h, _ = s.History("transform")
	history(out, h)
	if n := len(h.Attempts); n != 4 || h.Attempts[3].Rerun != 1 || h.Attempts[3].Outcome != coordinator.OutcomeSucceeded {
		return fmt.Errorf("transform's history after the re-run: %+v", h.Attempts)
	}
	// Nothing that had succeeded ran again, and the re-opened tasks once
	// each.
	want := map[string]int32{"extract": 1, "transform": 4, "load": 1, "report": 1, "notify": 1}
	for id, n := range want {
		if got := runs[id].Load(); got != n {
			return fmt.Errorf("%s ran %d times, want %d", id, got, n)
		}
	}
	if got := w.loaded.Load(); got != 1200 {
		return fmt.Errorf("the warehouse has %d rows, want 1200", got)
	}
	return nil
}

// statuses prints each task's status and re-run count, and checks them.
func statuses(out io.Writer, s *coordinator.Scheduler, want map[string]coordinator.Status) error {
	for _, id := range ids {
		info, _ := s.Info(id)
		line := fmt.Sprintf("%-9s %-9v attempts %d", id, info.Status, info.Attempts)
		if info.Reruns > 0 {
			line += fmt.Sprintf(", re-run %d time(s)", info.Reruns)
		}
		if info.Status == coordinator.Skipped {
			line += fmt.Sprintf(" (because %s did not succeed)", info.Cause)
		}
		fmt.Fprintln(out, line)
		if info.Status != want[id] {
			return fmt.Errorf("%s is %v, want %v", id, info.Status, want[id])
		}
	}
	return nil
}

// history prints a task's attempts with their log lines.
func history(out io.Writer, h coordinator.History) {
	for _, a := range h.Attempts {
		fmt.Fprintf(out, "re-run %d attempt %d on %s: %v after %v", a.Rerun, a.Attempt, a.Worker, a.Outcome,
			a.Duration(a.Ended).Round(10*time.Microsecond))
		if a.Err != nil {
			fmt.Fprintf(out, ": %v", a.Err)
		}
		fmt.Fprintln(out)
		for _, l := range a.Logs {
			fmt.Fprintln(out, "    ", l.Level, l.Message, l.Attrs)
		}
	}
	if h.Dropped > 0 {
		fmt.Fprintf(out, "(%d older attempts no longer kept)\n", h.Dropped)
	}
}
