package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	bjs "github.com/batonhq/baton/remote/jetstream"
	"github.com/batonhq/baton/worker"
	"github.com/nats-io/nats.go"
)

// WithFence: a Pool whose fence no longer holds (a replicated leader
// deposed while it was paused) hands out nothing more, stops nothing the
// next holder may have handed out, and a Close releases a Do waiting in
// the fence.

// errDeposed is what a test's fence returns once it no longer holds.
var errDeposed = errors.New("deposed")

// A deposed leader's Do resumed after its first check passed (the pause
// came after it): its publication is deduplicated against the next
// leader's, whose run of the attempt ended and is gone from the streams,
// so the publication looks dead and would be published again under a new
// key: a worker would run a task whose end was committed. The fence is
// checked again there; the handler runs once.
func TestDeposedPoolDoesNotRunAnEndedAttemptAgain(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	var runs atomic.Int32
	serve(t, nc, "fence", map[string]bjs.Handler{"work": func(ctx context.Context, data []byte) ([]byte, error) {
		runs.Add(1)
		return []byte("done"), nil
	}})
	var calls atomic.Int32
	old := newPool(t, nc, "fence", bjs.WithInstance("coord"), bjs.WithDetach(), bjs.WithFence(func(ctx context.Context) error {
		if calls.Add(1) == 1 {
			return nil // checked before the pause: the lease held
		}
		return errDeposed
	}))
	job := worker.Job{ID: "job", Round: 1, Attempt: 1, Payload: bjs.Payload{Kind: "work"}}
	next := newPool(t, nc, "fence", bjs.WithInstance("coord"), bjs.WithDetach())
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	if err := next.Do(ctx, job); err != nil {
		t.Fatalf("the next leader's Do = %v", err)
	}
	if err := old.Do(ctx, job); !errors.Is(err, errDeposed) {
		t.Errorf("the deposed Pool's Do = %v; want its fence's error", err)
	}
	if got := runs.Load(); got != 1 {
		t.Errorf("handler ran %d times; want once", got)
	}
	if st := old.Stats(); st.Published != 1 || st.Deduplicated != 1 || calls.Load() != 2 {
		t.Errorf("deposed Pool's Stats = %+v after %d checks; want one deduplicated publication, and a check before the second", st, calls.Load())
	}
}

// A publish that waits out an outage checks the fence again before it
// tries once more: the lease that let the first try through may have
// lapsed meanwhile, and the next leader run the attempt (beyond the
// duplicate window, the publication would be stored as new).
func TestFenceIsCheckedAgainAfterAnOutage(t *testing.T) {
	dir := t.TempDir()
	srv := startServer(t, dir, -1)
	port := serverPort(srv)
	nc := connect(t, srv.ClientURL())
	first, goOn := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	p := newPool(t, nc, "fence", bjs.WithFence(func(ctx context.Context) error {
		if calls.Add(1) > 1 {
			return errDeposed // the lease lapsed during the outage
		}
		close(first)
		<-goOn
		return nil
	}))
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- p.Do(ctx, worker.Job{ID: "job", Round: 1, Attempt: 1, Payload: bjs.Payload{Kind: "work"}})
	}()
	recv(t, first, "the first check")
	down := nc.StatusChanged(nats.RECONNECTING, nats.DISCONNECTED)
	stopServer(srv)
	recv(t, down, "disconnect")
	nc.RemoveStatusListener(down)
	close(goOn) // the first check passes; the publication waits for the connection
	up := nc.StatusChanged(nats.CONNECTED)
	startServer(t, dir, port)
	recv(t, up, "reconnect")
	nc.RemoveStatusListener(up)
	if err := recv(t, done, "Do"); !errors.Is(err, errDeposed) {
		t.Errorf("Do = %v; want the fence's error", err)
	}
	if st := p.Stats(); st.Published != 0 {
		t.Errorf("Stats = %+v after %d checks; want nothing published once the fence failed", st, calls.Load())
	}
}

// A deposed leader's Do whose context ended for a reason of its own (its
// attempt's Timeout passed during the pause: not a scheduler's stop, which
// WithDetach leaves running anyway) must not withdraw the attempt: the
// next leader's Do of it was deduplicated to the same message and waits
// for its outcome.
func TestDeposedPoolDoesNotWithdrawTheNextLeadersAttempt(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	var deposed atomic.Bool
	fence := bjs.WithFence(func(ctx context.Context) error {
		if deposed.Load() {
			return errDeposed
		}
		return nil
	})
	published := subscribe(t, nc, "baton.fence.attempts")
	old := newPool(t, nc, "fence", bjs.WithInstance("coord"), bjs.WithDetach(), fence)
	job := worker.Job{ID: "job", Round: 1, Attempt: 1, Payload: bjs.Payload{Kind: "work"}}
	octx, ocancel := context.WithCancelCause(context.Background())
	defer ocancel(nil)
	oldDone := make(chan error, 1)
	go func() { oldDone <- old.Do(octx, job) }()
	recv(t, published, "the old leader's publication")

	// The old leader pauses; the next takes over and resumes the attempt.
	deposed.Store(true)
	next := newPool(t, nc, "fence", bjs.WithInstance("coord"), bjs.WithDetach())
	nctx, ncancel := context.WithTimeout(context.Background(), long)
	defer ncancel()
	nextDone := make(chan error, 1)
	go func() { nextDone <- next.Do(nctx, job) }()
	recv(t, published, "the next leader's publication")

	// The old leader resumes: its attempt's timeout passed meanwhile.
	timeout := fmt.Errorf("%w after 1s", worker.ErrTimeout)
	ocancel(timeout)
	if err := recv(t, oldDone, "the deposed Do"); !errors.Is(err, worker.ErrTimeout) {
		t.Errorf("the deposed Do = %v; want its context's cause", err)
	}
	var runs atomic.Int32
	serve(t, nc, "fence", map[string]bjs.Handler{"work": func(ctx context.Context, data []byte) ([]byte, error) {
		runs.Add(1)
		return []byte("done"), nil
	}})
	if err := recv(t, nextDone, "the next leader's Do"); err != nil || runs.Load() != 1 {
		t.Errorf("the next leader's Do = %v, handler ran %d times; want its outcome, once", err, runs.Load())
	}
}

// Close releases every Do waiting in its fence (ErrClosed), and none of
// them publishes afterwards.
func TestCloseReleasesDoWaitingInTheFence(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	entered := make(chan struct{}, 20)
	p := newPool(t, nc, "fence", bjs.WithFence(func(ctx context.Context) error {
		entered <- struct{}{}
		<-ctx.Done()
		return context.Cause(ctx)
	}))
	const n = 20
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	errs := make(chan error, n)
	for i := range n {
		job := worker.Job{ID: fmt.Sprint("job", i), Round: 1, Attempt: 1, Payload: bjs.Payload{Kind: "work"}}
		go func() { errs <- p.Do(ctx, job) }()
	}
	for range n {
		recv(t, entered, "a Do in the fence")
	}
	p.Close()
	for range n {
		if err := recv(t, errs, "a Do after Close"); !errors.Is(err, bjs.ErrClosed) {
			t.Errorf("Do waiting in the fence at Close = %v; want ErrClosed", err)
		}
	}
	if st := p.Stats(); st.Published != 0 {
		t.Errorf("Stats after Close = %+v; want nothing published", st)
	}
}
