package coordinator_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/worker"
)

// The dispatch guarantees. Work handed to a worker is a promise no one
// relies on: what a worker has not claimed goes to whoever can run it
// first. Task durations are fake (synctest) but exact, so a task stuck
// behind another shows in the times themselves.

// warmUp runs n instant tasks so that the pool measures its attempts as
// nearly free and hands out large lanes: the worst case for a task of
// another duration that follows.
func warmUp(t *testing.T, s *coordinator.Scheduler, prefix string, n int, pool string) {
	t.Helper()
	tasks := make([]coordinator.Task, n)
	for i := range tasks {
		tasks[i] = coordinator.Task{ID: fmt.Sprintf("%s%d", prefix, i), Run: ok, Pool: pool, Payload: payloadFor(pool)}
	}
	if err := s.Submit(tasks...); err != nil {
		t.Fatalf("Submit(warm-up) = %v", err)
	}
	if err := s.Wait(context.Background()); err != nil {
		t.Fatalf("Wait(warm-up) = %v", err)
	}
}

func payloadFor(pool string) any {
	if pool == "" {
		return nil
	}
	return "job"
}

// 1. No worker idles while work of its pool that was handed out waits to
// start: one 500ms task heads a batch of 1,000 tiny ones on 4 workers; the
// tiny ones do not wait for it.
func TestIdleWorkersTakeHandedOutWork(t *testing.T) {
	for _, slowAt := range []int{0, 1, 500, 999} {
		t.Run(fmt.Sprintf("slow at %d", slowAt), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScheduler(t, coordinator.WithWorkers(4))
				warmUp(t, s, "warm", 4000, "")
				start := time.Now()
				var mu sync.Mutex
				var last time.Duration
				tiny := func(context.Context) error {
					mu.Lock()
					last = max(last, time.Since(start))
					mu.Unlock()
					return nil
				}
				tasks := make([]coordinator.Task, 1001)
				for i := range tasks {
					tasks[i] = coordinator.Task{ID: fmt.Sprint("tiny", i), Run: tiny}
				}
				tasks[slowAt] = coordinator.Task{ID: "slow", Run: func(context.Context) error { time.Sleep(500 * time.Millisecond); return nil }}
				if err := s.Submit(tasks...); err != nil {
					t.Fatalf("Submit = %v", err)
				}
				settle(t, s)
				if last >= 100*time.Millisecond {
					t.Fatalf("the last tiny task ended %v after submission; want < 100ms: idle workers must take what the slow task's worker has not started", last)
				}
			})
		})
	}
}

// 2. Bounded priority inversion: with one worker, a better task waits at
// most for the attempt already running plus about one dispatch budget of
// handed-out work, whatever the durations of the tasks queued behind it.
func TestBetterPriorityWaitsOnlyForRunningWork(t *testing.T) {
	for _, d := range []time.Duration{2 * time.Millisecond, 50 * time.Millisecond, time.Second} {
		t.Run(d.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScheduler(t, coordinator.WithWorkers(1))
				rec := record(s)
				warmUp(t, s, "warm", 2000, "") // the pool believes its tasks are free: its lanes are large
				tasks := make([]coordinator.Task, 200)
				for i := range tasks {
					tasks[i] = coordinator.Task{ID: fmt.Sprint("bulk", i), Priority: 10,
						Run: func(context.Context) error { time.Sleep(d); return nil }}
				}
				if err := s.Submit(tasks...); err != nil {
					t.Fatalf("Submit = %v", err)
				}
				time.Sleep(d + d/2) // fake time: the second bulk task runs
				submitted := time.Now()
				if err := s.Submit(coordinator.Task{ID: "urgent", Run: ok}); err != nil {
					t.Fatalf("Submit(urgent) = %v", err)
				}
				settle(t, s)
				started := rec.of("urgent")[0].At
				if wait := started.Sub(submitted); wait > d/2+15*time.Millisecond {
					t.Fatalf("urgent started %v after submission; want at most the running task's remaining %v plus 15ms", wait, d/2)
				}
				// It ran right after the task that was running, not later.
				var order []string
				for _, e := range rec.all() {
					if e.Kind == coordinator.EventStarted && e.TaskID != "" && e.TaskID[0] != 'w' {
						order = append(order, e.TaskID)
					}
				}
				if i := slices.Index(order, "urgent"); i != 2 {
					t.Fatalf("urgent started as bulk task number %d; want right after the 2nd (running when it came): %v", i, order[:min(len(order), 6)])
				}
			})
		})
	}
}

