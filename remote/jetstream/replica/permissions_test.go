package replica_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/remote/jetstream"
	"github.com/batonhq/baton/remote/jetstream/replica"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// user makes a server user of a role's permissions.
func user(name string, p jetstream.Permissions) *server.User {
	perms := &server.Permissions{Publish: &server.SubjectPermission{Allow: p.Publish},
		Subscribe: &server.SubjectPermission{Allow: p.Subscribe}}
	if p.AllowResponses {
		perms.Response = &server.ResponsePermission{MaxMsgs: 1, Expires: time.Minute}
	}
	return &server.User{Username: name, Password: name + "-secret", Permissions: perms}
}

// violations collects a connection's permission errors.
func violations(t *testing.T, url, name, inbox string) (*nats.Conn, <-chan string) {
	t.Helper()
	ch := make(chan string, 64)
	nc, err := nats.Connect(url, nats.UserInfo(name, name+"-secret"), nats.CustomInboxPrefix(inbox),
		nats.MaxReconnects(-1), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
				select {
				case ch <- err.Error():
				default:
				}
			}
		}))
	if err != nil {
		t.Fatalf("connect as %s: %v", name, err)
	}
	t.Cleanup(nc.Close)
	return nc, ch
}

// The least privileges of each role (replica.ReplicaPermissions,
// ClientPermissions, jetstream.ServePermissions), on a server that
// enforces them: the graph runs, on two pools each served by a worker
// allowed its own pool only; a worker cannot pull the other pool's
// attempts; a client can submit and wait, and cannot publish an outcome
// or append to the log.
func TestLeastPrivileges(t *testing.T) {
	const store = "perm"
	users := []*server.User{
		user("replica", replica.ReplicaPermissions(store, "_INBOX_replica", "pa", "pb")),
		user("worker-pa", jetstream.ServePermissions("pa", "_INBOX_worker_pa")),
		user("worker-pb", jetstream.ServePermissions("pb", "_INBOX_worker_pb")),
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
	url := srv.ClientURL()

	rnc, rviol := violations(t, url, "replica", "_INBOX_replica")
	release := make(chan struct{})
	nl, leading := notices()
	r, err := replica.New(rnc, store, replica.WithName("r"), replica.WithLease(testLease), replica.WithReplicas(1), nl,
		replica.WithRemotePool("ra", 4, "pa", jetstream.WithReplicas(1)),
		replica.WithRemotePool("rb", 4, "pb", jetstream.WithReplicas(1)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), long)
		defer cancel()
		r.Shutdown(ctx)
	})
	waitRole(t, leading, replica.Leader)

	anc, aviol := violations(t, url, "worker-pa", "_INBOX_worker_pa")
	bnc, bviol := violations(t, url, "worker-pb", "_INBOX_worker_pb")
	handler := func(ctx context.Context, data []byte) ([]byte, error) {
		if string(data) == "hold" {
			select {
			case <-release:
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}
		return append([]byte("real:"), data...), nil
	}
	for _, w := range []struct {
		nc   *nats.Conn
		pool string
	}{{anc, "pa"}, {bnc, "pb"}} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- jetstream.Serve(ctx, w.nc, w.pool, map[string]jetstream.Handler{"echo": handler}) }()
		t.Cleanup(func() { cancel(); <-done })
	}

	cnc, cviol := violations(t, url, "client", "_INBOX_client")
	client, err := replica.NewClient(cnc, store)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	task := func(id, pool, data string, deps ...string) coordinator.Task {
		return coordinator.Task{ID: id, Pool: pool, Deps: deps, Timeout: long,
			Payload: jetstream.Payload{Kind: "echo", Data: []byte(data)}.Encode()}
	}
	if err := client.Submit(ctx, task("a1", "ra", "a1"), task("b1", "rb", "b1", "a1"), task("a2", "ra", "a2", "b1"),
		task("held", "ra", "hold")); err != nil {
		t.Fatalf("the client's Submit = %v", err)
	}
	if err := client.WaitTasks(ctx, "a1", "b1", "a2"); err != nil {
		t.Fatalf("WaitTasks = %v: the graph did not run under least privileges", err)
	}
	if ti, _, err := client.Info(ctx, "b1"); err != nil || string(ti.Result.([]byte)) != "real:b1" {
		t.Fatalf("Info(b1) = %+v, %v", ti, err)
	}

	// Worker pa cannot pull pb's attempts.
	if _, err := anc.Request("$JS.API.CONSUMER.MSG.NEXT.BATON_pb_ATTEMPTS.workers", []byte(`{"batch":1}`), time.Second); err == nil {
		t.Error("worker pa's pull from pool pb was answered")
	}
	recvViolation(t, aviol, "worker pa pulling pool pb")

	// The client cannot forge the outcome of the held attempt, nor
	// append to the log.
	cnc.Publish("baton.pa.results.replica-perm.x", []byte("forged"))
	recvViolation(t, cviol, "the client publishing an outcome")
	cnc.Publish("baton.perm.log.commit", []byte("forged"))
	recvViolation(t, cviol, "the client appending to the log")
	close(release)
	if err := client.WaitTasks(ctx, "held"); err != nil {
		t.Fatalf("WaitTasks(held) = %v", err)
	}
	if ti, _, _ := client.Info(ctx, "held"); string(ti.Result.([]byte)) != "real:hold" {
		t.Errorf("held's result is %q; want the worker's, real:hold", ti.Result)
	}
	for name, ch := range map[string]<-chan string{"replica": rviol, "worker pa": aviol, "worker pb": bviol, "client": cviol} {
		select {
		case v := <-ch:
			t.Errorf("%s met a permissions violation doing its job: %s", name, v)
		default:
		}
	}
}

func recvViolation(t *testing.T, ch <-chan string, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Logf("%s: %s", what, v)
	case <-time.After(long):
		t.Errorf("%s: no permissions violation", what)
	}
}
