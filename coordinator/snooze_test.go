package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/coordinator/storetest"
	"github.com/batonhq/baton/worker"
)

// Snooze (its doc): the task runs again after the wait it asked for,
// without a failure and without using an attempt (MaxAttempts 1 allows
// any number of snoozes); MaxDelay caps the wait; an EventSnoozed says it.
func TestSnoozeRunsAgainWithoutAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		rec := record(s)
		var starts []time.Time
		err := s.Submit(coordinator.Task{ID: "poll", Retry: coordinator.RetryPolicy{MaxDelay: time.Minute},
			Run: func(ctx context.Context) error {
				starts = append(starts, time.Now())
				switch len(starts) {
				case 1:
					return coordinator.Snooze(10 * time.Second)
				case 2:
					return coordinator.Snooze(time.Hour) // capped: a minute
				}
				return nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		if len(starts) != 3 || starts[1].Sub(starts[0]) != 10*time.Second || starts[2].Sub(starts[1]) != time.Minute {
			t.Fatalf("starts %v; want three, 10s then a minute apart", starts)
		}
		info, _ := s.Info("poll")
		if info.Status != coordinator.Succeeded || info.Attempts != 1 {
			t.Errorf("Info(poll) = %v after %d attempts; want succeeded after 1 (snoozes use none)", info.Status, info.Attempts)
		}
		h, _ := s.History("poll")
		if len(h.Attempts) != 3 || h.Attempts[0].Outcome != coordinator.OutcomeSnoozed || h.Attempts[1].Outcome != coordinator.OutcomeSnoozed ||
			h.Attempts[2].Outcome != coordinator.OutcomeSucceeded || h.Attempts[2].Attempt != 1 {
			t.Errorf("History(poll) = %+v; want snoozed, snoozed, succeeded (attempt 1)", h)
		}
		var waits []time.Duration
		for _, e := range rec.of("poll") {
			if e.Kind == coordinator.EventSnoozed {
				waits = append(waits, e.Wait)
			}
		}
		if len(waits) != 2 || waits[0] != 10*time.Second || waits[1] != time.Minute {
			t.Errorf("EventSnoozed waits %v; want [10s 1m]", waits)
		}
	})
}

// RetryAfter (its doc): a failure whose retry waits what the task chose,
// capped by MaxDelay; it counts as an attempt, and with none left the
// task fails with the error.
func TestRetryAfterChoosesTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		var starts []time.Time
		busy := errors.New("503 busy")
		err := s.Submit(coordinator.Task{ID: "call", Retry: coordinator.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Hour, MaxDelay: 2 * time.Minute},
			Run: func(ctx context.Context) error {
				starts = append(starts, time.Now())
				if len(starts) == 1 {
					return coordinator.RetryAfter(busy, 30*time.Second)
				}
				return coordinator.RetryAfter(busy, time.Hour)
			}})
		if err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		if len(starts) != 3 || starts[1].Sub(starts[0]) != 30*time.Second || starts[2].Sub(starts[1]) != 2*time.Minute {
			t.Fatalf("starts %v; want three, 30s then 2m (MaxDelay) apart", starts)
		}
		if info, _ := s.Info("call"); info.Status != coordinator.Failed || info.Attempts != 3 || !errors.Is(info.Err, busy) {
			t.Errorf("Info(call) = %v, %d attempts, %v; want failed after 3, wrapping its error", info.Status, info.Attempts, info.Err)
		}
	})
}

// EventSnoozed names the attempt that snoozed (Event.Attempt, 1-based),
// and the attempt after the snooze has the same number.
func TestSnoozedEventNamesTheAttemptThatSnoozed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		rec := record(s)
		n := 0
		err := s.Submit(coordinator.Task{ID: "p", Retry: coordinator.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Second},
			Run: func(ctx context.Context) error {
				if n++; n <= 2 {
					return coordinator.Snooze(time.Second) // attempt 1, twice
				}
				switch n {
				case 3:
					return errors.New("boom") // attempt 1 fails
				case 4:
					return coordinator.Snooze(time.Second) // attempt 2
				}
				return nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		var got []string
		for _, e := range rec.of("p") {
			if e.Kind == coordinator.EventStarted || e.Kind == coordinator.EventSnoozed {
				got = append(got, fmt.Sprintf("%v %d", e.Kind, e.Attempt))
			}
		}
		want := []string{"started 1", "snoozed 1", "started 1", "snoozed 1", "started 1", "started 2", "snoozed 2", "started 2"}
		if !slices.Equal(got[:min(len(got), len(want))], want) {
			t.Fatalf("events = %v; want them to begin %v", got, want)
		}
	})
}