// 3. A fan-out of slow successors uses every worker: a hub with 400
// successors of 1ms on 4 workers.
func TestFanOutUsesEveryWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(4))
		warmUp(t, s, "warm", 4000, "")
		var running, most atomic.Int32
		slow := func(context.Context) error {
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(time.Millisecond)
			running.Add(-1)
			return nil
		}
		tasks := []coordinator.Task{{ID: "hub", Run: ok}}
		for i := range 400 {
			tasks = append(tasks, coordinator.Task{ID: fmt.Sprint("leaf", i), Run: slow, Deps: []string{"hub"}})
		}
		start := time.Now()
		if err := s.Submit(tasks...); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		if took := time.Since(start); took >= 200*time.Millisecond || most.Load() != 4 {
			t.Fatalf("400 x 1ms took %v with at most %d running; want < 200ms with all 4 workers busy", took, most.Load())
		}
	})
}

// 4. A task whose dependency still runs is not Running, even when it was
// handed out behind that dependency, and Cancel ends it at once, skipping
// its dependents.
func TestWaitingTaskIsNotRunningAndCancelsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(2))
		rec := record(s)
		warmUp(t, s, "warm", 1000, "")
		g := newGate()
		var ran atomic.Bool
		err := s.Submit(
			coordinator.Task{ID: "A", Run: g.run},
			coordinator.Task{ID: "F", Deps: []string{"A"}, Run: func(context.Context) error { ran.Store(true); return nil }},
			coordinator.Task{ID: "H", Deps: []string{"F"}, Run: func(context.Context) error { ran.Store(true); return nil }},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		synctest.Wait()
		for id, want := range map[string]coordinator.Status{"A": coordinator.Running, "F": coordinator.Pending, "H": coordinator.Pending} {
			if st := status(t, s, id); st != want {
				t.Fatalf("status(%s) = %v while A runs; want %v", id, st, want)
			}
		}
		if !s.Cancel("F") {
			t.Fatalf("Cancel(F) = false; want true")
		}
		if info, _ := s.Info("F"); info.Status != coordinator.Cancelled {
			t.Fatalf("Info(F) right after Cancel = %+v; want cancelled", info)
		}
		if info, _ := s.Info("H"); info.Status != coordinator.Skipped || info.Cause != "F" {
			t.Fatalf("Info(H) right after Cancel(F) = %+v; want skipped, cause F", info)
		}
		g.release()
		settle(t, s)
		if ran.Load() {
			t.Fatalf("a cancelled or skipped task ran")
		}
		for _, e := range rec.all() {
			if (e.TaskID == "F" || e.TaskID == "H") && e.Kind == coordinator.EventStarted {
				t.Fatalf("%s reported started; it never was", e.TaskID)
			}
		}
	})
}

// 5. Retention: a record freed by a cancelled queued task and reused keeps
// nothing of it: the new task runs at its own priority, on its own pool,
// and Wait returns.
func TestRetentionReuseKeepsNothingOfTheOldTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gpu := &countingWorker{block: make(chan struct{})}
		s := newScheduler(t, coordinator.WithWorkers(1), coordinator.WithRetention(0),
			coordinator.WithPool("gpu", 1, gpu))
		rec := record(s)
		g := newGate()
		// Both pools are busy, so these stay queued: one per pool, at
		// priorities the new tasks will not have.
		err := s.Submit(
			coordinator.Task{ID: "busy", Run: g.run},
			coordinator.Task{ID: "gpu-busy", Pool: "gpu", Payload: "block"},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		synctest.Wait()
		err = s.Submit(
			coordinator.Task{ID: "old-default", Run: ok, Priority: 9},
			coordinator.Task{ID: "old-gpu", Pool: "gpu", Payload: "job", Priority: -5},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		synctest.Wait()
		for _, id := range []string{"old-default", "old-gpu"} {
			if !s.Cancel(id) {
				t.Fatalf("Cancel(%s) = false", id)
			}
		}
		synctest.Wait()
		for _, id := range []string{"old-default", "old-gpu"} {
			if _, found := s.Info(id); found {
				t.Fatalf("Info(%s) found; want forgotten (retention 0), its record free", id)
			}
		}
		// New tasks reuse the records, with other priorities and pools.
		err = s.Submit(
			coordinator.Task{ID: "new-first", Run: ok, Priority: 0},
			coordinator.Task{ID: "new-gpu", Pool: "gpu", Payload: "job", Priority: 3},
			coordinator.Task{ID: "new-default", Run: ok, Priority: -1},
		)
		if err != nil {
			t.Fatalf("Submit(new) = %v", err)
		}
		g.release()
		close(gpu.block)
		settle(t, s)
		var order []string
		for _, e := range rec.all() {
			if e.Kind == coordinator.EventStarted && (e.TaskID == "new-first" || e.TaskID == "new-default") {
				order = append(order, e.TaskID)
			}
		}
		if !slices.Equal(order, []string{"new-default", "new-first"}) {
			t.Fatalf("default pool start order %v; want [new-default new-first] (by their own priorities)", order)
		}
		if n := gpu.jobs.Load(); n != 1 {
			t.Fatalf("the gpu worker ran %d jobs; want 1 (new-gpu)", n)
		}
		// Forgotten at once (retention 0): their events say how they ended.
		for _, id := range []string{"new-first", "new-gpu", "new-default"} {
			if ev := rec.of(id); len(ev) == 0 || ev[len(ev)-1].Kind != coordinator.EventSucceeded {
				t.Fatalf("events of %s = %v; want it to end succeeded", id, ev)
			}
		}
	})
}

