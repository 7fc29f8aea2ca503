package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/worker"
)

// Dependencies (README, "The rules"): a task runs only after every dependency succeeded.
func TestDiamond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(4))
		rec := record(s)
		var runsD atomic.Int32
		err := s.Submit(
			coordinator.Task{ID: "A", Run: ok},
			coordinator.Task{ID: "B", Run: func(context.Context) error { time.Sleep(2 * time.Second); return nil }, Deps: []string{"A"}},
			coordinator.Task{ID: "C", Run: func(context.Context) error { time.Sleep(time.Second); return nil }, Deps: []string{"A"}},
			coordinator.Task{ID: "D", Run: func(context.Context) error { runsD.Add(1); return nil }, Deps: []string{"B", "C"}},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		if n := runsD.Load(); n != 1 {
			t.Fatalf("D ran %d times; want 1", n)
		}
		got := rec.lines(coordinator.EventSucceeded)
		want := []string{"A succeeded", "C succeeded", "B succeeded", "D succeeded"}
		if !slices.Equal(got, want) {
			t.Fatalf("succeeded in order %v; want %v", got, want)
		}
		dStart := rec.of("D")[0].At
		bEnd := rec.of("B")[1].At
		if dStart.Before(bEnd) {
			t.Fatalf("D started at %v, before B ended at %v", dStart, bEnd)
		}
	})
}

// Priority (README, "The rules"): lowest Priority first, ties in submission order.
func TestPriorityOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(1))
		rec := record(s)
		g := newGate()
		if err := s.Submit(coordinator.Task{ID: "gate", Run: g.run}); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		var tasks []coordinator.Task
		for i, p := range []int{5, 1, 5, -3, 1, 9, 0} {
			tasks = append(tasks, coordinator.Task{ID: fmt.Sprintf("t%d(p%d)", i, p), Run: ok, Priority: p})
		}
		if err := s.Submit(tasks...); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		g.release()
		settle(t, s)
		got := rec.lines(coordinator.EventStarted)
		want := []string{"gate started", "t3(p-3) started", "t6(p0) started", "t1(p1) started", "t4(p1) started",
			"t0(p5) started", "t2(p5) started", "t5(p9) started"}
		if !slices.Equal(got, want) {
			t.Fatalf("start order %v; want %v", got, want)
		}
	})
}

// Priority (README, "The rules") with dependencies: tasks released together start by priority.
func TestPriorityAmongReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(1))
		rec := record(s)
		err := s.Submit(
			coordinator.Task{ID: "root", Run: ok},
			coordinator.Task{ID: "low", Run: ok, Deps: []string{"root"}, Priority: 9},
			coordinator.Task{ID: "high", Run: ok, Deps: []string{"root"}, Priority: 1},
			coordinator.Task{ID: "mid", Run: ok, Deps: []string{"root"}, Priority: 5},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		want := []string{"root started", "high started", "mid started", "low started"}
		if got := rec.lines(coordinator.EventStarted); !slices.Equal(got, want) {
			t.Fatalf("start order %v; want %v", got, want)
		}
	})
}

// Retries (README, "The rules"): a task waiting on backoff never holds a worker.
func TestBackoffFreesWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(1))
		rec := record(s)
		start := time.Now()
		fails := 2
		err := s.Submit(
			coordinator.Task{ID: "flaky", Priority: -1, Run: func(context.Context) error {
				if fails > 0 {
					fails--
					return errors.New("not yet")
				}
				return nil
			}, Retry: coordinator.RetryPolicy{MaxAttempts: 3, BaseDelay: 10 * time.Second}},
			coordinator.Task{ID: "other", Run: func(context.Context) error { time.Sleep(time.Second); return nil }},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		want := []string{"flaky started", "flaky retrying", "other started", "other succeeded",
			"flaky started", "flaky retrying", "flaky started", "flaky succeeded"}
		if got := rec.lines(); !slices.Equal(got, want) {
			t.Fatalf("events %v; want %v", got, want)
		}
		if got, want := since(start, rec.of("flaky"), coordinator.EventStarted), []time.Duration{0, 10 * time.Second, 30 * time.Second}; !slices.Equal(got, want) {
			t.Fatalf("flaky started at %v; want %v", got, want)
		}
		info, _ := s.Info("flaky")
		if info.Status != coordinator.Succeeded || info.Attempts != 3 {
			t.Fatalf("Info(flaky) = %+v; want succeeded after 3 attempts", info)
		}
	})
}

