package replica_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/internal/record"
	"github.com/batonhq/baton/remote/jetstream/replica"
)

// Records that no replica's scheduler can restore (a key it does not
// know, a task's state without its definition) never leave the store
// leaderless (issue #28 item 4): the leader that meets one takes it out
// of the store in a commit of its own, reports it (a Notice, Quarantined,
// the commit's Baton-Quarantine header) and resigns, and the next
// takeover goes on without it: one failed takeover per record, not a
// claim and a resignation every lease for ever. The tasks stay.
func TestRecordNoReplicaCanRestoreIsQuarantined(t *testing.T) {
	srv := oneServer(t)
	const store = "poison"
	funcs := replica.WithScheduler(coordinator.WithFunc("q", func(ctx context.Context, p []byte) error {
		return coordinator.SetResult(ctx, p)
	}))
	na, aCh := notices()
	a := startReplica(t, conn(t, srv.ClientURL()), store, "a", r1(funcs, na)...)
	waitRole(t, aCh, replica.Leader)
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	if err := a.Submit(ctx, coordinator.Task{ID: "x", Func: "q", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := a.WaitTasks(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if err := a.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	// Two records no scheduler restores, committed by a Store that led
	// in between.
	bad := map[string]string{
		"zz-unknown": "1",
		string(record.AppendTaskKey(nil, 999, record.KindState)): "a state without its definition",
	}
	w := replica.NewStore(conn(t, srv.ClientURL()), store, r1(replica.WithName("writer"), replica.WithLease(testLease), replica.WithLockWait(long))...)
	if err := w.Load(func(k, v []byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := commit(w, bad); err != nil {
		t.Fatal(err)
	}
	w.Close()

	all := make(chan replica.Notice, 256)
	tee := replica.WithNotify(func(n replica.Notice) { all <- n })
	b := startReplica(t, conn(t, srv.ClientURL()), store, "b", r1(funcs, tee)...)
	startReplica(t, conn(t, srv.ClientURL()), store, "c", r1(funcs, tee)...)
	quarantined := map[string]bool{}
	failed := 0
	deadline := time.After(long)
	for led := false; !led || len(quarantined) < len(bad); {
		select {
		case n := <-all:
			switch {
			case n.Quarantined != nil && n.Quarantined.Key != nil:
				quarantined[string(n.Quarantined.Key)] = true
			case n.Role == replica.Leader && n.Quarantined == nil:
				led = true
			case n.Err != nil:
				failed++
				if !errors.Is(n.Err, coordinator.ErrStoreCorrupt) {
					t.Errorf("a takeover failed for %v; want ErrStoreCorrupt", n.Err)
				}
			}
		case <-deadline:
			t.Fatalf("after %v: led %v, quarantined %v, %d failed takeovers", long, led, quarantined, failed)
		}
	}
	for k := range bad {
		if !quarantined[k] {
			t.Errorf("record %q was not reported quarantined", k)
		}
	}
	if failed > len(bad) {
		t.Errorf("%d takeovers failed; want at most one per bad record (%d)", failed, len(bad))
	}
	if ti, ok, err := b.Info(ctx, "x"); err != nil || !ok || ti.Status != coordinator.Succeeded || string(ti.Result.([]byte)) != "x" {
		t.Errorf("Info(x) = %v, %v, %v; want succeeded with result x", ti.Status, ok, err)
	}
	if err := b.Submit(ctx, coordinator.Task{ID: "y", Func: "q"}); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitTasks(ctx, "y"); err != nil {
		t.Fatal(err)
	}
	marked := 0
	for _, e := range logOf(t, conn(t, srv.ClientURL()), store) {
		if e.quarantine != "" {
			marked++
			if !strings.Contains(e.quarantine, "corrupt") {
				t.Errorf("log message %d says %q; want the scheduler's reason", e.seq, e.quarantine)
			}
		}
	}
	if marked != len(bad) {
		t.Errorf("%d commits of the log take a record out; want %d", marked, len(bad))
	}
	if err := replica.ReadRecords(ctx, conn(t, srv.ClientURL()), store, func(k, v []byte) error {
		if _, ok := bad[string(k)]; ok {
			t.Errorf("the store still holds %q", k)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
