package jetstream_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	bjs "github.com/batonhq/baton/remote/jetstream"
	"github.com/batonhq/baton/worker"
	"github.com/batonhq/baton/worker/workertest"
	"github.com/benbjohnson/clock"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
)

func echo(_ context.Context, data []byte) ([]byte, error) { return data, nil }

// block runs until its context ends; started receives the attempt's task
// ID, stopped the context's cause.
func block(started chan<- string, stopped chan<- error) bjs.Handler {
	return func(ctx context.Context, _ []byte) ([]byte, error) {
		a, _ := bjs.AttemptOf(ctx)
		started <- a.Task
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return nil, context.Cause(ctx)
	}
}

func task(id, kind string, deps ...string) coordinator.Task {
	return coordinator.Task{ID: id, Pool: "remote", Deps: deps, Payload: bjs.Payload{Kind: kind, Data: []byte(id)}}
}

// A graph runs across three worker processes: the three "meet" tasks can
// only finish while all three run at once, and each process runs one
// handler at a time.
func TestGraphAcrossThreeProcesses(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	pool := newPool(t, nc, "graph", bjs.WithLease(2*time.Second))
	startWorkers(t, srv.ClientURL(), "graph", 3)
	s := newScheduler(t, coordinator.WithPool("remote", 8, pool))
	tasks := []coordinator.Task{task("meet-1", "meet"), task("meet-2", "meet"), task("meet-3", "meet")}
	for i := range 6 {
		tasks = append(tasks, task(fmt.Sprintf("echo-%d", i), "echo", "meet-1", "meet-2", "meet-3"))
	}
	tasks = append(tasks, task("join", "echo", "echo-0", "echo-1", "echo-2", "echo-3", "echo-4", "echo-5"))
	if err := s.Submit(tasks...); err != nil {
		t.Fatalf("Submit = %v", err)
	}
	wait(t, s)
	workers := map[string]bool{}
	for _, id := range []string{"meet-1", "meet-2", "meet-3"} {
		workers[result(t, s, id).Worker] = true
	}
	if len(workers) != 3 {
		t.Fatalf("the meet tasks ran on %v; want three processes", workers)
	}
	for _, tk := range tasks[3:] {
		if r := result(t, s, tk.ID); string(r.Data) != tk.ID {
			t.Errorf("Result(%s).Data = %q; want %q", tk.ID, r.Data, tk.ID)
		}
	}
	if st := pool.Stats(); st.Outcomes != len(tasks) {
		t.Errorf("Stats().Outcomes = %d; want %d (one per attempt)", st.Outcomes, len(tasks))
	}
}

// A worker killed with SIGKILL mid-attempt: once its lease expires, the
// same attempt is delivered to another process and finishes there, and
// the coordinator records one outcome for it.
func TestKilledWorkerAttemptFinishesElsewhere(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	pool := newPool(t, nc, "kill", bjs.WithLease(time.Second))
	started := subscribe(t, nc, "test.killme")
	procs := startWorkers(t, srv.ClientURL(), "kill", 3)
	s := newScheduler(t, coordinator.WithPool("remote", 4, pool))
	if err := s.Submit(task("victim", "killme")); err != nil {
		t.Fatalf("Submit = %v", err)
	}
	var where struct {
		PID    int    `json:"pid"`
		Worker string `json:"worker"`
	}
	if err := json.Unmarshal(recv(t, started, "first delivery").Data, &where); err != nil {
		t.Fatal(err)
	}
	killed := false
	for _, p := range procs {
		if p.cmd.Process.Pid == where.PID {
			if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatalf("SIGKILL %s: %v", p.name, err)
			}
			killed = true
		}
	}
	if !killed {
		t.Fatalf("no worker process has pid %d", where.PID)
	}
	wait(t, s)
	r := result(t, s, "victim")
	if r.Worker == where.Worker || r.Delivery != 2 || string(r.Data) != "survived" {
		t.Fatalf("Result = {Worker %s, Delivery %d, Data %q}; want another worker than %s, delivery 2, survived",
			r.Worker, r.Delivery, r.Data, where.Worker)
	}
	if ti := info(t, s, "victim"); ti.Attempts != 1 {
		t.Errorf("Attempts = %d; want 1: a redelivery is the same attempt", ti.Attempts)
	}
	if st := pool.Stats(); st.Outcomes != 1 || st.Redelivered != 1 {
		t.Errorf("Stats() = %+v; want 1 outcome, redelivered", st)
	}
}

