package boltstore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/batonhq/baton/boltstore"
	"github.com/batonhq/baton/coordinator"
)

// A durable scheduler is stopped in the middle of a graph (a deploy; a
// crash would do the same) and a new one, on the same file, finishes it:
// what succeeded keeps its result and does not run again.
func Example() {
	dir, err := os.MkdirTemp("", "baton")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "baton.db")

	// Functions are registered by name: the store holds the name and the
	// payload, and every process registers the same names.
	fetched := make(chan struct{})
	fetch := func(ctx context.Context, url []byte) error {
		fmt.Printf("fetch %s\n", url)
		return coordinator.SetResult(ctx, []byte("<html>"))
	}
	slowParse := func(ctx context.Context, _ []byte) error {
		close(fetched)
		<-ctx.Done() // the first process stops before parse is done
		return ctx.Err()
	}

	s, err := coordinator.New(coordinator.WithStore(boltstore.New(path)),
		coordinator.WithFunc("fetch", fetch), coordinator.WithFunc("parse", slowParse))
	if err != nil {
		panic(err)
	}
	// Submit returns once the tasks are on disk.
	err = s.Submit(
		coordinator.Task{ID: "fetch", Func: "fetch", Payload: []byte("https://example.com")},
		coordinator.Task{ID: "parse", Func: "parse", Deps: []string{"fetch"}},
		coordinator.Task{ID: "index", Func: "index", Deps: []string{"parse"}},
	)
	fmt.Println("submit:", err) // index is not registered in this process: refused
	err = s.Submit(
		coordinator.Task{ID: "fetch", Func: "fetch", Payload: []byte("https://example.com")},
		coordinator.Task{ID: "parse", Func: "parse", Deps: []string{"fetch"}},
	)
	if err != nil {
		panic(err)
	}
	<-fetched
	s.Shutdown(context.Background()) // parse is stopped; the store keeps it to do

	// The next process.
	parse := func(ctx context.Context, _ []byte) error {
		page, err := coordinator.Result[[]byte](ctx, "fetch")
		fmt.Printf("parse %s\n", page)
		return err
	}
	s, err = coordinator.New(coordinator.WithStore(boltstore.New(path)),
		coordinator.WithFunc("fetch", fetch), coordinator.WithFunc("parse", parse))
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())
	if err := s.Wait(context.Background()); err != nil {
		panic(err)
	}
	for _, id := range []string{"fetch", "parse"} {
		ti, _ := s.Info(id)
		fmt.Printf("%s: %v, attempts %d\n", id, ti.Status, ti.Attempts)
	}
	// Output:
	// submit: coordinator: task "index": invalid task: function "index" is not registered (WithFunc)
	// fetch https://example.com
	// parse <html>
	// fetch: succeeded, attempts 1
	// parse: succeeded, attempts 1
}
