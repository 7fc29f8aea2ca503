package replica_test

// Guarantees an adversarial review of the replicated coordinator found
// broken (issue #22), each restored and checked here on one JetStream
// server (stores with WithReplicas(1)).

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/remote/jetstream"
	"github.com/batonhq/baton/remote/jetstream/replica"
	"github.com/batonhq/baton/worker"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// oneServer starts one JetStream server.
func oneServer(t *testing.T) *server.Server {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(long) {
		t.Fatal("server not ready")
	}
	return srv
}

// conn connects to url, reconnecting for ever; closed at the test's end.
func conn(t *testing.T, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// r1 puts WithReplicas(1) before opts: the log on one server.
func r1(opts ...replica.Option) []replica.Option {
	return append([]replica.Option{replica.WithReplicas(1)}, opts...)
}

// proxy forwards TCP to target; while paused it holds everything in both
// directions, as a partition (or a paused process) does, without closing
// a connection.
type proxy struct {
	l      net.Listener
	target string
	wg     sync.WaitGroup

	mu     sync.Mutex // guards the fields below
	cond   *sync.Cond
	paused bool
	closed bool
	conns  []net.Conn // forwarded now (reset closes and forgets them)
	all    []net.Conn // every connection it forwarded: close closes them all
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, target: target}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.all = append(p.all, c, u)
			p.mu.Unlock()
			p.wg.Go(func() { p.pipe(c, u) })
			p.wg.Go(func() { p.pipe(u, c) })
		}
	})
	t.Cleanup(p.close)
	return p
}

func (p *proxy) pipe(from, to net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.paused && !p.closed {
				p.cond.Wait()
			}
			closed := p.closed
			p.mu.Unlock()
			if closed {
				return
			}
			if _, err := to.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			to.Close()
			return
		}
	}
}

func (p *proxy) setPaused(b bool) {
	p.mu.Lock()
	p.paused = b
	p.cond.Broadcast()
	p.mu.Unlock()
}

// reset closes the connections it forwards now, as a peer's reset
// would; new ones are forwarded again.
func (p *proxy) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	for _, c := range p.all {
		c.Close()
	}
	p.mu.Unlock()
	p.l.Close()
	p.wg.Wait()
}

func (p *proxy) url() string { return "nats://" + p.l.Addr().String() }

// A stray message on the log's subjects (baton.S.log.other) is not
// stored: the stream takes only the four kinds this package writes, so
// it neither moves the log past the leader's expected last sequence (a
// fence) nor reaches a standby's view; the leader goes on leading and
// the standby standing by.
func TestStrayLogMessageIsNotStored(t *testing.T) {
	srv := oneServer(t)
	funcs := replica.WithScheduler(coordinator.WithFunc("q", func(ctx context.Context, p []byte) error { return nil }))
	na, aCh := notices()
	a := startReplica(t, conn(t, srv.ClientURL()), "stray", "a", r1(funcs, na)...)
	lead := waitRole(t, aCh, replica.Leader)
	nb, bCh := notices()
	startReplica(t, conn(t, srv.ClientURL()), "stray", "b", r1(funcs, nb)...)
	waitRole(t, bCh, replica.Standby)

	nc := conn(t, srv.ClientURL())
	if _, err := nc.Request("baton.stray.log.other", []byte("hello"), 5*time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("a publish on baton.stray.log.other = %v; want %v (no stream takes it)", err, nats.ErrNoResponders)
	}
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	if err := a.Submit(ctx, coordinator.Task{ID: "x", Func: "q"}); err != nil {
		t.Fatalf("Submit after the stray publish = %v", err)
	}
	if err := a.WaitTasks(ctx, "x"); err != nil {
		t.Fatalf("WaitTasks(x) = %v", err)
	}
	if _, term, err := a.Leader(ctx); err != nil || term != lead.Term {
		t.Errorf("Leader() = term %d, %v; want %d, nil", term, err, lead.Term)
	}
	select {
	case n := <-aCh:
		t.Errorf("a's role changed: %v (%v)", n.Role, n.Err)
	case n := <-bCh:
		t.Errorf("b's role changed: %v (%v)", n.Role, n.Err)
	default:
	}
}

