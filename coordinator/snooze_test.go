package coordinator_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
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
