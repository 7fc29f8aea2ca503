package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	bjs "github.com/batonhq/baton/remote/jetstream"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
)

// Serve's look at a delivery again: an attempt still in the work stream is
// held; once the Pool has taken it out (its end applied) it is gone; and
// when the stream cannot say (no such stream), the answer is unknown, and
// Serve hands the delivery back rather than run it
// (TestDeliveryAgainUnconfirmedIsNotRun).
func TestDeliveryAgainOfAWithdrawnAttemptIsSeen(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	newPool(t, nc, "gone") // creates the work stream
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	ack, err := js.Publish(ctx, bjs.AttemptsSubject("gone"), []byte("an attempt"))
	if err != nil {
		t.Fatal(err)
	}
	const lease = 200 * time.Millisecond
	bjs.SetWithdrawnPatience(t, lease)
	if got := bjs.Withdrawn(nc, "gone", ack.Sequence, lease); got != "held" {
		t.Fatalf("an attempt the work stream holds is %s; want held", got)
	}
	st, err := js.Stream(ctx, bjs.AttemptsStream("gone"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMsg(ctx, ack.Sequence); err != nil {
		t.Fatal(err)
	}
	if got := bjs.Withdrawn(nc, "gone", ack.Sequence, lease); got != "gone" {
		t.Fatalf("an attempt taken out of the work stream is %s; want gone", got)
	}
	if got := bjs.Withdrawn(nc, "no-such-pool", 1, lease); got != "unknown" {
		t.Fatalf("a stream that cannot answer says %s; want unknown", got)
	}
}

// A delivery again of an attempt is run only once the work stream says it
// still holds the attempt (its end not applied): a worker that cannot
// look (here, without the permission ServePermissions gives it for that;
// in the failover tests, the stream's leader lost with its server) hands
// it back and never runs it, and after WithMaxDeliver deliveries the
// attempt fails with ErrMaxDeliveries. Before, a look that got no answer
// within a quarter of the lease let the attempt run: in a test that
// stopped the server leading the streams, a task ran again after its end
// was committed (and after the tasks waiting for that end began). With
// the permission, the same delivery again runs at once.
func TestDeliveryAgainUnconfirmedIsNotRun(t *testing.T) {
	for _, canLook := range []bool{true, false} {
		t.Run(fmt.Sprintf("canLook=%v", canLook), func(t *testing.T) {
			perms := bjs.ServePermissions("p", "_INBOX_worker")
			if !canLook {
				perms.Publish = slices.DeleteFunc(slices.Clone(perms.Publish), func(s string) bool {
					return strings.HasPrefix(s, "$JS.API.STREAM.MSG.GET.")
				})
			}
			srv := startServerWith(t, &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
				Users: []*server.User{
					{Username: "admin", Password: "admin-secret"},
					{Username: "worker", Password: "worker-secret", Permissions: &server.Permissions{
						Publish: &server.SubjectPermission{Allow: perms.Publish}, Subscribe: &server.SubjectPermission{Allow: perms.Subscribe}}},
				}})
			admin, err := nats.Connect(srv.ClientURL(), nats.UserInfo("admin", "admin-secret"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(admin.Close)
			const lease = 200 * time.Millisecond
			bjs.SetWithdrawnPatience(t, lease) // not 10 s a delivery
			pool := newPool(t, admin, "p", bjs.WithLease(lease), bjs.WithMaxDeliver(3))
			s := newScheduler(t, coordinator.WithPool("remote", 1, pool))
			if err := s.Submit(task("again", "echo")); err != nil {
				t.Fatal(err)
			}
			// Delivery 1 is taken and dropped (a worker that died, or whose
			// acknowledgement was lost): its lease lapses.
			ctx, cancel := context.WithTimeout(context.Background(), long)
			defer cancel()
			js, _ := njs.New(admin)
			c, err := js.Consumer(ctx, bjs.AttemptsStream("p"), bjs.WorkConsumer)
			if err != nil {
				t.Fatal(err)
			}
			batch, err := c.Fetch(1, njs.FetchMaxWait(long))
			if err != nil {
				t.Fatal(err)
			}
			for m := range batch.Messages() {
				if md, _ := m.Metadata(); md == nil || md.NumDelivered != 1 {
					t.Fatalf("the first fetch got %+v; want delivery 1", md)
				}
			}
			// Then a worker takes the deliveries again.
			wnc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("worker", "worker-secret"), nats.CustomInboxPrefix("_INBOX_worker"),
				nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})) // the permission violations this test expects
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(wnc.Close)
			logs := make(chan string, 64)
			var calls atomic.Int32
			serve(t, wnc, "p", map[string]bjs.Handler{"echo": func(ctx context.Context, data []byte) ([]byte, error) {
				calls.Add(1)
				return echo(ctx, data)
			}}, bjs.WithWorkerName("w"), bjs.WithWorkerLogger(slogTo(logs)))
			wait(t, s)
			in := info(t, s, "again")
			if canLook {
				if in.Status != coordinator.Succeeded || calls.Load() != 1 {
					t.Fatalf("with the permission to look: %v, err %v, handler called %d times; want Succeeded, once", in.Status, in.Err, calls.Load())
				}
				return
			}
			if in.Status != coordinator.Failed || !errors.Is(in.Err, bjs.ErrMaxDeliveries) {
				t.Errorf("without the permission to look: %v, err %v; want Failed with ErrMaxDeliveries", in.Status, in.Err)
			}
			if n := calls.Load(); n != 0 {
				t.Errorf("the handler ran %d times on deliveries again that could not be looked up; want 0", n)
			}
			waitLog(t, logs, "jetstream: Serve: handing back a delivery again: the work stream did not say whether its attempt ended")
		})
	}
}

// A look that the work stream answers slowly still counts: each look
// waits up to two seconds for its answer, whatever the lease (Serve
// extends the delivery's lease meanwhile). Before, a look waited a
// quarter of the lease, so with a lease of 100 ms a stream that took 30 ms
// to answer was never heard, and every delivery again was handed back
// until the attempt failed with ErrMaxDeliveries (found by an adversarial
// review).
func TestDeliveryAgainLookedUpPatiently(t *testing.T) {
	srv := startServerWith(t, &server.Options{Host: "127.0.0.1", Port: -1}) // no JetStream: this test answers
	nc := connect(t, srv.ClientURL())
	const delay = 300 * time.Millisecond
	sub, err := nc.Subscribe("$JS.API.STREAM.MSG.GET."+bjs.AttemptsStream("p"), func(m *nats.Msg) {
		time.AfterFunc(delay, func() { _ = m.Respond([]byte(`{"message":{"seq":7}}`)) })
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := bjs.Withdrawn(nc, "p", 7, bjs.MinLease); got != "held" {
		t.Fatalf("a stream answering in %v, with a lease of %v: %s; want held", delay, bjs.MinLease, got)
	}
}