// A durable scheduler restores a task that snoozed, whatever else it has
// (none here: no retry policy, delay or series): Pending until its snooze
// ends, then it runs. New once panicked on it, and the store could never
// be opened again.
func TestSnoozedTaskSurvivesARestart(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := storetest.NewMemory()
				calls := 0
				f := coordinator.WithFunc("f", func(ctx context.Context, _ []byte) error {
					if calls++; calls == 1 {
						return coordinator.Snooze(time.Hour)
					}
					return nil
				})
				s1, err := coordinator.New(coordinator.WithStore(mem.Open()), f)
				if err != nil {
					t.Fatal(err)
				}
				if err := s1.Submit(coordinator.Task{ID: "t", Func: "f"}); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				store := mem
				if crash {
					store = mem.Crash()
				}
				if err := s1.Shutdown(context.Background()); err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				var s2 *coordinator.Scheduler
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Fatalf("New after the restart panicked: %v", r) // at once, not at the bubble's deadlock
						}
					}()
					s2 = newScheduler(t, coordinator.WithStore(store.Open()), f)
				}()
				if info, _ := s2.Info("t"); info.Status != coordinator.Pending || calls != 1 {
					t.Fatalf("Info(t) after the restart = %+v after %d calls; want pending, snoozed", info, calls)
				}
				settle(t, s2)
				if info, _ := s2.Info("t"); info.Status != coordinator.Succeeded || calls != 2 || time.Since(start) < 59*time.Minute {
					t.Fatalf("Info(t) = %+v after %d calls, %v after the restart; want succeeded at its second call, an hour after the snooze", info, calls, time.Since(start))
				}
			})
		})
	}
}

// A function that panics with Snooze or RetryAfter, or returns either
// after its Timeout, chose nothing: it fails, and a retry waits the
// policy's backoff. A panic with Snooze once snoozed (the panic's error
// wraps its value), using no attempt.
func TestPanicWithSnoozeOrRetryAfterFails(t *testing.T) {
	for _, c := range []struct {
		name string
		do   func(ctx context.Context) error
	}{
		{"panic-snooze", func(context.Context) error { panic(coordinator.Snooze(time.Hour)) }},
		{"panic-wrapped-snooze", func(context.Context) error { panic(fmt.Errorf("deep: %w", coordinator.Snooze(time.Hour))) }},
		{"panic-retry-after", func(context.Context) error { panic(coordinator.RetryAfter(errors.New("busy"), time.Hour)) }},
		{"timeout-then-snooze", func(ctx context.Context) error { <-ctx.Done(); return coordinator.Snooze(time.Hour) }},
		{"timeout-then-retry-after", func(ctx context.Context) error {
			<-ctx.Done()
			return coordinator.RetryAfter(errors.New("busy"), time.Hour)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScheduler(t)
				rec := record(s)
				calls := 0
				start := time.Now()
				err := s.Submit(coordinator.Task{ID: "t", Timeout: time.Second,
					Retry: coordinator.RetryPolicy{MaxAttempts: 2, BaseDelay: time.Second},
					Run: func(ctx context.Context) error {
						if calls++; calls == 1 {
							return c.do(ctx)
						}
						return nil
					}})
				if err != nil {
					t.Fatal(err)
				}
				settle(t, s)
				info, _ := s.Info("t")
				h, _ := s.History("t")
				if calls != 2 || info.Status != coordinator.Succeeded || info.Attempts != 2 || len(h.Attempts) != 2 || h.Attempts[0].Outcome != coordinator.OutcomeFailed {
					t.Fatalf("%d calls, %v after %d attempts, history %+v; want a failure, then a retry that succeeds", calls, info.Status, info.Attempts, h.Attempts)
				}
				if took := time.Since(start); took > 10*time.Second {
					t.Errorf("the retry came %v after the start; want the policy's backoff (1s), not the hour asked", took)
				}
				for _, e := range rec.of("t") {
					if e.Kind == coordinator.EventSnoozed {
						t.Errorf("an EventSnoozed: %+v", e)
					}
				}
			})
		})
	}
}

