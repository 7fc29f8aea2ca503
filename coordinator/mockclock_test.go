package coordinator_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/worker"
	"github.com/benbjohnson/clock"
)

// mockRig drives a scheduler on a mock clock. Tests wait for the timer to
// be armed before they advance the clock, and wait on events, never on time.
type mockRig struct {
	clk    *clock.Mock
	s      *coordinator.Scheduler
	armed  chan time.Time
	events chan coordinator.Event
}

func newMockRig(t *testing.T, opts ...coordinator.Option) *mockRig {
	r := &mockRig{clk: clock.NewMock(), armed: make(chan time.Time, 100), events: make(chan coordinator.Event, 1000)}
	r.clk.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	opts = append(opts, coordinator.WithClock(r.clk), coordinator.WithTimerArmed(func(due time.Time) {
		if !due.IsZero() {
			r.armed <- due
		}
	}))
	r.s = newScheduler(t, opts...)
	r.s.Subscribe(func(e coordinator.Event) { r.events <- e })
	return r
}

// next returns the next event of one of the kinds, skipping others.
func (r *mockRig) next(t *testing.T, kinds ...coordinator.EventKind) coordinator.Event {
	t.Helper()
	for {
		select {
		case e := <-r.events:
			if slices.Contains(kinds, e.Kind) {
				return e
			}
		case <-time.After(10 * time.Second): // only reports a failure
			t.Fatalf("no %v event within 10s", kinds)
		}
	}
}

func (r *mockRig) nextArmed(t *testing.T) time.Time {
	t.Helper()
	select {
	case due := <-r.armed:
		return due
	case <-time.After(10 * time.Second): // only reports a failure
		t.Fatalf("timer not armed within 10s")
	}
	return time.Time{}
}

// Retries wait exactly Delay(failures), capped; the attempt starts when the
// mock clock reaches the due time, not a tick later.
func TestRetryTimestampsMockClock(t *testing.T) {
	r := newMockRig(t, coordinator.WithWorkers(1))
	start := r.clk.Now()
	err := r.s.Submit(coordinator.Task{ID: "flaky", Run: func(context.Context) error { return errors.New("no") },
		Retry: coordinator.RetryPolicy{MaxAttempts: 5, BaseDelay: time.Second, MaxDelay: 3 * time.Second}})
	if err != nil {
		t.Fatalf("Submit = %v", err)
	}
	wantWaits := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second}
	at := time.Duration(0)
	for i, wait := range wantWaits {
		e := r.next(t, coordinator.EventStarted)
		if got := e.At.Sub(start); got != at || e.Attempt != i+1 {
			t.Fatalf("attempt %d started at %v; want attempt %d at %v", e.Attempt, got, i+1, at)
		}
		e = r.next(t, coordinator.EventRetrying)
		if e.Wait != wait {
			t.Fatalf("retry %d waits %v; want %v", i+1, e.Wait, wait)
		}
		due := r.nextArmed(t)
		at += wait
		if got := due.Sub(start); got != at {
			t.Fatalf("timer armed for %v; want %v", got, at)
		}
		r.clk.Add(wait - time.Nanosecond)
		select {
		case e := <-r.events:
			t.Fatalf("event %v %v before the backoff passed", e.TaskID, e.Kind)
		default:
		}
		r.clk.Add(time.Nanosecond)
	}
	e := r.next(t, coordinator.EventFailed)
	if e.Attempt != 5 {
		t.Fatalf("failed after attempt %d; want 5", e.Attempt)
	}
}