// Retries (README, "The rules"): out of attempts the task is Failed with the last error; RetryIf
// false fails it at once.
func TestRetryExhaustedAndRetryIf(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		var attempts atomic.Int32
		fatal := errors.New("fatal")
		err := s.Submit(
			coordinator.Task{ID: "always", Run: func(ctx context.Context) error {
				return fmt.Errorf("attempt %d", attempts.Add(1))
			}, Retry: coordinator.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Second}},
			coordinator.Task{ID: "fatal", Run: func(context.Context) error { return fatal },
				Retry: coordinator.RetryPolicy{MaxAttempts: 5, BaseDelay: time.Second,
					RetryIf: func(err error) bool { return !errors.Is(err, fatal) }}},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		info, _ := s.Info("always")
		if info.Status != coordinator.Failed || info.Attempts != 3 || info.Err == nil || info.Err.Error() != "attempt 3" {
			t.Fatalf("Info(always) = %+v; want failed after 3 attempts with the last error", info)
		}
		info, _ = s.Info("fatal")
		if info.Status != coordinator.Failed || info.Attempts != 1 || !errors.Is(info.Err, fatal) {
			t.Fatalf("Info(fatal) = %+v; want failed after 1 attempt (RetryIf false)", info)
		}
	})
}

// Skips (README, "The rules"): Failed or Cancelled skips every waiting dependent, transitively,
// with the root cause; a task submitted after its dependency failed is
// skipped at once.
func TestSkipCascade(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		rec := record(s)
		err := s.Submit(
			coordinator.Task{ID: "bad", Run: func(context.Context) error { return errors.New("boom") }},
			coordinator.Task{ID: "good", Run: ok},
			coordinator.Task{ID: "child", Run: ok, Deps: []string{"bad", "good"}},
			coordinator.Task{ID: "grandchild", Run: ok, Deps: []string{"child"}},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		for _, id := range []string{"child", "grandchild"} {
			info, _ := s.Info(id)
			if info.Status != coordinator.Skipped || info.Cause != "bad" {
				t.Fatalf("Info(%s) = %+v; want skipped, cause bad", id, info)
			}
		}
		if err := s.Submit(coordinator.Task{ID: "late", Run: ok, Deps: []string{"grandchild"}}); err != nil {
			t.Fatalf("Submit(late) = %v", err)
		}
		settle(t, s)
		info, _ := s.Info("late")
		if info.Status != coordinator.Skipped || info.Cause != "bad" {
			t.Fatalf("Info(late) = %+v; want skipped at once, cause bad", info)
		}
		ev := rec.of("late")
		if len(ev) != 1 || ev[0].Kind != coordinator.EventSkipped || ev[0].Cause != "bad" {
			t.Fatalf("events of late = %+v; want one skipped event with cause bad", ev)
		}
	})
}

// Skips (README, "The rules"): among several causes of the worst class,
// Cause names the first to reach the task: the dependencies ended before
// it was submitted in the order of its Deps, later ends in the order they
// happen, and a worse end replaces an earlier cause whatever its place.
func TestSkipCauseIsFirstOfTheWorstClass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(4)) // x, y and z run at once
		boom := func(context.Context) error { return errors.New("boom") }
		err := s.Submit(
			coordinator.Task{ID: "a", Run: boom},
			coordinator.Task{ID: "b", Run: boom},
			coordinator.Task{ID: "gone", Run: ok, Delay: time.Hour},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		s.Cancel("gone")
		settle(t, s)
		gx, gy, gz := newGate(), newGate(), newGate()
		failAfter := func(g *gate) func(context.Context) error {
			return func(ctx context.Context) error { g.run(ctx); return errors.New("boom") }
		}
		err = s.Submit(
			coordinator.Task{ID: "ba", Deps: []string{"b", "a"}, Run: ok},        // both ended: Deps order
			coordinator.Task{ID: "gone-b", Deps: []string{"gone", "b"}, Run: ok}, // a failure outranks a cancel
			coordinator.Task{ID: "x", Run: failAfter(gx)},
			coordinator.Task{ID: "y", Run: failAfter(gy)},
			coordinator.Task{ID: "z", Run: failAfter(gz)},
			coordinator.Task{ID: "xy", Deps: []string{"x", "y"}, Run: ok},        // y fails first
			coordinator.Task{ID: "gone-z", Deps: []string{"z", "gone"}, Run: ok}, // cancelled at once, z fails later
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		synctest.Wait()
		gy.release()
		synctest.Wait()
		gx.release()
		gz.release()
		settle(t, s)
		for id, want := range map[string]string{"ba": "b", "gone-b": "b", "xy": "y", "gone-z": "z"} {
			if info, _ := s.Info(id); info.Status != coordinator.Skipped || info.Cause != want {
				t.Errorf("Info(%s) = %v cause %q; want skipped, cause %s", id, info.Status, info.Cause, want)
			}
		}
	})
}

