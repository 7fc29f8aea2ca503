package replica_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/remote/jetstream"
	"github.com/batonhq/baton/remote/jetstream/replica"
	njs "github.com/nats-io/nats.go/jetstream"
)

// Two takeovers at once: a replica's, and a newer term's that fenced it
// a moment later (the first learns it at its next beat, a third of a
// lease on). Both make the pool's streams and results consumers, and
// JetStream may leave a request of either unanswered for good. The newer
// takeover tries again and has its pool within seconds, not nats.go's
// 5 s and a lease; the older one, trying again too, never deletes the
// newer one's results consumer (its outcomes would reach nobody).
func TestTakeoverPoolUnanswered(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster: not in -short")
	}
	c := startCluster(t, 3, nil)
	nc, rival := c.connect(t), c.connect(t)
	waitReady(t, nc)
	st := replica.NewStore(nc, "unanswered", replica.WithLease(time.Second), replica.WithLockWait(long))
	if err := st.Load(func(_, _ []byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	opts := []jetstream.Option{jetstream.WithInstance("replica-unanswered"), jetstream.WithDetach(),
		jetstream.WithReplicas(3), jetstream.WithLease(time.Second)}
	for round := range 6 {
		older, newer := uint64(2*round+1), uint64(2*round+2)
		var wg sync.WaitGroup
		var rivalErr error
		wg.Go(func() { // the fenced replica's takeover, trying again as a takeover does, until it learns
			deadline := time.Now().Add(1500 * time.Millisecond)
			for time.Now().Before(deadline) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Until(deadline))
				p, err := jetstream.NewPool(ctx, rival, "work", append(opts, jetstream.WithGeneration(st.Epoch(), older))...)
				cancel()
				if rivalErr = err; err == nil {
					p.Close()
					return
				}
				if errors.Is(err, jetstream.ErrSuperseded) {
					return
				}
			}
		})
		began := time.Now()
		p, err := replica.NewPoolInTakeover(context.Background(), st, newer, nc, "work", opts...)
		took := time.Since(began)
		wg.Wait()
		if err != nil {
			t.Fatalf("round %d: NewPool in a takeover = %v", round, err)
		}
		p.Close()
		if limit := 4 * time.Second; took > limit {
			t.Errorf("round %d: NewPool in a takeover took %v beside an older term's; want under %v", round, took, limit)
		}
		// The newer takeover's results consumer is there (Close keeps it).
		mine := fmt.Sprintf("coord-replica-unanswered-g%016x%016x", st.Epoch(), newer)
		ctx, cancel := context.WithTimeout(context.Background(), long)
		s, err := js.Stream(ctx, "BATON_work_RESULTS")
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		var names []string
		l := s.ConsumerNames(ctx)
		for n := range l.Name() {
			names = append(names, n)
		}
		err = l.Err()
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(names, mine) {
			t.Errorf("round %d: results consumers %v after both takeovers (the older one's last try: %v); want %s among them", round, names, rivalErr, mine)
		}
		t.Logf("round %d: the newer takeover took %v; the older one's last try: %v", round, took.Round(time.Millisecond), rivalErr)
	}
}

// A takeover whose store stops leading (fenced, closed) gives its pools
// up at once, with the store's reason: another replica's takeover goes
// on alone.
func TestTakeoverPoolFenced(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster: not in -short")
	}
	nc := conn(t, oneServer(t).ClientURL())
	st := replica.NewStore(nc, "fencedpool", r1(replica.WithLease(time.Second), replica.WithLockWait(long))...)
	if err := st.Load(func(_, _ []byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	st.Close()
	_, err := replica.NewPoolInTakeover(context.Background(), st, 1, nc, "work", jetstream.WithInstance("replica-fencedpool"))
	if !errors.Is(err, replica.ErrClosed) {
		t.Fatalf("NewPool in a takeover of a closed store = %v; want ErrClosed", err)
	}
}
