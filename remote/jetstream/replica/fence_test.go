package replica_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/remote/jetstream"
	"github.com/batonhq/baton/remote/jetstream/replica"
	"github.com/nats-io/nats.go"
)

// A leader cut off just as it hands a remote attempt out (its publication
// held in the cut, delivered when the connection comes back) does not
// publish that attempt again once it is deposed: the next leader ran the
// attempt to its end meanwhile, so the held publication, deduplicated
// against the next leader's, looks withdrawn, and without the lease's
// check before each publication (jetstream.WithFence) the deposed
// leader's pool published it again under a new key and a worker ran a
// task whose success was committed (TestProcessHarness's pause round).
func TestDeposedLeaderDoesNotRunAnEndedRemoteAttemptAgain(t *testing.T) {
	srv := oneServer(t)
	px := newProxy(t, strings.TrimPrefix(srv.ClientURL(), "nats://"))
	const lease = time.Second
	started := make(chan string, 16)
	sctx, scancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- jetstream.Serve(sctx, conn(t, srv.ClientURL()), "wp", map[string]jetstream.Handler{
			"h": func(ctx context.Context, data []byte) ([]byte, error) {
				started <- string(data)
				return data, nil
			}}, jetstream.WithConcurrency(1)) // one at a time, in the order they were queued
	}()
	defer func() { scancel(); <-served }()
	pool := replica.WithRemotePool("rp", 4, "wp", jetstream.WithReplicas(1))
	na, aCh := notices()
	startReplica(t, conn(t, px.url()), "refence", "a", r1(pool, na, replica.WithLease(lease), replica.WithStopWait(time.Second))...)
	waitRole(t, aCh, replica.Leader)
	// Every publication of an attempt of x, as the server receives it
	// (its message ID: the attempt's key, with a generation after a
	// rekey), stored or deduplicated.
	var mu sync.Mutex
	var pubs []string
	watch, err := conn(t, srv.ClientURL()).Subscribe("baton.wp.attempts", func(m *nats.Msg) {
		if id := m.Header.Get(nats.MsgIdHdr); strings.HasSuffix(id, "/x") {
			mu.Lock()
			pubs = append(pubs, id)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Unsubscribe()
	nb, bCh := notices()
	b := startReplica(t, conn(t, srv.ClientURL()), "refence", "b", r1(pool, nb, replica.WithLease(lease))...)
	waitRole(t, bCh, replica.Standby)
	cl, err := replica.NewClient(conn(t, srv.ClientURL()), "refence")
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	task := func(id string, delay time.Duration) coordinator.Task {
		return coordinator.Task{ID: id, Pool: "rp", Delay: delay, Payload: jetstream.Payload{Kind: "h", Data: []byte(id)}.Encode()}
	}
	// x is due a moment after the cut: a hands it out while its lease,
	// renewed by the submit's commit, still holds, and its publication
	// waits in the cut.
	const due = 300 * time.Millisecond
	if err := cl.Submit(ctx, task("x", due)); err != nil {
		t.Fatal(err)
	}
	px.setPaused(true)
	waitRole(t, bCh, replica.Leader)
	if got := recv(t, started, "x's run"); got != "x" {
		t.Fatalf("first run: %q; want x", got)
	}
	if err := b.WaitTasks(ctx, "x"); err != nil {
		t.Fatalf("WaitTasks(x) on the next leader = %v", err)
	}
	px.setPaused(false)
	for { // a's next append is refused: fenced, it stops leading
		if n := recv(t, aCh, "a's notice"); n.Role == replica.Standby {
			break
		}
	}
	// y, queued after anything a published before it stopped, runs
	// after it on the one worker.
	if err := b.Submit(ctx, task("y", 0)); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitTasks(ctx, "y"); err != nil {
		t.Fatalf("WaitTasks(y) = %v", err)
	}
	for {
		select {
		case got := <-started:
			if got == "x" {
				t.Errorf("x ran again after its success was committed: the deposed leader published it again")
			}
			continue
		default:
		}
		break
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("publications of x: %q", pubs)
	switch {
	case len(pubs) < 2:
		t.Errorf("publications of x: %q; want the next leader's and the deposed leader's held one (the cut came too late or too early)", pubs)
	case len(pubs) > 2 || pubs[0] != pubs[1]:
		t.Errorf("publications of x: %q; want two under one key: the deposed leader published it again", pubs)
	}
	if ti, ok := b.Scheduler().Info("x"); !ok || ti.Status != coordinator.Succeeded || ti.Attempts != 1 {
		t.Errorf("Info(x) = %+v, %v; want succeeded after one attempt", ti, ok)
	}
}
