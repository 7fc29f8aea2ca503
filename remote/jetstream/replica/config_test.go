package replica_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/remote/jetstream"
	"github.com/batonhq/baton/remote/jetstream/replica"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

var updateConfig = flag.Bool("replica.update", false, "TestClusterConfiguration: write deploy/accounts.conf from the permission functions")

// The deployment deploy/ describes (docs/distributed.md): a store
// "orders", a remote pool "render", each role a user with its
// permissions, the log in an account of its own.
const (
	confStore = "orders"
	confPool  = "render"
)

// confUsers are the users of deploy/accounts.conf, by account: each
// role's permissions as this package's functions give them, and the
// environment variable that holds its password.
var confUsers = []struct {
	account, user, password string
	perms                   jetstream.Permissions
}{
	{"BATON", "replica", "BATON_REPLICA_PASSWORD", replica.ReplicaServicePermissions(confStore, "_INBOX_replica", confPool)},
	{"BATON", "worker-" + confPool, "BATON_WORKER_PASSWORD", jetstream.ServePermissions(confPool, "_INBOX_worker")},
	{"BATON", "client", "BATON_CLIENT_PASSWORD", replica.ClientPermissions(confStore, "_INBOX_client")},
	{"BATON_LOG", "replica-log", "BATON_REPLICA_LOG_PASSWORD", replica.LogPermissions(confStore, "_INBOX_replica_log")},
}

// accountsConf is deploy/accounts.conf as the functions say it.
func accountsConf() string {
	var b strings.Builder
	b.WriteString(`# Accounts and users of Baton's NATS cluster (included by baton-N.conf):
# a replicated store "orders" (package replica) with a remote pool
# "render" (package jetstream). Written by replica's
# TestClusterConfiguration from the permission functions
# (go test ./replica/ -run TestClusterConfiguration -replica.update);
# for other names, call the functions with yours (docs/distributed.md).
#
# Two accounts. BATON holds the pools' streams and every role's traffic:
# the replicas' requests, the workers, the clients. BATON_LOG holds the
# store's log alone, and only the replicas' log user is in it: JetStream,
# and every service, answer a request within the requester's account, so
# no client or worker can aim an answer at the log. The passwords come
# from the environment.
accounts {
`)
	for _, acc := range []string{"BATON", "BATON_LOG"} {
		fmt.Fprintf(&b, "  %s {\n    jetstream: enabled\n    users: [\n", acc)
		for _, u := range confUsers {
			if u.account != acc {
				continue
			}
			fmt.Fprintf(&b, "      {\n        user: %q\n        password: $%s\n        permissions: {\n", u.user, u.password)
			for _, l := range []struct {
				what string
				subs []string
			}{{"publish", u.perms.Publish}, {"subscribe", u.perms.Subscribe}} {
				fmt.Fprintf(&b, "          %s: {allow: [\n", l.what)
				for _, s := range l.subs {
					fmt.Fprintf(&b, "            %q\n", s)
				}
				b.WriteString("          ]}\n")
			}
			if u.perms.AllowResponses {
				b.WriteString("          allow_responses: {max: 1, expires: \"1m\"}\n")
			}
			b.WriteString("        }\n      }\n")
		}
		b.WriteString("    ]\n  }\n")
	}
	b.WriteString(`  SYS {
    users: [{user: "sys", password: $BATON_SYS_PASSWORD}]
  }
}
system_account: SYS
`)
	return b.String()
}