// The server restarts (same storage, same port) while a graph runs: the
// attempt running at the time reports after the restart, the rest of the
// graph is published after it, and everything succeeds once.
func TestServerRestartMidGraph(t *testing.T) {
	dir := t.TempDir()
	srv := startServer(t, dir, -1)
	port := serverPort(srv)
	coordConn := connect(t, srv.ClientURL())
	workConn := connect(t, srv.ClientURL())
	pool := newPool(t, coordConn, "restart")
	gateStarted, release := make(chan string, 1), make(chan struct{})
	serve(t, workConn, "restart", map[string]bjs.Handler{
		"echo": echo,
		"gate": func(ctx context.Context, data []byte) ([]byte, error) {
			gateStarted <- "gate"
			select {
			case <-release:
				return data, nil
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		},
	}, bjs.WithConcurrency(4))
	s := newScheduler(t, coordinator.WithPool("remote", 4, pool))
	tasks := []coordinator.Task{task("a", "echo"), task("gate", "gate", "a"),
		task("c", "echo", "gate"), task("d", "echo", "gate"), task("e", "echo", "c", "d")}
	if err := s.Submit(tasks...); err != nil {
		t.Fatalf("Submit = %v", err)
	}
	recv(t, gateStarted, "gate started")
	down := coordConn.StatusChanged(nats.RECONNECTING, nats.DISCONNECTED)
	stopServer(srv)
	recv(t, down, "disconnect")
	coordConn.RemoveStatusListener(down)
	up := coordConn.StatusChanged(nats.CONNECTED)
	startServer(t, dir, port)
	recv(t, up, "reconnect")
	coordConn.RemoveStatusListener(up)
	close(release)
	wait(t, s)
	for _, tk := range tasks {
		result(t, s, tk.ID)
		if ti := info(t, s, tk.ID); ti.Attempts != 1 {
			t.Errorf("Info(%s).Attempts = %d; want 1", tk.ID, ti.Attempts)
		}
	}
	if st := pool.Stats(); st.Outcomes != len(tasks) {
		t.Errorf("Stats() = %+v; want %d outcomes", st, len(tasks))
	}
}

// Cancel of a task whose attempt is queued (no worker yet) removes the
// attempt from the stream; a worker that starts later never runs it.
func TestCancelQueuedAttempt(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	pool := newPool(t, nc, "queued")
	published := subscribe(t, nc, "baton.queued.attempts")
	s := newScheduler(t, coordinator.WithPool("remote", 2, pool))
	if err := s.Submit(task("q", "echo")); err != nil {
		t.Fatalf("Submit = %v", err)
	}
	recv(t, published, "attempt published")
	if !s.Cancel("q") {
		t.Fatalf("Cancel(q) = false")
	}
	wait(t, s)
	if ti := info(t, s, "q"); ti.Status != coordinator.Cancelled {
		t.Fatalf("Status = %v; want Cancelled", ti.Status)
	}
	js, _ := njs.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	st, err := js.Stream(ctx, "BATON_queued_ATTEMPTS")
	if err != nil {
		t.Fatal(err)
	}
	if si, err := st.Info(ctx); err != nil || si.State.Msgs != 0 {
		t.Fatalf("attempts stream after Cancel: %d messages (err %v); want 0", si.State.Msgs, err)
	}
}

// Cancel, Timeout and Shutdown reach a running remote handler's context.
func TestStopRunningAttempt(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	pool := newPool(t, nc, "stop")
	started, stopped := make(chan string, 4), make(chan error, 4)
	serve(t, nc, "stop", map[string]bjs.Handler{"block": block(started, stopped)})

	t.Run("Cancel", func(t *testing.T) {
		s := newScheduler(t, coordinator.WithPool("remote", 2, pool))
		if err := s.Submit(task("c", "block")); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		recv(t, started, "handler start")
		s.Cancel("c")
		if err := recv(t, stopped, "handler stop"); !errors.Is(err, bjs.ErrStopped) {
			t.Fatalf("handler's cause = %v; want ErrStopped", err)
		}
		wait(t, s)
		if ti := info(t, s, "c"); ti.Status != coordinator.Cancelled {
			t.Fatalf("Status = %v; want Cancelled", ti.Status)
		}
	})
	t.Run("Timeout", func(t *testing.T) {
		// The coordinator's clock is a mock set to the wall clock, so its
		// timeout cannot fire before a worker has taken the attempt,
		// however slow this machine; the worker reads the same deadline
		// on its real clock.
		clk := clock.NewMock()
		clk.Set(time.Now())
		s := newScheduler(t, coordinator.WithPool("remote", 2, pool), coordinator.WithClock(clk))
		tk := task("t", "block")
		tk.Timeout = 300 * time.Millisecond
		if err := s.Submit(tk); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		recv(t, started, "handler start")
		// The attempt's timer is armed before Do is called, so the advance
		// fires it. The handler's own deadline or the coordinator's stop:
		// whichever comes first ends it.
		clk.Add(tk.Timeout)
		if err := recv(t, stopped, "handler stop"); !errors.Is(err, bjs.ErrStopped) && !errors.Is(err, worker.ErrTimeout) {
			t.Fatalf("handler's cause = %v; want ErrStopped or ErrTimeout", err)
		}
		wait(t, s)
		if ti := info(t, s, "t"); ti.Status != coordinator.Failed || !errors.Is(ti.Err, worker.ErrTimeout) {
			t.Fatalf("Info = %v, %v; want Failed with ErrTimeout", ti.Status, ti.Err)
		}
	})
	t.Run("Shutdown", func(t *testing.T) {
		s, err := coordinator.New(coordinator.WithPool("remote", 2, pool))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Submit(task("s", "block")); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		recv(t, started, "handler start")
		ctx, cancel := context.WithTimeout(context.Background(), long)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Fatalf("Shutdown = %v", err)
		}
		if err := recv(t, stopped, "handler stop"); !errors.Is(err, bjs.ErrStopped) {
			t.Fatalf("handler's cause = %v; want ErrStopped", err)
		}
	})
}

// Handler errors, panics and unknown kinds come back as typed errors.
func TestRemoteFailures(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	pool := newPool(t, nc, "fail")
	serve(t, nc, "fail", map[string]bjs.Handler{
		"fail":  func(context.Context, []byte) ([]byte, error) { return nil, errors.New("boom") },
		"panic": func(context.Context, []byte) ([]byte, error) { panic("kaboom") },
	}, bjs.WithWorkerName("w1"))
	s := newScheduler(t, coordinator.WithPool("remote", 2, pool))
	if err := s.Submit(task("f", "fail"), task("p", "panic"), task("u", "unknown")); err != nil {
		t.Fatalf("Submit = %v", err)
	}
	wait(t, s)
	var re *bjs.RemoteError
	if err := info(t, s, "f").Err; !errors.As(err, &re) || re.Message != "boom" || re.Worker != "w1" || re.Task != "f" || re.Panic {
		t.Errorf("f: Err = %v; want a RemoteError boom from w1", err)
	}
	var pe *worker.PanicError
	err := info(t, s, "p").Err
	if !errors.As(err, &pe) || !errors.As(err, &re) || !re.Panic || re.Message != "kaboom" || !strings.Contains(string(pe.Stack), "panic") {
		t.Errorf("p: Err = %v; want a PanicError holding a RemoteError with the remote stack", err)
	}
	if err := info(t, s, "u").Err; !errors.Is(err, bjs.ErrUnknownKind) {
		t.Errorf("u: Err = %v; want ErrUnknownKind", err)
	}
}