// Jitter draws each wait from [d*(1-J), d]; a seeded source repeats them.
func TestJitterSeeded(t *testing.T) {
	waits := func() []time.Duration {
		r := newMockRig(t, coordinator.WithRandSource(rand.NewPCG(7, 7)))
		err := r.s.Submit(coordinator.Task{ID: "j", Run: func(context.Context) error { return errors.New("no") },
			Retry: coordinator.RetryPolicy{MaxAttempts: 6, BaseDelay: time.Second, Jitter: 0.5}})
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		var out []time.Duration
		p := coordinator.RetryPolicy{BaseDelay: time.Second}
		for i := 1; i <= 5; i++ {
			e := r.next(t, coordinator.EventRetrying)
			d := p.Delay(i)
			if e.Wait < d/2 || e.Wait > d {
				t.Fatalf("retry %d waits %v; want within [%v, %v]", i, e.Wait, d/2, d)
			}
			out = append(out, e.Wait)
			r.nextArmed(t)
			r.clk.Add(e.Wait)
		}
		r.next(t, coordinator.EventFailed)
		return out
	}
	a, b := waits(), waits()
	if !slices.Equal(a, b) {
		t.Fatalf("waits %v then %v; want the same with the same seed", a, b)
	}
	if slices.Equal(a, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second}) {
		t.Fatalf("waits %v carry no jitter", a)
	}
}

// A delayed task starts when the mock clock reaches submission + Delay.
func TestDelayMockClock(t *testing.T) {
	r := newMockRig(t)
	start := r.clk.Now()
	if err := r.s.Submit(coordinator.Task{ID: "d", Run: ok, Delay: 1500 * time.Microsecond}); err != nil {
		t.Fatalf("Submit = %v", err)
	}
	if due := r.nextArmed(t); due.Sub(start) != 1500*time.Microsecond {
		t.Fatalf("armed for %v; want 1.5ms", due.Sub(start))
	}
	r.clk.Add(1500 * time.Microsecond)
	if e := r.next(t, coordinator.EventStarted); e.At.Sub(start) != 1500*time.Microsecond {
		t.Fatalf("started at %v; want 1.5ms", e.At.Sub(start))
	}
}

// movingClock is a mock clock that moves by jump once, between the
// timer goroutine reading the time and arming its timer: the window in
// which a test's Add used to land and leave the timer armed late.
type movingClock struct {
	*clock.Mock
	jump  time.Duration
	armed int
}

func (c *movingClock) Timer(d time.Duration) *clock.Timer {
	if c.armed++; c.armed == 1 {
		c.Mock.Add(c.jump)
	}
	return c.Mock.Timer(d)
}

// A clock moved while the timer is being armed does not make it late: the
// task starts when the clock reaches its due time, by an Add of exactly
// what remains, whatever the size of the move (a nanosecond too).
func TestTimerArmedOnAClockThatMoves(t *testing.T) {
	for _, jump := range []time.Duration{time.Nanosecond, 999 * time.Nanosecond, 3 * time.Millisecond} {
		t.Run(jump.String(), func(t *testing.T) {
			mc := &movingClock{Mock: clock.NewMock(), jump: jump}
			mc.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			armed := make(chan time.Time, 10)
			started := make(chan time.Time, 1)
			s := newScheduler(t, coordinator.WithClock(mc), coordinator.WithTimerArmed(func(due time.Time) {
				if !due.IsZero() {
					armed <- due
				}
			}))
			start := mc.Now()
			err := s.Submit(coordinator.Task{ID: "d", Delay: 10 * time.Millisecond, Run: func(context.Context) error {
				started <- mc.Now()
				return nil
			}})
			if err != nil {
				t.Fatalf("Submit = %v", err)
			}
			select {
			case due := <-armed:
				if want := start.Add(10 * time.Millisecond); !due.Equal(want) {
					t.Fatalf("armed for %v; want %v", due, want)
				}
			case <-time.After(10 * time.Second): // only reports a failure
				t.Fatal("timer not armed")
			}
			mc.Add(10*time.Millisecond - jump) // to the due time, exactly
			select {
			case at := <-started:
				if at.Sub(start) != 10*time.Millisecond {
					t.Fatalf("started at +%v; want +10ms", at.Sub(start))
				}
			case <-time.After(10 * time.Second): // only reports a failure
				t.Fatalf("the task did not start when the clock reached its due time (timer armed late)")
			}
		})
	}
}