// countingWorker is a custom worker: a "block" payload waits for block to
// close; a "job" payload is counted.
type countingWorker struct {
	jobs  atomic.Int32
	block chan struct{}
}

func (w *countingWorker) Do(ctx context.Context, j worker.Job) error {
	switch j.Payload {
	case "block":
		<-w.block
	case "job":
		w.jobs.Add(1)
	}
	return nil
}

// The guarantees again, in the shapes an adversarial review found them
// broken: work fused behind other work, priorities that change the plan
// after hand-out, and workers busy for different lengths of time.

// 1, with successors: a tiny task handed out behind a slow one is taken by
// the worker that frees up first, however many successors are fused behind
// it (a lane's tail is taken whole or not split inside a fused chain).
func TestIdleWorkersTakeFusedWorkBehindASlowTask(t *testing.T) {
	for _, chain := range []int{1, 2, 8, 40} {
		for _, busy := range []time.Duration{time.Millisecond, 10 * time.Millisecond, 70 * time.Millisecond} {
			t.Run(fmt.Sprintf("chain %d, other worker busy %v", chain, busy), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					s := newScheduler(t, coordinator.WithWorkers(2))
					warmUp(t, s, "warm", 100, "")
					start := time.Now()
					if err := s.Submit(coordinator.Task{ID: "busy", Run: sleepFor(busy)}); err != nil {
						t.Fatalf("Submit = %v", err)
					}
					synctest.Wait()
					var mu sync.Mutex
					first := time.Duration(-1)
					tiny := func(context.Context) error {
						mu.Lock()
						if first < 0 {
							first = time.Since(start)
						}
						mu.Unlock()
						return nil
					}
					tasks := []coordinator.Task{{ID: "slow", Run: sleepFor(time.Second)}}
					for i := range chain {
						tk := coordinator.Task{ID: fmt.Sprint("c", i), Run: tiny}
						if i > 0 {
							tk.Deps = []string{fmt.Sprint("c", i-1)}
						}
						tasks = append(tasks, tk)
					}
					if err := s.Submit(tasks...); err != nil {
						t.Fatalf("Submit = %v", err)
					}
					settle(t, s)
					if first < 0 || first > busy+5*time.Millisecond {
						t.Fatalf("the chain began %v after submission; want by %v, when the other worker freed up", first, busy)
					}
				})
			})
		}
	}
}

// 3, with busy peers: successors all fused behind a slow hub (because the
// other workers were briefly busy when it was handed out) still spread to
// every worker once the hub succeeds.
func TestFanOutBehindASlowHubUsesEveryWorker(t *testing.T) {
	for _, workers := range []int{2, 4} {
		for _, leaves := range []int{3, 200} {
			t.Run(fmt.Sprintf("%d workers, %d leaves", workers, leaves), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					s := newScheduler(t, coordinator.WithWorkers(workers))
					warmUp(t, s, "warm", 100, "")
					var running, most atomic.Int32
					leaf := func(context.Context) error {
						n := running.Add(1)
						for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
						}
						time.Sleep(10 * time.Millisecond)
						running.Add(-1)
						return nil
					}
					var tasks []coordinator.Task
					for i := range workers - 1 {
						tasks = append(tasks, coordinator.Task{ID: fmt.Sprint("brief", i), Run: sleepFor(time.Duration(i+1) * time.Millisecond)})
					}
					tasks = append(tasks, coordinator.Task{ID: "hub", Run: sleepFor(50 * time.Millisecond)})
					for i := range leaves {
						tasks = append(tasks, coordinator.Task{ID: fmt.Sprint("leaf", i), Run: leaf, Deps: []string{"hub"}})
					}
					start := time.Now()
					if err := s.Submit(tasks...); err != nil {
						t.Fatalf("Submit = %v", err)
					}
					settle(t, s)
					rounds := (leaves + workers - 1) / workers
					want := 50*time.Millisecond + time.Duration(rounds)*10*time.Millisecond
					if took := time.Since(start); took > want+5*time.Millisecond || most.Load() != int32(min(workers, leaves)) {
						t.Fatalf("took %v with at most %d leaves at once; want %v with %d", took, most.Load(), want, min(workers, leaves))
					}
				})
			})
		}
	}
}

