package coordinator_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/worker"
)

func TestWaitTasks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(2))
		g := newGate()
		err := s.Submit(
			coordinator.Task{ID: "ok1", Run: ok},
			coordinator.Task{ID: "slow", Run: g.run},
			coordinator.Task{ID: "bad", Run: func(context.Context) error { return errors.New("disk full") }},
			coordinator.Task{ID: "after-bad", Deps: []string{"bad"}, Run: ok},
			coordinator.Task{ID: "delayed", Delay: time.Hour, Run: ok},
			coordinator.Task{ID: "alert", When: coordinator.AnyFailed, Deps: []string{"ok1"}, Run: ok},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		// Success: waits for the slow one, then nil.
		done := make(chan error, 1)
		go func() { done <- s.WaitTasks(context.Background(), "ok1", "slow", "ok1") }()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("WaitTasks returned %v while slow runs", err)
		default:
		}
		g.release()
		if err := <-done; err != nil {
			t.Fatalf("WaitTasks(ok1, slow) = %v; want nil", err)
		}
		// Failure and skips, in the order given, each once.
		err = s.WaitTasks(context.Background(), "after-bad", "ok1", "bad", "alert", "after-bad")
		var te *coordinator.TasksError
		if !errors.As(err, &te) {
			t.Fatalf("WaitTasks = %v; want a *TasksError", err)
		}
		var ids []string
		for _, ti := range te.Tasks {
			ids = append(ids, ti.ID+":"+ti.Status.String())
		}
		if got := strings.Join(ids, " "); got != "after-bad:skipped bad:failed alert:skipped" {
			t.Fatalf("TasksError.Tasks = %s; want after-bad skipped, bad failed, alert skipped", got)
		}
		for _, want := range []string{`"after-bad" skipped because of "bad"`, `"bad" failed: disk full`, `"alert" skipped by its trigger rule`} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("message %q lacks %q", err.Error(), want)
			}
		}
		// Unknown IDs: an error at once, naming it, whatever else is listed.
		err = s.WaitTasks(context.Background(), "delayed", "ghost")
		var taskErr *coordinator.TaskError
		if !errors.Is(err, coordinator.ErrUnknownTask) || !errors.As(err, &taskErr) || taskErr.ID != "ghost" {
			t.Fatalf("WaitTasks(delayed, ghost) = %v; want ErrUnknownTask naming ghost", err)
		}
		// ctx ends first.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.WaitTasks(ctx, "delayed"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitTasks(delayed) with a 1m ctx = %v; want DeadlineExceeded", err)
		}
		// Nothing listed: nil.
		if err := s.WaitTasks(context.Background()); err != nil {
			t.Fatalf("WaitTasks() = %v", err)
		}
		if err := s.WaitTasks(context.Background(), "delayed"); err != nil {
			t.Fatalf("WaitTasks(delayed) = %v; want nil an hour later", err)
		}
	})
}

// A task retention forgets while the call waits for another is reported
// as it ended, not as whatever reuses its record.
func TestWaitTasksUnderRetention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithRetention(0))
		g, first := newGate(), newGate()
		err := s.Submit(
			coordinator.Task{ID: "early", Run: func(ctx context.Context) error {
				first.run(ctx)
				return errors.New("early failure")
			}},
			coordinator.Task{ID: "late", Run: g.run},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		done := make(chan error, 1)
		go func() { done <- s.WaitTasks(context.Background(), "late", "early") }()
		synctest.Wait() // the call waits for both
		first.release()
		synctest.Wait()
		// early failed and is forgotten; its record and ID are reused.
		if err := s.Submit(coordinator.Task{ID: "early", Run: ok}, coordinator.Task{ID: "other", Run: ok}); err != nil {
			t.Fatalf("Submit(reuse) = %v", err)
		}
		synctest.Wait()
		g.release()
		err = <-done
		var te *coordinator.TasksError
		if !errors.As(err, &te) || len(te.Tasks) != 1 || te.Tasks[0].ID != "early" || te.Tasks[0].Status != coordinator.Failed {
			t.Fatalf("WaitTasks = %v; want early failed", err)
		}
	})
}

// WaitTasks (and Wait) do not return while a timed-out function that
// honours its context is still cleaning up, and the retry does not start
// beside it.
func TestWaitTasksWaitsForCleanup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(4))
		var running, most, attempts atomic.Int32
		var cleaned atomic.Int32
		err := s.Submit(coordinator.Task{ID: "t", Timeout: time.Second,
			Retry: coordinator.RetryPolicy{MaxAttempts: 3},
			Run: func(ctx context.Context) error {
				attempts.Add(1)
				n := running.Add(1)
				defer running.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				<-ctx.Done()
				time.Sleep(2 * time.Second) // cleans up, within the default grace
				cleaned.Add(1)
				return ctx.Err()
			}})
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		start := time.Now()
		err = s.WaitTasks(context.Background(), "t")
		if cleaned.Load() != 3 {
			t.Fatalf("WaitTasks returned after %d cleanups; want all 3", cleaned.Load())
		}
		if took := time.Since(start); took != 9*time.Second {
			t.Fatalf("WaitTasks returned after %v; want 9s (3 attempts of 1s + 2s cleanup)", took)
		}
		if most.Load() != 1 || attempts.Load() != 3 {
			t.Fatalf("%d attempts, at most %d at once; want 3, one at a time", attempts.Load(), most.Load())
		}
		var te *coordinator.TasksError
		if !errors.As(err, &te) || !errors.Is(te.Tasks[0].Err, worker.ErrTimeout) {
			t.Fatalf("WaitTasks = %v; want t failed with its timeout", err)
		}
	})
}

// After Shutdown, WaitTasks answers at once from the final state.
func TestWaitTasksAfterShutdown(t *testing.T) {
	s, err := coordinator.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Submit(coordinator.Task{ID: "a", Run: ok}, coordinator.Task{ID: "b", Delay: time.Hour, Run: ok}); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitTasks(context.Background(), "a"); err != nil {
		t.Fatalf("WaitTasks(a) = %v", err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	var te *coordinator.TasksError
	if err := s.WaitTasks(context.Background(), "a", "b"); !errors.As(err, &te) || te.Tasks[0].ID != "b" || te.Tasks[0].Status != coordinator.Cancelled {
		t.Fatalf("WaitTasks after Shutdown = %v; want b cancelled", err)
	}
	if err := s.WaitTasks(context.Background(), "zzz"); !errors.Is(err, coordinator.ErrUnknownTask) {
		t.Fatalf("WaitTasks(zzz) after Shutdown = %v; want ErrUnknownTask", err)
	}
}
