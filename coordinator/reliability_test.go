package coordinator_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/worker"
)

// Regression tests, each named after the guarantee it keeps.

// Once Shutdown has begun no attempt starts, and once it returns every
// task is final: recurring series included, whatever point they are at
// (waiting for the next run, running, their run just returned).
func TestShutdownEndsSeriesAndStartsNothing(t *testing.T) {
	for _, after := range []time.Duration{0, time.Microsecond, 500 * time.Microsecond, time.Millisecond, 5*time.Millisecond + 500*time.Microsecond} {
		t.Run(after.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, err := coordinator.New(coordinator.WithWorkers(2))
				if err != nil {
					t.Fatalf("New = %v", err)
				}
				rec := record(s)
				var runs atomic.Int32
				var shutdown atomic.Bool
				var startedAfter atomic.Int32
				tick := func(ctx context.Context) error {
					if shutdown.Load() {
						startedAfter.Add(1)
					}
					runs.Add(1)
					return nil
				}
				var tasks []coordinator.Task
				for i := range 4 {
					tasks = append(tasks, coordinator.Task{ID: fmt.Sprint("tick", i), Run: tick, Every: time.Millisecond, Times: 1000})
				}
				tasks = append(tasks, coordinator.Task{ID: "slow", Run: func(ctx context.Context) error {
					time.Sleep(3 * time.Millisecond) // holds a worker while the series go on
					return nil
				}})
				if err := s.Submit(tasks...); err != nil {
					t.Fatalf("Submit = %v", err)
				}
				time.Sleep(after)
				shutdown.Store(true)
				if err := s.Shutdown(context.Background()); err != nil {
					t.Fatalf("Shutdown = %v", err)
				}
				n := runs.Load()
				for _, tk := range tasks {
					if info, _ := s.Info(tk.ID); !info.Status.Final() {
						t.Fatalf("Info(%s) after Shutdown = %+v; want final", tk.ID, info)
					}
				}
				if err := s.Wait(context.Background()); err != nil {
					t.Fatalf("Wait after Shutdown = %v", err)
				}
				time.Sleep(time.Second) // fake time: a series that escaped would run on
				if got := runs.Load(); got != n {
					t.Fatalf("%d runs after Shutdown returned; want none", got-n)
				}
				// A function that began after Shutdown was called had been
				// claimed before the coordinator took the request: the event
				// stream says it started before the shutdown's cancellations.
				closedAt := -1
				for i, e := range rec.all() {
					if e.Kind == coordinator.EventCancelled && errors.Is(e.Err, coordinator.ErrClosed) && closedAt < 0 {
						closedAt = i
					}
					if e.Kind == coordinator.EventStarted && closedAt >= 0 {
						t.Fatalf("%s started (event %d) after Shutdown's first cancellation (event %d)", e.TaskID, i, closedAt)
					}
				}
			})
		})
	}
}

// A Cancel of a recurring task between runs stops the series at once; one
// that comes while a run executes stops it after that run.
func TestCancelStopsSeries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		var runs atomic.Int32
		release := make(chan struct{})
		err := s.Submit(
			coordinator.Task{ID: "between", Every: time.Second, Times: 100, Run: func(context.Context) error { runs.Add(1); return nil }},
			coordinator.Task{ID: "during", Every: time.Second, Times: 100, Run: func(ctx context.Context) error {
				<-release
				return nil
			}},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		time.Sleep(1500 * time.Millisecond) // between: run 2 done, waits for run 3
		synctest.Wait()
		if !s.Cancel("between") {
			t.Fatalf("Cancel(between) = false; want true")
		}
		if info, _ := s.Info("between"); info.Status != coordinator.Cancelled || info.Runs != 2 {
			t.Fatalf("Info(between) = %+v; want cancelled after 2 runs", info)
		}
		if !s.Cancel("during") {
			t.Fatalf("Cancel(during) = false; want true")
		}
		close(release)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n := runs.Load(); n != 2 {
			t.Fatalf("between ran %d times; want 2", n)
		}
		if info, _ := s.Info("during"); info.Status != coordinator.Cancelled {
			t.Fatalf("Info(during) = %+v; want cancelled", info)
		}
	})
}