// replica.New checks the scheduler's options as coordinator.New would,
// and refuses them with ErrInvalidOption: a replica whose scheduler
// cannot start never claims the store.
func TestNewChecksSchedulerOptions(t *testing.T) {
	srv := oneServer(t)
	nc := conn(t, srv.ClientURL())
	for _, c := range []struct {
		name string
		opts []replica.Option
	}{
		{"WithWorkers(-1)", []replica.Option{replica.WithScheduler(coordinator.WithWorkers(-1))}},
		{"a nil worker", []replica.Option{replica.WithScheduler(coordinator.WithPool("p", 1, nil))}},
		{"a local pool named like a remote one", []replica.Option{
			replica.WithScheduler(coordinator.WithPool("rp", 1, worker.Func{})),
			replica.WithRemotePool("rp", 2, "wp", jetstream.WithReplicas(1))}},
		{"two remote pools of one name", []replica.Option{
			replica.WithRemotePool("rp", 2, "wp", jetstream.WithReplicas(1)),
			replica.WithRemotePool("rp", 2, "wq", jetstream.WithReplicas(1))}},
		{"a rate limit of no pool", []replica.Option{replica.WithScheduler(coordinator.WithRateLimit("nope", 1, 1))}},
	} {
		r, err := replica.New(nc, "badopt", r1(c.opts...)...)
		if !errors.Is(err, replica.ErrInvalidOption) || !errors.Is(err, coordinator.ErrInvalidOption) {
			t.Errorf("%s: New = %v; want an error wrapping replica.ErrInvalidOption and coordinator.ErrInvalidOption", c.name, err)
		}
		if r != nil {
			ctx, cancel := context.WithTimeout(context.Background(), long)
			r.Shutdown(ctx)
			cancel()
		}
	}
	// Two remote pools of one JetStream pool would share its results
	// consumer, each taking some of the other's outcomes.
	r, err := replica.New(nc, "badopt", r1(replica.WithRemotePool("ra", 2, "wp", jetstream.WithReplicas(1)),
		replica.WithRemotePool("rb", 2, "wp", jetstream.WithReplicas(1)))...)
	if !errors.Is(err, replica.ErrInvalidOption) {
		t.Errorf("two remote pools of one JetStream pool: New = %v; want ErrInvalidOption", err)
	}
	if r != nil {
		ctx, cancel := context.WithTimeout(context.Background(), long)
		r.Shutdown(ctx)
		cancel()
	}
}

// A replica whose scheduler fails to start after it claimed the store
// (here a middleware that returns no Worker, which only coordinator.New
// finds out) resigns at once: it does not keep the store with its signs
// of life, and a good replica takes over.
func TestReplicaThatCannotStartResigns(t *testing.T) {
	srv := oneServer(t)
	broken := replica.WithScheduler(coordinator.WithMiddleware(func(pool string, next worker.Worker) worker.Worker { return nil }))
	nbad, badCh := notices()
	startReplica(t, conn(t, srv.ClientURL()), "zombie", "bad", r1(broken, nbad)...)
	for {
		n := recv(t, badCh, "bad's notice")
		if n.Role == replica.Leader {
			t.Fatal("the replica whose scheduler cannot start says it leads")
		}
		if n.Err != nil {
			if !errors.Is(n.Err, coordinator.ErrInvalidOption) {
				t.Errorf("bad's notice: %v; want coordinator.ErrInvalidOption", n.Err)
			}
			break
		}
	}
	ngood, goodCh := notices()
	good := startReplica(t, conn(t, srv.ClientURL()), "zombie", "good", r1(ngood)...)
	waitRole(t, goodCh, replica.Leader)
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	if name, _, err := good.Leader(ctx); err != nil || name != "good" {
		t.Errorf("Leader() = %q, %v; want good", name, err)
	}
}

