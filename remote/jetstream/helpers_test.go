package jetstream_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	bjs "github.com/batonhq/baton/remote/jetstream"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"
)

// Environment of a worker process started by a test (re-exec of the test
// binary): which server to reach, its name and pool.
const (
	envWorker = "BATON_JS_TEST_WORKER"
	envURL    = "BATON_JS_TEST_URL"
	envPool   = "BATON_JS_TEST_POOL"
)

func TestMain(m *testing.M) {
	if name := os.Getenv(envWorker); name != "" {
		os.Exit(workerProcess(name, os.Getenv(envURL), os.Getenv(envPool)))
	}
	if path := os.Getenv(envCoord); path != "" {
		os.Exit(coordinatorProcess(path, os.Getenv(envURL)))
	}
	goleak.VerifyTestMain(m)
}

// long bounds every wait of these tests: it only turns a hang into a
// failure, it never paces anything.
const long = 30 * time.Second

// startServer starts an embedded JetStream server with file storage in
// dir, on port (-1: any free port), and shuts it down at cleanup unless
// the test did.
func startServer(t testing.TB, dir string, port int) *server.Server {
	t.Helper()
	return startServerWith(t, &server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir})
}

// startServerWith starts an embedded server with options o (its own logs
// and signal handling off), and shuts it down at cleanup unless the test
// did.
func startServerWith(t testing.TB, o *server.Options) *server.Server {
	t.Helper()
	o.NoLog, o.NoSigs = true, true
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatalf("server.NewServer = %v", err)
	}
	s.Start()
	if !s.ReadyForConnections(long) {
		t.Fatalf("embedded server not ready after %v", long)
	}
	t.Cleanup(func() { stopServer(s) })
	return s
}

func stopServer(s *server.Server) {
	s.Shutdown()
	s.WaitForShutdown()
}

func serverPort(s *server.Server) int { return s.Addr().(*net.TCPAddr).Port }

// connect opens a connection that reconnects forever, closed at cleanup.
func connect(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("nats.Connect(%s) = %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func newPool(t *testing.T, nc *nats.Conn, name string, opts ...bjs.Option) *bjs.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	p, err := bjs.NewPool(ctx, nc, name, opts...)
	if err != nil {
		t.Fatalf("NewPool(%q) = %v", name, err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// serve runs Serve in this process until cleanup.
func serve(t *testing.T, nc *nats.Conn, pool string, hs map[string]bjs.Handler, opts ...bjs.ServeOption) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- bjs.Serve(ctx, nc, pool, hs, opts...) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Serve = %v; want context.Canceled", err)
		}
	})
}

func newScheduler(t *testing.T, opts ...coordinator.Option) *coordinator.Scheduler {
	t.Helper()
	s, err := coordinator.New(opts...)
	if err != nil {
		t.Fatalf("coordinator.New = %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), long)
		defer cancel()
		s.Shutdown(ctx)
	})
	return s
}

func wait(t *testing.T, s *coordinator.Scheduler) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	if err := s.Wait(ctx); err != nil {
		t.Fatalf("Wait = %v", err)
	}
}

func info(t *testing.T, s *coordinator.Scheduler, id string) coordinator.TaskInfo {
	t.Helper()
	ti, ok := s.Info(id)
	if !ok {
		t.Fatalf("Info(%q): unknown", id)
	}
	return ti
}

func result(t *testing.T, s *coordinator.Scheduler, id string) bjs.Result {
	t.Helper()
	ti := info(t, s, id)
	if ti.Status != coordinator.Succeeded {
		t.Fatalf("Info(%q).Status = %v (err %v); want Succeeded", id, ti.Status, ti.Err)
	}
	r, ok := ti.Result.(bjs.Result)
	if !ok {
		t.Fatalf("Info(%q).Result = %T; want jetstream.Result", id, ti.Result)
	}
	return r
}

// recv waits for one message on ch, failing the test after long.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(long):
		t.Fatalf("no %s after %v", what, long)
		panic("unreachable")
	}
}

// subscribe collects the messages of subject on a channel.
func subscribe(t *testing.T, nc *nats.Conn, subject string) <-chan *nats.Msg {
	t.Helper()
	ch := make(chan *nats.Msg, 1024)
	sub, err := nc.ChanSubscribe(subject, ch)
	if err != nil {
		t.Fatalf("Subscribe(%s) = %v", subject, err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("Flush = %v", err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	return ch
}

// recordHandler is a slog.Handler that sends each record's message on a
// channel, for tests that wait for what a Pool logs.
type recordHandler struct{ ch chan string }

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.ch <- r.Message:
	default:
	}
	return nil
}
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordHandler) WithGroup(string) slog.Handler      { return h }

func slogTo(ch chan string) *slog.Logger { return slog.New(recordHandler{ch}) }

// waitLog waits until the handler saw msg.
func waitLog(t *testing.T, ch <-chan string, msg string) {
	t.Helper()
	deadline := time.After(long)
	for {
		select {
		case m := <-ch:
			if m == msg {
				return
			}
		case <-deadline:
			t.Fatalf("no log %q after %v", msg, long)
		}
	}
}

// Worker processes.

// process is a worker process started by startWorkers.
type process struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	exit  chan error // receives Wait's result
}