// Bad payloads are refused by Validate at Submit; nothing is published.
func TestValidateRefusesBadPayloads(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	pool := newPool(t, nc, "valid", bjs.WithKinds("echo"))
	s := newScheduler(t, coordinator.WithPool("remote", 2, pool))
	big := make([]byte, nc.MaxPayload())
	for _, tc := range []struct {
		name string
		t    coordinator.Task
		want error
	}{
		{"no payload", coordinator.Task{ID: "a", Pool: "remote"}, bjs.ErrBadPayload},
		{"wrong type", coordinator.Task{ID: "b", Pool: "remote", Payload: "echo"}, bjs.ErrBadPayload},
		{"nil pointer", coordinator.Task{ID: "c", Pool: "remote", Payload: (*bjs.Payload)(nil)}, bjs.ErrBadPayload},
		{"no kind", coordinator.Task{ID: "d", Pool: "remote", Payload: bjs.Payload{}}, bjs.ErrBadPayload},
		{"unknown kind", coordinator.Task{ID: "e", Pool: "remote", Payload: bjs.Payload{Kind: "nope"}}, bjs.ErrUnknownKind},
		{"too big", coordinator.Task{ID: "f", Pool: "remote", Payload: bjs.Payload{Kind: "echo", Data: big}}, bjs.ErrBadPayload},
		{"line break in ID", coordinator.Task{ID: "g\nh", Pool: "remote", Payload: bjs.Payload{Kind: "echo"}}, bjs.ErrBadPayload},
		{"huge ID", coordinator.Task{ID: strings.Repeat("i", 5000), Pool: "remote", Payload: bjs.Payload{Kind: "echo"}}, bjs.ErrBadPayload},
		{"space after ID", coordinator.Task{ID: "i ", Pool: "remote", Payload: bjs.Payload{Kind: "echo"}}, bjs.ErrBadPayload}, // NATS trims header values
		{"tab before kind", coordinator.Task{ID: "j", Pool: "remote", Payload: bjs.Payload{Kind: "\techo"}}, bjs.ErrBadPayload},
	} {
		err := s.Submit(tc.t)
		if !errors.Is(err, coordinator.ErrInvalidTask) || !errors.Is(err, tc.want) {
			t.Errorf("%s: Submit = %v; want ErrInvalidTask and %v", tc.name, err, tc.want)
		}
	}
	if err := pool.Validate(worker.Job{ID: "ok", Payload: &bjs.Payload{Kind: "echo"}}); err != nil {
		t.Errorf("Validate(*Payload) = %v; want nil", err)
	}
	if st := pool.Stats(); st.Published != 0 {
		t.Fatalf("Stats().Published = %d; want 0", st.Published)
	}
}

// An outcome published again for an attempt already settled (a worker
// that ran it after a lease expiry, or a forged one) is ignored.
func TestDuplicateOutcomeIgnored(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	logs := make(chan string, 64)
	pool := newPool(t, nc, "dup", bjs.WithLogger(slogTo(logs)), bjs.WithInstance("coord1"))
	serve(t, nc, "dup", map[string]bjs.Handler{"echo": echo}, bjs.WithWorkerName("w1"))
	s := newScheduler(t, coordinator.WithPool("remote", 2, pool))
	if err := s.Submit(task("x", "echo")); err != nil {
		t.Fatalf("Submit = %v", err)
	}
	wait(t, s)
	// The second outcome of attempt 1 of round 1 of x: a failure.
	forged := bjs.EncodeOutcome("coord1/1/1/x", "error", "w2", 2, "late")
	js, _ := njs.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	if _, err := js.Publish(ctx, "baton.dup.results.coord1.forged", forged); err != nil {
		t.Fatal(err)
	}
	waitLog(t, logs, "jetstream: duplicate outcome ignored")
	if r := result(t, s, "x"); r.Worker != "w1" || string(r.Data) != "x" {
		t.Errorf("Result = %+v; want w1's", r)
	}
	if st := pool.Stats(); st.Outcomes != 1 || st.Duplicates != 1 {
		t.Errorf("Stats() = %+v; want 1 outcome and 1 duplicate", st)
	}
}

// An attempt that every worker took and abandoned (no ack, no outcome) as
// often as WithMaxDeliver allows fails with ErrMaxDeliveries.
func TestMaxDeliveries(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	pool := newPool(t, nc, "maxd", bjs.WithMaxDeliver(1), bjs.WithLease(500*time.Millisecond))
	done := make(chan error, 1)
	go func() {
		done <- pool.Do(context.Background(), worker.Job{ID: "lost", Attempt: 1, Round: 1, Payload: bjs.Payload{Kind: "echo"}})
	}()
	// A "worker" that takes the attempt and dies with it: it never acks.
	js, _ := njs.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	cons, err := js.Consumer(ctx, "BATON_maxd_ATTEMPTS", "workers")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cons.Next(njs.FetchMaxWait(long)); err != nil {
		t.Fatalf("Next = %v", err)
	}
	if err := recv(t, done, "Do's return"); !errors.Is(err, bjs.ErrMaxDeliveries) {
		t.Fatalf("Do = %v; want ErrMaxDeliveries", err)
	}
	// The work queue would keep the message for ever: Do removed it.
	st, err := js.Stream(ctx, "BATON_maxd_ATTEMPTS")
	if err != nil {
		t.Fatal(err)
	}
	if si, err := st.Info(ctx); err != nil || si.State.Msgs != 0 {
		t.Fatalf("attempts stream after ErrMaxDeliveries: %d messages (err %v); want 0", si.State.Msgs, err)
	}
}