// A leader cut off without its connection closing (paused, partitioned)
// keeps its subscription on the server: a request sent to its term is
// neither answered nor refused. A takeover redirects the calls in flight
// to the new leader (those that may be asked twice: WaitTasks here), and
// new calls go to it at once, through a Client that knew the old one
// and through the new leader's own Client.
func TestTakeoverRedirectsCallsInFlight(t *testing.T) {
	srv := oneServer(t)
	px := newProxy(t, strings.TrimPrefix(srv.ClientURL(), "nats://"))
	release := make(chan struct{})
	funcs := replica.WithScheduler(coordinator.WithFunc("hold", func(ctx context.Context, p []byte) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}))
	na, aCh := notices()
	startReplica(t, conn(t, px.url()), "part", "a", r1(funcs, na, replica.WithStopWait(time.Second))...)
	waitRole(t, aCh, replica.Leader)
	nb, bCh := notices()
	b := startReplica(t, conn(t, srv.ClientURL()), "part", "b", r1(funcs, nb)...)
	waitRole(t, bCh, replica.Standby)
	cl, err := replica.NewClient(conn(t, srv.ClientURL()), "part")
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	if err := cl.Submit(ctx, coordinator.Task{ID: "w", Func: "hold", Retry: coordinator.RetryPolicy{MaxAttempts: 3}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Info(ctx, "w"); err != nil { // b's Client knows a's term too
		t.Fatal(err)
	}
	px.setPaused(true) // before or after the WaitTasks reaches a: it goes to a's term either way
	waited := make(chan error, 1)
	go func() { waited <- cl.WaitTasks(ctx, "w") }()
	waitRole(t, bCh, replica.Leader)
	close(release) // w, restored interrupted on b, runs again and succeeds

	// A call still sent to a's term would wait until its context ends.
	call := func(what string, f func(ctx context.Context) error) {
		t.Helper()
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		defer ccancel()
		if err := f(cctx); err != nil {
			t.Errorf("%s after the takeover = %v; want nil (sent to the new leader)", what, err)
		}
	}
	call("the new leader's own Info", func(ctx context.Context) error { _, _, err := b.Info(ctx, "w"); return err })
	call("Info through the Client that knew a", func(ctx context.Context) error { _, _, err := cl.Info(ctx, "w"); return err })
	if err := recv(t, waited, "the WaitTasks in flight"); err != nil {
		t.Errorf("WaitTasks(w) in flight across the takeover = %v; want nil", err)
	}

	px.setPaused(false)
	for { // a finds out it was fenced and stands by
		if n := recv(t, aCh, "a's notice"); n.Role == replica.Standby {
			if !errors.Is(n.Err, replica.ErrFenced) {
				t.Errorf("a stands by for %v; want ErrFenced", n.Err)
			}
			break
		}
	}
}

// A cut-off leader that comes back with a Cancel in hand cannot commit
// it, and its remote pool leaves the attempt alone: the attempt ends
// with cause coordinator.ErrClosed (a failed commit's), not the
// ErrCancelled decided, so that the queued work the new leader resumed
// is not deleted, and the new leader finishes the task.
func TestFencedCancelLeavesRemoteAttempts(t *testing.T) {
	srv := oneServer(t)
	px := newProxy(t, strings.TrimPrefix(srv.ClientURL(), "nats://"))
	release := make(chan struct{})
	started := make(chan string, 16)
	sctx, scancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- jetstream.Serve(sctx, conn(t, srv.ClientURL()), "wp", map[string]jetstream.Handler{
			"h": func(ctx context.Context, data []byte) ([]byte, error) {
				started <- string(data)
				select {
				case <-release:
					return data, nil
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				}
			}}, jetstream.WithConcurrency(1)) // x1 holds the worker: x2 waits in the queue
	}()
	defer func() { scancel(); <-served }()
	pool := replica.WithRemotePool("rp", 4, "wp", jetstream.WithReplicas(1))
	na, aCh := notices()
	a := startReplica(t, conn(t, px.url()), "stalecancel", "a", r1(pool, na, replica.WithStopWait(time.Second))...)
	waitRole(t, aCh, replica.Leader)
	nb, bCh := notices()
	b := startReplica(t, conn(t, srv.ClientURL()), "stalecancel", "b", r1(pool, nb)...)
	waitRole(t, bCh, replica.Standby)
	cl, err := replica.NewClient(conn(t, srv.ClientURL()), "stalecancel")
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	task := func(id string) coordinator.Task {
		return coordinator.Task{ID: id, Pool: "rp", Payload: jetstream.Payload{Kind: "h", Data: []byte(id)}.Encode()}
	}
	x2Started := make(chan struct{})
	var once sync.Once
	unsub := a.Scheduler().Subscribe(func(ev coordinator.Event) {
		if ev.Kind == coordinator.EventStarted && ev.TaskID == "x2" {
			once.Do(func() { close(x2Started) })
		}
	})
	defer unsub()
	if err := cl.Submit(ctx, task("x1")); err != nil {
		t.Fatal(err)
	}
	recv(t, started, "x1's start")
	if err := cl.Submit(ctx, task("x2")); err != nil {
		t.Fatal(err)
	}
	recv(t, x2Started, "x2 handed to a's pool")
	px.setPaused(true)
	// A Client's Cancel as it leaves for a's term, cut off: a takes it
	// when it resumes. (Sent by a Client's call, it could also leave
	// after b leads, and reach b: a Cancel that b would rightly apply.)
	_, term, err := cl.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	body, err := replica.CancelRequest("x2")
	if err != nil {
		t.Fatal(err)
	}
	cnc := conn(t, srv.ClientURL())
	if err := cnc.PublishRequest(replica.APISubject("stalecancel", term), cnc.NewInbox(), body); err != nil {
		t.Fatal(err)
	}
	if err := cnc.Flush(); err != nil {
		t.Fatal(err)
	}
	waitRole(t, bCh, replica.Leader)
	px.setPaused(false)
	for { // a takes the Cancel, its commit is refused: fenced
		if n := recv(t, aCh, "a's notice"); n.Role == replica.Standby {
			break
		}
	}
	close(release)
	if err := b.WaitTasks(ctx, "x1", "x2"); err != nil {
		t.Errorf("WaitTasks(x1, x2) on the new leader = %v; want nil: the deposed leader's uncommitted Cancel reached the worker", err)
	}
}