// 2, across workers: when every worker is busy and queued tasks of many
// priorities are handed out behind them, no task starts later than a worse
// one (tasks that start at the same instant on different workers start in
// no defined order).
func TestPrioritiesStartInOrderAcrossWorkers(t *testing.T) {
	for _, workers := range []int{2, 3, 4} {
		for _, retain := range []bool{false, true} {
			t.Run(fmt.Sprintf("%d workers, retention %v", workers, retain), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					opts := []coordinator.Option{coordinator.WithWorkers(workers)}
					if retain {
						opts = append(opts, coordinator.WithRetention(0))
					}
					s := newScheduler(t, opts...)
					var tasks []coordinator.Task
					for i := range workers {
						// Uneven: the workers free up one after another.
						tasks = append(tasks, coordinator.Task{ID: fmt.Sprint("busy", i), Run: sleepFor(time.Duration(20+15*i) * time.Millisecond)})
					}
					if err := s.Submit(tasks...); err != nil {
						t.Fatalf("Submit = %v", err)
					}
					synctest.Wait()
					n := 7 * workers
					start := time.Now()
					var mu sync.Mutex
					at := make([]time.Duration, n)
					tasks = tasks[:0]
					for i := range n {
						p := (i * 7919) % n // priorities in a scrambled order
						tasks = append(tasks, coordinator.Task{ID: fmt.Sprint("p", p), Priority: p, Run: func(context.Context) error {
							mu.Lock()
							at[p] = time.Since(start)
							mu.Unlock()
							time.Sleep(time.Duration(1+p%3) * time.Millisecond)
							return nil
						}})
					}
					if err := s.Submit(tasks...); err != nil {
						t.Fatalf("Submit = %v", err)
					}
					settle(t, s)
					for p := 1; p < n; p++ {
						if at[p] < at[p-1] {
							t.Fatalf("priority %d started at %v, before the better %d at %v", p, at[p], p-1, at[p-1])
						}
					}
				})
			})
		}
	}
}

// 2, after hand-out: a better task that arrives when worse ones were handed
// out behind a long runner starts as soon as any worker frees up, before
// those worse tasks; and a task fused behind a worse dependency that is
// taken back still runs once its dependency succeeds.
func TestBetterArrivalReordersHandedOutWork(t *testing.T) {
	for _, shortRun := range []time.Duration{5 * time.Millisecond, 20 * time.Millisecond} {
		t.Run(shortRun.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScheduler(t, coordinator.WithWorkers(2))
				rec := record(s)
				if err := s.Submit(coordinator.Task{ID: "short", Run: sleepFor(shortRun)}); err != nil {
					t.Fatalf("Submit = %v", err)
				}
				synctest.Wait()
				err := s.Submit(
					coordinator.Task{ID: "long", Run: sleepFor(100 * time.Millisecond), Priority: 10},
					coordinator.Task{ID: "worse", Run: sleepFor(30 * time.Millisecond), Priority: 10},
					coordinator.Task{ID: "fused", Run: ok, Priority: 0, Deps: []string{"worse"}},
				)
				if err != nil {
					t.Fatalf("Submit = %v", err)
				}
				synctest.Wait()
				if err := s.Submit(coordinator.Task{ID: "better", Run: ok, Priority: 5}); err != nil {
					t.Fatalf("Submit(better) = %v", err)
				}
				time.Sleep(time.Millisecond) // fake time: the coordinator takes back what waits behind long
				// A long task keeps the freed worker busy after worse, so no
				// one is idle to steal what stays behind.
				if err := s.Submit(coordinator.Task{ID: "after", Run: sleepFor(200 * time.Millisecond), Priority: 10}); err != nil {
					t.Fatalf("Submit(after) = %v", err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := s.Wait(ctx); err != nil {
					t.Fatalf("Wait = %v; want nil: every task can run", err)
				}
				started := map[string]time.Time{}
				for _, e := range rec.all() {
					if e.Kind == coordinator.EventStarted {
						started[e.TaskID] = e.At
					}
				}
				if started["better"].After(started["worse"]) {
					t.Fatalf("the worse task started %v before the better one", started["better"].Sub(started["worse"]))
				}
				if _, ok := started["fused"]; !ok {
					t.Fatalf("fused never started")
				}
			})
		})
	}
}