// Every duration Submit accepts, at its extreme, is computed without
// overflow: retry waits (with full jitter), delays, series intervals,
// timeouts and retention.
func TestExtremeDurationsDoNotOverflow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithRetention(math.MaxInt64), coordinator.WithWorkers(2))
		rec := record(s)
		failOnce := func() func(context.Context) error {
			var n atomic.Int32
			return func(context.Context) error {
				if n.Add(1) == 1 {
					return errors.New("once")
				}
				return nil
			}
		}
		err := s.Submit(
			coordinator.Task{ID: "jitter", Run: failOnce(), Retry: coordinator.RetryPolicy{BaseDelay: math.MaxInt64, Jitter: 1, MaxAttempts: 2}},
			coordinator.Task{ID: "nojitter", Run: failOnce(), Retry: coordinator.RetryPolicy{BaseDelay: math.MaxInt64, MaxAttempts: 3}},
			coordinator.Task{ID: "capped", Run: failOnce(), Retry: coordinator.RetryPolicy{BaseDelay: math.MaxInt64 / 3, MaxDelay: math.MaxInt64, Jitter: 0.5, MaxAttempts: 9}},
			coordinator.Task{ID: "delay", Run: ok, Delay: math.MaxInt64},
			coordinator.Task{ID: "every", Run: ok, Every: math.MaxInt64, Times: 3},
			coordinator.Task{ID: "timeout", Run: ok, Timeout: math.MaxInt64},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		synctest.Wait()
		for _, e := range rec.all() {
			if e.Kind == coordinator.EventRetrying && e.Wait < 0 {
				t.Fatalf("%s waits %v", e.TaskID, e.Wait)
			}
		}
		for id, want := range map[string]coordinator.Status{"jitter": coordinator.Pending, "nojitter": coordinator.Pending,
			"capped": coordinator.Pending, "delay": coordinator.Pending, "every": coordinator.Pending, "timeout": coordinator.Succeeded} {
			if st := status(t, s, id); st != want {
				t.Fatalf("status(%s) = %v; want %v", id, st, want)
			}
		}
		if info, _ := s.Info("every"); info.Runs != 1 {
			t.Fatalf("Info(every) = %+v; want 1 run done, the next far away", info)
		}
	})
}

// A subscriber callback that panics is unsubscribed and its panic logged,
// with the stack; the scheduler and the other subscribers go on.
func TestSubscriberPanicIsContained(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs bytes.Buffer
		var logMu sync.Mutex
		log := slog.New(slog.NewTextHandler(lockedWriter{&logs, &logMu}, nil))
		s := newScheduler(t, coordinator.WithLogger(log))
		var calls atomic.Int32
		s.Subscribe(func(e coordinator.Event) {
			if calls.Add(1) == 3 {
				panic("subscriber bug")
			}
		})
		good := record(s)
		var tasks []coordinator.Task
		for i := range 20 {
			tasks = append(tasks, coordinator.Task{ID: fmt.Sprint(i), Run: ok})
		}
		if err := s.Submit(tasks...); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		if n := calls.Load(); n != 3 {
			t.Fatalf("the panicking subscriber was called %d times; want 3 (unsubscribed at its panic)", n)
		}
		if n := len(good.all()); n != 40 {
			t.Fatalf("the other subscriber got %d events; want 40", n)
		}
		logMu.Lock()
		out := logs.String()
		logMu.Unlock()
		if !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "subscriber bug") || !strings.Contains(out, "reliability_test.go") {
			t.Fatalf("log = %q; want an Error with the panic value and its stack", out)
		}
	})
}