// Skips (README, "The rules"): the cascade is iterative: a chain of 1,000,000 whose head fails.
func TestMillionChainSkipped(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000,000 tasks")
	}
	s := newScheduler(t, coordinator.WithWorkers(2))
	const n = 1_000_000
	tasks := make([]coordinator.Task, n)
	tasks[0] = coordinator.Task{ID: "t0", Run: func(context.Context) error { return errors.New("head fails") }}
	for i := 1; i < n; i++ {
		tasks[i] = coordinator.Task{ID: fmt.Sprintf("t%d", i), Run: ok, Deps: []string{tasks[i-1].ID}}
	}
	if err := s.Submit(tasks...); err != nil {
		t.Fatalf("Submit = %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Wait(ctx); err != nil {
		t.Fatalf("Wait = %v", err)
	}
	for _, id := range []string{"t1", "t500000", "t999999"} {
		info, _ := s.Info(id)
		if info.Status != coordinator.Skipped || info.Cause != "t0" {
			t.Fatalf("Info(%s) = %+v; want skipped, cause t0", id, info)
		}
	}
}

// Cancel (README, "The rules"): Cancel of pending, ready and delayed tasks.
func TestCancelWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(1))
		rec := record(s)
		g := newGate()
		err := s.Submit(
			coordinator.Task{ID: "busy", Run: g.run},
			coordinator.Task{ID: "ready", Run: ok},
			coordinator.Task{ID: "pending", Run: ok, Deps: []string{"busy"}},
			coordinator.Task{ID: "delayed", Run: ok, Delay: time.Hour},
			coordinator.Task{ID: "after-delayed", Run: ok, Deps: []string{"delayed"}},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		synctest.Wait()
		for _, id := range []string{"ready", "pending", "delayed"} {
			if got := s.Cancel(id); !got {
				t.Fatalf("Cancel(%s) = false; want true", id)
			}
			if st := status(t, s, id); st != coordinator.Cancelled {
				t.Fatalf("status(%s) = %v right after Cancel; want cancelled", id, st)
			}
			if s.Cancel(id) {
				t.Fatalf("second Cancel(%s) = true; want false", id)
			}
		}
		if s.Cancel("nobody") {
			t.Fatalf("Cancel(unknown) = true; want false")
		}
		g.release()
		settle(t, s)
		if s.Cancel("busy") {
			t.Fatalf("Cancel(finished) = true; want false")
		}
		info, _ := s.Info("after-delayed")
		if info.Status != coordinator.Skipped || info.Cause != "delayed" {
			t.Fatalf("Info(after-delayed) = %+v; want skipped, cause delayed", info)
		}
		if got := rec.lines(coordinator.EventStarted); !slices.Equal(got, []string{"busy started"}) {
			t.Fatalf("started %v; want only busy", got)
		}
	})
}

// Cancel (README, "The rules"): Cancel of a running task ends its context; it ends Cancelled even
// though its function returns nil.
func TestCancelRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		cause := make(chan error, 1)
		err := s.Submit(
			coordinator.Task{ID: "long", Run: func(ctx context.Context) error {
				<-ctx.Done()
				cause <- context.Cause(ctx)
				return nil
			}},
			coordinator.Task{ID: "next", Run: ok, Deps: []string{"long"}},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		synctest.Wait()
		if st := status(t, s, "long"); st != coordinator.Running {
			t.Fatalf("status(long) = %v; want running", st)
		}
		if !s.Cancel("long") {
			t.Fatalf("Cancel(running) = false; want true")
		}
		if s.Cancel("long") {
			t.Fatalf("second Cancel(running) = true; want false")
		}
		settle(t, s)
		if c := <-cause; !errors.Is(c, coordinator.ErrCancelled) {
			t.Fatalf("context.Cause = %v; want ErrCancelled", c)
		}
		if st := status(t, s, "long"); st != coordinator.Cancelled {
			t.Fatalf("status(long) = %v; want cancelled", st)
		}
		if info, _ := s.Info("next"); info.Status != coordinator.Skipped || info.Cause != "long" {
			t.Fatalf("Info(next) = %+v; want skipped, cause long", info)
		}
	})
}