func sleepFor(d time.Duration) func(context.Context) error {
	return func(context.Context) error { time.Sleep(d); return nil }
}

// 1, beside a fused follower: work a worker holds behind its running
// attempt is stolen even when a task fused behind that attempt sits at the
// lane's end (it stays; what does not wait for the attempt goes).
func TestIdleWorkersTakeWorkBesideAFusedFollower(t *testing.T) {
	for _, extra := range []int{1, 4} {
		t.Run(fmt.Sprint(extra, " independent"), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScheduler(t, coordinator.WithWorkers(2))
				start := time.Now()
				var mu sync.Mutex
				starts := map[string]time.Duration{}
				task := func(id string, d time.Duration, deps ...string) coordinator.Task {
					return coordinator.Task{ID: id, Deps: deps, Run: func(context.Context) error {
						mu.Lock()
						starts[id] = time.Since(start)
						mu.Unlock()
						time.Sleep(d)
						return nil
					}}
				}
				tasks := []coordinator.Task{task("w", 5*time.Millisecond), task("h", time.Millisecond),
					task("p", 10*time.Millisecond, "h"), task("c", time.Millisecond, "p")}
				for i := range extra {
					tasks = append(tasks, task(fmt.Sprint("x", i), 100*time.Millisecond, "h"))
				}
				if err := s.Submit(tasks...); err != nil {
					t.Fatalf("Submit = %v", err)
				}
				settle(t, s)
				// Ideal: the other worker is free at 5ms; 1 + 10 + 1ms of chain
				// and extra x 100ms shared by two workers.
				want := time.Duration((extra+1)/2)*100*time.Millisecond + 12*time.Millisecond
				if took := time.Since(start); took > want+5*time.Millisecond {
					t.Fatalf("took %v (starts %v); want about %v: a worker idled while work waited in the other's lane", took, starts, want)
				}
			})
		})
	}
}

// 2, on an idle fill: two tasks of the best level go to two idle workers,
// not one behind the other while the other worker runs worse ones.
func TestBestLevelSpreadsOverIdleWorkers(t *testing.T) {
	for _, workers := range []int{2, 3} {
		t.Run(fmt.Sprint(workers, " workers"), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScheduler(t, coordinator.WithWorkers(workers))
				rec := record(s)
				tasks := []coordinator.Task{{ID: "slow", Run: sleepFor(100 * time.Millisecond)}}
				for i := range workers - 1 {
					tasks = append(tasks, coordinator.Task{ID: fmt.Sprint("urgent", i), Run: sleepFor(time.Millisecond)})
				}
				for i := range 10 {
					tasks = append(tasks, coordinator.Task{ID: fmt.Sprint("low", i), Priority: 1, Run: sleepFor(10 * time.Millisecond)})
				}
				start := time.Now()
				if err := s.Submit(tasks...); err != nil {
					t.Fatalf("Submit = %v", err)
				}
				settle(t, s)
				for i := range workers - 1 {
					if at := rec.of(fmt.Sprint("urgent", i))[0].At.Sub(start); at > time.Millisecond {
						t.Fatalf("urgent%d started at %v; want at once, beside slow", i, at)
					}
				}
			})
		})
	}
}

