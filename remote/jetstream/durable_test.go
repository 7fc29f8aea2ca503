package jetstream_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	bjs "github.com/batonhq/baton/remote/jetstream"
	"github.com/batonhq/baton/worker"
	"github.com/nats-io/nats.go"
)

// Environment of a coordinator process started by TestDurableCoordinatorRestart.
const (
	envCoord = "BATON_JS_TEST_COORD" // the store's path
)

// durableGraph is a -> slow -> c, all remote, described by data alone.
func durableGraph() []coordinator.Task {
	task := func(id string, deps ...string) coordinator.Task {
		return coordinator.Task{ID: id, Pool: "remote", Deps: deps, Timeout: long,
			Retry:   coordinator.RetryPolicy{MaxAttempts: 3},
			Payload: bjs.Payload{Kind: "step", Data: []byte(id)}.Encode()}
	}
	return []coordinator.Task{task("a"), task("slow", "a"), task("c", "slow")}
}

// coordinatorProcess runs a durable scheduler with a remote pool on the
// store at path: it submits durableGraph on an empty store, then waits for
// c and prints each task's status and result. It is killed mid-graph by
// the test, and started again on the same store.
func coordinatorProcess(path, url string) int {
	fail := func(what string, err error) int { fmt.Println("error:", what, err); return 1 }
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		return fail("connect", err)
	}
	defer nc.Close()
	ctx := context.Background()
	pool, err := bjs.NewPool(ctx, nc, "render", bjs.WithInstance("coord-1"))
	if err != nil {
		return fail("NewPool", err)
	}
	defer pool.Close()
	s, err := coordinator.New(coordinator.WithStore(newFileStore(path)), coordinator.WithPool("remote", 4, pool))
	if err != nil {
		return fail("coordinator.New", err)
	}
	defer s.Shutdown(ctx)
	if _, restored := s.Info("a"); !restored {
		if err := s.Submit(durableGraph()...); err != nil {
			return fail("Submit", err)
		}
	}
	fmt.Println("ready")
	if err := s.WaitTasks(ctx, "c"); err != nil {
		return fail("WaitTasks", err)
	}
	for _, id := range []string{"a", "slow", "c"} {
		ti, _ := s.Info(id)
		out, _ := ti.Result.([]byte)
		fmt.Printf("%s %v %d %s\n", id, ti.Status, ti.Attempts, out)
	}
	return 0
}

// A coordinator killed with SIGKILL while a remote attempt runs, started
// again on its durable store: the graph finishes, what had succeeded does
// not run again, and the attempt that was out, whose outcome was
// published while no coordinator ran, is handed out again as the same
// attempt (the Pool is a worker.Resumer) and its outcome applied: it ran
// once, and counts once.
func TestDurableCoordinatorRestart(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	url := srv.ClientURL()
	nc := connect(t, url)
	var mu sync.Mutex
	runs := map[string]int{}
	slowStarted, release := make(chan struct{}, 4), make(chan struct{})
	serve(t, nc, "render", map[string]bjs.Handler{"step": func(ctx context.Context, data []byte) ([]byte, error) {
		id := string(data)
		mu.Lock()
		runs[id]++
		mu.Unlock()
		if id == "slow" {
			slowStarted <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}
		return []byte("out-" + id), nil
	}})
	path := filepath.Join(t.TempDir(), "baton.json")
	start := func() (*exec.Cmd, *bufio.Scanner) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envCoord+"="+path, envURL+"="+url)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, bufio.NewScanner(out)
	}

	first, _ := start()
	recv(t, slowStarted, "start of slow's remote attempt")
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := first.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("first coordinator: %v; want killed", err)
	}
	close(release) // slow's outcome is published while no coordinator runs

	second, lines := start()
	done := make(chan error, 1)
	var got []string
	go func() {
		for lines.Scan() {
			got = append(got, lines.Text())
		}
		done <- second.Wait()
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("second coordinator: %v; printed %q", err, got)
		}
	case <-time.After(long):
		second.Process.Kill()
		<-done
		t.Fatalf("second coordinator did not finish the graph; printed %q", got)
	}
	want := map[string]string{"a": "a succeeded 1 out-a", "slow": "slow succeeded 1 out-slow", "c": "c succeeded 1 out-c"}
	for _, line := range got {
		id, _, _ := strings.Cut(line, " ")
		if w, ok := want[id]; ok && line != w {
			t.Errorf("%q; want %q", line, w)
		}
	}
	if len(got) != 4 { // ready, a, slow, c
		t.Errorf("second coordinator printed %q; want ready and three tasks", got)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("handler runs %v; the restarted coordinator printed %q", runs, got)
	if runs["a"] != 1 || runs["c"] != 1 || runs["slow"] != 1 {
		t.Errorf("handler runs %v; want each once", runs)
	}
}

// Payload.Encode's bytes are a payload like the Payload itself; bytes of
// another layout are refused by Validate before anything is published.
func TestEncodedPayload(t *testing.T) {
	p := bjs.Payload{Kind: "tile", Data: []byte{0, 1, 2, '\n'}}
	got, err := bjs.DecodePayload(p.Encode())
	if err != nil || got.Kind != p.Kind || string(got.Data) != string(p.Data) {
		t.Fatalf("DecodePayload(Encode(%+v)) = %+v, %v", p, got, err)
	}
	for _, bad := range [][]byte{nil, {}, {0x80}, {5, 'a'}} {
		if _, err := bjs.DecodePayload(bad); !errors.Is(err, bjs.ErrBadPayload) {
			t.Errorf("DecodePayload(%v) = %v; want ErrBadPayload", bad, err)
		}
	}
	srv := startServer(t, t.TempDir(), -1)
	pool := newPool(t, connect(t, srv.ClientURL()), "render")
	if err := pool.Validate(worker.Job{ID: "x", Payload: p.Encode()}); err != nil {
		t.Errorf("Validate(encoded) = %v", err)
	}
	if err := pool.Validate(worker.Job{ID: "x", Payload: []byte{9}}); !errors.Is(err, bjs.ErrBadPayload) {
		t.Errorf("Validate(bad bytes) = %v; want ErrBadPayload", err)
	}
}
