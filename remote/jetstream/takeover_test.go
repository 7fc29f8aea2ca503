package jetstream_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/batonhq/baton/coordinator"
	bjs "github.com/batonhq/baton/remote/jetstream"
	"github.com/batonhq/baton/worker"
	njs "github.com/nats-io/nats.go/jetstream"
)

// WithDetach: a Do whose scheduler stops (cause coordinator.ErrClosed)
// returns at once and leaves the attempt running; a second Pool of the
// same instance, created while the first is still alive, takes the
// instance over and its Do of the same attempt returns the outcome, which
// had gone to the first Pool (unacknowledged: no Do waited for it), at
// once rather than after the first Pool's acknowledgement wait. The
// handler runs once; the first Pool receives nothing more.
func TestDetachedAttemptIsPickedUpByTheNextPool(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	var runs atomic.Int32
	started, release := make(chan struct{}, 1), make(chan struct{})
	serve(t, nc, "detach", map[string]bjs.Handler{"work": func(ctx context.Context, data []byte) ([]byte, error) {
		runs.Add(1)
		started <- struct{}{}
		select {
		case <-release:
			return []byte("done"), nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}})
	first := newPool(t, nc, "detach", bjs.WithInstance("coord"), bjs.WithDetach())
	job := worker.Job{ID: "job", Round: 1, Attempt: 1, Payload: bjs.Payload{Kind: "work"}}
	ctx, stop := context.WithCancelCause(context.Background())
	returned := make(chan error, 1)
	go func() { returned <- first.Do(ctx, job) }()
	recv(t, started, "the attempt started")
	stop(coordinator.ErrClosed)
	if err := recv(t, returned, "the detached Do"); !errors.Is(err, coordinator.ErrClosed) {
		t.Fatalf("Do whose scheduler stopped = %v; want coordinator.ErrClosed at once", err)
	}
	outcome := subscribe(t, nc, "baton.detach.results.coord.>")
	close(release) // the handler ends after the Do left: its outcome goes to the first Pool
	recv(t, outcome, "the outcome published")

	second := newPool(t, nc, "detach", bjs.WithInstance("coord"))
	dctx, cancel := context.WithTimeout(context.Background(), long/2) // less than the acknowledgement wait
	defer cancel()
	if err := second.Do(dctx, job); err != nil {
		t.Fatalf("Do of the same attempt on the Pool that took over = %v; want its outcome", err)
	}
	if got := runs.Load(); got != 1 {
		t.Errorf("handler ran %d times; want once", got)
	}
	// Its Do publishes the attempt again (deduplicated by the stream), or,
	// if the outcome reached it first, publishes nothing: either way no
	// second attempt is stored.
	if st := second.Stats(); st.Outcomes != 1 || st.Published > 1 || st.Deduplicated != st.Published {
		t.Errorf("second Pool's Stats = %+v; want one outcome, and a publish only if deduplicated", st)
	}
	if st := first.Stats(); st.Outcomes != 0 {
		t.Errorf("first Pool's Stats = %+v; want no outcome applied", st)
	}
}

// A Pool takes its instance over from earlier Pools of that instance: their
// results consumers are deleted as it starts, and those of other instances
// stay, an instance whose name begins with this one's ("coord-x") among
// them.
func TestTakeOverDeletesOnlyItsInstancesConsumers(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	names := func() []string { t.Helper(); return consumerNames(t, js, "BATON_own_RESULTS") }
	newPool(t, nc, "own", bjs.WithInstance("coord"))
	newPool(t, nc, "own", bjs.WithInstance("coord-x"))
	newPool(t, nc, "own", bjs.WithInstance("coord"))
	before := names()
	if len(before) != 2 {
		t.Fatalf("results consumers after two Pools of coord and one of coord-x: %v; want one each", before)
	}
	newPool(t, nc, "own", bjs.WithInstance("coord-x"))
	after := names()
	if len(after) != 2 || !slices.Contains(after, before[0]) || slices.Contains(after, before[1]) {
		t.Fatalf("results consumers %v, then %v after a new Pool of coord-x; want coord's kept and coord-x's replaced", before, after)
	}
}

// Pools of one instance with generations (WithGeneration): a newer one
// deletes the results consumers of lower terms of its epoch, of other
// epochs (a log made again numbers its terms from 1) and of none (a Pool
// without a generation, or of an older version); one of a lower term
// finds the newer one's, fails with ErrSuperseded and deletes its own
// only; a Pool made again with a generation uses its consumer again.
func TestTakeOverByGeneration(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	names := func() []string { t.Helper(); return consumerNames(t, js, "BATON_gen_RESULTS") }
	pool := func(opts ...bjs.Option) error {
		ctx, cancel := context.WithTimeout(context.Background(), long)
		defer cancel()
		p, err := bjs.NewPool(ctx, nc, "gen", append([]bjs.Option{bjs.WithInstance("coord")}, opts...)...)
		if err == nil {
			p.Close()
		}
		return err
	}
	want := func(after string, consumers ...string) {
		t.Helper()
		if got := names(); !slices.Equal(got, consumers) {
			t.Fatalf("results consumers after %s: %v; want %v", after, got, consumers)
		}
	}
	const e7t5 = "coord-coord-g00000000000000070000000000000005"
	if err := pool(); err != nil { // a Pool without a generation
		t.Fatal(err)
	}
	if err := pool(bjs.WithGeneration(7, 5)); err != nil {
		t.Fatal(err)
	}
	want("a Pool of no generation, then one of epoch 7 term 5", e7t5)
	if err := pool(bjs.WithGeneration(7, 4)); !errors.Is(err, bjs.ErrSuperseded) {
		t.Fatalf("NewPool of epoch 7 term 4 beside term 5's = %v; want ErrSuperseded", err)
	}
	want("term 4's NewPool failed", e7t5)
	if err := pool(bjs.WithGeneration(7, 5)); err != nil {
		t.Fatalf("NewPool of epoch 7 term 5 again = %v", err)
	}
	want("term 5's NewPool again", e7t5)
	if err := pool(bjs.WithGeneration(3, 1)); err != nil { // a log made again (even with an earlier clock)
		t.Fatalf("NewPool of epoch 3 term 1 beside epoch 7's = %v", err)
	}
	want("epoch 3 term 1's NewPool", "coord-coord-g00000000000000030000000000000001")
	if err := pool(bjs.WithGeneration(3, 1<<40)); err != nil {
		t.Fatal(err)
	}
	want("term 2^40's NewPool", "coord-coord-g00000000000000030000010000000000")
	if err := pool(); err != nil { // a Pool without a generation takes over from any
		t.Fatal(err)
	}
	if got := names(); len(got) != 1 || strings.Contains(got[0], "-g") {
		t.Fatalf("results consumers after a Pool of no generation: %v; want its alone", got)
	}
	if err := pool(bjs.WithGeneration(1, 0)); !errors.Is(err, bjs.ErrInvalidOption) {
		t.Fatalf("WithGeneration(1, 0) = %v; want ErrInvalidOption", err)
	}
}

// consumerNames lists the consumers of stream, sorted.
func consumerNames(t *testing.T, js njs.JetStream, stream string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	l := s.ConsumerNames(ctx)
	for n := range l.Name() {
		got = append(got, n)
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	return got
}
