// Command distributed runs a graph of tasks across three worker
// processes: one command starts an embedded NATS JetStream server (file
// storage in a temporary directory), a coordinator, and three workers
// (this same binary, started again in worker mode), then prints which
// process ran each task.
//
//	go run ./examples/distributed    (from remote/jetstream)
//
// In production the server is a NATS cluster, the coordinator is your
// program with a jetstream.Pool in coordinator.WithPool, and every worker
// machine runs jetstream.Serve with the same handlers.
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"time"

	"github.com/batonhq/baton/coordinator"
	bjs "github.com/batonhq/baton/remote/jetstream"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// A process started with these variables set is a worker.
const (
	envWorker = "BATON_DISTRIBUTED_WORKER" // the worker's name
	envURL    = "BATON_DISTRIBUTED_URL"    // the server to reach
)

const poolName = "render"

func main() {
	if name := os.Getenv(envWorker); name != "" {
		os.Exit(workerMain(name, os.Getenv(envURL)))
	}
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "distributed:", err)
		os.Exit(1)
	}
}

// handlers are what every worker machine runs, by Payload.Kind.
func handlers() map[string]bjs.Handler {
	return map[string]bjs.Handler{
		// tile "renders" one tile: a little CPU work, then a pause that
		// stands for I/O, ended early if the attempt is cancelled.
		"tile": func(ctx context.Context, data []byte) ([]byte, error) {
			sum := sha256.Sum256(data)
			for range 20000 {
				sum = sha256.Sum256(sum[:])
			}
			select {
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			case <-time.After(20 * time.Millisecond):
			}
			return fmt.Appendf(nil, "%x", sum[:4]), nil
		},
		"merge": func(ctx context.Context, data []byte) ([]byte, error) {
			return append([]byte("merged "), data...), nil
		},
	}
}

// workerMain serves the pool until its standard input closes (the
// coordinator ends it that way, and a worker whose coordinator died stops
// too).
func workerMain(name, url string) int {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		fmt.Fprintln(os.Stderr, name, err)
		return 1
	}
	defer nc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	fmt.Println("ready")
	err = bjs.Serve(ctx, nc, poolName, handlers(),
		bjs.WithWorkerName(name+" (pid "+strconv.Itoa(os.Getpid())+")"), bjs.WithConcurrency(1))
	if !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, name, err)
		return 1
	}
	return 0
}

func run(out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// 1. An embedded JetStream server with file storage.
	dir, err := os.MkdirTemp("", "baton-distributed-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		return err
	}
	srv.Start()
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	if !srv.ReadyForConnections(10 * time.Second) {
		return errors.New("embedded server not ready")
	}

	// 2. The coordinator's side: a Pool in a Scheduler.
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	pool, err := bjs.NewPool(ctx, nc, poolName, bjs.WithKinds("tile", "merge"))
	if err != nil {
		return err
	}
	defer pool.Close()

	// 3. Three worker processes: this binary again, in worker mode.
	stop, err := startWorkers(srv.ClientURL(), 3)
	defer stop()
	if err != nil {
		return err
	}

	s, err := coordinator.New(coordinator.WithPool("remote", 6, pool))
	if err != nil {
		return err
	}
	defer s.Shutdown(ctx)
	var tasks []coordinator.Task
	var tiles []string
	for i := range 9 {
		id := fmt.Sprintf("tile-%d", i)
		tiles = append(tiles, id)
		tasks = append(tasks, coordinator.Task{ID: id, Pool: "remote",
			Payload: bjs.Payload{Kind: "tile", Data: []byte(id)}, Retry: coordinator.RetryPolicy{MaxAttempts: 3}})
	}
	tasks = append(tasks, coordinator.Task{ID: "merge", Pool: "remote", Deps: tiles,
		Payload: bjs.Payload{Kind: "merge", Data: []byte("9 tiles")}})
	if err := s.Submit(tasks...); err != nil {
		return err
	}
	if err := s.Wait(ctx); err != nil {
		return err
	}

	perWorker := map[string]int{}
	for _, t := range tasks {
		info, _ := s.Info(t.ID)
		r, ok := info.Result.(bjs.Result)
		if info.Status != coordinator.Succeeded || !ok {
			return fmt.Errorf("task %s: %v (%v)", t.ID, info.Status, info.Err)
		}
		perWorker[r.Worker]++
		fmt.Fprintf(out, "%-7s ran on %-24s -> %s\n", t.ID, r.Worker, r.Data)
	}
	var names []string
	for w := range perWorker {
		names = append(names, w)
	}
	sort.Strings(names)
	for _, w := range names {
		fmt.Fprintf(out, "%s ran %d tasks\n", w, perWorker[w])
	}
	return nil
}

// startWorkers starts n worker processes and waits until each says it is
// ready. stop closes their standard input and waits for them to exit.
func startWorkers(url string, n int) (stop func(), err error) {
	self, err := os.Executable()
	if err != nil {
		return func() {}, err
	}
	var stdins []io.Closer
	var cmds []*exec.Cmd
	stop = func() {
		for _, in := range stdins {
			_ = in.Close()
		}
		for _, c := range cmds {
			_ = c.Wait()
		}
	}
	for i := range n {
		name := fmt.Sprintf("worker-%d", i+1)
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), envWorker+"="+name, envURL+"="+url)
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			return stop, err
		}
		outp, err := cmd.StdoutPipe()
		if err != nil {
			return stop, err
		}
		if err := cmd.Start(); err != nil {
			return stop, err
		}
		stdins, cmds = append(stdins, in), append(cmds, cmd)
		sc := bufio.NewScanner(outp)
		if !sc.Scan() || sc.Text() != "ready" {
			return stop, fmt.Errorf("%s did not start: %v", name, sc.Err())
		}
		go func() { _, _ = io.Copy(io.Discard, outp) }()
	}
	return stop, nil
}