type lockedWriter struct {
	b  *bytes.Buffer
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// Shutdown and Wait may be called from a subscriber callback: they return
// (Shutdown waits for everything but that subscriber's own goroutine).
func TestShutdownAndWaitFromSubscriber(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := coordinator.New(coordinator.WithWorkers(2))
		if err != nil {
			t.Fatalf("New = %v", err)
		}
		waited, shut := make(chan error, 1), make(chan error, 1)
		var once sync.Once
		s.Subscribe(func(e coordinator.Event) {
			if e.TaskID == "last" && e.Kind == coordinator.EventSucceeded {
				once.Do(func() {
					waited <- s.Wait(context.Background())
					shut <- s.Shutdown(context.Background())
				})
			}
		})
		release := make(chan struct{})
		err = s.Submit(
			coordinator.Task{ID: "last", Run: ok},
			coordinator.Task{ID: "blocked", Run: func(ctx context.Context) error {
				select {
				case <-release:
				case <-ctx.Done():
				}
				return nil
			}},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		synctest.Wait()
		close(release) // Wait in the callback returns once blocked ends
		if err := <-waited; err != nil {
			t.Fatalf("Wait from a subscriber = %v; want nil", err)
		}
		if err := <-shut; err != nil {
			t.Fatalf("Shutdown from a subscriber = %v; want nil", err)
		}
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatalf("Shutdown afterwards = %v", err)
		}
	})
}

// Several subscribers calling Shutdown from their callbacks at once do not
// wait for one another; a Shutdown from outside then waits for them all.
func TestShutdownFromSeveralSubscribers(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprint(n, " subscribers"), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, err := coordinator.New(coordinator.WithWorkers(2))
				if err != nil {
					t.Fatalf("New = %v", err)
				}
				shut := make(chan error, n)
				for range n {
					s.Subscribe(func(e coordinator.Event) {
						if e.Kind == coordinator.EventFailed {
							shut <- s.Shutdown(context.Background())
						}
					})
				}
				err = s.Submit(
					coordinator.Task{ID: "bad", Run: func(context.Context) error { return errors.New("boom") }},
					coordinator.Task{ID: "slow", Run: func(ctx context.Context) error { <-ctx.Done(); return nil }},
				)
				if err != nil {
					t.Fatalf("Submit = %v", err)
				}
				for range n {
					if err := <-shut; err != nil {
						t.Fatalf("Shutdown from a subscriber = %v; want nil", err)
					}
				}
				if err := s.Shutdown(context.Background()); err != nil {
					t.Fatalf("Shutdown afterwards = %v", err)
				}
				if st := status(t, s, "slow"); st != coordinator.Cancelled {
					t.Fatalf("status(slow) = %v; want cancelled", st)
				}
			})
		})
	}
}

// A Wait whose context ends is forgotten: waiters that gave up hold no
// memory while the graph never settles.
func TestAbandonedWaitsAreForgotten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		g := newGate()
		if err := s.Submit(coordinator.Task{ID: "forever", Run: g.run}); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		synctest.Wait()
		wave := func() {
			var wg sync.WaitGroup
			for range 10_000 {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
					defer cancel()
					if err := s.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("Wait = %v; want DeadlineExceeded", err)
					}
				})
			}
			wg.Wait()
		}
		wave() // warm up: the loop's map and the runtime's caches
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range 20 {
			wave()
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		g.release()
		// Kept, the 200,000 waiters would hold about 28 MB. What other
		// tests of the package leave to the collector, and the race
		// detector's own bookkeeping, move the heap by a few MB.
		if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 10<<20 {
			t.Errorf("heap grew %d bytes over 200,000 abandoned Waits; want them forgotten", grew)
		}
	})
}