// 2, through a success not yet reported: a better task released by a
// success is known at once, not half a lane later, and starts before the
// worse work handed out after it.
func TestBetterTaskReleasedBySuccessStartsNext(t *testing.T) {
	for _, warm := range []bool{false, true} {
		t.Run(fmt.Sprint("warm ", warm), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScheduler(t, coordinator.WithWorkers(1))
				if warm {
					warmUp(t, s, "warm", 2000, "")
				}
				rec := record(s)
				tasks := []coordinator.Task{
					{ID: "c", Priority: 2, Run: sleepFor(time.Millisecond)},
					{ID: "a", Priority: 2, Run: sleepFor(10 * time.Millisecond)},
					{ID: "b", Priority: 0, Deps: []string{"c", "a"}, Run: ok},
				}
				for i := range 40 {
					tasks = append(tasks, coordinator.Task{ID: fmt.Sprint("x", i), Priority: 2, Run: sleepFor(10 * time.Millisecond)})
				}
				if err := s.Submit(tasks...); err != nil {
					t.Fatalf("Submit = %v", err)
				}
				settle(t, s)
				var order []string
				for _, e := range rec.all() {
					if e.Kind == coordinator.EventStarted && e.TaskID[0] != 'w' {
						order = append(order, e.TaskID)
					}
				}
				// b is ready when a ends; one x may already have been claimed.
				if i := slices.Index(order, "b"); i > 3 {
					t.Fatalf("b started as number %d: %v; want right after a (one x at most in between)", i, order[:min(len(order), 8)])
				}
			})
		})
	}
}

// A success that releases a task of another pool is reported at once,
// whether the successor was submitted with it or later, whatever the
// length of the attempt its worker starts next: an idle worker of the
// other pool starts it, and a better task of a busy pool starts next.
func TestSuccessReleasingAnotherPoolIsReportedAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		late  bool // X submitted after its dependency was handed out
		queue int  // priority-10 tasks of pool B (0: B's worker is idle)
	}{
		{"idle pool, same batch", false, 0},
		{"idle pool, late", true, 0},
		{"busy pool, same batch", false, 200},
		{"busy pool, late", true, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScheduler(t, coordinator.WithWorkers(1), coordinator.WithPool("B", 1, worker.Func{}))
				warmUp(t, s, "warm", 2000, "")
				start := time.Now()
				var depDone, xStarted time.Time
				tasks := []coordinator.Task{
					{ID: "a1", Run: sleepFor(5 * time.Millisecond)},
					{ID: "a2", Run: sleepFor(5 * time.Millisecond)},
					{ID: "dep", Run: func(ctx context.Context) error {
						time.Sleep(5 * time.Millisecond)
						depDone = time.Now()
						return nil
					}},
					{ID: "long", Run: sleepFor(500 * time.Millisecond)},
				}
				for i := range tc.queue {
					tasks = append(tasks, coordinator.Task{ID: fmt.Sprint("b", i), Pool: "B", Priority: 10, Run: sleepFor(5 * time.Millisecond)})
				}
				x := coordinator.Task{ID: "X", Pool: "B", Deps: []string{"dep"}, Run: func(context.Context) error {
					xStarted = time.Now()
					return nil
				}}
				if !tc.late {
					tasks = append(tasks, x)
				}
				if err := s.Submit(tasks...); err != nil {
					t.Fatalf("Submit = %v", err)
				}
				if tc.late {
					time.Sleep(2 * time.Millisecond)
					if err := s.Submit(x); err != nil {
						t.Fatalf("Submit(X) = %v", err)
					}
				}
				if err := s.WaitTasks(context.Background(), "X"); err != nil {
					t.Fatalf("WaitTasks(X) = %v", err)
				}
				// X waits at most for the attempt B's worker runs when dep
				// ends (5 ms), never for "long".
				if wait := xStarted.Sub(depDone); wait > 6*time.Millisecond {
					t.Fatalf("X started %v after dep ended (dep ended at %v); want at most one 5 ms attempt of B", wait, depDone.Sub(start))
				}
				settle(t, s)
			})
		})
	}
}

// WaitTasks and events learn of a success when it happens, not when the
// worker's next attempt ends, however long that is.
func TestOutcomesDoNotWaitForTheNextAttempt(t *testing.T) {
	for _, subscribe := range []bool{false, true} {
		t.Run(fmt.Sprint("subscribed ", subscribe), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScheduler(t, coordinator.WithWorkers(1))
				warmUp(t, s, "warm", 2000, "")
				var rec *recorder
				if subscribe {
					rec = record(s)
				}
				tasks := []coordinator.Task{}
				for i := range 5 {
					tasks = append(tasks, coordinator.Task{ID: fmt.Sprint("a", i), Run: sleepFor(5 * time.Millisecond)})
				}
				tasks = append(tasks, coordinator.Task{ID: "long", Run: sleepFor(time.Second)})
				start := time.Now()
				if err := s.Submit(tasks...); err != nil {
					t.Fatalf("Submit = %v", err)
				}
				if err := s.WaitTasks(context.Background(), "a4"); err != nil {
					t.Fatalf("WaitTasks(a4) = %v", err)
				}
				if took := time.Since(start); took > 30*time.Millisecond {
					t.Fatalf("WaitTasks(a4) returned after %v; want about 25 ms, not after long's second", took)
				}
				settle(t, s)
				if rec != nil {
					for _, e := range rec.all() {
						if e.Kind == coordinator.EventSucceeded && e.TaskID == "a4" {
							if lag := e.At.Sub(start); lag > 30*time.Millisecond {
								t.Fatalf("EventSucceeded(a4) at %v; want about 25 ms", lag)
							}
						}
					}
				}
			})
		})
	}
}