// Time (README, "The rules"): a delayed task does not start before submission + Delay.
func TestDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		rec := record(s)
		start := time.Now()
		err := s.Submit(
			coordinator.Task{ID: "later", Run: ok, Delay: 1500 * time.Millisecond},
			coordinator.Task{ID: "dep", Run: func(context.Context) error { time.Sleep(time.Second); return nil }},
			coordinator.Task{ID: "dep-then-delay", Run: ok, Delay: 500 * time.Millisecond, Deps: []string{"dep"}},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		if got := since(start, rec.of("later"), coordinator.EventStarted); !slices.Equal(got, []time.Duration{1500 * time.Millisecond}) {
			t.Fatalf("later started at %v; want [1.5s]", got)
		}
		// Its delay had passed when dep finished: it starts at once.
		if got := since(start, rec.of("dep-then-delay"), coordinator.EventStarted); !slices.Equal(got, []time.Duration{time.Second}) {
			t.Fatalf("dep-then-delay started at %v; want [1s]", got)
		}
	})
}

// Time (README, "The rules"): recurring at a fixed rate; an overrun is followed at once; the
// task ends Succeeded after its last run.
func TestRecurring(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		rec := record(s)
		start := time.Now()
		run := 0
		err := s.Submit(
			coordinator.Task{ID: "tick", Every: time.Second, Times: 4, Delay: 100 * time.Millisecond,
				Run: func(context.Context) error {
					run++
					if run == 2 {
						time.Sleep(1500 * time.Millisecond) // overruns its interval
					}
					return nil
				}},
			coordinator.Task{ID: "after", Run: ok, Deps: []string{"tick"}},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		ms := time.Millisecond
		want := []time.Duration{100 * ms, 1100 * ms, 2600 * ms, 3100 * ms}
		if got := since(start, rec.of("tick"), coordinator.EventStarted); !slices.Equal(got, want) {
			t.Fatalf("tick started at %v; want %v", got, want)
		}
		var runs []int
		for _, e := range rec.of("tick") {
			if e.Kind == coordinator.EventRecurred {
				runs = append(runs, e.Run)
			}
		}
		if !slices.Equal(runs, []int{1, 2, 3}) {
			t.Fatalf("recurred events for runs %v; want [1 2 3]", runs)
		}
		info, _ := s.Info("tick")
		if info.Status != coordinator.Succeeded || info.Runs != 4 {
			t.Fatalf("Info(tick) = %+v; want succeeded after 4 runs", info)
		}
		if st := status(t, s, "after"); st != coordinator.Succeeded {
			t.Fatalf("status(after) = %v; want succeeded once every run is done", st)
		}
	})
}

// Time (README, "The rules"): a failed run (after retries) ends a recurring task Failed.
func TestRecurringFailedRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		run := 0
		err := s.Submit(coordinator.Task{ID: "tick", Every: time.Second, Times: 5,
			Retry: coordinator.RetryPolicy{MaxAttempts: 2, BaseDelay: 100 * time.Millisecond},
			Run: func(context.Context) error {
				run++
				if run >= 3 {
					return errors.New("broken")
				}
				return nil
			}})
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		info, _ := s.Info("tick")
		if info.Status != coordinator.Failed || info.Runs != 2 || info.Attempts != 2 {
			t.Fatalf("Info(tick) = %+v; want failed in run 3 after 2 attempts", info)
		}
	})
}

