package replica_test

// The log trusts its replicas alone (issue #28): a client or a worker
// with its role's permissions, on a server that enforces them, cannot
// write into the log, fence the leader or make the store unreadable by
// aiming an answer (JetStream's or the leader's) at the log's subjects.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/remote/jetstream"
	"github.com/batonhq/baton/remote/jetstream/replica"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// trustRig is one server that enforces each role's permissions: users
// replica, worker (pool tp), client and admin (all rights, for the
// test's own look at the log).
type trustRig struct {
	url   string
	store string
}

func newTrustRig(t *testing.T, store string) *trustRig {
	t.Helper()
	users := []*server.User{
		user("replica", replica.ReplicaPermissions(store, "_INBOX_replica", "tp")),
		user("worker", jetstream.ServePermissions("tp", "_INBOX_worker")),
		user("client", replica.ClientPermissions(store, "_INBOX_client")),
		{Username: "admin", Password: "admin-secret"},
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true, Users: users})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(long) {
		t.Fatal("server not ready")
	}
	return &trustRig{url: srv.ClientURL(), store: store}
}

// as connects as one of the rig's users, with its inbox prefix.
func (r *trustRig) as(t *testing.T, name string) *nats.Conn {
	t.Helper()
	opts := []nats.Option{nats.UserInfo(name, name+"-secret"), nats.MaxReconnects(-1)}
	if name != "admin" {
		opts = append(opts, nats.CustomInboxPrefix("_INBOX_"+name))
	}
	return conn(t, r.url, opts...)
}

// replica starts a replica of the rig's store, with a remote pool on tp
// and a local function.
func (r *trustRig) replica(t *testing.T, name string, opts ...replica.Option) *replica.Replica {
	t.Helper()
	opts = append(r1(replica.WithRemotePool("remote", 4, "tp", jetstream.WithReplicas(1)),
		replica.WithScheduler(coordinator.WithFunc("local", func(ctx context.Context, p []byte) error {
			return coordinator.SetResult(ctx, p)
		}))), opts...)
	return startReplica(t, r.as(t, "replica"), r.store, name, opts...)
}