// WithTimerArmed(nil) is refused.
func TestWithTimerArmedNil(t *testing.T) {
	if _, err := coordinator.New(coordinator.WithTimerArmed(nil)); !errors.Is(err, coordinator.ErrInvalidOption) {
		t.Fatalf("New(WithTimerArmed(nil)) = %v; want ErrInvalidOption", err)
	}
}

// WithTimerArmed reports an attempt's timeout and its grace period too,
// before the function is called: a test on a mock clock moves the clock
// to each time it reports and sees the attempt time out, its retry wait
// pass, the retry time out and be abandoned, then the zero time.
func TestTimerArmedForTimeouts(t *testing.T) {
	r := newMockRig(t, coordinator.WithWorkers(1), coordinator.WithAbandonAfter(time.Second))
	start := r.clk.Now()
	calls := 0
	stuck := make(chan struct{})
	defer close(stuck)
	err := r.s.Submit(coordinator.Task{ID: "slow", Timeout: time.Minute,
		Retry: coordinator.RetryPolicy{MaxAttempts: 2, BaseDelay: 10 * time.Second},
		Run: func(ctx context.Context) error {
			if calls++; calls == 1 {
				<-ctx.Done() // honours its context: ends at the timeout
				return ctx.Err()
			}
			<-stuck // ignores it: abandoned after the grace period
			return nil
		}})
	if err != nil {
		t.Fatalf("Submit = %v", err)
	}
	step := func(want time.Duration, move bool) {
		t.Helper()
		due := r.nextArmed(t)
		if got := due.Sub(start); got != want {
			t.Fatalf("armed for %v; want %v", got, want)
		}
		if move {
			r.clk.Set(due)
		}
	}
	step(time.Minute, true)                  // attempt 1's timeout
	step(time.Minute+time.Second, false)     // its grace period, armed as it timed out
	r.next(t, coordinator.EventRetrying)     // it returned within it
	step(time.Minute+10*time.Second, true)   // the retry wait
	step(2*time.Minute+10*time.Second, true) // attempt 2's timeout
	step(2*time.Minute+11*time.Second, true) // its grace period: it does not return
	e := r.next(t, coordinator.EventFailed)
	if e.Attempt != 2 || !errors.Is(e.Err, worker.ErrTimeout) {
		t.Fatalf("slow ended %v after attempt %d (%v); want failed with ErrTimeout after 2", e.Kind, e.Attempt, e.Err)
	}
}

// A scheduler that has had no task reports nothing: the first report of a
// test that subscribes before it submits is its task's timer, not the zero
// time ("every task is final" of an empty scheduler), which stopped the
// recipe before it began.
func TestTimerArmedReportsNothingBeforeTheFirstTask(t *testing.T) {
	clk := clock.NewMock()
	armed := make(chan time.Time, 10)
	s := newScheduler(t, coordinator.WithClock(clk), coordinator.WithTimerArmed(func(due time.Time) { armed <- due }))
	s.Subscribe(func(coordinator.Event) {}) // before anything is submitted
	if err := s.Submit(coordinator.Task{ID: "d", Delay: time.Minute, Run: ok}); err != nil {
		t.Fatalf("Submit = %v", err)
	}
	select {
	case due := <-armed:
		if want := clk.Now().Add(time.Minute); !due.Equal(want) {
			t.Fatalf("first report %v; want the delay's %v", due, want)
		}
	case <-time.After(10 * time.Second): // only reports a failure
		t.Fatal("no report within 10s")
	}
	clk.Add(time.Minute)
	if err := s.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case due := <-armed:
		if !due.IsZero() {
			t.Fatalf("report after the task ended: %v; want the zero time", due)
		}
	case <-time.After(10 * time.Second): // only reports a failure
		t.Fatal("no zero time once the task ended")
	}
}