// Timeouts (README, "The rules"): a timeout fails the attempt (retryably); a function that ignores
// its context past the grace period (here 0) is abandoned and the pool
// keeps its size.
func TestTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(1), coordinator.WithAbandonAfter(0))
		rec := record(s)
		start := time.Now()
		release := make(chan struct{})
		var attempt atomic.Int32 // the abandoned attempt runs beside the retry
		err := s.Submit(
			coordinator.Task{ID: "stubborn", Timeout: time.Second,
				Retry: coordinator.RetryPolicy{MaxAttempts: 2, BaseDelay: time.Second},
				Run: func(ctx context.Context) error {
					if attempt.Add(1) == 1 {
						<-release // ignores ctx
					}
					return nil
				}},
			coordinator.Task{ID: "other", Run: ok},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		ev := rec.of("stubborn")
		if ev[1].Kind != coordinator.EventRetrying || !errors.Is(ev[1].Err, worker.ErrTimeout) {
			t.Fatalf("second event %+v; want retrying with ErrTimeout", ev[1])
		}
		if got := since(start, rec.of("other"), coordinator.EventStarted); !slices.Equal(got, []time.Duration{time.Second}) {
			t.Fatalf("other started at %v; want 1s: the slot is freed at the timeout", got)
		}
		if st := status(t, s, "stubborn"); st != coordinator.Succeeded {
			t.Fatalf("status(stubborn) = %v; want succeeded on attempt 2", st)
		}
		close(release) // the abandoned attempt returns; its result is discarded
		synctest.Wait()
		if st := status(t, s, "stubborn"); st != coordinator.Succeeded {
			t.Fatalf("status(stubborn) = %v after the abandoned attempt returned; want succeeded", st)
		}
	})
}

// Timeouts (README, "The rules"): an attempt's context has a deadline; after it ctx.Err() is
// DeadlineExceeded with cause ErrTimeout. A function that honours it and
// cleans up for a while holds its worker until it returns: the retry never
// runs beside it, and Wait does not return while it runs. One that is still
// running a grace period after its timeout is abandoned.
func TestTimeoutGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(2), coordinator.WithAbandonAfter(3*time.Second))
		rec := record(s)
		start := time.Now()
		var running, overlap atomic.Int32
		var mu sync.Mutex
		var deadlines []time.Duration
		var errs, causes []error
		cleanup := []time.Duration{2 * time.Second, 10 * time.Second, 0} // attempt 2 outlives the grace
		attempt := 0
		err := s.Submit(coordinator.Task{ID: "slow", Timeout: time.Second,
			Retry: coordinator.RetryPolicy{MaxAttempts: 3},
			Run: func(ctx context.Context) error {
				if running.Add(1) > 1 {
					overlap.Add(1)
				}
				defer running.Add(-1)
				mu.Lock()
				attempt++
				n := attempt
				dl, ok := ctx.Deadline()
				if ok {
					deadlines = append(deadlines, dl.Sub(start))
				}
				mu.Unlock()
				if n == 3 {
					return nil
				}
				<-ctx.Done()
				mu.Lock()
				errs, causes = append(errs, ctx.Err()), append(causes, context.Cause(ctx))
				mu.Unlock()
				time.Sleep(cleanup[n-1]) // fake time: cleaning up after the deadline
				return ctx.Err()
			}})
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		// Attempt 1: 1s to its timeout, 2s of cleanup, then the retry. Attempt
		// 2 starts at 3s, times out at 4s and is abandoned at 7s; attempt 3
		// starts then, while attempt 2's function still runs (abandoned).
		if got, want := since(start, rec.of("slow"), coordinator.EventStarted), []time.Duration{0, 3 * time.Second, 7 * time.Second}; !slices.Equal(got, want) {
			t.Fatalf("attempts started at %v; want %v", got, want)
		}
		if got, want := deadlines, []time.Duration{time.Second, 4 * time.Second, 8 * time.Second}; !slices.Equal(got, want) {
			t.Fatalf("ctx.Deadline() = %v; want start+Timeout: %v", got, want)
		}
		if overlap.Load() != 1 {
			t.Fatalf("%d attempts overlapped; want 1 (only the abandoned one)", overlap.Load())
		}
		for i := range errs {
			if !errors.Is(errs[i], context.DeadlineExceeded) || !errors.Is(causes[i], worker.ErrTimeout) {
				t.Fatalf("after the deadline: Err = %v, Cause = %v; want DeadlineExceeded, ErrTimeout", errs[i], causes[i])
			}
		}
		if info, _ := s.Info("slow"); info.Status != coordinator.Succeeded || info.Attempts != 3 {
			t.Fatalf("Info(slow) = %+v; want succeeded on attempt 3", info)
		}
		time.Sleep(10 * time.Second) // the abandoned function returns; nothing changes
		synctest.Wait()
		if info, _ := s.Info("slow"); info.Status != coordinator.Succeeded {
			t.Fatalf("Info(slow) = %+v after the abandoned attempt returned; want succeeded", info)
		}
	})
}

