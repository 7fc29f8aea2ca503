package replica_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/remote/jetstream/replica"
)

// A leader cut off from the servers (its connection blackholed: nothing
// closes) stops running its attempts when its lease lapses, before a
// standby may take over (issue #28 item 3): its function's context ends
// with the cause ErrLeaseLapsed within a lease of the cut, and the next
// leader's run of the attempt begins after it returned. Before, it ran on
// until the old leader reached the log again (or WithMaxOutage).
func TestCutOffLeaderStopsItsAttempts(t *testing.T) {
	srv := oneServer(t)
	px := newProxy(t, strings.TrimPrefix(srv.ClientURL(), "nats://"))
	const lease = time.Second
	type run struct {
		who   string
		start bool
		at    time.Time
		cause error
	}
	runs := make(chan run, 16)
	release := make(chan struct{})
	funcs := func(who string) replica.Option {
		return replica.WithScheduler(coordinator.WithFunc("long", func(ctx context.Context, p []byte) error {
			runs <- run{who: who, start: true, at: time.Now()}
			select {
			case <-ctx.Done():
				runs <- run{who: who, at: time.Now(), cause: context.Cause(ctx)}
				return context.Cause(ctx)
			case <-release:
				runs <- run{who: who, at: time.Now()}
				return nil
			}
		}))
	}
	na, aCh := notices()
	startReplica(t, conn(t, px.url()), "lapse", "a", r1(funcs("a"), na, replica.WithLease(lease), replica.WithStopWait(time.Second))...)
	waitRole(t, aCh, replica.Leader)
	nb, bCh := notices()
	b := startReplica(t, conn(t, srv.ClientURL()), "lapse", "b", r1(funcs("b"), nb, replica.WithLease(lease))...)
	waitRole(t, bCh, replica.Standby)
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	if err := b.Submit(ctx, coordinator.Task{ID: "w", Func: "long", Retry: coordinator.RetryPolicy{MaxAttempts: 5}}); err != nil {
		t.Fatal(err)
	}
	if r := recv(t, runs, "w's start"); r.who != "a" || !r.start {
		t.Fatalf("first run: %+v; want a's start", r)
	}
	cut := time.Now()
	px.setPaused(true)
	endA := recv(t, runs, "the end of a's run")
	if endA.who != "a" || endA.start || !errors.Is(endA.cause, replica.ErrLeaseLapsed) {
		t.Fatalf("after the cut: %+v; want a's run ended with ErrLeaseLapsed", endA)
	}
	if d := endA.at.Sub(cut); d > lease+raceSlack {
		t.Errorf("a's run ended %v after the cut; want within the lease, %v", d, lease)
	}
	startB := recv(t, runs, "b's run")
	if startB.who != "b" || !startB.start {
		t.Fatalf("next: %+v; want b's start", startB)
	}
	if !endA.at.Before(startB.at) {
		t.Errorf("a's run ended at %v, after b's began at %v: two runs at once", endA.at.Format(time.StampMicro), startB.at.Format(time.StampMicro))
	}
	t.Logf("cut at %s; a's run stopped %v later, b's began %v after that", cut.Format(time.StampMilli),
		endA.at.Sub(cut).Round(time.Millisecond), startB.at.Sub(endA.at).Round(time.Millisecond))
	close(release)
	if err := b.WaitTasks(ctx, "w"); err != nil {
		t.Fatalf("WaitTasks(w) = %v", err)
	}
	px.setPaused(false)
	waitRole(t, aCh, replica.Standby)
}
