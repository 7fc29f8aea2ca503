package jetstream_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/batonhq/baton/coordinator"
	bjs "github.com/batonhq/baton/remote/jetstream"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// A remote pool end to end, in one process for the example's sake: an
// embedded JetStream server, a Serve (normally on each worker machine)
// and a Scheduler whose "remote" pool is a Pool.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "baton-example-")
	defer os.RemoveAll(dir)
	srv, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	srv.Start()
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	srv.ReadyForConnections(10 * time.Second)
	nc, _ := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1))
	defer nc.Close()

	// The worker machine's side.
	wctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() {
		served <- bjs.Serve(wctx, nc, "greet", map[string]bjs.Handler{
			"hello": func(ctx context.Context, name []byte) ([]byte, error) {
				return fmt.Appendf(nil, "hello, %s", name), nil
			},
		}, bjs.WithWorkerName("worker-1"))
	}()
	defer func() { stop(); <-served }()

	// The coordinator's side.
	pool, err := bjs.NewPool(ctx, nc, "greet", bjs.WithKinds("hello"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	s, _ := coordinator.New(coordinator.WithPool("remote", 4, pool))
	defer s.Shutdown(ctx)
	err = s.Submit(coordinator.Task{ID: "greet-gopher", Pool: "remote", Timeout: time.Minute,
		Payload: bjs.Payload{Kind: "hello", Data: []byte("gopher")}})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = s.Wait(ctx)
	info, _ := s.Info("greet-gopher")
	r := info.Result.(bjs.Result)
	fmt.Printf("%v on %s: %s\n", info.Status, r.Worker, r.Data)

	// A payload of a kind no worker handles is refused at Submit.
	err = s.Submit(coordinator.Task{ID: "bad", Pool: "remote", Payload: bjs.Payload{Kind: "goodbye"}})
	fmt.Println(err != nil)
	// Output:
	// succeeded on worker-1: hello, gopher
	// true
}
