package replica_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/remote/jetstream"
	"github.com/batonhq/baton/remote/jetstream/replica"
	"github.com/batonhq/baton/worker"
	"github.com/nats-io/nats.go"
)

// Processes the failover tests start: this test binary, re-executed with
// envChild set to "replica" or "worker" (see TestMain).
const (
	envChild = "BATON_REPLICA_CHILD"   // "replica" or "worker"
	envURL   = "BATON_REPLICA_URL"     // the cluster's client URLs
	envStore = "BATON_REPLICA_STORE"   // the store's name
	envName  = "BATON_REPLICA_NAME"    // the replica's or worker's name
	envLog   = "BATON_REPLICA_LOG"     // the side log every process appends to
	envLease = "BATON_REPLICA_LEASE"   // the replicas' lease
	envCreds = "BATON_REPLICA_USER"    // user:password, if the servers ask for one
	envInbox = "BATON_REPLICA_INBOX"   // the connection's inbox prefix, if not the default
	envLogU  = "BATON_REPLICA_LOGUSER" // a replica's log connection's user:password and inbox prefix (user:password:inbox), if it has one
	envPool  = "BATON_REPLICA_POOL"    // the remote pool's JetStream name (default remotePool)
	envDebug = "BATON_REPLICA_DEBUG"   // log at Debug in replica children
)

// remotePool is the JetStream pool of the failover tests' remote tasks.
const remotePool = "fowork"

// childMain runs a child process if this is one, and returns its exit
// code; ok is false in the test process itself.
func childMain() (code int, ok bool) {
	switch os.Getenv(envChild) {
	case "replica":
		return replicaChild(), true
	case "worker":
		return workerChild(), true
	}
	return 0, false
}

// sideLog is the processes' common record, one line per write, appended
// (O_APPEND: lines of several processes do not mix): "dispatch ID
// ATTEMPT PID NANOS" (a replica's middleware: the lease's gate let an
// attempt start at NANOS, replica.AdmissionOf), "run ID PID NANOS" and "end ID PID NANOS" (a function
// or handler began, returned).
type sideLog struct {
	mu sync.Mutex
	f  *os.File
}

func openSideLog(path string) *sideLog {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		panic(err)
	}
	return &sideLog{f: f}
}

func (l *sideLog) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := fmt.Fprintf(l.f, format+"\n", args...); err != nil {
		panic(err)
	}
}

func childConnect(name string) *nats.Conn {
	return childConnectAs(name, os.Getenv(envCreds), os.Getenv(envInbox))
}

// poolOf is the remote pool's JetStream name in a child.
func poolOf() string {
	if p := os.Getenv(envPool); p != "" {
		return p
	}
	return remotePool
}

func childConnectAs(name, creds, inbox string) *nats.Conn {
	// Only the URLs given: the servers' gossip of their own addresses
	// would let a replica behind the harness's proxies reconnect around
	// them (a partitioned leader wrote on).
	opts := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond), nats.Name(name),
		nats.IgnoreDiscoveredServers()}
	if creds != "" {
		user, pass, _ := strings.Cut(creds, ":")
		opts = append(opts, nats.UserInfo(user, pass))
	}
	if inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(inbox))
	}
	nc, err := nats.Connect(os.Getenv(envURL), opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, name, "connect:", err)
		os.Exit(2)
	}
	return nc
}

// stdinClosed returns a context that ends when the process's standard
// input closes: the test's way to stop a child gracefully.
func stdinClosed() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	return ctx
}

// work is the tasks' function, local and remote: it logs its start, works
// a few milliseconds, fails one attempt in ten, and returns "res:ID".
func work(log *sideLog, rng *rand.Rand, mu *sync.Mutex) func(ctx context.Context, id string) ([]byte, error) {
	return func(ctx context.Context, id string) ([]byte, error) {
		log.printf("run %s %d %d", id, os.Getpid(), time.Now().UnixNano())
		defer func() { log.printf("end %s %d %d", id, os.Getpid(), time.Now().UnixNano()) }()
		mu.Lock()
		d, fail := time.Duration(2+rng.IntN(30))*time.Millisecond, rng.IntN(10) == 0
		if rng.IntN(12) == 0 {
			d = countedAfter + time.Duration(rng.IntN(250))*time.Millisecond // a slow one among quick ones
		}
		mu.Unlock()
		t := time.NewTimer(d) // simulated work
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		if fail {
			return nil, errors.New("unlucky")
		}
		return []byte("res:" + id), nil
	}
}

// countedAfter: a local attempt that had run this long when its leader
// was killed, without returning, had its start committed (within a
// commit of its claim): it must count as interrupted after the takeover.
const countedAfter = 150 * time.Millisecond