// Once Shutdown has begun, Submit returns ErrClosed before it looks at the
// tasks.
func TestSubmitAfterShutdownIsClosedFirst(t *testing.T) {
	s, err := coordinator.New()
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	bad := coordinator.Task{ID: "", Run: nil, Delay: -1}
	if err := s.Submit(bad); !errors.Is(err, coordinator.ErrClosed) || errors.Is(err, coordinator.ErrInvalidTask) {
		t.Fatalf("Submit(invalid) after Shutdown = %v; want ErrClosed", err)
	}
	var g coordinator.Graph
	g.Add(bad, coordinator.Handle{})
	if err := s.SubmitGraph(context.Background(), &g); !errors.Is(err, coordinator.ErrClosed) {
		t.Fatalf("SubmitGraph(invalid) after Shutdown = %v; want ErrClosed", err)
	}
}

// A panicking custom worker's attempts fail with the panic; a timed one
// too (the panic is on the attempt's own goroutine).
func TestWorkerPanicInTimedAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithPool("p", 1, panicWorker{}))
		err := s.Submit(coordinator.Task{ID: "timed", Pool: "p", Payload: 1, Timeout: time.Second},
			coordinator.Task{ID: "plain", Pool: "p", Payload: 1})
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		for _, id := range []string{"timed", "plain"} {
			info, _ := s.Info(id)
			var pe *worker.PanicError
			if info.Status != coordinator.Failed || !errors.As(info.Err, &pe) {
				t.Fatalf("Info(%s) = %+v; want failed with a *PanicError", id, info)
			}
		}
	})
}

type panicWorker struct{}

func (panicWorker) Do(context.Context, worker.Job) error { panic("worker bug") }

// Shutdown while a revocation for priority is planned: the plan is dropped
// (it used to leave a due time in the past, and the coordinator spun, so
// that fake time never moved and Shutdown never returned).
func TestShutdownWithPlannedRevocation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := coordinator.New(coordinator.WithWorkers(1))
		if err != nil {
			t.Fatal(err)
		}
		deaf := func(context.Context) error { time.Sleep(10 * time.Millisecond); return nil } // ignores its context
		if err := s.Submit(coordinator.Task{ID: "a", Priority: 5, Run: deaf}, coordinator.Task{ID: "b", Priority: 5, Run: deaf}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
		if err := s.Submit(coordinator.Task{ID: "u", Run: deaf}); err != nil { // plans taking b back in 200µs
			t.Fatal(err)
		}
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatalf("Shutdown = %v", err)
		}
	})
}

// A task, or a custom worker, that calls runtime.Goexit (testing.T's
// FailNow does) fails its attempt like a panic, with worker.ErrGoexit and
// the stack; its retry runs, the pool goes on with every worker and
// Shutdown returns (the worker goroutine used to vanish: the task stayed
// Running, Wait and Shutdown never returned).
func TestGoexitInATaskFailsItsAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var tries atomic.Int32
		exitOnce := func(context.Context) error {
			if tries.Add(1) == 1 {
				runtime.Goexit()
			}
			return nil
		}
		exit := func(context.Context) error { runtime.Goexit(); return nil }
		s := newScheduler(t, coordinator.WithWorkers(1), coordinator.WithPool("p", 1, goexitWorker{}))
		var tasks []coordinator.Task
		tasks = append(tasks,
			coordinator.Task{ID: "retried", Run: exitOnce, Retry: coordinator.RetryPolicy{MaxAttempts: 2}},
			coordinator.Task{ID: "plain", Run: exit},
			coordinator.Task{ID: "timed", Run: exit, Timeout: time.Second},
			coordinator.Task{ID: "below", Run: ok, Deps: []string{"plain"}},
			coordinator.Task{ID: "worker", Pool: "p", Payload: 1},
			coordinator.Task{ID: "worker-timed", Pool: "p", Payload: 1, Timeout: time.Second})
		for i := range 20 { // the pool's one worker runs these after the exits
			tasks = append(tasks, coordinator.Task{ID: fmt.Sprint("after-", i), Run: ok}, coordinator.Task{ID: fmt.Sprint("p-after-", i), Pool: "p", Payload: 0})
		}
		if err := s.Submit(tasks...); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		for _, id := range []string{"plain", "timed", "worker", "worker-timed"} {
			info, _ := s.Info(id)
			var pe *worker.PanicError
			if info.Status != coordinator.Failed || !errors.Is(info.Err, worker.ErrGoexit) || !errors.As(info.Err, &pe) ||
				!strings.Contains(string(pe.Stack), "reliability_test.go") {
				t.Errorf("Info(%s) = %v, %v; want Failed with ErrGoexit in a *PanicError with the task's stack", id, info.Status, info.Err)
			}
		}
		if info, _ := s.Info("retried"); info.Status != coordinator.Succeeded || info.Attempts != 2 {
			t.Errorf("Info(retried) = %v after %d attempts; want Succeeded on its retry", info.Status, info.Attempts)
		}
		if st := status(t, s, "below"); st != coordinator.Skipped {
			t.Errorf("below = %v; want Skipped", st)
		}
		for i := range 20 {
			for _, id := range []string{fmt.Sprint("after-", i), fmt.Sprint("p-after-", i)} {
				if st := status(t, s, id); st != coordinator.Succeeded {
					t.Errorf("%s = %v; want Succeeded", id, st)
				}
			}
		}
	})
}