// A task's flow-control fields travel through a Client: Slots (more
// than its pool has is refused, as by a local scheduler) and Key (under
// a limit of 1, k2 waits for k1 while a task of lower priority and no
// key takes the free worker); TaskInfo.When comes back.
func TestFlowControlFieldsTravel(t *testing.T) {
	srv := oneServer(t)
	k1Running, k2Running := make(chan struct{}), make(chan struct{})
	releaseK1 := make(chan struct{})
	funcs := replica.WithScheduler(coordinator.WithWorkers(2), coordinator.WithKeys(coordinator.KeyPolicy{Limit: 1}),
		coordinator.WithFunc("hold", func(ctx context.Context, p []byte) error {
			switch string(p) {
			case "k1":
				close(k1Running)
				<-releaseK1
			case "k2":
				close(k2Running)
			}
			return nil
		}))
	nl, ch := notices()
	a := startReplica(t, conn(t, srv.ClientURL()), "keys", "a", r1(funcs, nl)...)
	waitRole(t, ch, replica.Leader)
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()

	if err := a.Submit(ctx, coordinator.Task{ID: "s", Func: "hold", Slots: 3}); !errors.Is(err, coordinator.ErrInvalidTask) {
		t.Errorf("Submit(Slots 3 on a pool of 2) = %v; want ErrInvalidTask, as a local scheduler says", err)
	}
	if err := a.Submit(ctx, coordinator.Task{ID: "k1", Func: "hold", Key: "k", Payload: []byte("k1")}); err != nil {
		t.Fatal(err)
	}
	recv(t, k1Running, "k1's start") // one worker left
	// Without its key, k2 (the higher priority) would take the free
	// worker first, and start before free ends.
	if err := a.Submit(ctx, coordinator.Task{ID: "k2", Func: "hold", Key: "k", Priority: 10, Payload: []byte("k2"), When: coordinator.AllDone},
		coordinator.Task{ID: "free", Func: "hold"}); err != nil {
		t.Fatal(err)
	}
	if err := a.WaitTasks(ctx, "free"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-k2Running:
		t.Error("k2 ran beside k1: Task.Key was lost on the way")
	default:
	}
	if ti, _, err := a.Info(ctx, "k2"); err != nil || ti.When != coordinator.AllDone {
		t.Errorf("Info(k2) = When %v, %v; want %v", ti.When, err, coordinator.AllDone)
	}
	close(releaseK1)
	if err := a.WaitTasks(ctx, "k1", "k2"); err != nil {
		t.Fatal(err)
	}
}