// 4, as events tell it: the events never show more attempts of a pool
// running at once than it has workers, nor a task started twice without an
// end between. A worker runs its lane in order, so an attempt it claimed
// means the ones before it have ended: their ends are told first, even
// when their reports are still on their way. Real time, uneven durations
// (a slow attempt among tiny ones), fused chains, failures with retries,
// two pools.
func TestConcurrentEventsShowNoMoreRunningThanWorkers(t *testing.T) {
	sizes := map[string]int{"": 2, "gpu": 1}
	s := newScheduler(t, coordinator.WithWorkers(sizes[""]), coordinator.WithPool("gpu", sizes["gpu"], worker.Func{}))
	rec := record(s)
	spin := func(n int) func(context.Context) error {
		return func(context.Context) error {
			x := 0
			for i := range n {
				x += i
			}
			_ = x
			return nil
		}
	}
	var failures sync.Map
	var tasks []coordinator.Task
	for i := range 3000 {
		task := coordinator.Task{ID: fmt.Sprint("t", i), Run: spin(0)}
		switch {
		case i%97 == 0:
			task.Run = spin(50_000) // a slow one among tiny ones
		case i%13 == 0:
			id := task.ID
			task.Retry = coordinator.RetryPolicy{MaxAttempts: 2}
			task.Run = func(context.Context) error {
				if _, again := failures.LoadOrStore(id, true); !again {
					return fmt.Errorf("first attempt of %s", id)
				}
				return nil
			}
		}
		if i%3 == 0 {
			task.Pool = "gpu"
		}
		if i%5 != 0 && i > 0 {
			task.Deps = []string{fmt.Sprint("t", i-1)} // chains, fused where they can be
		}
		tasks = append(tasks, task)
	}
	if err := s.Submit(tasks...); err != nil {
		t.Fatalf("Submit = %v", err)
	}
	if err := s.Wait(context.Background()); err != nil {
		t.Fatalf("Wait = %v", err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	running := map[string]int{}
	on := map[string]bool{}
	for _, e := range rec.all() {
		switch e.Kind {
		case coordinator.EventStarted:
			if on[e.TaskID] {
				t.Fatalf("%s started again (attempt %d) before its attempt ended", e.TaskID, e.Attempt)
			}
			on[e.TaskID] = true
			if running[e.Pool]++; running[e.Pool] > sizes[e.Pool] {
				t.Fatalf("events show %d attempts of pool %q running at once (at %s's start); it has %d workers",
					running[e.Pool], e.Pool, e.TaskID, sizes[e.Pool])
			}
		case coordinator.EventSucceeded, coordinator.EventFailed, coordinator.EventRetrying,
			coordinator.EventCancelled, coordinator.EventRecurred:
			if on[e.TaskID] {
				on[e.TaskID] = false
				running[e.Pool]--
			}
		}
	}
}

// 2, with work of the same level behind a long attempt: a worker that
// frees up takes back, from another worker's lane, unclaimed work as good
// as the best ready task, so it never moves on to a worse level while
// that waits behind an attempt of any length. Two shapes an adversarial
// review found: a later arrival of the same level, and a dependent of the
// same level released meanwhile.
func TestSameLevelWorkBehindALongAttemptIsNotPassedOver(t *testing.T) {
	type spec struct {
		id   string
		prio int
		d    time.Duration
		deps []string
	}
	for _, tc := range []struct {
		name        string
		first, late []spec
		better      string // must start before worse
	}{
		{"later arrival", []spec{{"short", 0, time.Millisecond, nil}, {"worse", 2, time.Second, nil},
			{"mid", 1, 0, nil}, {"long", 0, time.Second, nil}}, []spec{{"late", 1, 0, nil}}, "mid"},
		{"released dependent", []spec{{"a", 0, time.Millisecond, nil}, {"mid", 1, 0, nil},
			{"after-a", 1, 0, []string{"a"}}, {"worse", 2, time.Second, nil}, {"long", 0, time.Second, nil}}, nil, "mid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScheduler(t, coordinator.WithWorkers(2))
				rec := record(s)
				tasks := func(specs []spec) []coordinator.Task {
					var out []coordinator.Task
					for _, sp := range specs {
						out = append(out, coordinator.Task{ID: sp.id, Priority: sp.prio, Deps: sp.deps, Run: sleepFor(sp.d)})
					}
					return out
				}
				if err := s.Submit(tasks(tc.first)...); err != nil {
					t.Fatalf("Submit = %v", err)
				}
				if tc.late != nil {
					time.Sleep(500 * time.Microsecond)
					if err := s.Submit(tasks(tc.late)...); err != nil {
						t.Fatalf("Submit(late) = %v", err)
					}
				}
				settle(t, s)
				at := map[string]time.Time{}
				for _, e := range rec.all() {
					if e.Kind == coordinator.EventStarted {
						at[e.TaskID] = e.At
					}
				}
				if at[tc.better].After(at["worse"]) {
					t.Fatalf("%s (priority 1, ready first) started %v after worse (priority 2)", tc.better, at[tc.better].Sub(at["worse"]))
				}
			})
		})
	}
}

