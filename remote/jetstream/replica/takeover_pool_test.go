package replica_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/remote/jetstream"
	"github.com/batonhq/baton/remote/jetstream/replica"
)

// Two takeovers at once create the results consumers of one instance
// and each deletes the other's: JetStream then leaves a request of one
// of them unanswered for good. The takeover that goes on (the other gives
// up at once, fenced) tries again and leads within a second or two, not
// nats.go's 5 s (TestFailoverKills failed about one run in seven on it).
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
	opts := []jetstream.Option{jetstream.WithInstance("replica-unanswered"), jetstream.WithDetach(),
		jetstream.WithReplicas(3), jetstream.WithLease(time.Second)}
	for round := range 6 {
		var wg sync.WaitGroup
		wg.Go(func() { // the fenced replica's takeover: given up early
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			if p, err := jetstream.NewPool(ctx, rival, "work", opts...); err == nil {
				p.Close()
			}
		})
		began := time.Now()
		p, err := replica.NewPoolInTakeover(context.Background(), st, nc, "work", opts...)
		took := time.Since(began)
		wg.Wait()
		if err != nil {
			t.Fatalf("round %d: NewPool in a takeover = %v", round, err)
		}
		p.Close()
		// A try that is not answered costs its second; JetStream's
		// election of the new consumer's leader takes a few hundred ms,
		// seconds at times.
		if limit := 4 * time.Second; took > limit {
			t.Errorf("round %d: NewPool in a takeover took %v beside a rival's; want under %v", round, took, limit)
		}
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
	_, err := replica.NewPoolInTakeover(context.Background(), st, nc, "work", jetstream.WithInstance("replica-fencedpool"))
	if !errors.Is(err, replica.ErrClosed) {
		t.Fatalf("NewPool in a takeover of a closed store = %v; want ErrClosed", err)
	}
}
