package jetstream_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	bjs "github.com/batonhq/baton/remote/jetstream"
	"github.com/batonhq/baton/worker"
)

// An attempt key published again once the duplicate window has passed is a
// new publication, and nothing remembered of the earlier one reaches it:
// not the Pool's memory of settled attempts (a task ID used again after
// retention), not a worker's memory of cancelled ones (the earlier one was
// cancelled while queued), not the earlier one's outcome (stopped by a
// Shutdown after running past the window, then handed out again at once).
// Each used to leave the new publication without an outcome for ever.
func TestKeyPublishedAgainPastTheDuplicateWindow(t *testing.T) {
	const window = bjs.MinDedupe
	pastWindow := func() { time.Sleep(window + window/2) } // real time must pass: the window is the stream's clock
	job := worker.Job{ID: "job", Round: 1, Attempt: 1, Payload: bjs.Payload{Kind: "work"}}
	do := func(p *bjs.Pool, ctx context.Context) error {
		dctx, cancel := context.WithTimeout(ctx, long)
		defer cancel()
		return p.Do(dctx, job)
	}

	t.Run("after its outcome was applied", func(t *testing.T) {
		srv := startServer(t, t.TempDir(), -1)
		nc := connect(t, srv.ClientURL())
		pool := newPool(t, nc, "applied", bjs.WithDedupeWindow(window))
		var runs atomic.Int32
		serve(t, nc, "applied", map[string]bjs.Handler{"work": func(context.Context, []byte) ([]byte, error) {
			runs.Add(1)
			return nil, nil
		}})
		for i := range 2 {
			if err := do(pool, context.Background()); err != nil {
				t.Fatalf("Do #%d = %v; want nil", i+1, err)
			}
			pastWindow()
		}
		if got := runs.Load(); got != 2 {
			t.Errorf("handler ran %d times; want 2", got)
		}
	})

	t.Run("after it was cancelled while queued", func(t *testing.T) {
		srv := startServer(t, t.TempDir(), -1)
		nc := connect(t, srv.ClientURL())
		pool := newPool(t, nc, "queued", bjs.WithDedupeWindow(window))
		var runs atomic.Int32
		gate, holding := make(chan struct{}), make(chan struct{}, 1)
		serve(t, nc, "queued", map[string]bjs.Handler{
			"work": func(context.Context, []byte) ([]byte, error) { runs.Add(1); return nil, nil },
			"hold": func(context.Context, []byte) ([]byte, error) { holding <- struct{}{}; <-gate; return nil, nil },
		}, bjs.WithConcurrency(1))
		held := make(chan error, 1)
		hold := worker.Job{ID: "hold", Round: 1, Attempt: 1, Payload: bjs.Payload{Kind: "hold"}}
		go func() { // occupies the only slot, so that job stays queued
			dctx, cancel := context.WithTimeout(context.Background(), long)
			defer cancel()
			held <- pool.Do(dctx, hold)
		}()
		recv(t, holding, "the slot taken")
		published := subscribe(t, nc, "baton.queued.attempts")
		ctx, cancel := context.WithCancel(context.Background())
		first := make(chan error, 1)
		go func() { first <- do(pool, ctx) }()
		recv(t, published, "the attempt published")
		cancel()
		if err := recv(t, first, "the cancelled Do"); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Do = %v; want context.Canceled", err)
		}
		close(gate)
		recv(t, held, "the holding attempt")
		pastWindow()
		if err := do(pool, context.Background()); err != nil {
			t.Fatalf("Do past the window = %v; want nil", err)
		}
		if got := runs.Load(); got != 1 {
			t.Errorf("handler ran %d times; want 1", got)
		}
	})

	t.Run("after a stop, at once", func(t *testing.T) {
		srv := startServer(t, t.TempDir(), -1)
		nc := connect(t, srv.ClientURL())
		pool := newPool(t, nc, "stopped", bjs.WithDedupeWindow(window), bjs.WithResultsTTL(time.Minute))
		var runs atomic.Int32
		started := make(chan struct{}, 2)
		serve(t, nc, "stopped", map[string]bjs.Handler{"work": func(ctx context.Context, _ []byte) ([]byte, error) {
			started <- struct{}{}
			if runs.Add(1) > 1 {
				return []byte("done"), nil
			}
			<-ctx.Done()
			return nil, ctx.Err()
		}})
		ctx, cancel := context.WithCancel(context.Background())
		first := make(chan error, 1)
		go func() { first <- do(pool, ctx) }()
		recv(t, started, "the first run")
		pastWindow() // it runs past the attempts' window, not past the results'
		cancel()
		if err := recv(t, first, "the stopped Do"); !errors.Is(err, context.Canceled) {
			t.Fatalf("stopped Do = %v; want context.Canceled", err)
		}
		if err := do(pool, context.Background()); err != nil {
			t.Fatalf("Do after the stop = %v; want nil (run again, its outcome received)", err)
		}
		if got := runs.Load(); got != 2 {
			t.Errorf("handler ran %d times; want 2", got)
		}
	})
}

