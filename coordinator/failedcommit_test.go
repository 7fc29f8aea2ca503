package coordinator_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/coordinator/storetest"
)

// A failed commit stops the scheduler as if its process had died, and a
// dead process's functions stop too: the attempts running then have
// their contexts end (cause ErrClosed), and Shutdown returns once they
// have. They used to be left running, so that Shutdown waited for ever
// for functions that wait for their context.
func TestFailedCommitEndsRunningAttempts(t *testing.T) {
	mem := storetest.NewMemory()
	release, running := make(chan struct{}), make(chan struct{})
	cause := make(chan error, 1)
	s, err := coordinator.New(coordinator.WithStore(mem.Open()), coordinator.WithWorkers(2),
		coordinator.WithFunc("step", func(ctx context.Context, p []byte) error {
			switch string(p) {
			case "a":
				close(running)
				<-ctx.Done()
				cause <- context.Cause(ctx)
				return ctx.Err()
			case "x":
				<-release
			}
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Submit(coordinator.Task{ID: "a", Func: "step", Payload: []byte("a")},
		coordinator.Task{ID: "x", Func: "step", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	<-running // no subscriber: the configuration most users run
	mem.FailCommits(errors.New("disk full"))
	close(release)                                                           // x's end is the commit that fails
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a failure guard
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, coordinator.ErrStoreFailed) {
		t.Errorf("Shutdown = %v; want ErrStoreFailed, once the running attempt has ended", err)
	}
	select {
	case got := <-cause:
		if !errors.Is(got, coordinator.ErrClosed) {
			t.Errorf("the running attempt's context ended with cause %v; want ErrClosed", got)
		}
	default:
		t.Error("the running attempt's context did not end")
	}
}