// A SnoozeError or RetryAfterError made by hand with a negative wait
// waits 0, as Snooze and RetryAfter's own: events say 0.
func TestHandMadeNegativeWaitsCountAsZero(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		rec := record(s)
		calls := 0
		err := s.Submit(coordinator.Task{ID: "t", Retry: coordinator.RetryPolicy{MaxAttempts: 2, BaseDelay: time.Hour},
			Run: func(ctx context.Context) error {
				switch calls++; calls {
				case 1:
					return &coordinator.SnoozeError{After: -time.Hour}
				case 2:
					return &coordinator.RetryAfterError{Err: errors.New("busy"), After: -time.Hour}
				}
				return nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		settle(t, s)
		if info, _ := s.Info("t"); info.Status != coordinator.Succeeded || calls != 3 || time.Since(start) != 0 {
			t.Fatalf("%v after %d calls and %v; want Succeeded after 3 calls at once", info.Status, calls, time.Since(start))
		}
		var waits []time.Duration
		for _, e := range rec.of("t") {
			if e.Kind == coordinator.EventSnoozed || e.Kind == coordinator.EventRetrying {
				waits = append(waits, e.Wait)
			}
		}
		if !slices.Equal(waits, []time.Duration{0, 0}) {
			t.Errorf("the snooze's and the retry's Event.Wait: %v; want [0 0]", waits)
		}
	})
}

// A function that neither panicked nor timed out keeps the wait it chose,
// though its error wraps another task's panic (WaitTasks's *TasksError
// unwraps to each task's error): only the attempt's own panic or timeout
// chooses nothing.
func TestChosenWaitWrappingAnotherTasksPanicIsKept(t *testing.T) {
	for _, how := range []string{"retry-after", "snooze"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScheduler(t)
				rec := record(s)
				if err := s.Submit(coordinator.Task{ID: "c", Run: func(context.Context) error { panic("boom") }}); err != nil {
					t.Fatal(err)
				}
				settle(t, s)
				calls := 0
				start := time.Now()
				if err := s.Submit(coordinator.Task{ID: "o", Retry: coordinator.RetryPolicy{MaxAttempts: 2, BaseDelay: time.Second},
					Run: func(ctx context.Context) error {
						if calls++; calls > 1 {
							return nil
						}
						err := s.WaitTasks(ctx, "c")
						if how == "snooze" {
							return fmt.Errorf("%w: c not done: %w", coordinator.Snooze(time.Hour), err)
						}
						return coordinator.RetryAfter(err, time.Hour)
					}}); err != nil {
					t.Fatal(err)
				}
				settle(t, s)
				if took := time.Since(start); took != time.Hour || calls != 2 {
					t.Errorf("o ran again after %v (%d calls); want the hour it chose", took, calls)
				}
				for _, e := range rec.of("o") {
					if (e.Kind == coordinator.EventSnoozed || e.Kind == coordinator.EventRetrying) && e.Wait != time.Hour {
						t.Errorf("%v: Wait %v, want 1h", e.Kind, e.Wait)
					}
				}
			})
		})
	}
}

// recoverToPanicError is a middleware that recovers a panic itself and
// returns it as a *worker.PanicError wrapped with a word of its own.
type recoverToPanicError struct{ next worker.Worker }

func (w recoverToPanicError) Do(ctx context.Context, j worker.Job) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("pool mw: %w", &worker.PanicError{Value: r, Stack: debug.Stack()})
		}
	}()
	return w.next.Do(ctx, j)
}

// A panic with Snooze or RetryAfter fails and chooses no wait through a
// middleware that recovers it and wraps the *worker.PanicError: what the
// error chain meets first, the panic, decides.
func TestPanicWithSnoozeThroughAMiddlewareFails(t *testing.T) {
	for _, how := range []string{"snooze", "retry-after"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScheduler(t, coordinator.WithMiddleware(func(pool string, next worker.Worker) worker.Worker { return recoverToPanicError{next} }))
				calls := 0
				start := time.Now()
				if err := s.Submit(coordinator.Task{ID: "t", Retry: coordinator.RetryPolicy{MaxAttempts: 2, BaseDelay: time.Second},
					Run: func(ctx context.Context) error {
						if calls++; calls > 1 {
							return nil
						}
						if how == "snooze" {
							panic(coordinator.Snooze(time.Hour))
						}
						panic(coordinator.RetryAfter(errors.New("busy"), time.Hour))
					}}); err != nil {
					t.Fatal(err)
				}
				settle(t, s)
				info, _ := s.Info("t")
				if took := time.Since(start); calls != 2 || info.Status != coordinator.Succeeded || info.Attempts != 2 || took > 10*time.Second {
					t.Errorf("%v after %d calls, %d attempts, %v; want a failure retried after the 1s backoff", info.Status, calls, info.Attempts, took)
				}
			})
		})
	}
}
