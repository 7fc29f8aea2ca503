package jetstream_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	bjs "github.com/batonhq/baton/remote/jetstream"
	"github.com/batonhq/baton/worker"
)

// A Do of a Pool whose scheduler was deposed (a replicated leader paused
// past its lease) that publishes only after the next leader's Pool of the
// same instance ran the same attempt to its end finds its publication
// deduplicated and gone; it must not publish the attempt again under a
// new key, or a worker runs a task whose end was committed. WithFence's
// check stops it; the handler runs once.
func TestDeposedPoolDoesNotRunAnEndedAttemptAgain(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	var runs atomic.Int32
	serve(t, nc, "fence", map[string]bjs.Handler{"work": func(ctx context.Context, data []byte) ([]byte, error) {
		runs.Add(1)
		return []byte("done"), nil
	}})
	var deposed atomic.Bool
	errDeposed := errors.New("deposed")
	old := newPool(t, nc, "fence", bjs.WithInstance("coord"), bjs.WithDetach(), bjs.WithFence(func(ctx context.Context) error {
		if deposed.Load() {
			return errDeposed
		}
		return nil
	}))
	job := worker.Job{ID: "job", Round: 1, Attempt: 1, Payload: bjs.Payload{Kind: "work"}}
	next := newPool(t, nc, "fence", bjs.WithInstance("coord"), bjs.WithDetach())
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	if err := next.Do(ctx, job); err != nil {
		t.Fatalf("the next leader's Do = %v", err)
	}
	deposed.Store(true)
	if err := old.Do(ctx, job); !errors.Is(err, errDeposed) {
		t.Errorf("the deposed Pool's Do = %v; want its fence's error", err)
	}
	if got := runs.Load(); got != 1 {
		t.Errorf("handler ran %d times; want once", got)
	}
	if st := old.Stats(); st.Published != 0 {
		t.Errorf("deposed Pool's Stats = %+v; want nothing published", st)
	}
}
