package pgstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestWaitsWithoutNotifications: a Client whose listener hears nothing
// (never connected) still sees its batch accepted and its tasks end, by
// its polls: waits never rely on a notification alone.
func TestWaitsWithoutNotifications(t *testing.T) {
	u := needEnv(t, "BATON_PGSTORE_TEST_DB")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	name := fmt.Sprintf("deaf-%d", rand.Uint64()) // a store of its own, run after run (-count)
	sv, err := New(pool, name, WithScheduler(coordinator.WithFunc("f", func(context.Context, []byte) error { return nil })))
	if err != nil {
		t.Fatal(err)
	}
	defer sv.Shutdown(ctx)
	<-sv.Leading()
	cfg, err := newConfig([]Option{WithPoll(50 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	deaf := &listener{waits: map[string]chan struct{}{}, stop: make(chan struct{}), done: make(chan struct{})}
	close(deaf.done) // no goroutine: nothing ever fires
	c := &Client{pool: pool, name: name, cfg: cfg, l: deaf, closed: make(chan struct{})}
	if err := c.Submit(ctx, coordinator.Task{ID: "a", Func: "f"}, coordinator.Task{ID: "b", Func: "f", Deps: []string{"a"}}); err != nil {
		t.Fatalf("Submit without notifications = %v", err)
	}
	if err := c.WaitTasks(ctx, "a", "b"); err != nil {
		t.Fatalf("WaitTasks without notifications = %v", err)
	}
	if ok, err := c.Cancel(ctx, "b"); ok || err != nil {
		t.Fatalf("Cancel of a final task without notifications = %v, %v; want false", ok, err)
	}
}
