package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
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

// A failed commit in an iteration that handed work to idle workers held
// back that work (nothing is published after a failed commit): those
// workers were never woken, never said they were idle again, and the
// shutdown that follows the failure waited for them for ever. The work
// is published once the shutdown has revoked it: they find nothing to
// run, say they are idle, and Shutdown returns.
func TestFailedCommitDoesNotStrandIdleWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := storetest.NewMemory()
		release := make(chan struct{})
		s, err := coordinator.New(coordinator.WithStore(mem.Open()), coordinator.WithWorkers(4),
			coordinator.WithFunc("step", func(ctx context.Context, p []byte) error {
				if string(p) == "a" {
					<-release
				}
				return nil
			}))
		if err != nil {
			t.Fatal(err)
		}
		tasks := []coordinator.Task{{ID: "a", Func: "step", Payload: []byte("a")}}
		for i := range 8 { // released by a at once: handed to the three idle workers too
			tasks = append(tasks, coordinator.Task{ID: fmt.Sprint("d", i), Func: "step", Deps: []string{"a"}})
		}
		if err := s.Submit(tasks...); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // a runs, its start committed; the other workers idle
		mem.FailCommits(errors.New("disk full"))
		close(release) // a's end, and the hand-out of its dependents, is the commit that fails
		synctest.Wait()
		if err := s.Shutdown(context.Background()); !errors.Is(err, coordinator.ErrStoreFailed) {
			t.Errorf("Shutdown = %v; want ErrStoreFailed", err)
		}
	})
}

// A Cancel whose commit fails was not stored: the next scheduler on the
// store resumes the attempt as running. Its context ends as a dead
// process's would, with cause ErrClosed, not with the ErrCancelled that
// was decided: a worker that acts on a cancel (a remote pool deletes the
// attempt's queued work) must leave it alone.
func TestFailedCommitStopsWithErrClosed(t *testing.T) {
	mem := storetest.NewMemory()
	running := make(chan struct{})
	cause := make(chan error, 1)
	s, err := coordinator.New(coordinator.WithStore(mem.Open()), coordinator.WithWorkers(1),
		coordinator.WithFunc("step", func(ctx context.Context, p []byte) error {
			close(running)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return ctx.Err()
		}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Submit(coordinator.Task{ID: "a", Func: "step"}); err != nil {
		t.Fatal(err)
	}
	<-running
	mem.FailCommits(errors.New("disk full"))
	if s.Cancel("a") {
		t.Error("Cancel(a) = true; want false: its commit failed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a failure guard
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, coordinator.ErrStoreFailed) {
		t.Errorf("Shutdown = %v; want ErrStoreFailed", err)
	}
	select {
	case got := <-cause:
		if !errors.Is(got, coordinator.ErrClosed) || errors.Is(got, coordinator.ErrCancelled) {
			t.Errorf("the running attempt's context ended with cause %v; want ErrClosed (the Cancel was not stored)", got)
		}
	default:
		t.Error("the running attempt's context did not end")
	}
}