// goexitWorker calls runtime.Goexit for a Payload of 1 and succeeds
// otherwise.
type goexitWorker struct{}

func (goexitWorker) Do(_ context.Context, j worker.Job) error {
	if j.Payload == 1 {
		runtime.Goexit()
	}
	return nil
}

// A RetryIf that calls runtime.Goexit or panics says "no retry": the task
// fails with its own error (a Goexit there used to leave the attempt half
// recorded, and the coordinator panicked on it).
func TestRetryIfThatExitsOrPanicsSaysNo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(1))
		boom := errors.New("boom")
		fail := func(context.Context) error { return boom }
		var tasks []coordinator.Task
		for i, f := range []func(error) bool{
			func(error) bool { runtime.Goexit(); return true },
			func(error) bool { panic("retry bug") },
		} {
			tasks = append(tasks, coordinator.Task{ID: fmt.Sprint("t", i), Run: fail, Retry: coordinator.RetryPolicy{MaxAttempts: 3, RetryIf: f}})
		}
		tasks = append(tasks, coordinator.Task{ID: "after", Run: ok})
		if err := s.Submit(tasks...); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		for _, id := range []string{"t0", "t1"} {
			if info, _ := s.Info(id); info.Status != coordinator.Failed || !errors.Is(info.Err, boom) || info.Attempts != 1 {
				t.Errorf("Info(%s) = %v, %v after %d attempts; want Failed with boom after 1", id, info.Status, info.Err, info.Attempts)
			}
		}
		if st := status(t, s, "after"); st != coordinator.Succeeded {
			t.Errorf("after = %v; want Succeeded", st)
		}
	})
}

// A Subscribe once Shutdown has begun is never called, even while the
// scheduler still waits for a function that ignores its context (its end
// is an event), and its unsubscribe does nothing.
func TestSubscribeAfterShutdownIsNeverCalled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := coordinator.New(coordinator.WithWorkers(1))
		if err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		if err := s.Submit(coordinator.Task{ID: "stubborn", Run: func(context.Context) error { <-release; return nil }}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err == nil {
			t.Fatal("Shutdown with a function that ignores its context = nil; want its context's end")
		}
		var calls atomic.Int32
		unsubscribe := s.Subscribe(func(coordinator.Event) { calls.Add(1) })
		close(release)
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatalf("second Shutdown = %v", err)
		}
		synctest.Wait()
		unsubscribe()
		if n := calls.Load(); n != 0 {
			t.Errorf("a Subscribe made after Shutdown began was called %d times; want never", n)
		}
	})
}