// A worker that published an attempt's outcome and whose ack was lost
// (its connection, or the server leading the work consumer, gone): Do
// applies the outcome and takes the attempt out of the work stream
// before it returns, so that JetStream delivers it to no worker again
// when its lease expires: it would run again after the coordinator
// committed its end, and after what waits for that end had started.
func TestAppliedAttemptLeavesTheWorkStream(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	pool := newPool(t, nc, "lostack", bjs.WithInstance("coord"))
	done := make(chan error, 1)
	go func() {
		done <- pool.Do(context.Background(), worker.Job{ID: "x", Attempt: 1, Round: 1, Payload: bjs.Payload{Kind: "echo"}})
	}()
	js, _ := njs.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	cons, err := js.Consumer(ctx, "BATON_lostack_ATTEMPTS", "workers")
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Next(njs.FetchMaxWait(long))
	if err != nil {
		t.Fatalf("Next = %v", err)
	}
	// The "worker" publishes the outcome; its ack is lost: it sends none.
	outcome := bjs.EncodeOutcome(m.Headers().Get(nats.MsgIdHdr), "ok", "w1", 1, "")
	if _, err := js.Publish(ctx, "baton.lostack.results.coord.x", outcome); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, done, "Do's return"); err != nil {
		t.Fatalf("Do = %v; want nil", err)
	}
	st, err := js.Stream(ctx, "BATON_lostack_ATTEMPTS")
	if err != nil {
		t.Fatal(err)
	}
	if si, err := st.Info(ctx); err != nil || si.State.Msgs != 0 {
		t.Fatalf("attempts stream once Do returned the outcome: %d messages (err %v); want 0: the attempt would be delivered again", si.State.Msgs, err)
	}
	// The worker's ack, late, finds nothing to acknowledge.
	_ = m.Ack()
	if st := pool.Stats(); st.Outcomes != 1 {
		t.Errorf("Stats() = %+v; want 1 outcome", st)
	}
}

// A Pool created again with the same instance (a coordinator restart)
// applies the outcome a worker published while no Pool was running; the
// repeated Do of the same attempt does not run it again.
func TestRestartedPoolAppliesOutcome(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	first := newPool(t, nc, "again", bjs.WithInstance("coord"))
	job := worker.Job{ID: "job", Round: 1, Attempt: 1, Payload: bjs.Payload{Kind: "count", Data: []byte("once")}}
	published := subscribe(t, nc, "baton.again.attempts")
	done := make(chan error, 1)
	go func() { done <- first.Do(context.Background(), job) }()
	recv(t, published, "attempt published")
	first.Close() // the coordinator dies; no cancel reaches the workers
	if err := recv(t, done, "Do's return"); !errors.Is(err, bjs.ErrClosed) {
		t.Fatalf("Do after Close = %v; want ErrClosed", err)
	}
	runs := make(chan string, 4)
	outcomes := subscribe(t, nc, "baton.again.results.coord.>")
	serve(t, nc, "again", map[string]bjs.Handler{"count": func(ctx context.Context, data []byte) ([]byte, error) {
		a, _ := bjs.AttemptOf(ctx)
		runs <- a.Task
		return data, nil
	}})
	recv(t, runs, "the attempt run")
	recv(t, outcomes, "its outcome published")
	second := newPool(t, nc, "again", bjs.WithInstance("coord"))
	if err := second.Do(context.Background(), job); err != nil {
		t.Fatalf("Do after restart = %v; want nil", err)
	}
	// The outcome reached the new Pool before its Do (which then does not
	// publish) or after (the repeated publish is deduplicated).
	if st := second.Stats(); st.Outcomes != 1 || st.Published != st.Deduplicated {
		t.Errorf("Stats() = %+v; want one outcome and nothing newly stored", st)
	}
	select {
	case id := <-runs:
		t.Fatalf("%s ran a second time", id)
	default:
	}
}

// The Pool passes the worker conformance suite. The suite runs one job
// many times at once; a coordinator never runs one attempt twice at once
// (Do refuses it: ErrInFlight), so the adapter numbers the attempts.
func TestConformance(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	pool := newPool(t, nc, "conf", bjs.WithStopWait(long))
	started, stopped := make(chan string, 64), make(chan error, 64)
	serve(t, nc, "conf", map[string]bjs.Handler{
		"echo":  echo,
		"fail":  func(context.Context, []byte) ([]byte, error) { return nil, errors.New("no") },
		"block": block(started, stopped),
	}, bjs.WithConcurrency(16))
	workertest.Run(t, &numbered{p: pool}, workertest.Jobs{
		OK:    worker.Job{ID: "ok", Payload: bjs.Payload{Kind: "echo"}},
		Fail:  worker.Job{ID: "fail", Payload: bjs.Payload{Kind: "fail"}},
		Block: worker.Job{ID: "block", Payload: bjs.Payload{Kind: "block"}},
	})
	// Same attempt twice at once.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- pool.Do(ctx, worker.Job{ID: "twice", Round: 1, Attempt: 1, Payload: bjs.Payload{Kind: "block"}})
	}()
	for recv(t, started, "handler start") != "twice" {
	}
	if err := pool.Do(ctx, worker.Job{ID: "twice", Round: 1, Attempt: 1, Payload: bjs.Payload{Kind: "block"}}); !errors.Is(err, bjs.ErrInFlight) {
		t.Errorf("second Do of one attempt = %v; want ErrInFlight", err)
	}
	cancel()
	recv(t, done, "Do's return")
}

type numbered struct {
	p *bjs.Pool
	n atomic.Int64
}

func (w *numbered) Do(ctx context.Context, j worker.Job) error {
	j.Round, j.Attempt = 1, int(w.n.Add(1))
	return w.p.Do(ctx, j)
}

func (w *numbered) Validate(j worker.Job) error { return w.p.Validate(j) }