// startWorkers starts n worker processes serving pool (re-exec of this
// test binary, see TestMain) and waits until each has joined the pool. At
// cleanup their standard input closes, which stops them; any still running
// after long is killed.
func startWorkers(t *testing.T, url, pool string, n int) []*process {
	t.Helper()
	var ps []*process
	for i := range n {
		name := fmt.Sprintf("worker-%d", i+1)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envWorker+"="+name, envURL+"="+url, envPool+"="+pool)
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
		p := &process{name: name, cmd: cmd, stdin: stdin, exit: make(chan error, 1)}
		ready := make(chan struct{})
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if sc.Text() == "ready" {
					close(ready)
				}
			}
			p.exit <- cmd.Wait()
		}()
		recv(t, ready, name+" ready")
		ps = append(ps, p)
		t.Cleanup(func() {
			p.stdin.Close()
			select {
			case <-p.exit:
			case <-time.After(long):
				p.cmd.Process.Kill()
				<-p.exit
				t.Errorf("%s did not stop within %v of its stdin closing", p.name, long)
			}
		})
	}
	return ps
}

// workerProcess is the main function of a worker process: it serves the
// test handlers until its standard input closes.
func workerProcess(name, url, pool string) int {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, name, err)
		return 1
	}
	defer nc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	// Barrier: the tasks of kind "meet" return once three of them run at
	// once; with one handler per process, they run in three processes.
	var mu sync.Mutex
	met := map[string]bool{}
	metc := make(chan struct{}, 16)
	if _, err := nc.Subscribe("test.meet", func(m *nats.Msg) {
		mu.Lock()
		met[string(m.Data)] = true
		mu.Unlock()
		select {
		case metc <- struct{}{}:
		default:
		}
	}); err != nil {
		fmt.Fprintln(os.Stderr, name, err)
		return 1
	}
	if err := nc.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, name, err)
		return 1
	}
	hs := map[string]bjs.Handler{
		"echo": func(ctx context.Context, data []byte) ([]byte, error) { return data, nil },
		"meet": func(ctx context.Context, data []byte) ([]byte, error) {
			a, _ := bjs.AttemptOf(ctx)
			if err := nc.Publish("test.meet", []byte(a.Task)); err != nil {
				return nil, err
			}
			for {
				mu.Lock()
				n := len(met)
				mu.Unlock()
				if n >= 3 {
					return []byte(strconv.Itoa(os.Getpid())), nil
				}
				select {
				case <-metc:
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				}
			}
		},
		// On its first delivery, "killme" says where it runs and blocks
		// until the test kills this process; a redelivery succeeds.
		"killme": func(ctx context.Context, data []byte) ([]byte, error) {
			a, _ := bjs.AttemptOf(ctx)
			if a.Delivery == 1 {
				b, _ := json.Marshal(map[string]any{"pid": os.Getpid(), "worker": a.Worker})
				if err := nc.Publish("test.killme", b); err != nil {
					return nil, err
				}
				<-ctx.Done()
				return nil, context.Cause(ctx)
			}
			return []byte("survived"), nil
		},
		// "hold" says where it runs and which delivery it is (on
		// test.hold), then blocks until the test kills this process.
		"hold": func(ctx context.Context, data []byte) ([]byte, error) {
			a, _ := bjs.AttemptOf(ctx)
			b, _ := json.Marshal(map[string]any{"pid": os.Getpid(), "worker": a.Worker, "delivery": a.Delivery})
			if err := nc.Publish("test.hold", b); err != nil {
				return nil, err
			}
			<-ctx.Done()
			return nil, context.Cause(ctx)
		},
	}
	// Say ready once the pool's subscriptions are in place: a first
	// "echo" through Serve would need a coordinator, so joining is
	// approximated by the connection being up and subscribed.
	fmt.Println("ready")
	err = bjs.Serve(ctx, nc, pool, hs, bjs.WithWorkerName(name+"/pid"+strconv.Itoa(os.Getpid())), bjs.WithConcurrency(1))
	if !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, name, "Serve:", err)
		return 1
	}
	return 0
}

// stoppable is a Serve run in this process until the test stops it (or
// its cleanup does).
type stoppable struct {
	cancel context.CancelFunc // ends Serve's context
	done   chan error         // Serve's return
	waited bool
}

// serveStoppable runs Serve until the test calls stop, or cancel and then
// wait.
func serveStoppable(t *testing.T, nc *nats.Conn, pool string, hs map[string]bjs.Handler, opts ...bjs.ServeOption) *stoppable {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &stoppable{cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- bjs.Serve(ctx, nc, pool, hs, opts...) }()
	t.Cleanup(func() {
		cancel()
		if !s.waited {
			<-s.done
		}
	})
	return s
}

// wait waits for Serve, whose context the test cancelled, to return
// context.Canceled.
func (s *stoppable) wait(t *testing.T) {
	t.Helper()
	s.waited = true
	if err := recv(t, s.done, "Serve's return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Serve = %v; want context.Canceled", err)
	}
}

// stop cancels Serve's context and waits for it to return.
func (s *stoppable) stop(t *testing.T) {
	t.Helper()
	s.cancel()
	s.wait(t)
}
