package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/coordinator/storetest"
)

// Durable schedulers on an in-memory store (storetest.Memory), crashed at
// chosen moments with Memory.Crash. These tests use the configuration most
// users run: no subscriber, no logger, no middleware.

// blockingFuncs registers "step", whose function blocks until its
// context ends: an inspection scheduler, started on a crashed store to
// read it, must run nothing to its end.
func blockingFuncs() coordinator.Option {
	return coordinator.WithFunc("step", func(ctx context.Context, _ []byte) error {
		<-ctx.Done()
		return ctx.Err()
	})
}

// restored starts a scheduler on what a crash left and returns it; the
// test's cleanup shuts it down.
func restored(t *testing.T, mem *storetest.Memory, opts ...coordinator.Option) *coordinator.Scheduler {
	t.Helper()
	opts = append([]coordinator.Option{coordinator.WithStore(mem.Open()), coordinator.WithWorkers(1)}, opts...)
	return newScheduler(t, opts...)
}

// An attempt that ran counts after a crash in every configuration: a
// durable scheduler commits each start as soon as a worker claims it. It
// used to commit a start only when something else woke the coordinator (a
// subscriber asked every attempt to be reported); with nobody listening,
// an attempt claimed right after another one ended was not written until
// its own end, and a crash in between brought it back Ready, uncounted.
func TestInterruptedAttemptCountsWithoutObservers(t *testing.T) {
	for _, maxAttempts := range []int{1, 2} {
		t.Run(fmt.Sprintf("MaxAttempts=%d", maxAttempts), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := storetest.NewMemory()
				release, running := make(chan struct{}), make(chan struct{})
				step := coordinator.WithFunc("step", func(ctx context.Context, p []byte) error {
					switch string(p) {
					case "x":
						<-release
					case "b":
						close(running)
						<-ctx.Done() // runs until the crash
						return ctx.Err()
					}
					return nil
				})
				s, err := coordinator.New(coordinator.WithStore(mem.Open()), coordinator.WithWorkers(1), step)
				if err != nil {
					t.Fatal(err)
				}
				task := func(id string, deps ...string) coordinator.Task {
					return coordinator.Task{ID: id, Func: "step", Payload: []byte(id), Deps: deps}
				}
				b := task("b", "a")
				b.Retry.MaxAttempts = maxAttempts
				// One worker: b, released by a, is handed out behind x while
				// x runs, and claimed the moment x returns.
				if err := s.Submit(task("a"), task("x"), b); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				close(release)
				<-running
				synctest.Wait() // the coordinator has done all it will do of its own accord
				crashed := mem.Crash()
				if err := s.Shutdown(context.Background()); err != nil {
					t.Fatal(err)
				}

				s2 := restored(t, crashed, blockingFuncs())
				ti, _ := s2.Info("b")
				if ti.Attempts != 1 || !errors.Is(ti.Err, coordinator.ErrInterrupted) {
					t.Fatalf("after the crash b is %v with %d attempts, error %v; want its interrupted attempt counted (1, ErrInterrupted)",
						ti.Status, ti.Attempts, ti.Err)
				}
				if want := coordinator.Failed; maxAttempts == 1 && ti.Status != want {
					t.Errorf("b is %v; want %v: its only attempt was interrupted", ti.Status, want)
				}
				if maxAttempts == 2 && ti.Status.Final() {
					t.Errorf("b is %v; want a retry to come", ti.Status)
				}
			})
		})
	}
}