// A server that stays down longer than WithMaxOutage fails the attempt
// waiting for its outcome, and new attempts at once, with ErrUnavailable.
func TestOutageFailsAttempts(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	pool := newPool(t, nc, "outage", bjs.WithMaxOutage(300*time.Millisecond))
	published := subscribe(t, nc, "baton.outage.attempts")
	done := make(chan error, 1)
	go func() {
		done <- pool.Do(context.Background(), worker.Job{ID: "w", Round: 1, Attempt: 1, Payload: bjs.Payload{Kind: "echo"}})
	}()
	recv(t, published, "attempt published")
	stopServer(srv)
	if err := recv(t, done, "Do's return"); !errors.Is(err, bjs.ErrUnavailable) {
		t.Fatalf("waiting Do = %v; want ErrUnavailable", err)
	}
	err := pool.Do(context.Background(), worker.Job{ID: "n", Round: 1, Attempt: 1, Payload: bjs.Payload{Kind: "echo"}})
	if !errors.Is(err, bjs.ErrUnavailable) {
		t.Fatalf("Do during the outage = %v; want ErrUnavailable", err)
	}
}

// Connected, but JetStream does not answer a publish (its stream is gone
// and something else listens on the subject): the time each publish waits
// counts toward WithMaxOutage, so Do fails with ErrUnavailable well
// before one publish's own timeout (5 s).
func TestUnansweredPublishCountsTowardOutage(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	pool := newPool(t, nc, "mute", bjs.WithMaxOutage(200*time.Millisecond))
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(context.Background(), "BATON_mute_ATTEMPTS"); err != nil {
		t.Fatal(err)
	}
	subscribe(t, nc, "baton.mute.attempts") // hears the publish, never answers
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		done <- pool.Do(context.Background(), worker.Job{ID: "m", Round: 1, Attempt: 1, Payload: bjs.Payload{Kind: "echo"}})
	}()
	if err := recv(t, done, "Do's return"); !errors.Is(err, bjs.ErrUnavailable) {
		t.Fatalf("Do = %v; want ErrUnavailable", err)
	}
	if took := time.Since(start); took >= 4*time.Second {
		t.Errorf("Do failed after %v with an outage limit of 200ms; a publish's wait did not count", took)
	}
}