// A task ID used again on a scheduler with retention runs again, past the
// duplicate window too.
func TestTaskIDUsedAgainAfterRetention(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	pool := newPool(t, nc, "retain", bjs.WithDedupeWindow(bjs.MinDedupe))
	var runs atomic.Int32
	serve(t, nc, "retain", map[string]bjs.Handler{"echo": func(_ context.Context, d []byte) ([]byte, error) {
		runs.Add(1)
		return d, nil
	}})
	s := newScheduler(t, coordinator.WithPool("remote", 2, pool), coordinator.WithRetention(0))
	for round := range 3 {
		ended := make(chan coordinator.Event, 1)
		unsubscribe := s.Subscribe(func(e coordinator.Event) {
			if e.TaskID == "job" && e.Kind.String() != "started" {
				ended <- e
			}
		})
		if err := s.Submit(task("job", "echo")); err != nil {
			t.Fatalf("round %d: Submit = %v", round, err)
		}
		if e := recv(t, ended, "job's end"); e.Kind != coordinator.EventSucceeded {
			t.Fatalf("round %d: job ended %v (%v); want succeeded", round, e.Kind, e.Err)
		}
		unsubscribe()
		if round == 1 {
			time.Sleep(bjs.MinDedupe * 3 / 2) // the last round comes past the window
		}
	}
	if got := runs.Load(); got != 3 {
		t.Errorf("handler ran %d times; want 3", got)
	}
}

// Workers follow a change of the lease a restarted coordinator makes: a
// handler longer than the new lease keeps its attempt (it used to be
// delivered again, and run up to four times at once).
func TestWorkersFollowALeaseChange(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	first := newPool(t, nc, "relet", bjs.WithLease(6*time.Second))
	var runs atomic.Int32
	h := map[string]bjs.Handler{"slow": func(ctx context.Context, d []byte) ([]byte, error) {
		runs.Add(1)
		select {
		case <-time.After(time.Second): // the work: three new leases long
		case <-ctx.Done():
		}
		return d, nil
	}}
	ready := subscribe(t, nc, "$JS.API.CONSUMER.INFO.BATON_relet_ATTEMPTS.workers")
	serve(t, nc, "relet", h, bjs.WithWorkerName("w1"))
	serve(t, nc, "relet", h, bjs.WithWorkerName("w2"))
	recv(t, ready, "the first worker's lookup")
	recv(t, ready, "the second worker's lookup")
	first.Close()
	second := newPool(t, nc, "relet", bjs.WithLease(300*time.Millisecond))
	s := newScheduler(t, coordinator.WithPool("remote", 2, second))
	if err := s.Submit(task("x", "slow")); err != nil {
		t.Fatalf("Submit = %v", err)
	}
	wait(t, s)
	if ti := info(t, s, "x"); ti.Status != coordinator.Succeeded {
		t.Fatalf("x = %v (%v); want succeeded", ti.Status, ti.Err)
	}
	if got := runs.Load(); got != 1 {
		t.Errorf("the handler ran %d times for one attempt; want 1", got)
	}
}