// Priority (README, "The rules") across workers: work handed out and taken back for an idle
// worker keeps the order in which it became ready (the oldest is taken,
// and it goes back in order), so ties that wait behind a long attempt
// start in their order, not reversed.
func TestTakenBackWorkKeepsItsOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(2))
		rec := record(s)
		var tasks []coordinator.Task
		for i := range 40 {
			d := time.Millisecond
			if i == 0 {
				d = 500 * time.Millisecond
			}
			tasks = append(tasks, coordinator.Task{ID: fmt.Sprintf("t%02d", i), Run: sleepFor(d)})
		}
		if err := s.Submit(tasks...); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		// t00 holds its worker; whatever was handed out behind it and
		// taken back by the other worker starts in submission order.
		var order []string
		for _, e := range rec.all() {
			if e.Kind == coordinator.EventStarted && e.TaskID != "t00" {
				order = append(order, e.TaskID)
			}
		}
		// The other worker's own share comes first; from the first task
		// taken back on, the starts are ascending.
		i := 0
		for i+1 < len(order) && order[i] < order[i+1] {
			i++
		}
		rest := order[i+1:]
		if !slices.IsSorted(rest) {
			t.Fatalf("starts after the other worker's share: %v; want them in submission order", rest)
		}
	})
}

// 2, after a success releases work fused behind it: a better task that
// was fused behind its dependency on a worker's lane, and is free to move
// once that dependency's success is applied, is taken back by the next
// worker that frees up while the lane's worker runs a long attempt, and
// starts before worse work. Found by a review: the lane's best priority
// was computed while the task was still fused (skipped), and no later
// look at that lane came.
func TestBetterFollowerBehindALongAttemptIsTakenBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(3))
		start := time.Now()
		var mu sync.Mutex
		at := map[string]time.Duration{}
		run := func(id string, d time.Duration) func(context.Context) error {
			return func(context.Context) error {
				mu.Lock()
				at[id] = time.Since(start)
				mu.Unlock()
				time.Sleep(d)
				return nil
			}
		}
		tasks := []coordinator.Task{
			{ID: "blockA", Run: run("blockA", 10*time.Millisecond)},
			{ID: "blockC", Run: run("blockC", 15*time.Millisecond+100*time.Microsecond)},
			{ID: "P", Run: run("P", 15*time.Millisecond)},
			{ID: "G1", Run: run("G1", 100*time.Millisecond), Deps: []string{"P"}},
			{ID: "G2", Run: run("G2", time.Millisecond), Deps: []string{"P"}},
		}
		for i := range 10 {
			id := fmt.Sprint("w", i)
			tasks = append(tasks, coordinator.Task{ID: id, Priority: 1, Run: run(id, 3*time.Millisecond)})
		}
		if err := s.Submit(tasks...); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		released := at["P"] + 15*time.Millisecond
		for i := range 10 {
			id := fmt.Sprint("w", i)
			if w := at[id]; w > released && w < at["G2"] {
				t.Fatalf("%s (priority 1) started at %v, before G2 (priority 0, ready at %v behind G1's 100ms) at %v; starts %v", id, w, released, at["G2"], at)
			}
		}
	})
}
