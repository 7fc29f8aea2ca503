package replica_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/remote/jetstream/replica"
	"github.com/nats-io/nats.go"
)

// notices collects a replica's Notices on a channel.
func notices() (replica.Option, <-chan replica.Notice) {
	ch := make(chan replica.Notice, 256)
	return replica.WithNotify(func(n replica.Notice) { ch <- n }), ch
}

// waitRole waits for a notice of role on ch (not a quarantine's).
func waitRole(t *testing.T, ch <-chan replica.Notice, role replica.Role) replica.Notice {
	t.Helper()
	deadline := time.After(long)
	for {
		select {
		case n := <-ch:
			if n.Role == role && n.Quarantined == nil {
				return n
			}
		case <-deadline:
			t.Fatalf("no %v notice after %v", role, long)
		}
	}
}

func startReplica(t *testing.T, nc *nats.Conn, store, name string, opts ...replica.Option) *replica.Replica {
	t.Helper()
	opts = append([]replica.Option{replica.WithName(name), replica.WithLease(testLease)}, opts...)
	r, err := replica.New(nc, store, opts...)
	if err != nil {
		t.Fatalf("replica.New = %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), long)
		defer cancel()
		if err := r.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown(%s) = %v", name, err)
		}
	})
	return r
}

// Every call works through a standby, reaching the leader, with the
// coordinator's errors as they are on a local scheduler; a Wait asked
// before the leader resigns is answered by the next.
func TestReplicaCallsReachTheLeader(t *testing.T) {
	c := startCluster(t, 3, nil)
	waitReady(t, c.connect(t))
	release := make(chan struct{})
	funcs := replica.WithScheduler(coordinator.WithWorkers(8),
		coordinator.WithFunc("echo", func(ctx context.Context, p []byte) error { return coordinator.SetResult(ctx, p) }),
		coordinator.WithFunc("fail", func(ctx context.Context, p []byte) error { return errors.New("boom: " + string(p)) }),
		coordinator.WithFunc("gate", func(ctx context.Context, p []byte) error {
			select {
			case <-release:
				return coordinator.SetResult(ctx, p)
			case <-ctx.Done():
				return ctx.Err()
			}
		}),
		coordinator.WithFunc("block", func(ctx context.Context, p []byte) error { <-ctx.Done(); return ctx.Err() }))
	na, aNotices := notices()
	a := startReplica(t, c.connect(t), "calls", "a", funcs, na)
	waitRole(t, aNotices, replica.Leader)
	nb, bNotices := notices()
	b := startReplica(t, c.connect(t), "calls", "b", funcs, nb)
	waitRole(t, bNotices, replica.Standby)
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	if name, _, err := b.Leader(ctx); err != nil || name != "a" {
		t.Fatalf("b.Leader = %q, %v; want a", name, err)
	}

	var mu sync.Mutex
	var events []coordinator.Event
	seen := make(chan struct{}, 64)
	unsubscribe, err := b.Subscribe(func(ev coordinator.Event) {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
		seen <- struct{}{}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unsubscribe()

	task := func(id, fn string, deps ...string) coordinator.Task {
		return coordinator.Task{ID: id, Func: fn, Payload: []byte(id), Deps: deps}
	}
	if err := b.Submit(ctx, task("x", "echo"), task("y", "echo", "x"), task("f", "fail"), task("blk", "block"), task("g", "gate")); err != nil {
		t.Fatalf("Submit through the standby = %v", err)
	}
	if err := b.WaitTasks(ctx, "x", "y"); err != nil {
		t.Fatalf("WaitTasks = %v", err)
	}
	ti, ok, err := b.Info(ctx, "y")
	if err != nil || !ok || ti.Status != coordinator.Succeeded || string(ti.Result.([]byte)) != "y" {
		t.Fatalf("Info(y) = %+v, %v, %v; want succeeded with result y", ti, ok, err)
	}
	if _, ok, err := b.Info(ctx, "nope"); ok || err != nil {
		t.Errorf("Info(unknown) = %v, %v; want false, nil", ok, err)
	}
	var te *coordinator.TasksError
	var tErr0 *coordinator.TaskError
	if err := b.WaitTasks(ctx, "f"); !errors.As(err, &te) || len(te.Tasks) != 1 || te.Tasks[0].Status != coordinator.Failed ||
		te.Tasks[0].Err == nil || te.Tasks[0].Err.Error() != "boom: f" {
		t.Errorf("WaitTasks(f) = %v; want a TasksError with f failed, boom: f", err)
	}
	// History and Rerun, with their errors as a local scheduler's.
	if h, ok, err := b.History(ctx, "f"); err != nil || !ok || len(h.Attempts) != 1 || h.Attempts[0].Outcome != coordinator.OutcomeFailed ||
		h.Attempts[0].Err == nil || h.Attempts[0].Err.Error() != "boom: f" || h.Attempts[0].Ended.IsZero() {
		t.Errorf("History(f) = %+v, %v, %v; want its one failed attempt, boom: f", h, ok, err)
	}
	if _, ok, err := b.History(ctx, "nope"); ok || err != nil {
		t.Errorf("History(unknown) = %v, %v; want false, nil", ok, err)
	}
	if res, err := b.Rerun(ctx, coordinator.RerunRequest{IDs: []string{"f"}, By: "ops"}); err != nil || len(res.Reopened) != 1 || res.Reopened[0] != "f" {
		t.Errorf("Rerun(f) = %+v, %v; want f re-opened", res, err)
	}
	if err := b.WaitTasks(ctx, "f"); !errors.As(err, &te) {
		t.Errorf("WaitTasks(f) after its re-run = %v; want it failed again", err)
	}
	if _, err := b.Rerun(ctx, coordinator.RerunRequest{IDs: []string{"x"}}); !errors.Is(err, coordinator.ErrNotRerunnable) || !errors.As(err, &tErr0) || tErr0.ID != "x" {
		t.Errorf("Rerun(a success) = %v; want a TaskError for x wrapping ErrNotRerunnable", err)
	}
	if _, err := b.Rerun(ctx, coordinator.RerunRequest{IDs: []string{"nope"}}); !errors.Is(err, coordinator.ErrUnknownTask) {
		t.Errorf("Rerun(unknown) = %v; want ErrUnknownTask", err)
	}
	if err := b.WaitTasks(ctx, "nope"); !errors.Is(err, coordinator.ErrUnknownTask) {
		t.Errorf("WaitTasks(unknown) = %v; want ErrUnknownTask", err)
	}
	if ok, err := b.Cancel(ctx, "blk"); !ok || err != nil {
		t.Errorf("Cancel(blk) = %v, %v; want true", ok, err)
	}
	// A running task ends Cancelled once its function returns.
	if err := b.WaitTasks(ctx, "blk"); !errors.As(err, &te) || te.Tasks[0].Status != coordinator.Cancelled ||
		!errors.Is(err, coordinator.ErrCancelled) {
		t.Errorf("WaitTasks(blk) = %v; want blk cancelled, ErrCancelled", err)
	}
	if ok, err := b.Cancel(ctx, "blk"); ok || err != nil {
		t.Errorf("Cancel(blk) again = %v, %v; want false, nil", ok, err)
	}

	// Submit's errors, as a local scheduler's.
	var tErr *coordinator.TaskError
	if err := b.Submit(ctx, task("x", "echo")); !errors.Is(err, coordinator.ErrDuplicateID) || !errors.As(err, &tErr) || tErr.ID != "x" {
		t.Errorf("Submit(duplicate) = %v; want a TaskError for x wrapping ErrDuplicateID", err)
	}
	if err := b.Submit(ctx, task("z", "echo", "missing")); !errors.Is(err, coordinator.ErrUnknownDependency) {
		t.Errorf("Submit(unknown dependency) = %v; want ErrUnknownDependency", err)
	}
	if err := b.Submit(ctx, task("p", "echo", "q"), task("q", "echo", "p")); !errors.Is(err, coordinator.ErrCycle) {
		t.Errorf("Submit(cycle) = %v; want ErrCycle", err)
	}
	if err := b.Submit(ctx, task("u", "unregistered")); !errors.Is(err, coordinator.ErrInvalidTask) {
		t.Errorf("Submit(unregistered function) = %v; want ErrInvalidTask", err)
	}
	closure := coordinator.Task{ID: "c", Run: func(context.Context) error { return nil }}
	if err := b.Submit(ctx, closure); !errors.Is(err, coordinator.ErrNotDurable) {
		t.Errorf("Submit(closure) = %v; want ErrNotDurable", err)
	}

	// A Wait asked before the leader goes is answered by the next one,
	// once g, released after the takeover, ends.
	waited := make(chan error, 1)
	go func() { waited <- b.Wait(ctx) }()
	sctx, scancel := context.WithTimeout(context.Background(), long)
	defer scancel()
	if err := a.Shutdown(sctx); err != nil {
		t.Fatalf("a.Shutdown = %v", err)
	}
	if n := waitRole(t, bNotices, replica.Leader); n.Term == 0 {
		t.Fatalf("b leads with term 0")
	}
	close(release)
	if err := recv(t, waited, "Wait's answer"); err != nil {
		t.Fatalf("Wait across the takeover = %v", err)
	}
	if ti, _, err := b.Info(ctx, "g"); err != nil || ti.Status != coordinator.Succeeded {
		t.Errorf("Info(g) = %v, %v; want succeeded", ti.Status, err)
	}
	// The re-run was committed like a Submit: the next leader has it, and
	// both attempts of f.
	if ti, _, err := b.Info(ctx, "f"); err != nil || ti.Reruns != 1 {
		t.Errorf("Info(f) on the next leader = %+v, %v; want 1 re-run", ti, err)
	}
	if h, _, err := b.History(ctx, "f"); err != nil || len(h.Attempts) != 2 || h.Attempts[1].Rerun != 1 {
		t.Errorf("History(f) on the next leader = %+v, %v; want 2 attempts, the second of re-run 1", h, err)
	}
	recv(t, seen, "an event")
	mu.Lock()
	defer mu.Unlock()
	if len(events) == 0 {
		t.Error("no event reached the standby's subscriber")
	}
	t.Logf("%d events; first %+v", len(events), events[0])
}

// With no replica running, a call waits for a leader until its context
// ends, then fails with ErrNoLeader, whose text says what to do.
func TestNoLeaderIsClear(t *testing.T) {
	c := startCluster(t, 3, nil)
	cl, err := replica.NewClient(c.connect(t), "nobody")
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond) // the call's own deadline: the input
	defer cancel()
	err = cl.Submit(ctx, coordinator.Task{ID: "x", Func: "f"})
	if !errors.Is(err, replica.ErrNoLeader) || !strings.Contains(err.Error(), "replica.New") {
		t.Errorf("Submit with no replica = %v; want ErrNoLeader, naming replica.New", err)
	}
	if err := cl.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cl.Submit(context.Background(), coordinator.Task{ID: "x", Func: "f"}); !errors.Is(err, replica.ErrClosed) {
		t.Errorf("Submit after Close = %v; want ErrClosed", err)
	}
}

// A request sent again to the same reply subject (a Client does so while
// no answer comes: a server that stops loses messages in flight) is done
// once: a copy that comes after the answer gets that answer again; a
// Submit of the same tasks under another reply subject is a new request,
// refused as a duplicate.
func TestRequestSentTwiceIsDoneOnce(t *testing.T) {
	c := startCluster(t, 3, nil)
	nc := c.connect(t)
	waitReady(t, nc)
	funcs := replica.WithScheduler(coordinator.WithFunc("noop", func(context.Context, []byte) error { return nil }))
	na, aNotices := notices()
	a := startReplica(t, c.connect(t), "twice", "a", funcs, na)
	waitRole(t, aNotices, replica.Leader)
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	_, term, err := a.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	data, err := replica.SubmitRequest(coordinator.Task{ID: "once", Func: "noop"})
	if err != nil {
		t.Fatal(err)
	}
	ask := func(inbox string) error {
		t.Helper()
		sub, err := nc.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		if err := nc.PublishMsg(&nats.Msg{Subject: replica.APISubject("twice", term), Reply: inbox, Data: data}); err != nil {
			t.Fatal(err)
		}
		m, err := sub.NextMsg(long)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		return replica.AnswerErr(m)
	}
	inbox := nc.NewInbox()
	for i := range 3 {
		if err := ask(inbox); err != nil {
			t.Fatalf("copy %d of one Submit = %v; want nil, as the first", i, err)
		}
	}
	if err := ask(nc.NewInbox()); !errors.Is(err, coordinator.ErrDuplicateID) {
		t.Fatalf("the same Submit under a new reply subject = %v; want ErrDuplicateID", err)
	}
	if err := a.WaitTasks(ctx, "once"); err != nil {
		t.Fatalf("WaitTasks(once) = %v", err)
	}
	// A copy of a Submit the leader has no answer for, sent a minute after
	// its first (its Client cut off that long): the first may have been
	// done and its answer forgotten, so it is not done, and says so.
	if data, err = replica.SubmitCopy(61*time.Second, coordinator.Task{ID: "late", Func: "noop"}); err != nil {
		t.Fatal(err)
	}
	if err := ask(nc.NewInbox()); err == nil || !strings.Contains(err.Error(), "its answer is not kept") {
		t.Fatalf("a late copy of a Submit = %v; want it refused as done or not", err)
	}
	if _, ok, err := a.Info(ctx, "late"); ok || err != nil {
		t.Fatalf("Info(late) = %v, %v; want unknown: a late copy is not done", ok, err)
	}
}