// Wait does not return while a timed-out function that is not abandoned
// still runs.
func TestWaitCoversTimeoutCleanup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithAbandonAfter(time.Minute))
		start := time.Now()
		var returned atomic.Bool
		err := s.Submit(coordinator.Task{ID: "t", Timeout: time.Second, Run: func(ctx context.Context) error {
			<-ctx.Done()
			time.Sleep(5 * time.Second)
			returned.Store(true)
			return nil
		}})
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		if err := s.Wait(context.Background()); err != nil {
			t.Fatalf("Wait = %v", err)
		}
		if !returned.Load() || time.Since(start) != 6*time.Second {
			t.Fatalf("Wait returned at %v, function returned: %v; want at 6s, after the function", time.Since(start), returned.Load())
		}
		if info, _ := s.Info("t"); info.Status != coordinator.Failed || !errors.Is(info.Err, worker.ErrTimeout) {
			t.Fatalf("Info(t) = %+v; want failed with ErrTimeout", info)
		}
	})
}

// Panics (README, "The rules"): a panic is a failed attempt carrying the value and the stack.
func TestPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		if err := s.Submit(coordinator.Task{ID: "p", Run: func(context.Context) error { panic("kaboom") }}); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		info, _ := s.Info("p")
		var pe *worker.PanicError
		if info.Status != coordinator.Failed || !errors.As(info.Err, &pe) || pe.Value != "kaboom" || len(pe.Stack) == 0 {
			t.Fatalf("Info(p) = %+v; want failed with a *PanicError(kaboom) and a stack", info)
		}
		if err := s.Submit(coordinator.Task{ID: "after", Run: ok}); err != nil {
			t.Fatalf("Submit after a panic = %v", err)
		}
		settle(t, s)
		if st := status(t, s, "after"); st != coordinator.Succeeded {
			t.Fatalf("status(after) = %v; want succeeded: the scheduler survives", st)
		}
	})
}

// Events (README, "The rules"): every subscriber gets every event in order; a blocked subscriber
// stalls nothing and loses nothing; unsubscribe stops delivery.
func TestSubscribers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(2))
		fast := record(s)
		unblock := make(chan struct{})
		slow := &recorder{}
		s.Subscribe(func(e coordinator.Event) {
			<-unblock
			slow.mu.Lock()
			slow.events = append(slow.events, e)
			slow.mu.Unlock()
		})
		gone := &recorder{}
		unsubscribe := s.Subscribe(func(e coordinator.Event) {
			gone.mu.Lock()
			gone.events = append(gone.events, e)
			gone.mu.Unlock()
		})
		unsubscribe()
		unsubscribe()
		var tasks []coordinator.Task
		for i := range 50 {
			tasks = append(tasks, coordinator.Task{ID: fmt.Sprint(i), Run: ok})
		}
		if err := s.Submit(tasks...); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s) // returns although slow is blocked
		if n := len(fast.all()); n != 100 {
			t.Fatalf("fast subscriber got %d events; want 100", n)
		}
		close(unblock)
		synctest.Wait()
		if !slices.EqualFunc(fast.all(), slow.all(), func(a, b coordinator.Event) bool { return a.TaskID == b.TaskID && a.Kind == b.Kind }) {
			t.Fatalf("slow subscriber saw %v; want the same events as fast, in order", slow.lines())
		}
		if n := len(gone.all()); n != 0 {
			t.Fatalf("unsubscribed callback got %d events; want 0", n)
		}
	})
}

// Waiting and Shutdown (README, "The rules"): Wait returns once everything is final; later tasks reopen it;
// it honours its context.
func TestWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		if err := s.Wait(context.Background()); err != nil {
			t.Fatalf("Wait(nothing submitted) = %v; want nil", err)
		}
		g := newGate()
		if err := s.Submit(coordinator.Task{ID: "a", Run: g.run}); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := s.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait(running task) = %v; want DeadlineExceeded", err)
		}
		g.release()
		if err := s.Wait(context.Background()); err != nil {
			t.Fatalf("Wait = %v; want nil", err)
		}
		g2 := newGate()
		if err := s.Submit(coordinator.Task{ID: "b", Run: g2.run}); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		waited := make(chan error)
		go func() { waited <- s.Wait(context.Background()) }()
		synctest.Wait()
		select {
		case err := <-waited:
			t.Fatalf("Wait returned %v while b runs; want it to wait", err)
		default:
		}
		g2.release()
		if err := <-waited; err != nil {
			t.Fatalf("Wait = %v; want nil", err)
		}
	})
}

