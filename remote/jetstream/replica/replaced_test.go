package replica_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	bjs "github.com/batonhq/baton/remote/jetstream"
	"github.com/batonhq/baton/remote/jetstream/replica"
	"github.com/nats-io/nats.go/jetstream"
)

// A log stream deleted and created again under a running service is
// read from its start, alone (issue #28 item 5): a standby that had
// read the old stream does not apply the new one's messages onto the
// old records (the sequences start over), and the old leader, whose
// appends expect the old stream's sequences, is fenced by the stream's
// identity (its creation time), not left retrying. The tasks of the old
// stream are gone with it; those of the new one are all there.
func TestReplacedLogIsReadAlone(t *testing.T) {
	srv := oneServer(t)
	const store = "replaced"
	funcs := replica.WithScheduler(coordinator.WithFunc("q", func(ctx context.Context, p []byte) error { return nil }))
	na, aCh := notices()
	a := startReplica(t, conn(t, srv.ClientURL()), store, "a", r1(funcs, na)...)
	waitRole(t, aCh, replica.Leader)
	nb, bCh := notices()
	startReplica(t, conn(t, srv.ClientURL()), store, "b", r1(funcs, nb)...)
	waitRole(t, bCh, replica.Standby)
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	var old []string
	for i := range 20 { // a log longer than the new one will be when read
		id := "old" + string(rune('a'+i))
		old = append(old, id)
		if err := a.Submit(ctx, coordinator.Task{ID: id, Func: "q"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.WaitTasks(ctx, old...); err != nil {
		t.Fatal(err)
	}

	// An operator deletes the log; a replica started now creates it
	// again, empty, and leads it.
	js, _ := jetstream.New(conn(t, srv.ClientURL()))
	if err := js.DeleteStream(ctx, "BATON_"+store+"_LOG"); err != nil {
		t.Fatal(err)
	}
	nc, cCh := notices()
	c := startReplica(t, conn(t, srv.ClientURL()), store, "c", r1(funcs, nc)...)
	cl := waitRole(t, cCh, replica.Leader)
	if cl.Tasks != 0 {
		t.Errorf("c restored %d tasks from the new, empty log", cl.Tasks)
	}
	for { // a's next append meets the new stream: fenced
		n := recv(t, aCh, "a's notice")
		if n.Role == replica.Standby && n.Quarantined == nil {
			if !errors.Is(n.Err, replica.ErrFenced) {
				t.Errorf("a stands by for %v; want ErrFenced (the stream was replaced)", n.Err)
			}
			break
		}
	}
	var fresh []string
	for i := range 5 {
		id := "new" + string(rune('a'+i))
		fresh = append(fresh, id)
		if err := c.Submit(ctx, coordinator.Task{ID: id, Func: "q"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WaitTasks(ctx, fresh...); err != nil {
		t.Fatal(err)
	}
	// c resigns: a or b leads, having read the new stream alone.
	if err := c.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	var next replica.Notice
	deadline := time.After(long)
	for next.Leader == "" {
		var n replica.Notice
		select {
		case n = <-aCh:
		case n = <-bCh:
		case <-deadline:
			t.Fatalf("no leader %v after c resigned", long)
		}
		if n.Role == replica.Leader && n.Quarantined == nil {
			next = n
		}
	}
	if next.Tasks != len(fresh) {
		t.Errorf("%s restored %d tasks; want the new stream's %d", next.Leader, next.Tasks, len(fresh))
	}
	for _, id := range fresh {
		if _, ok, err := a.Info(ctx, id); err != nil || !ok {
			t.Errorf("Info(%s) = %v, %v; want known", id, ok, err)
		}
	}
	if _, ok, err := a.Info(ctx, old[0]); err != nil || ok {
		t.Errorf("Info(%s) = %v, %v; want unknown: it was in the deleted stream", old[0], ok, err)
	}
}

// A log deleted and made again numbers its terms from 1, while the
// results stream still holds the consumer of the old log's last leader,
// of a higher term: the new log's leader takes it over (a consumer of
// another log is older whatever its term) and leads at its first try.
func TestReplacedLogLeadsBesideOldConsumers(t *testing.T) {
	srv := oneServer(t)
	const store = "relogged"
	funcs := replica.WithScheduler(coordinator.WithFunc("q", func(ctx context.Context, p []byte) error { return nil }))
	pool := replica.WithRemotePool("rp", 4, "wp", bjs.WithReplicas(1))
	na, aCh := notices()
	a := startReplica(t, conn(t, srv.ClientURL()), store, "a", r1(funcs, pool, na)...)
	waitRole(t, aCh, replica.Leader)
	ctx, cancel := context.WithTimeout(context.Background(), 2*long)
	defer cancel()
	var ids []string
	for i := range 20 { // terms of the first log well past 1
		id := fmt.Sprint("t", i)
		ids = append(ids, id)
		if err := a.Submit(ctx, coordinator.Task{ID: id, Func: "q"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.WaitTasks(ctx, ids...); err != nil {
		t.Fatal(err)
	}
	nb, bCh := notices()
	startReplica(t, conn(t, srv.ClientURL()), store, "b", r1(funcs, pool, nb)...)
	waitRole(t, bCh, replica.Standby)
	if err := a.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if n := waitRole(t, bCh, replica.Leader); n.Term < 3 {
		t.Fatalf("b leads at term %d; want the first log's terms past those of the second", n.Term)
	}
	js, err := jetstream.New(conn(t, srv.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, "BATON_"+store+"_LOG"); err != nil {
		t.Fatal(err)
	}
	nc, cCh := notices()
	startReplica(t, conn(t, srv.ClientURL()), store, "c", r1(funcs, pool, nc)...)
	for {
		var n replica.Notice
		select {
		case n = <-cCh:
		case n = <-bCh:
		case <-ctx.Done():
			t.Fatal("no leader of the log made again")
		}
		if errors.Is(n.Err, bjs.ErrSuperseded) {
			t.Fatalf("a replica could not lead the log made again: %v", n.Err)
		}
		if n.Role == replica.Leader {
			return
		}
	}
}