// notice is a replica's Notice as a child prints it, one JSON line each.
type notice struct {
	Replica string        `json:"replica"`
	Role    string        `json:"role"`
	Term    uint64        `json:"term"`
	Leader  string        `json:"leader"`
	Err     string        `json:"err,omitempty"`
	Fenced  bool          `json:"fenced,omitempty"`
	At      int64         `json:"at"`
	Tasks   int           `json:"tasks,omitempty"`
	Restore time.Duration `json:"restore,omitempty"`
	// Where Restore went (replica.Notice).
	Claim     time.Duration `json:"claim,omitempty"`
	Pools     time.Duration `json:"pools,omitempty"`
	Scheduler time.Duration `json:"scheduler,omitempty"`
	Requests  time.Duration `json:"requests,omitempty"`
	PID       int           `json:"pid"`
}

// replicaChild is a replica of the test store: local tasks run the
// function "local", remote ones the pool's workers. It prints its
// Notices and runs until its standard input closes (Shutdown) or it is
// killed.
func replicaChild() int {
	name := os.Getenv(envName)
	nc := childConnect(name)
	defer nc.Close()
	log := openSideLog(os.Getenv(envLog))
	lease, _ := time.ParseDuration(os.Getenv(envLease))
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(time.Now().UnixNano())))
	var mu sync.Mutex
	w := work(log, rng, &mu)
	local := func(ctx context.Context, p []byte) error {
		out, err := w(ctx, string(p))
		if err != nil {
			return err
		}
		return coordinator.SetResult(ctx, out)
	}
	dispatch := func(pool string, next worker.Worker) worker.Worker {
		return workerFunc(func(ctx context.Context, j worker.Job) error {
			a, _ := replica.AdmissionOf(ctx) // when the lease's gate let it start
			log.printf("dispatch %s %d %d %d", j.ID, j.Attempt, os.Getpid(), a.At.UnixNano())
			return next.Do(ctx, j)
		})
	}
	var out sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	level := slog.LevelWarn
	if os.Getenv(envDebug) != "" {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}).WithAttrs([]slog.Attr{slog.String("child", name)}))
	var logConn []replica.Option
	if lu := os.Getenv(envLogU); lu != "" {
		user, rest, _ := strings.Cut(lu, ":")
		pass, inbox, _ := strings.Cut(rest, ":")
		lc := childConnectAs(name+"-log", user+":"+pass, inbox)
		defer lc.Close()
		logConn = append(logConn, replica.WithLogConnection(lc))
	}
	r, err := replica.New(nc, os.Getenv(envStore), append(logConn, replica.WithName(name), replica.WithLease(lease), replica.WithLogger(logger),
		replica.WithRemotePool("remote", 16, poolOf(), jetstream.WithReplicas(3), jetstream.WithLease(time.Second)),
		replica.WithScheduler(coordinator.WithWorkers(4), coordinator.WithFunc("local", local),
			coordinator.WithMiddleware(dispatch)),
		replica.WithNotify(func(n replica.Notice) {
			if n.Quarantined != nil {
				return // logged at Warn: not a change of role
			}
			out.Lock()
			defer out.Unlock()
			pn := notice{Replica: name, Role: n.Role.String(), Term: n.Term, Leader: n.Leader, At: n.At.UnixNano(),
				Tasks: n.Tasks, Restore: n.Restore, Claim: n.Claim, Pools: n.Pools, Scheduler: n.Scheduler, Requests: n.Requests, PID: os.Getpid(), Fenced: errors.Is(n.Err, replica.ErrFenced)}
			if n.Err != nil {
				pn.Err = n.Err.Error()
			}
			enc.Encode(pn)
		}))...)
	if err != nil {
		fmt.Fprintln(os.Stderr, name, "replica.New:", err)
		return 2
	}
	<-stdinClosed().Done()
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	if err := r.Shutdown(ctx); err != nil {
		fmt.Fprintln(os.Stderr, name, "Shutdown:", err)
		return 3
	}
	return 0
}

type workerFunc func(ctx context.Context, j worker.Job) error

func (f workerFunc) Do(ctx context.Context, j worker.Job) error { return f(ctx, j) }

// workerChild serves the remote pool until its standard input closes.
func workerChild() int {
	name := os.Getenv(envName)
	nc := childConnect(name)
	defer nc.Close()
	log := openSideLog(os.Getenv(envLog))
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(time.Now().UnixNano())))
	var mu sync.Mutex
	w := work(log, rng, &mu)
	fmt.Println("ready")
	err := jetstream.Serve(stdinClosed(), nc, poolOf(), map[string]jetstream.Handler{
		"step": func(ctx context.Context, data []byte) ([]byte, error) { return w(ctx, string(data)) },
	}, jetstream.WithWorkerName(name), jetstream.WithConcurrency(4))
	if !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, name, "Serve:", err)
		return 2
	}
	return 0
}

// child is a process started by a test.
type child struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	exit  chan error // Wait's result
	gone  bool       // exited, and exit read
}

