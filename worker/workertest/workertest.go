// Package workertest is the conformance suite for custom worker types: the
// behaviour the scheduler relies on from any worker.Worker.
//
// # Usage
//
// In the custom worker's tests:
//
//	func TestConformance(t *testing.T) {
//		workertest.Run(t, newMyWorker(), workertest.Jobs{
//			OK:    worker.Job{ID: "ok", Payload: myPayload},
//			Fail:  worker.Job{ID: "fail", Payload: badPayload},
//			Block: worker.Job{ID: "block", Payload: slowPayload},
//		})
//	}
package workertest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/worker"
)

// Jobs are the jobs the suite runs; the worker's author makes them.
type Jobs struct {
	OK    worker.Job // Do returns nil
	Fail  worker.Job // Do returns an error
	Block worker.Job // Do runs until its context ends, then returns
	// ReturnWithin is how long Do(Block) may take to return once its
	// context has ended (0: DefaultReturnWithin).
	ReturnWithin time.Duration
}

// DefaultReturnWithin is how long the suite lets a worker take to return
// once its context has ended, unless Jobs.ReturnWithin says otherwise.
const DefaultReturnWithin = 10 * time.Second

// Run checks w: a job that should succeed succeeds and one that should fail
// fails, under concurrent use; a job that runs until cancelled returns once
// its context ends (a worker that has not returned Jobs.ReturnWithin later
// fails the test, saying so, rather than hanging it); a Validator accepts
// the suite's jobs. Run it with -race.
func Run(t *testing.T, w worker.Worker, jobs Jobs) {
	t.Helper()
	t.Run("Outcomes", func(t *testing.T) {
		if err := w.Do(context.Background(), jobs.OK); err != nil {
			t.Fatalf("Do(OK) = %v; want nil", err)
		}
		if err := w.Do(context.Background(), jobs.Fail); err == nil {
			t.Fatalf("Do(Fail) = nil; want an error")
		}
	})
	t.Run("Concurrent", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for i := range 32 {
			wg.Go(func() {
				j := jobs.OK
				if i%2 == 1 {
					j = jobs.Fail
				}
				err := w.Do(context.Background(), j)
				if (err == nil) != (i%2 == 0) {
					errs <- errors.New("workertest: Do gave the wrong outcome under concurrent use")
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	})
	t.Run("HonoursContext", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Do(ctx, jobs.Block) }()
		cancel()
		within := jobs.ReturnWithin
		if within <= 0 {
			within = DefaultReturnWithin
		}
		// A failure guard on the wall clock, not a wait for something to
		// happen: Do returns at once if the worker honours its context.
		guard, stop := context.WithTimeout(context.Background(), within)
		defer stop()
		select {
		case <-done:
		case <-guard.Done():
			t.Fatalf("Do(Block) has not returned %v after its context ended: a worker must return soon after "+
				"ctx ends, or the scheduler's Cancel, Timeout and Shutdown wait for it (its goroutine is left running)", within)
		}
	})
	if v, ok := w.(worker.Validator); ok {
		t.Run("Validate", func(t *testing.T) {
			for _, j := range []worker.Job{jobs.OK, jobs.Fail, jobs.Block} {
				if err := v.Validate(j); err != nil {
					t.Fatalf("Validate(%s) = %v; want nil", j.ID, err)
				}
			}
		})
	}
}
