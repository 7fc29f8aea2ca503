package jetstream_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/batonhq/baton/coordinator"
	bjs "github.com/batonhq/baton/remote/jetstream"
)

// A remote handler cannot spawn or choose (coordinator.Spawn's doc): both
// return an error wrapping ErrNoAttempt that says so; a local task spawns
// into the remote pool instead.
func TestRemoteHandlerCannotSpawnOrChoose(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	pool := newPool(t, nc, "rs")
	errs := make(chan error, 2)
	serve(t, nc, "rs", map[string]bjs.Handler{
		"spawn": func(ctx context.Context, data []byte) ([]byte, error) {
			errs <- coordinator.Spawn(ctx, coordinator.Task{ID: "kid", Func: "echo"})
			errs <- coordinator.Choose(ctx, "x")
			return nil, nil
		},
		"echo": func(ctx context.Context, data []byte) ([]byte, error) { return data, nil },
	})
	s := newScheduler(t, coordinator.WithPool("remote", 2, pool))
	err := s.Submit(
		coordinator.Task{ID: "r", Pool: "remote", Payload: bjs.Payload{Kind: "spawn"}},
		coordinator.Task{ID: "local", Run: func(ctx context.Context) error {
			return coordinator.Spawn(ctx, coordinator.Task{ID: "rk", Pool: "remote", Payload: bjs.Payload{Kind: "echo", Data: []byte("hi")}})
		}},
	)
	if err != nil {
		t.Fatalf("Submit = %v", err)
	}
	wait(t, s)
	for _, name := range []string{"Spawn", "Choose"} {
		if err := <-errs; !errors.Is(err, coordinator.ErrNoAttempt) || !strings.Contains(err.Error(), "remote handlers cannot spawn or choose") {
			t.Errorf("%s in a remote handler = %v; want ErrNoAttempt saying remote handlers cannot spawn or choose", name, err)
		}
	}
	for _, id := range []string{"r", "local", "rk"} {
		if info, _ := s.Info(id); info.Status != coordinator.Succeeded {
			t.Errorf("Info(%s) = %+v; want succeeded", id, info)
		}
	}
	if info, _ := s.Info("rk"); info.Parent != "local" {
		t.Errorf("Info(rk).Parent = %q; want local", info.Parent)
	}
}
