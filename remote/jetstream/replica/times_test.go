package replica_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/remote/jetstream/replica"
	"github.com/benbjohnson/clock"
)

// A standby that takes over keeps the times the old leader planned: a
// retry's wait, a series' next starts and a delay run at their original
// moments on the scheduler's clock (one mock clock for both replicas, so
// that a moment is the same on each), not counted again from the
// takeover.
func TestTakeoverKeepsTimes(t *testing.T) {
	c := startCluster(t, 3, nil)
	waitReady(t, c.connect(t))
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	mock := clock.NewMock()
	mock.Set(t0)

	type run struct {
		id string
		at time.Time
	}
	runs := make(chan run, 64)
	var flakyCalls atomic.Int32
	funcs := func(armed chan<- time.Time) replica.Option {
		return replica.WithScheduler(coordinator.WithClock(mock),
			coordinator.WithTimerArmed(func(due time.Time) { armed <- due }),
			coordinator.WithFunc("rec", func(ctx context.Context, p []byte) error {
				runs <- run{string(p), mock.Now()}
				return nil
			}),
			coordinator.WithFunc("flaky", func(ctx context.Context, p []byte) error {
				runs <- run{string(p), mock.Now()}
				if flakyCalls.Add(1) == 1 {
					return errors.New("flaky: first call")
				}
				return nil
			}))
	}
	aArmed, bArmed := make(chan time.Time, 256), make(chan time.Time, 256)
	na, aNotices := notices()
	a := startReplica(t, c.connect(t), "times", "a", funcs(aArmed), na)
	waitRole(t, aNotices, replica.Leader)
	nb, bNotices := notices()
	b := startReplica(t, c.connect(t), "times", "b", funcs(bArmed), nb)
	waitRole(t, bNotices, replica.Standby)

	events := make(chan coordinator.Event, 64)
	unsubscribe, err := b.Subscribe(func(ev coordinator.Event) { events <- ev })
	if err != nil {
		t.Fatal(err)
	}
	defer unsubscribe()

	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	tasks := []coordinator.Task{
		{ID: "delayed", Func: "rec", Payload: []byte("delayed"), Delay: time.Hour},
		{ID: "series", Func: "rec", Payload: []byte("series"), Every: 10 * time.Minute, Times: 3},
		{ID: "retry", Func: "flaky", Payload: []byte("retry"), Retry: coordinator.RetryPolicy{MaxAttempts: 3, BaseDelay: 5 * time.Minute}},
	}
	if err := b.Submit(ctx, tasks...); err != nil {
		t.Fatalf("Submit = %v", err)
	}
	// On a: the series' first run and the retry's first attempt, at t0;
	// their ends are committed before they are published.
	for range 2 {
		if r := recv(t, runs, "a first run"); !r.at.Equal(t0) {
			t.Fatalf("%s ran at %v; want %v", r.id, r.at, t0)
		}
	}
	for recurred, retrying := false, false; !recurred || !retrying; {
		ev := recv(t, events, "an event")
		switch {
		case ev.TaskID == "series" && ev.Kind == coordinator.EventRecurred:
			recurred = true
		case ev.TaskID == "retry" && ev.Kind == coordinator.EventRetrying:
			retrying = true
			if ev.Wait != 5*time.Minute {
				t.Fatalf("retry's wait = %v; want 5m", ev.Wait)
			}
		}
	}

	// Two minutes later (nothing is due), a resigns and b takes over: a
	// wait counted again from b's restore would end two minutes late.
	mock.Set(t0.Add(2 * time.Minute))
	if err := a.Shutdown(ctx); err != nil {
		t.Fatalf("a.Shutdown = %v", err)
	}
	waitRole(t, bNotices, replica.Leader)

	// Each planned moment in turn: b's timer is armed for it, the clock
	// moves there, the task runs then.
	for _, step := range []struct {
		id string
		at time.Duration
	}{{"retry", 5 * time.Minute}, {"series", 10 * time.Minute}, {"series", 20 * time.Minute}, {"delayed", time.Hour}} {
		due := t0.Add(step.at)
		for d := recv(t, bArmed, "b's timer armed"); !d.Equal(due); d = recv(t, bArmed, "b's timer armed") {
			if d.Before(due) && d.After(mock.Now()) { // an earlier report of a past moment is stale
				t.Fatalf("b armed its timer for t0+%v, before %s's t0+%v", d.Sub(t0), step.id, step.at)
			}
		}
		mock.Set(due)
		if r := recv(t, runs, step.id+"'s run"); r.id != step.id || !r.at.Equal(due) {
			t.Fatalf("ran %s at t0+%v; want %s at t0+%v", r.id, r.at.Sub(t0), step.id, step.at)
		}
	}
	if err := b.WaitTasks(ctx, "delayed", "series", "retry"); err != nil {
		t.Fatalf("WaitTasks = %v", err)
	}
	if ti, _, err := b.Info(ctx, "series"); err != nil || ti.Runs != 3 {
		t.Errorf("Info(series) = %+v, %v; want 3 runs", ti, err)
	}
	if ti, _, err := b.Info(ctx, "retry"); err != nil || ti.Attempts != 2 {
		t.Errorf("Info(retry) = %+v, %v; want 2 attempts", ti, err)
	}
}