// deployDir is where the ready configuration lives.
func deployDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// The ready configuration (deploy/: three servers, two accounts, a user
// per role) is what the permission functions say, and works: three
// servers started from its files run a graph, each role connected as its
// user (the replicas' log through the log's own account,
// WithLogConnection); a client has no JetStream rights; a worker's
// JetStream answers aimed at the log's subjects land in its own account,
// not in the log: no replica quarantines anything.
func TestClusterConfiguration(t *testing.T) {
	dir := deployDir(t)
	path := filepath.Join(dir, "accounts.conf")
	if *updateConfig {
		if err := os.WriteFile(path, []byte(accountsConf()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != accountsConf() {
		t.Fatalf("deploy/accounts.conf differs from the permission functions: run go test ./replica/ -run TestClusterConfiguration -replica.update")
	}
	if testing.Short() {
		t.Skip("a cluster: not in -short")
	}
	for _, u := range append(confUsers[:len(confUsers):len(confUsers)], struct {
		account, user, password string
		perms                   jetstream.Permissions
	}{user: "sys", password: "BATON_SYS_PASSWORD"}) {
		t.Setenv(u.password, u.user+"-secret")
	}
	c := &cluster{t: t, name: "baton", ports: freePorts(t, 3), routes: freePorts(t, 3), servers: make([]*server.Server, 3)}
	stores := t.TempDir()
	for i := range 3 {
		c.dirs = append(c.dirs, filepath.Join(stores, fmt.Sprintf("s%d", i)))
	}
	c.tweak = func(i int, o *server.Options) {
		file, err := server.ProcessConfigFile(filepath.Join(dir, fmt.Sprintf("baton-%d.conf", i+1)))
		if err != nil {
			t.Fatalf("baton-%d.conf: %v", i+1, err)
		}
		// The files' own addresses and directories, made local.
		file.Host, file.Port, file.HTTPHost, file.HTTPPort = o.Host, o.Port, "", 0
		file.Cluster.Host, file.Cluster.Port, file.Routes = o.Cluster.Host, o.Cluster.Port, o.Routes
		file.StoreDir, file.NoLog, file.NoSigs = o.StoreDir, true, true
		*o = *file
	}
	for i := range 3 {
		c.start(i)
	}
	for i := range 3 {
		if !c.servers[i].ReadyForConnections(long) {
			t.Fatalf("server %d not ready", i)
		}
	}
	t.Cleanup(func() {
		for i := range c.servers {
			c.stop(i)
		}
	})
	as := func(name, inbox string) *nats.Conn {
		opts := []nats.Option{nats.UserInfo(name, name+"-secret")}
		if inbox != "" {
			opts = append(opts, nats.CustomInboxPrefix(inbox))
		}
		return c.connect(t, opts...)
	}

	var replicas []*replica.Replica
	var chans []<-chan replica.Notice
	for i := range 2 {
		nl, ch := notices()
		r, err := replica.New(as("replica", "_INBOX_replica"), confStore, nl,
			replica.WithName(fmt.Sprintf("r%d", i)), replica.WithLease(testLease),
			replica.WithLogConnection(as("replica-log", "_INBOX_replica_log")),
			// A short lease, as the failover tests': a delivery lost in
			// flight (to a pull that expired at that moment) comes back
			// a lease later, and the default lease is the tasks' timeout.
			replica.WithRemotePool("remote", 4, confPool, jetstream.WithReplicas(3), jetstream.WithLease(time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), long)
			defer cancel()
			r.Shutdown(ctx)
		})
		replicas, chans = append(replicas, r), append(chans, ch)
		waitRole(t, ch, []replica.Role{replica.Leader, replica.Standby}[i])
	}
	wnc := as("worker-"+confPool, "_INBOX_worker")
	sctx, scancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- jetstream.Serve(sctx, wnc, confPool, map[string]jetstream.Handler{
			"echo": func(ctx context.Context, data []byte) ([]byte, error) { return data, nil },
		})
	}()
	defer func() { scancel(); <-served }()

	cnc, cviol := violations(t, c.url(), "client", "_INBOX_client")
	cl, err := replica.NewClient(cnc, confStore)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*long)
	defer cancel()
	task := func(id string, deps ...string) coordinator.Task {
		return coordinator.Task{ID: id, Pool: "remote", Deps: deps, Timeout: long,
			Payload: jetstream.Payload{Kind: "echo", Data: []byte(id)}.Encode()}
	}
	if err := cl.Submit(ctx, task("a"), task("b", "a")); err != nil {
		t.Fatalf("the client's Submit = %v", err)
	}
	if err := cl.WaitTasks(ctx, "a", "b"); err != nil {
		t.Fatalf("WaitTasks = %v", err)
	}

	// The client reads nothing of JetStream.
	cnc.Publish("$JS.API.STREAM.INFO.BATON_"+confStore+"_LOG", nil)
	recvViolation(t, cviol, "the client asking for the log's stream")
	// The worker's answers aimed at the log stay in its account (an
	// administrator of BATON sees them there).
	seen := make(chan *nats.Msg, 64)
	admin := c.connect(t, nats.UserInfo("replica", "replica-secret"), nats.CustomInboxPrefix("_INBOX_replica"))
	sub, err := admin.ChanSubscribe("baton."+confStore+".api.*", seen) // allowed to the replica user: reuse it
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := admin.Flush(); err != nil {
		t.Fatal(err)
	}
	const probes = 10
	for range probes {
		// Aimed at the log's subject, and at a subject the test hears in
		// the BATON account, to see them arrive.
		wnc.PublishRequest("$JS.API.CONSUMER.INFO.BATON_"+confPool+"_ATTEMPTS.workers", "baton."+confStore+".log.commit", nil)
		wnc.PublishRequest("$JS.API.CONSUMER.INFO.BATON_"+confPool+"_ATTEMPTS.workers", "baton."+confStore+".api.probe", nil)
	}
	for range probes {
		recv(t, seen, "a JetStream answer to the worker, in its account")
	}
	if err := cl.Submit(ctx, task("c", "b")); err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitTasks(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	for i, r := range replicas {
		if n, items := r.Quarantined(); n != 0 {
			t.Errorf("replica r%d quarantined %d messages (%v); want none: nothing reaches the log's account", i, n, items)
		}
		noRoleChange(t, chans[i], fmt.Sprintf("r%d", i))
	}
	for _, e := range logOf(t, as("replica-log", "_INBOX_replica_log"), confStore) {
		if e.leader == "" {
			t.Errorf("log message %d (%s) names no writer", e.seq, e.kind)
		}
	}
}