// Pause and Resume reach the leader through a Client; Pause of a pool
// the leader was not given is ErrUnknownPool.
func TestPauseThroughClient(t *testing.T) {
	srv := oneServer(t)
	funcs := replica.WithScheduler(coordinator.WithFunc("q", func(ctx context.Context, p []byte) error { return nil }))
	nl, ch := notices()
	a := startReplica(t, conn(t, srv.ClientURL()), "pause", "a", r1(funcs, nl)...)
	waitRole(t, ch, replica.Leader)
	cl, err := replica.NewClient(conn(t, srv.ClientURL()), "pause")
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	if err := cl.Pause(ctx, ""); err != nil {
		t.Fatalf("Pause = %v", err)
	}
	if !a.Scheduler().Paused("") {
		t.Error("the leader's default pool is not paused after Pause returned")
	}
	if err := cl.Pause(ctx, "nope"); !errors.Is(err, coordinator.ErrUnknownPool) {
		t.Errorf("Pause(nope) = %v; want ErrUnknownPool", err)
	}
	if err := cl.Resume(ctx, ""); err != nil {
		t.Fatalf("Resume = %v", err)
	}
	if a.Scheduler().Paused("") {
		t.Error("the leader's default pool is paused after Resume returned")
	}
}

// A WaitTasks or Wait whose caller gave up does not hold a handler on the
// leader until the tasks end: the caller's time left travels with the
// request, and a Client whose caller gave up says so.
func TestAbandonedWaitEndsOnTheLeader(t *testing.T) {
	srv := oneServer(t)
	funcs := replica.WithScheduler(coordinator.WithFunc("block", func(ctx context.Context, p []byte) error { <-ctx.Done(); return ctx.Err() }))
	nl, ch := notices()
	a := startReplica(t, conn(t, srv.ClientURL()), "leak", "a", r1(funcs, nl)...)
	waitRole(t, ch, replica.Leader)
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	if err := a.Submit(ctx, coordinator.Task{ID: "blk", Func: "block"}); err != nil {
		t.Fatal(err)
	}
	cl, err := replica.NewClient(conn(t, srv.ClientURL()), "leak")
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for range 50 {
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Millisecond) // a deadline
		if err := cl.WaitTasks(wctx, "blk"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitTasks = %v; want DeadlineExceeded", err)
		}
		wcancel()
		wctx, wcancel = context.WithCancel(ctx) // no deadline: given up
		waited := make(chan error, 1)
		go func() { waited <- cl.Wait(wctx) }()
		wcancel()
		if err := recv(t, waited, "Wait"); !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait = %v; want Canceled", err)
		}
	}
	if err := a.Handlers(ctx, 0); err != nil {
		t.Errorf("the leader's request handlers for abandoned waits still run: %v", err)
	}
	a.Scheduler().Cancel("blk")
}

// An answer larger than the server's max payload is refused by the
// connection: the leader says so (ErrAnswerTooLarge) rather than leave
// the caller waiting. A batch larger than the max payload fails at once
// (nats.ErrMaxPayload).
func TestOversizedAnswerFailsClearly(t *testing.T) {
	srv := oneServer(t)
	big := strings.Repeat("x", 800_000) // 1.07 MB in JSON's base64: over the default 1 MiB
	funcs := replica.WithScheduler(coordinator.WithFunc("big", func(ctx context.Context, p []byte) error {
		return coordinator.SetResult(ctx, []byte(big))
	}))
	nl, ch := notices()
	a := startReplica(t, conn(t, srv.ClientURL()), "big", "a", r1(funcs, nl)...)
	waitRole(t, ch, replica.Leader)
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	if err := a.Submit(ctx, coordinator.Task{ID: "b", Func: "big"}); err != nil {
		t.Fatal(err)
	}
	if err := a.WaitTasks(ctx, "b"); err != nil {
		t.Fatalf("WaitTasks(b) = %v", err)
	}
	if _, _, err := a.Info(ctx, "b"); !errors.Is(err, replica.ErrAnswerTooLarge) {
		t.Errorf("Info of a task with an 800 KB result = %v; want ErrAnswerTooLarge", err)
	}
	err := a.Submit(ctx, coordinator.Task{ID: "p", Func: "big", Payload: []byte(big)})
	if !errors.Is(err, nats.ErrMaxPayload) {
		t.Errorf("Submit of an 800 KB payload = %v; want nats.ErrMaxPayload", err)
	}
}