// Waiting and Shutdown (README, "The rules"): Shutdown cancels what has not run, ends running contexts, is
// idempotent; afterwards Submit fails with ErrClosed and Info still works.
func TestShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := coordinator.New(coordinator.WithWorkers(1))
		if err != nil {
			t.Fatalf("New = %v", err)
		}
		rec := record(s)
		cause := make(chan error, 1)
		err = s.Submit(
			coordinator.Task{ID: "running", Run: func(ctx context.Context) error {
				<-ctx.Done()
				cause <- context.Cause(ctx)
				return ctx.Err()
			}},
			coordinator.Task{ID: "queued", Run: ok},
			coordinator.Task{ID: "delayed", Run: ok, Delay: time.Hour},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		synctest.Wait()
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatalf("Shutdown = %v; want nil", err)
		}
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatalf("second Shutdown = %v; want nil", err)
		}
		if c := <-cause; !errors.Is(c, coordinator.ErrClosed) {
			t.Fatalf("running task's context.Cause = %v; want ErrClosed", c)
		}
		for _, id := range []string{"running", "queued", "delayed"} {
			if st := status(t, s, id); st != coordinator.Cancelled {
				t.Fatalf("status(%s) after Shutdown = %v; want cancelled", id, st)
			}
		}
		got := rec.lines(coordinator.EventCancelled)
		slices.Sort(got)
		if want := []string{"delayed cancelled", "queued cancelled", "running cancelled"}; !slices.Equal(got, want) {
			t.Fatalf("cancelled events %v; want %v (delivered before Shutdown returned)", got, want)
		}
		if err := s.Submit(coordinator.Task{ID: "late", Run: ok}); !errors.Is(err, coordinator.ErrClosed) {
			t.Fatalf("Submit after Shutdown = %v; want ErrClosed", err)
		}
		if s.Cancel("queued") {
			t.Fatalf("Cancel after Shutdown = true; want false")
		}
		if err := s.Wait(context.Background()); err != nil {
			t.Fatalf("Wait after Shutdown = %v; want nil", err)
		}
		s.Subscribe(func(coordinator.Event) { t.Errorf("event after Shutdown") })()
	})
}

// Waiting and Shutdown (README, "The rules"): Shutdown returns ctx.Err() while a task ignores its context, and
// completes once it returns.
func TestShutdownContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := coordinator.New()
		if err != nil {
			t.Fatalf("New = %v", err)
		}
		release := make(chan struct{})
		if err := s.Submit(coordinator.Task{ID: "deaf", Run: func(context.Context) error { <-release; return nil }}); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown = %v; want DeadlineExceeded", err)
		}
		close(release)
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatalf("Shutdown after the task returned = %v; want nil", err)
		}
		if st := status(t, s, "deaf"); st != coordinator.Cancelled {
			t.Fatalf("status(deaf) = %v; want cancelled", st)
		}
	})
}

// Dispatch: with one worker and slow tasks the order is exact: a better
// task submitted while a batch runs starts next.
func TestSlowTasksExactOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(1))
		rec := record(s)
		slow := func(context.Context) error { time.Sleep(time.Second); return nil }
		var tasks []coordinator.Task
		for _, id := range []string{"a", "b", "c", "d"} {
			tasks = append(tasks, coordinator.Task{ID: id, Run: slow, Priority: 5})
		}
		if err := s.Submit(tasks...); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		time.Sleep(1500 * time.Millisecond) // fake time: b is running
		if err := s.Submit(coordinator.Task{ID: "urgent", Run: slow}); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		want := []string{"a started", "b started", "urgent started", "c started", "d started"}
		if got := rec.lines(coordinator.EventStarted); !slices.Equal(got, want) {
			t.Fatalf("start order %v; want %v", got, want)
		}
	})
}