// serve runs a worker of pool tp until the test ends.
func (r *trustRig) serve(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	nc := r.as(t, "worker")
	go func() {
		done <- jetstream.Serve(ctx, nc, "tp", map[string]jetstream.Handler{
			"echo": func(ctx context.Context, data []byte) ([]byte, error) { return data, nil },
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// run submits a local and a remote task through cl and waits for both.
func (r *trustRig) run(t *testing.T, cl interface {
	Submit(context.Context, ...coordinator.Task) error
	WaitTasks(context.Context, ...string) error
}, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	err := cl.Submit(ctx, coordinator.Task{ID: id + "-local", Func: "local", Payload: []byte(id)},
		coordinator.Task{ID: id + "-remote", Pool: "remote", Timeout: long, Payload: jetstream.Payload{Kind: "echo", Data: []byte(id)}.Encode()})
	if err != nil {
		t.Fatalf("Submit(%s) = %v", id, err)
	}
	if err := cl.WaitTasks(ctx, id+"-local", id+"-remote"); err != nil {
		t.Fatalf("WaitTasks(%s) = %v", id, err)
	}
}

// quarantines waits for n quarantine notices on ch, and fails on any
// change of role.
func quarantines(t *testing.T, ch <-chan replica.Notice, n int, who string) {
	t.Helper()
	deadline := time.After(long)
	for got := 0; got < n; {
		select {
		case x := <-ch:
			if x.Quarantined == nil {
				t.Fatalf("%s: a change of role (%v, term %d, %v) while answers were aimed at the log", who, x.Role, x.Term, x.Err)
			}
			got++
		case <-deadline:
			t.Fatalf("%s: %d quarantine notices after %v; want %d", who, got, long, n)
		}
	}
}

// noRoleChange fails if ch holds a change of role (quarantine notices
// pass).
func noRoleChange(t *testing.T, ch <-chan replica.Notice, who string) {
	t.Helper()
	for {
		select {
		case x := <-ch:
			if x.Quarantined == nil {
				t.Errorf("%s: a change of role (%v, term %d, %v)", who, x.Role, x.Term, x.Err)
			}
		default:
			return
		}
	}
}

// A worker aims JetStream's answers to its allowed API requests
// (CONSUMER.INFO of its own pool) at the log's term and commit subjects,
// over and over, and a client aims the leader's answers (Info) at the
// log's commit and beat subjects (a client has no JetStream rights at
// all, and cannot say a leader is ready): the leader answers no reply subject
// but an inbox (nothing of it reaches the log), and JetStream's answers,
// which land in the log, are quarantined by every replica. The leader
// keeps its term throughout (no fence at will), the graph runs, and
// replicas started afresh on that log lead and restore every task.
func TestNoClientOrWorkerCanWriteTheLog(t *testing.T) {
	const store = "trust"
	rig := newTrustRig(t, store)
	rig.serve(t)
	na, aCh := notices()
	a := rig.replica(t, "a", na)
	lead := waitRole(t, aCh, replica.Leader)
	nb, bCh := notices()
	rig.replica(t, "b", nb)
	waitRole(t, bCh, replica.Standby)
	cl, err := replica.NewClient(rig.as(t, "client"), store)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rig.run(t, cl, "before")

	// The client: no JetStream request at all (it could aim the answer
	// at the log), and the leader's answers aimed at the log.
	cnc, cviol := violations(t, rig.url, "client", "_INBOX_client")
	cnc.PublishRequest("$JS.API.STREAM.INFO.BATON_"+store+"_LOG", "baton."+store+".log.commit", nil)
	recvViolation(t, cviol, "the client asking JetStream for the log's stream")
	cnc.Publish("baton."+store+".ready", []byte("1"))
	recvViolation(t, cviol, "the client saying a leader is ready")
	info := []byte(`{"op":"info","ids":["before-local"]}`)
	for i := range 10 {
		for _, kind := range []string{"commit", "beat", "term"} {
			if err := cnc.PublishRequest(replica.APISubject(store, lead.Term), fmt.Sprintf("baton.%s.log.%s", store, kind), info); err != nil {
				t.Fatalf("client request %d: %v", i, err)
			}
		}
	}
	// The worker: JetStream's answers aimed at the log, as a worker of
	// pool tp may ask them.
	wnc := rig.as(t, "worker")
	const probes = 20
	for i := range probes {
		kind := []string{"term", "commit"}[i%2]
		if err := wnc.PublishRequest("$JS.API.CONSUMER.INFO.BATON_tp_ATTEMPTS.workers", fmt.Sprintf("baton.%s.log.%s", store, kind), nil); err != nil {
			t.Fatalf("worker request %d: %v", i, err)
		}
	}
	if err := wnc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := cnc.Flush(); err != nil {
		t.Fatal(err)
	}
	// Every JetStream answer lands in the log, and each replica
	// quarantines it; the leader's answers land nowhere (a would have
	// been fenced by the first on the term subject: its role would
	// change).
	quarantines(t, bCh, probes, "the standby")
	rig.run(t, cl, "after")
	noRoleChange(t, aCh, "the leader")
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	if name, term, err := cl.Leader(ctx); err != nil || name != "a" || term != lead.Term {
		t.Errorf("Leader() = %q, term %d, %v; want a, term %d: the leader kept its term", name, term, err, lead.Term)
	}
	junk := 0
	for _, e := range logOf(t, rig.as(t, "admin"), store) {
		if e.leader == "" {
			junk++
		}
	}
	if junk != probes {
		t.Errorf("%d messages of the log name no writer; want %d, JetStream's answers to the worker (the leader answered none)", junk, probes)
	}
	if n, _ := a.Quarantined(); n > probes {
		t.Errorf("the leader quarantined %d messages; want at most the %d in the log", n, probes)
	}

	// Replicas started afresh read the log with its quarantined
	// messages, lead, and restore every task.
	for _, r := range []*replica.Replica{a} {
		sctx, scancel := context.WithTimeout(context.Background(), long)
		if err := r.Shutdown(sctx); err != nil {
			t.Fatal(err)
		}
		scancel()
	}
	waitRole(t, bCh, replica.Leader)
	nc, cCh := notices()
	c := rig.replica(t, "c", nc)
	waitRole(t, cCh, replica.Standby)
	quarantines(t, cCh, probes, "a replica started afresh")
	if n, _ := c.Quarantined(); n != probes {
		t.Errorf("a replica started afresh quarantined %d messages; want %d", n, probes)
	}
	for _, id := range []string{"before-local", "before-remote", "after-local", "after-remote"} {
		ti, ok, err := cl.Info(ctx, id)
		if err != nil || !ok || ti.Status != coordinator.Succeeded {
			t.Errorf("Info(%s) after the takeover = %v, %v, %v; want succeeded", id, ti.Status, ok, err)
		}
	}
	rig.run(t, cl, "later")
}
