package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/bench/mutexsched"
	"github.com/batonhq/baton/coordinator"
)

// Body is a task body: empty, or a spin of a fixed duration.
type Body struct {
	Name string
	Spin time.Duration
}

// Bodies are the task bodies measured.
var Bodies = []Body{{"empty", 0}, {"1us", time.Microsecond}, {"100us", 100 * time.Microsecond}}

func (b Body) run() {
	if b.Spin > 0 {
		for start := time.Now(); time.Since(start) < b.Spin; {
		}
	}
}

// Design runs graphs on one scheduler design.
type Design struct {
	Name string
	// prepare builds the scheduler, submits g behind a gate (when gated) and
	// returns the function that opens the gate and waits for the end, and
	// the one that tears the scheduler down.
	prepare func(g *Graph, workers int, body Body, gated bool) (run func() error, stop func())
}

// Designs are the designs compared: Baton, the mutex design with a binary
// heap, and the control: the mutex design with Baton's ready queue.
var Designs = []Design{
	{Name: "baton", prepare: prepareBaton},
	{Name: "mutex", prepare: func(g *Graph, w int, b Body, gated bool) (func() error, func()) {
		return prepareMutex(mutexsched.NewHeap(w), g, b, gated)
	}},
	{Name: "mutex+fifo", prepare: func(g *Graph, w int, b Body, gated bool) (func() error, func()) {
		return prepareMutex(mutexsched.NewFIFO(w), g, b, gated)
	}},
}

// Naive is the design with no scheduler at all: one goroutine per task,
// waiting on its dependencies' done channels (no pool: the Go scheduler
// runs them all). It is measured on small graphs only: a million
// goroutines would measure their stacks.
var Naive = Design{Name: "naive", prepare: prepareNaive}

func prepareNaive(g *Graph, workers int, body Body, gated bool) (func() error, func()) {
	attempt := attempts(g, body)
	run := func() error {
		done := make([]chan struct{}, g.N)
		for i := range done {
			done[i] = make(chan struct{})
		}
		var wg sync.WaitGroup
		for i := range g.N {
			wg.Go(func() {
				for _, d := range g.Deps(i) {
					<-done[d]
				}
				for attempt(i) != nil { // a planned failure: run it again
				}
				close(done[i])
			})
		}
		wg.Wait()
		return nil
	}
	return run, func() {}
}

var errPlanned = errors.New("planned failure")

// attempts returns the work of one attempt of task i, the same for every
// design: the body, then a failure on the first attempt if the graph plans
// one.
func attempts(g *Graph, body Body) func(i int) error {
	var tried []atomic.Bool
	if g.FailOnce != nil {
		tried = make([]atomic.Bool, g.N)
	}
	return func(i int) error {
		body.run()
		if tried != nil && g.FailOnce[i] && !tried[i].Swap(true) {
			return errPlanned
		}
		return nil
	}
}

// Service is Baton as a long-lived service runs it: retention on
// (WithRetention(0): every task is forgotten as soon as it ends, so that
// the next run may use the same IDs), each run submitted with SubmitBatch
// and waited with Batch.Wait. Its run may be called again and again.
// Ungated only.
var Service = Design{Name: "baton-service", prepare: func(g *Graph, w int, b Body, gated bool) (func() error, func()) {
	if gated {
		panic("bench: Service runs ungated")
	}
	return prepareBatonWith(g, w, b, gated, true)
}}

func prepareBaton(g *Graph, workers int, body Body, gated bool) (func() error, func()) {
	return prepareBatonWith(g, workers, body, gated, false)
}

func prepareBatonWith(g *Graph, workers int, body Body, gated, retain bool) (func() error, func()) {
	opts := []coordinator.Option{coordinator.WithWorkers(workers)}
	if retain {
		opts = append(opts, coordinator.WithRetention(0))
	}
	s, err := coordinator.New(opts...)
	if err != nil {
		panic(err)
	}
	attempt := attempts(g, body)
	ids := make([]string, g.N)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	tasks := make([]coordinator.Task, g.N, g.N+1)
	depIDs := make([]string, len(g.Dep))
	for i, d := range g.Dep {
		depIDs[i] = ids[d]
	}
	for i := range tasks {
		t := &tasks[i]
		t.ID = ids[i]
		t.Deps = depIDs[g.Start[i]:g.Start[i+1]:g.Start[i+1]]
		t.Run = func(context.Context) error { return attempt(i) }
		if g.Delay != nil {
			t.Delay = g.Delay[i]
		}
		if g.FailOnce != nil {
			t.Retry = coordinator.RetryPolicy{MaxAttempts: 2, BaseDelay: time.Millisecond}
		}
	}
	stop := func() { s.Shutdown(context.Background()) }
	wait := func() error {
		if err := s.Wait(context.Background()); err != nil {
			return err
		}
		return checkBaton(s, ids)
	}
	if !gated && retain {
		return func() error {
			b, err := s.SubmitBatch(context.Background(), tasks...)
			if err != nil {
				return err
			}
			return b.Wait(context.Background())
		}, stop
	}
	if !gated {
		return func() error {
			if err := s.Submit(tasks...); err != nil {
				return err
			}
			return wait()
		}, stop
	}
	// The gate: every root waits on it, so nothing starts until it runs.
	open := make(chan struct{})
	gate := coordinator.Task{ID: "gate", Run: func(context.Context) error { <-open; return nil }}
	for i := range tasks {
		if len(tasks[i].Deps) == 0 {
			tasks[i].Deps = []string{"gate"}
		}
	}
	if err := s.Submit(append([]coordinator.Task{gate}, tasks...)...); err != nil {
		panic(err)
	}
	return func() error { close(open); return wait() }, stop
}

// checkBaton verifies the run: every task succeeded.
func checkBaton(s *coordinator.Scheduler, ids []string) error {
	for _, id := range []string{ids[0], ids[len(ids)/2], ids[len(ids)-1]} {
		if info, _ := s.Info(id); info.Status != coordinator.Succeeded {
			return fmt.Errorf("task %s ended %v", id, info.Status)
		}
	}
	return nil
}

func prepareMutex(s *mutexsched.Scheduler, g *Graph, body Body, gated bool) (func() error, func()) {
	attempt := attempts(g, body)
	specs := make([]mutexsched.Spec, g.N)
	for i := range specs {
		sp := &specs[i]
		sp.Deps = g.Deps(i)
		sp.Run = func() error { return attempt(i) }
		if g.Delay != nil {
			sp.Delay = g.Delay[i]
		}
		if g.FailOnce != nil {
			sp.MaxAttempts, sp.BaseDelay = 2, time.Millisecond
		}
	}
	if !gated {
		return func() error { s.Submit(specs); s.Wait(); return nil }, s.Close
	}
	s.Pause()
	s.Submit(specs)
	return func() error { s.Resume(); s.Wait(); return nil }, s.Close
}

// Measure runs g once on d and returns the timed duration. It collects
// garbage between building and timing, so that a collection started by
// the build does not run, in the background, into the timed part.
func (d Design) Measure(g *Graph, workers int, body Body, gated bool) (time.Duration, error) {
	run, stop := d.prepare(g, workers, body, gated)
	defer stop()
	runtime.GC()
	start := time.Now()
	err := run()
	return time.Since(start), err
}