// Fusion through the public API: a chain whose middle link fails skips the
// rest without running it; a Cancel landing mid-batch cancels a link that
// waits behind a running one.
func TestFusedChainSemantics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(1))
		rec := record(s)
		// Warm up: once the pool has measured its (instant) tasks, chains fuse.
		if err := s.Submit(coordinator.Task{ID: "warm", Run: ok}); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		var ran []string
		step := func(id string, err error) func(context.Context) error {
			return func(context.Context) error { ran = append(ran, id); return err }
		}
		err := s.Submit(
			coordinator.Task{ID: "c1", Run: step("c1", nil)},
			coordinator.Task{ID: "c2", Run: step("c2", errors.New("broken")), Deps: []string{"c1"}},
			coordinator.Task{ID: "c3", Run: step("c3", nil), Deps: []string{"c2"}},
			coordinator.Task{ID: "c4", Run: step("c4", nil), Deps: []string{"c3"}},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		if !slices.Equal(ran, []string{"c1", "c2"}) {
			t.Fatalf("ran %v; want [c1 c2]", ran)
		}
		for _, id := range []string{"c3", "c4"} {
			if info, _ := s.Info(id); info.Status != coordinator.Skipped || info.Cause != "c2" || info.Attempts != 0 {
				t.Fatalf("Info(%s) = %+v; want skipped, cause c2, no attempt", id, info)
			}
			// Regression: a fused link that never ran was reported started.
			if ev := rec.of(id); len(ev) != 1 || ev[0].Kind != coordinator.EventSkipped {
				t.Fatalf("events of %s = %v; want only skipped", id, ev)
			}
		}

		g := newGate()
		err = s.Submit(
			coordinator.Task{ID: "head", Run: g.run},
			coordinator.Task{ID: "mid", Run: step("mid", nil), Deps: []string{"head"}},
			coordinator.Task{ID: "tail", Run: step("tail", nil), Deps: []string{"mid"}},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		synctest.Wait()
		// mid is fused behind head: handed out, but Pending until head has
		// succeeded and the worker has claimed it.
		if st := status(t, s, "mid"); st != coordinator.Pending {
			t.Fatalf("status(mid) = %v while head runs; want pending", st)
		}
		if !s.Cancel("mid") {
			t.Fatalf("Cancel(mid) = false; want true")
		}
		// Final at once, and so is what waits on it, while head still runs.
		if st := status(t, s, "mid"); st != coordinator.Cancelled {
			t.Fatalf("status(mid) right after Cancel = %v; want cancelled", st)
		}
		if info, _ := s.Info("tail"); info.Status != coordinator.Skipped || info.Cause != "mid" {
			t.Fatalf("Info(tail) right after Cancel(mid) = %+v; want skipped, cause mid", info)
		}
		if st := status(t, s, "head"); st != coordinator.Running {
			t.Fatalf("status(head) = %v; want running", st)
		}
		g.release()
		settle(t, s)
		for id, want := range map[string]coordinator.Status{"head": coordinator.Succeeded, "mid": coordinator.Cancelled, "tail": coordinator.Skipped} {
			if st := status(t, s, id); st != want {
				t.Fatalf("status(%s) = %v; want %v", id, st, want)
			}
		}
		if slices.Contains(ran, "mid") || slices.Contains(ran, "tail") {
			t.Fatalf("ran %v; the cancelled link and the one behind it must not run", ran)
		}
	})
}

// A task may submit more tasks (a graph that grows as it runs), and a
// subscriber may call back into the scheduler.
func TestReentrantCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(1))
		seen := make(chan coordinator.TaskInfo, 10)
		s.Subscribe(func(e coordinator.Event) {
			if e.Kind == coordinator.EventSucceeded && e.TaskID == "child" {
				info, _ := s.Info("parent")
				seen <- info
			}
		})
		err := s.Submit(coordinator.Task{ID: "parent", Run: func(context.Context) error {
			return s.Submit(coordinator.Task{ID: "child", Run: ok, Deps: []string{"parent"}})
		}})
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		if st := status(t, s, "child"); st != coordinator.Succeeded {
			t.Fatalf("status(child) = %v; want succeeded", st)
		}
		if info := <-seen; info.Status != coordinator.Succeeded {
			t.Fatalf("Info(parent) from a subscriber = %+v; want succeeded", info)
		}
	})
}