// children starts and follows the test's processes: replicas' notices
// come on one channel.
type children struct {
	t       *testing.T
	env     []string // common environment
	notices chan notice
	mu      sync.Mutex
	all     []*child
	leaders map[uint64]notice // every leader's notice waitNotice read, by term
}

func newChildren(t *testing.T, env ...string) *children {
	cs := &children{t: t, env: append(os.Environ(), env...), notices: make(chan notice, 1024)}
	t.Cleanup(cs.stopAll)
	return cs
}

// start starts a child of kind ("replica" or "worker") named name, with
// env added to the common environment.
func (cs *children) start(kind, name string, env ...string) *child {
	t := cs.t
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(append([]string{}, cs.env...), envChild+"="+kind, envName+"="+name), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	c := &child{name: name, cmd: cmd, stdin: stdin, exit: make(chan error, 1)}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			if line == "ready" {
				close(ready)
				continue
			}
			var n notice
			if json.Unmarshal([]byte(line), &n) == nil && n.Role != "" {
				cs.notices <- n
			}
		}
		c.exit <- cmd.Wait()
	}()
	if kind == "worker" {
		recv(t, ready, name+" ready")
	}
	cs.mu.Lock()
	cs.all = append(cs.all, c)
	cs.mu.Unlock()
	return c
}

// kill sends sig to c.
func (c *child) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v to %s: %v", sig, c.name, err)
	}
}

// killed waits for c, sent SIGKILL, to exit.
func (c *child) killed(t *testing.T) {
	t.Helper()
	recv(t, c.exit, c.name+"'s exit")
	c.gone = true
}

// stopAll closes every child's input, which stops it, and kills those
// still running after long.
func (cs *children) stopAll() {
	cs.mu.Lock()
	all := cs.all
	cs.mu.Unlock()
	for _, c := range all {
		if !c.gone {
			c.cmd.Process.Signal(syscall.SIGCONT) // a paused one must run to stop
			c.stdin.Close()
		}
	}
	for _, c := range all {
		if c.gone {
			continue
		}
		select {
		case err := <-c.exit:
			if err != nil {
				cs.t.Errorf("%s exited with %v", c.name, err)
			}
		case <-time.After(long):
			c.cmd.Process.Kill()
			<-c.exit
			cs.t.Errorf("%s did not stop within %v of its stdin closing", c.name, long)
		}
		c.gone = true
	}
}

// waitNotice waits for a notice that f accepts. Every leader's notice it
// reads is kept (leaders), whether f takes it or not.
func (cs *children) waitNotice(f func(notice) bool, what string) notice {
	cs.t.Helper()
	n, ok := cs.waitNoticeFor(f, long)
	if !ok {
		cs.t.Fatalf("no notice of %s after %v", what, long)
	}
	return n
}

// waitNoticeFor is waitNotice, for up to d: false if none came.
func (cs *children) waitNoticeFor(f func(notice) bool, d time.Duration) (notice, bool) {
	cs.mu.Lock()
	for _, n := range cs.leaders {
		if f(n) {
			cs.mu.Unlock()
			return n, true
		}
	}
	cs.mu.Unlock()
	deadline := time.After(d)
	for {
		select {
		case n := <-cs.notices:
			if n.Role == "leader" {
				cs.mu.Lock()
				if cs.leaders == nil {
					cs.leaders = map[uint64]notice{}
				}
				cs.leaders[n.Term] = n
				cs.mu.Unlock()
			}
			if f(n) {
				return n, true
			}
		case <-deadline:
			return notice{}, false
		}
	}
}

// logLine is a line of the side log.
type logLine struct {
	kind    string // "dispatch", "run" or "end"
	id      string
	attempt int
	pid     int
	at      int64
}

// readSideLog reads the side log, in time order (lines of a process are
// in order already; several processes interleave by time).
func readSideLog(t *testing.T, path string) []logLine {
	t.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []logLine
	for line := range strings.Lines(string(data)) {
		w := strings.Fields(line)
		var l logLine
		switch {
		case len(w) == 5 && w[0] == "dispatch":
			l = logLine{kind: w[0], id: w[1]}
			l.attempt, _ = strconv.Atoi(w[2])
			l.pid, _ = strconv.Atoi(w[3])
			l.at, _ = strconv.ParseInt(w[4], 10, 64)
		case len(w) == 4 && (w[0] == "run" || w[0] == "end"):
			l = logLine{kind: w[0], id: w[1]}
			l.pid, _ = strconv.Atoi(w[2])
			l.at, _ = strconv.ParseInt(w[3], 10, 64)
		default:
			continue // a line cut by a kill
		}
		out = append(out, l)
	}
	slices.SortStableFunc(out, func(a, b logLine) int { return cmp.Compare(a.at, b.at) })
	return out
}