// A handler that runs 2.5 leases long keeps its attempt: Serve extends
// the lease, so the attempt is neither delivered again nor run twice.
func TestLeaseExtendedWhileHandlerRuns(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	const lease = time.Second
	pool := newPool(t, nc, "lease", bjs.WithLease(lease))
	var runs atomic.Int32
	// Two Serves, so that a redelivery would have somewhere to go.
	for i := range 2 {
		serve(t, nc, "lease", map[string]bjs.Handler{"long": func(ctx context.Context, _ []byte) ([]byte, error) {
			runs.Add(1)
			// The work itself lasts 2.5 leases.
			select {
			case <-time.After(5 * lease / 2):
				return nil, nil
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}}, bjs.WithWorkerName(fmt.Sprintf("w%d", i)))
	}
	if err := pool.Do(context.Background(), worker.Job{ID: "long", Round: 1, Attempt: 1, Payload: bjs.Payload{Kind: "long"}}); err != nil {
		t.Fatalf("Do = %v", err)
	}
	ranOnce(t, runs.Load(), pool)
}

// ranOnce checks that an attempt's handler ran once (runs) and that pool
// saw no redelivery and no duplicate outcome.
func ranOnce(t *testing.T, runs int32, pool *bjs.Pool) {
	t.Helper()
	if runs != 1 {
		t.Errorf("the attempt ran %d times; want 1", runs)
	}
	if st := pool.Stats(); st.Redelivered != 0 || st.Duplicates != 0 {
		t.Errorf("Stats() = %+v; want no redelivery", st)
	}
}

// Attempts waiting for one of a busy Serve's handler slots are not held
// by it: a Serve takes no more than it can start, so none sits in a buffer
// while its lease runs out (it used to be delivered again and run twice,
// on the same healthy worker).
func TestBusyServeHoldsNoAttemptItCannotStart(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	const lease = 300 * time.Millisecond
	pool := newPool(t, nc, "busy", bjs.WithLease(lease))
	var mu sync.Mutex
	runs := map[string][]int{} // deliveries by task
	serve(t, nc, "busy", map[string]bjs.Handler{"work": func(ctx context.Context, d []byte) ([]byte, error) {
		a, _ := bjs.AttemptOf(ctx)
		mu.Lock()
		runs[a.Task] = append(runs[a.Task], a.Delivery)
		mu.Unlock()
		select {
		case <-time.After(3 * lease): // the work, uneven: the first is the longest
			if a.Task != "t0" {
				break
			}
			<-time.After(3 * lease)
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		return d, nil
	}}, bjs.WithConcurrency(2), bjs.WithWorkerName("A"))
	s := newScheduler(t, coordinator.WithPool("remote", 8, pool))
	var tasks []coordinator.Task
	for i := range 5 {
		tasks = append(tasks, task(fmt.Sprint("t", i), "work"))
	}
	if err := s.Submit(tasks...); err != nil {
		t.Fatalf("Submit = %v", err)
	}
	wait(t, s)
	mu.Lock()
	defer mu.Unlock()
	for _, tk := range tasks {
		result(t, s, tk.ID)
		if d := runs[tk.ID]; len(d) != 1 || d[0] != 1 {
			t.Errorf("%s ran with deliveries %v; want once, first delivery", tk.ID, d)
		}
	}
	if st := pool.Stats(); st.Redelivered != 0 || st.Duplicates != 0 {
		t.Errorf("Stats() = %+v; want no redelivery", st)
	}
}

// A stopping Serve keeps extending the leases of the handlers it waits
// for: one that takes several leases to wind down keeps its attempt, and
// its success is the outcome (it used to be delivered to another worker
// and run again).
func TestStoppingServeKeepsLeasesOfWindingDownHandlers(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	const lease = 300 * time.Millisecond
	pool := newPool(t, nc, "wind", bjs.WithLease(lease))
	started := make(chan struct{}, 1)
	var runs atomic.Int32
	a := serveStoppable(t, nc, "wind", map[string]bjs.Handler{"slow": func(ctx context.Context, d []byte) ([]byte, error) {
		runs.Add(1)
		started <- struct{}{}
		<-ctx.Done()
		<-time.After(3 * lease) // the clean-up, after which it succeeds anyway
		return d, nil
	}}, bjs.WithWorkerName("A"))
	done := make(chan error, 1)
	go func() {
		done <- pool.Do(context.Background(), worker.Job{ID: "x", Round: 1, Attempt: 1, Payload: bjs.Payload{Kind: "slow"}})
	}()
	recv(t, started, "the handler's start")
	// B, where a redelivery would go.
	serve(t, nc, "wind", map[string]bjs.Handler{"slow": func(ctx context.Context, d []byte) ([]byte, error) {
		runs.Add(1)
		return d, nil
	}}, bjs.WithWorkerName("B"))
	a.cancel()
	if err := recv(t, done, "Do's return"); err != nil {
		t.Fatalf("Do = %v; want nil", err)
	}
	a.wait(t)
	ranOnce(t, runs.Load(), pool)
}

// A Serve stopped while attempts stream in hands back everything its
// pulls receive: another Serve runs each attempt within about a second,
// none waits a lease (attempts in flight to a pull cancelled with the
// Serve used to be dropped, and came back a lease later).
func TestStoppedServeHandsBackWhatItsPullsReceive(t *testing.T) {
	for _, offset := range []time.Duration{0, time.Millisecond} {
		t.Run(fmt.Sprint(offset), func(t *testing.T) {
			srv := startServer(t, t.TempDir(), -1)
			nc := connect(t, srv.ClientURL())
			wc := connect(t, srv.ClientURL())
			const lease = 10 * time.Second
			pool := newPool(t, nc, "midstop", bjs.WithLease(lease))
			// A's hand-backs: a delivery it did not start (it reached a
			// pull after A stopped) is one more than its handlers' starts.
			var naks, startsA atomic.Int32
			acks, err := nc.Subscribe("$JS.ACK.BATON_midstop_ATTEMPTS.>", func(m *nats.Msg) {
				if bytes.HasPrefix(m.Data, []byte("-NAK")) {
					naks.Add(1)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			defer acks.Unsubscribe()
			firstA := make(chan struct{}, 1)
			a := serveStoppable(t, wc, "midstop", map[string]bjs.Handler{"w": func(ctx context.Context, _ []byte) ([]byte, error) {
				startsA.Add(1)
				select {
				case firstA <- struct{}{}:
				default:
				}
				<-ctx.Done()
				return nil, context.Cause(ctx)
			}}, bjs.WithConcurrency(256), bjs.WithWorkerName("A"))
			const n = 200
			took := make(chan time.Duration, n)
			do := func(i int) {
				start := time.Now()
				if err := pool.Do(context.Background(), worker.Job{ID: fmt.Sprint("t", i), Round: 1, Attempt: 1, Payload: bjs.Payload{Kind: "w"}}); err != nil {
					t.Errorf("Do = %v", err)
				}
				took <- time.Since(start)
			}
			go do(0)
			recv(t, firstA, "A's first handler")
			for i := 1; i < n; i++ {
				if i == n/2 {
					time.AfterFunc(offset, a.cancel)
				}
				go do(i)
				time.Sleep(100 * time.Microsecond) // a steady stream, so that some are on their way to A as it stops: the test's input (checked below)
			}
			a.wait(t)
			serve(t, wc, "midstop", map[string]bjs.Handler{"w": echo}, bjs.WithConcurrency(8), bjs.WithWorkerName("B"))
			slow := 0
			for range n {
				if d := recv(t, took, "Do's return"); d > lease/2 {
					slow++
				}
			}
			if slow > 0 {
				t.Errorf("%d attempts waited about a lease after A stopped; want none", slow)
			}
			if err := nc.Flush(); err != nil { // the hand-backs came before the redeliveries that ended the Dos
				t.Fatal(err)
			}
			if unstarted := naks.Load() - startsA.Load(); unstarted <= 0 {
				t.Errorf("A handed back %d deliveries and started %d handlers: none reached its pulls after it stopped, which is what this tests", naks.Load(), startsA.Load())
			} else {
				t.Logf("A handed back %d deliveries it never started (and %d it started)", unstarted, startsA.Load())
			}
		})
	}
}

// A handler ended by its Serve's stop, with an error or a runtime.Goexit,
// is handed back once: another worker runs it, within WithMaxDeliver(2).
// (It was handed back at once, into the same Serve's pulls still waiting
// at the server, and handed back from there: two deliveries for one stop.
// A Goexit was reported as the task's panic.)
func TestHandlerStoppedByItsServeIsHandedBackOnce(t *testing.T) {
	for _, exit := range []bool{false, true} {
		t.Run(fmt.Sprint("goexit=", exit), func(t *testing.T) {
			srv := startServer(t, t.TempDir(), -1)
			nc := connect(t, srv.ClientURL())
			pool := newPool(t, nc, "once", bjs.WithLease(2*long), bjs.WithMaxDeliver(2))
			pulls := subscribe(t, nc, "$JS.API.CONSUMER.MSG.NEXT.BATON_once_ATTEMPTS.workers")
			started := make(chan struct{}, 1)
			a := serveStoppable(t, nc, "once", map[string]bjs.Handler{"w": func(ctx context.Context, _ []byte) ([]byte, error) {
				started <- struct{}{}
				<-ctx.Done()
				if exit {
					runtime.Goexit()
				}
				return nil, context.Cause(ctx)
			}}, bjs.WithConcurrency(4), bjs.WithWorkerName("A"))
			done := make(chan error, 1)
			go func() {
				done <- pool.Do(context.Background(), worker.Job{ID: "x", Round: 1, Attempt: 1, Payload: bjs.Payload{Kind: "w"}})
			}()
			recv(t, started, "the start on A")
			recv(t, pulls, "A's first pull")
			recv(t, pulls, "A's pull for its three free handlers")
			a.stop(t)
			serve(t, nc, "once", map[string]bjs.Handler{"w": echo}, bjs.WithWorkerName("B"))
			if err := recv(t, done, "Do's return"); err != nil {
				t.Fatalf("Do = %v; want nil, run by B", err)
			}
		})
	}
}

// A handler that calls runtime.Goexit fails its attempt like a panic, at
// once (it used to leave no outcome: the attempt was delivered again each
// lease until WithMaxDeliver).
func TestHandlerGoexitIsAPanic(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	pool := newPool(t, nc, "goexit")
	serve(t, nc, "goexit", map[string]bjs.Handler{"exit": func(context.Context, []byte) ([]byte, error) {
		runtime.Goexit()
		return nil, nil
	}}, bjs.WithWorkerName("w1"))
	done := make(chan error, 1)
	go func() {
		done <- pool.Do(context.Background(), worker.Job{ID: "x", Round: 1, Attempt: 1, Payload: bjs.Payload{Kind: "exit"}})
	}()
	err := recv(t, done, "Do's return")
	var re *bjs.RemoteError
	if !errors.As(err, &re) || !re.Panic || !strings.Contains(re.Message, "Goexit") {
		t.Fatalf("Do = %v; want a RemoteError, a panic, naming Goexit", err)
	}
	if st := pool.Stats(); st.Redelivered != 0 {
		t.Fatalf("Stats() = %+v; want no redelivery", st)
	}
}

// A Serve that shuts down hands back the attempts it was running (and any
// it had fetched): another worker runs them at once, not a lease later.
func TestServeShutdownHandsBackAttempts(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	pool := newPool(t, nc, "handback", bjs.WithLease(2*long)) // a redelivery by lease would fail the test
	started := make(chan string, 8)
	a := serveStoppable(t, nc, "handback", map[string]bjs.Handler{"hold": func(ctx context.Context, _ []byte) ([]byte, error) {
		a, _ := bjs.AttemptOf(ctx)
		started <- a.Task
		<-ctx.Done()
		return nil, context.Cause(ctx)
	}}, bjs.WithConcurrency(2), bjs.WithWorkerName("A"))
	const n = 6 // two run on A
	done := make(chan error, n)
	for i := range n {
		go func() {
			done <- pool.Do(context.Background(), worker.Job{ID: fmt.Sprint("t", i), Round: 1, Attempt: 1, Payload: bjs.Payload{Kind: "hold"}})
		}()
	}
	recv(t, started, "an attempt started on A")
	recv(t, started, "a second attempt started on A")
	a.stop(t)
	serve(t, nc, "handback", map[string]bjs.Handler{"hold": echo}, bjs.WithWorkerName("B"))
	for range n {
		if err := recv(t, done, "Do's return"); err != nil {
			t.Fatalf("Do = %v; want nil", err)
		}
	}
	if st := pool.Stats(); st.Outcomes != n || st.Duplicates != 0 {
		t.Fatalf("Stats() = %+v; want %d outcomes", st, n)
	}
}

// Invalid arguments and options are refused with ErrInvalidOption.
func TestInvalidOptions(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	ctx := context.Background()
	for name, opts := range map[string][]bjs.Option{
		"lease":        {bjs.WithLease(0)},
		"short lease":  {bjs.WithLease(bjs.MinLease - 1)},
		"maxDeliver":   {bjs.WithMaxDeliver(0)},
		"instance":     {bjs.WithInstance("a b")},
		"outage":       {bjs.WithMaxOutage(-time.Second)},
		"stopWait":     {bjs.WithStopWait(0)},
		"dedupe":       {bjs.WithDedupeWindow(0)},
		"short dedupe": {bjs.WithDedupeWindow(bjs.MinDedupe - 1)},
		"ttl":          {bjs.WithResultsTTL(0)},
		"short ttl":    {bjs.WithResultsTTL(bjs.MinDedupe - 1)},
		"ttl < dedupe": {bjs.WithResultsTTL(time.Minute), bjs.WithDedupeWindow(2 * time.Minute)},
		"replicas":     {bjs.WithReplicas(9)},
		"no kinds":     {bjs.WithKinds()},
		"empty kind":   {bjs.WithKinds("")},
		"logger":       {bjs.WithLogger(nil)},
		"fence":        {bjs.WithFence(nil)},
	} {
		if _, err := bjs.NewPool(ctx, nc, "opts", opts...); !errors.Is(err, bjs.ErrInvalidOption) {
			t.Errorf("NewPool with bad %s = %v; want ErrInvalidOption", name, err)
		}
	}
	if _, err := bjs.NewPool(ctx, nil, "opts"); !errors.Is(err, bjs.ErrInvalidOption) {
		t.Errorf("NewPool(nil conn) = %v; want ErrInvalidOption", err)
	}
	if _, err := bjs.NewPool(ctx, nc, "a.b"); !errors.Is(err, bjs.ErrInvalidOption) {
		t.Errorf("NewPool(\"a.b\") = %v; want ErrInvalidOption", err)
	}
	hs := map[string]bjs.Handler{"echo": echo}
	for name, call := range map[string]func() error{
		"nil conn":    func() error { return bjs.Serve(ctx, nil, "p", hs) },
		"bad pool":    func() error { return bjs.Serve(ctx, nc, "", hs) },
		"no handlers": func() error { return bjs.Serve(ctx, nc, "p", nil) },
		"nil handler": func() error { return bjs.Serve(ctx, nc, "p", map[string]bjs.Handler{"x": nil}) },
		"spaced kind": func() error { return bjs.Serve(ctx, nc, "p", map[string]bjs.Handler{" x": echo}) },
		"kind with a line break": func() error {
			return bjs.Serve(ctx, nc, "p", map[string]bjs.Handler{"x\ny": echo})
		},
		"concurrency": func() error { return bjs.Serve(ctx, nc, "p", hs, bjs.WithConcurrency(0)) },
		"name":        func() error { return bjs.Serve(ctx, nc, "p", hs, bjs.WithWorkerName("")) },
		"logger":      func() error { return bjs.Serve(ctx, nc, "p", hs, bjs.WithWorkerLogger(nil)) },
	} {
		if err := call(); !errors.Is(err, bjs.ErrInvalidOption) {
			t.Errorf("Serve with %s = %v; want ErrInvalidOption", name, err)
		}
	}
}

// deadlineOnly reports a deadline it never enforces, standing for a
// coordinator whose clock reaches the deadline after the worker's does.
type deadlineOnly struct {
	context.Context
	at time.Time
}

func (d deadlineOnly) Deadline() (time.Time, bool) { return d.at, true }

// The task's deadline travels with the attempt: a handler still running
// at it ends with worker.ErrTimeout as its cause, and the attempt's error
// says it timed out even when the worker's clock got there first.
func TestDeadlineTravels(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	pool := newPool(t, nc, "deadline")
	started, stopped := make(chan string, 1), make(chan error, 1)
	serve(t, nc, "deadline", map[string]bjs.Handler{"block": block(started, stopped)})
	ctx := deadlineOnly{context.Background(), time.Now().Add(200 * time.Millisecond)}
	err := pool.Do(ctx, worker.Job{ID: "d", Round: 1, Attempt: 1, Payload: bjs.Payload{Kind: "block"}})
	var re *bjs.RemoteError
	if !errors.Is(err, worker.ErrTimeout) || !errors.As(err, &re) {
		t.Fatalf("Do = %v; want a RemoteError that is worker.ErrTimeout", err)
	}
	if cause := recv(t, stopped, "handler stop"); !errors.Is(cause, worker.ErrTimeout) {
		t.Fatalf("handler's cause = %v; want worker.ErrTimeout", cause)
	}
}

// An attempt whose Do was cancelled (a Shutdown) and that a restarted
// coordinator hands out again with the same Round and Attempt (a durable
// scheduler does, for the attempt Shutdown stopped) runs again, within the
// duplicate window too: whether the first publication was withdrawn from
// the queue, stopped while it ran, or its stop was reported only after the
// first Pool had gone.
func TestCancelledAttemptRunsAgainAfterRestart(t *testing.T) {
	for _, how := range []string{"withdrawn", "stopped", "stop reported late"} {
		t.Run(how, func(t *testing.T) {
			srv := startServer(t, t.TempDir(), -1)
			nc := connect(t, srv.ClientURL())
			first := newPool(t, nc, "again", bjs.WithInstance("coord"), bjs.WithStopWait(time.Millisecond))
			job := worker.Job{ID: "job", Round: 1, Attempt: 1, Payload: bjs.Payload{Kind: "work"}}
			var calls atomic.Int32
			started := make(chan struct{}, 4)
			release := make(chan struct{})
			handler := func(ctx context.Context, data []byte) ([]byte, error) {
				started <- struct{}{}
				if calls.Add(1) > 1 || how == "withdrawn" {
					return []byte("done"), nil
				}
				<-ctx.Done()
				if how == "stop reported late" {
					<-release // the first Pool is gone before the stop is reported
				}
				return nil, ctx.Err()
			}
			if how != "withdrawn" {
				serve(t, nc, "again", map[string]bjs.Handler{"work": handler})
			}
			published := subscribe(t, nc, "baton.again.attempts")
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- first.Do(ctx, job) }()
			recv(t, published, "attempt published")
			if how != "withdrawn" {
				recv(t, started, "the first run")
			}
			cancel() // Shutdown
			if err := recv(t, done, "Do's return"); !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled Do = %v; want context.Canceled", err)
			}
			first.Close()
			close(release)
			if how == "withdrawn" {
				serve(t, nc, "again", map[string]bjs.Handler{"work": handler})
			}
			second := newPool(t, nc, "again", bjs.WithInstance("coord"))
			dctx, dcancel := context.WithTimeout(context.Background(), long)
			defer dcancel()
			if err := second.Do(dctx, job); err != nil {
				t.Fatalf("Do after restart = %v; want nil (run again)", err)
			}
			want := int32(2)
			if how == "withdrawn" {
				want = 1
			}
			if got := calls.Load(); got != want {
				t.Errorf("handler ran %d times; want %d", got, want)
			}
		})
	}
}

// A cancel that reaches no worker (the one that took the attempt died
// with it) does not leave the attempt for another worker to run once the
// lease expires: Do takes it out of the stream.
func TestCancelOfAttemptOnDeadWorker(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	pool := newPool(t, nc, "deadw", bjs.WithStopWait(50*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- pool.Do(ctx, worker.Job{ID: "x", Round: 1, Attempt: 1, Payload: bjs.Payload{Kind: "echo"}})
	}()
	js, _ := njs.New(nc)
	lctx, lcancel := context.WithTimeout(context.Background(), long)
	defer lcancel()
	cons, err := js.Consumer(lctx, "BATON_deadw_ATTEMPTS", "workers")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cons.Next(njs.FetchMaxWait(long)); err != nil { // a worker takes it and dies
		t.Fatalf("Next = %v", err)
	}
	cancel()
	if err := recv(t, done, "Do's return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Do = %v; want context.Canceled", err)
	}
	st, err := js.Stream(lctx, "BATON_deadw_ATTEMPTS")
	if err != nil {
		t.Fatal(err)
	}
	if si, err := st.Info(lctx); err != nil || si.State.Msgs != 0 {
		t.Fatalf("attempts stream after the cancelled Do: %d messages (err %v); want 0: another worker would run it", si.State.Msgs, err)
	}
}

// A result too large for a message fails the attempt at once, saying so,
// rather than running it again until WithMaxDeliver.
func TestResultTooLarge(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	pool := newPool(t, nc, "big")
	var calls atomic.Int32
	serve(t, nc, "big", map[string]bjs.Handler{"big": func(context.Context, []byte) ([]byte, error) {
		calls.Add(1)
		return make([]byte, nc.MaxPayload()+1), nil
	}})
	err := pool.Do(context.Background(), worker.Job{ID: "b", Round: 1, Attempt: 1, Payload: bjs.Payload{Kind: "big"}})
	var re *bjs.RemoteError
	if !errors.As(err, &re) || !strings.Contains(re.Message, "more than a message holds") {
		t.Fatalf("Do = %v; want a *RemoteError saying the result is too large", err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("handler ran %d times; want 1", n)
	}
}
