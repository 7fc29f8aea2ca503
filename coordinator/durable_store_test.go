package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/coordinator/storetest"
	batonrecord "github.com/batonhq/baton/internal/record"
	"github.com/batonhq/baton/worker"
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
// A subscriber of other kinds than starts (Kinds) changes nothing.
func TestInterruptedAttemptCountsWithoutObservers(t *testing.T) {
	for _, c := range []struct {
		maxAttempts int
		failures    bool // a subscriber of failures only
	}{{1, false}, {2, false}, {1, true}, {2, true}} {
		maxAttempts := c.maxAttempts
		t.Run(fmt.Sprintf("MaxAttempts=%d failures-subscriber=%v", maxAttempts, c.failures), func(t *testing.T) {
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
				if c.failures {
					s.Subscribe(func(coordinator.Event) {}, coordinator.Kinds(coordinator.EventFailed, coordinator.EventRetrying))
				}
				task := func(id string, deps ...string) coordinator.Task {
					return coordinator.Task{ID: id, Func: "step", Payload: []byte(id), Deps: deps}
				}
				b := task("b", "a")
				b.Retry = coordinator.RetryPolicy{MaxAttempts: maxAttempts, BaseDelay: time.Hour} // a retry waits: Info reads the count
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

// A result keeps its identity across a restart: SetResult(ctx, nil) reads
// back as nil, not as a []byte(nil) in a non-nil interface; an empty and a
// nil []byte stay what they were.
func TestResultsKeepTheirIdentityAcrossARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		results := map[string]any{"nil": nil, "nil-bytes": []byte(nil), "empty": []byte{}, "bytes": []byte("x")}
		set := coordinator.WithFunc("set", func(ctx context.Context, p []byte) error {
			if v, ok := results[string(p)]; ok {
				return coordinator.SetResult(ctx, v)
			}
			return nil // "none": no result
		})
		mem := storetest.NewMemory()
		s := restored(t, mem, set)
		ids := []string{"nil", "nil-bytes", "empty", "bytes", "none"}
		for _, id := range ids {
			if err := s.Submit(coordinator.Task{ID: id, Func: "set", Payload: []byte(id)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		before := map[string]any{}
		for _, id := range ids {
			ti, _ := s.Info(id)
			before[id] = ti.Result
		}
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		s2 := restored(t, mem, set)
		for _, id := range ids {
			ti, _ := s2.Info(id)
			got, want := ti.Result, before[id]
			if fmt.Sprintf("%T %#v", got, got) != fmt.Sprintf("%T %#v", want, want) || (got == nil) != (want == nil) {
				t.Errorf("%s: after the restart the result is %T %#v; before it, %T %#v", id, got, got, want, want)
			}
		}
		if ti, _ := s2.Info("nil"); ti.Result != nil {
			t.Errorf("SetResult(ctx, nil) reads back as %#v after a restart; want nil", ti.Result)
		}
	})
}

// Opening a store writes nothing that did not change: tasks waiting for
// their time (a delay, a retry's backoff, a series' next run) or for
// their dependencies are restored as they were stored, with no commit.
// So restarts do not grow the file by a copy of every waiting task, and a
// store on a full disk whose restore decides nothing opens (and can be
// read); one whose restore must write (an interrupted attempt) fails New
// with the commit's error, wrapping ErrStoreFailed, and writes nothing.
func TestRestoreWritesNothingThatDidNotChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fail := errors.New("no space left on device")
		steps := coordinator.WithFunc("step", func(ctx context.Context, p []byte) error {
			if string(p) == "fail" {
				return errors.New("not yet")
			}
			return nil
		})
		mem := storetest.NewMemory()
		s := restored(t, mem, steps)
		err := s.Submit(
			coordinator.Task{ID: "delayed", Func: "step", Delay: time.Hour},
			coordinator.Task{ID: "backoff", Func: "step", Payload: []byte("fail"),
				Retry: coordinator.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Hour}},
			coordinator.Task{ID: "series", Func: "step", Every: time.Hour},
			coordinator.Task{ID: "cron", Func: "step", Cron: "@daily"},
			coordinator.Task{ID: "waiting", Func: "step", Deps: []string{"delayed"}},
		)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // backoff failed once, series ran once: all wait for an hour or more
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		commits := mem.Commits()
		for restart := range 3 {
			s := restored(t, mem, steps)
			if got := mem.Commits(); got != commits {
				t.Fatalf("restart %d: New committed %d times; want nothing written", restart, got-commits)
			}
			if err := s.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
		}

		mem.FailCommits(fail) // a full disk
		s3 := restored(t, mem, steps)
		if ti, _ := s3.Info("backoff"); ti.Attempts != 1 || ti.Status != coordinator.Pending {
			t.Errorf("on a full disk, backoff reads as %v with %d attempts; want pending with 1", ti.Status, ti.Attempts)
		}
		if err := s3.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}

		// A restore with something to write (an interrupted attempt) on a
		// full disk: New fails and the store is as it was.
		mem.FailCommits(nil)
		busy := storetest.NewMemory()
		running := make(chan struct{})
		s4 := restored(t, busy, coordinator.WithFunc("step", func(ctx context.Context, _ []byte) error {
			close(running)
			<-ctx.Done()
			return ctx.Err()
		}))
		if err := s4.Submit(coordinator.Task{ID: "long", Func: "step"}); err != nil {
			t.Fatal(err)
		}
		<-running
		synctest.Wait()
		crashed := busy.Crash()
		crashed.FailCommits(fail)
		before := crashed.Commits()
		if _, err := coordinator.New(coordinator.WithStore(crashed.Open()), blockingFuncs()); !errors.Is(err, coordinator.ErrStoreFailed) || !errors.Is(err, fail) {
			t.Errorf("New on a full disk with an interrupted attempt to write = %v; want ErrStoreFailed wrapping the disk's error", err)
		}
		if crashed.Commits() != before {
			t.Errorf("the failed New wrote %d commits", crashed.Commits()-before)
		}
	})
}

// A restored task that is final while a dependency of it has not ended (it
// was cancelled, or AnyFailed started it at a first failure) is held by
// that dependency under retention, as in memory: it is forgotten only once
// the dependency is final, not at once after the restart (its record was
// reused by the next Submit, and the dependency's end then released the
// new task before its own dependency ended), and not never (its count of
// such dependencies went below zero, and it stayed in memory and in the
// store). Found by an adversarial review.
func TestRestoredFinalTaskIsHeldByItsRunningDependency(t *testing.T) {
	for _, tc := range []struct {
		name  string
		crash bool
		setup func(s *coordinator.Scheduler, task func(string, coordinator.Trigger, ...string) coordinator.Task) error
	}{
		{"cancelled", false, func(s *coordinator.Scheduler, task func(string, coordinator.Trigger, ...string) coordinator.Task) error {
			err := s.Submit(task("b", 0), task("c", 0, "b"))
			s.Cancel("c")
			return err
		}},
		{"AnyFailed started early", true, func(s *coordinator.Scheduler, task func(string, coordinator.Trigger, ...string) coordinator.Task) error {
			return s.Submit(task("a", 0), task("b", 0), task("c", coordinator.AnyFailed, "a", "b"), task("d", coordinator.AllDone, "c", "b"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				gateB, gateY := make(chan struct{}), make(chan struct{})
				ran := make(chan string, 16)
				fn := coordinator.WithFunc("f", func(ctx context.Context, p []byte) error {
					wait := map[string]chan struct{}{"b": gateB, "y": gateY}[string(p)]
					if wait != nil {
						select {
						case <-wait:
						case <-ctx.Done():
							return ctx.Err()
						}
					}
					if string(p) == "a" {
						return errors.New("a fails")
					}
					ran <- string(p)
					return nil
				})
				task := func(id string, when coordinator.Trigger, deps ...string) coordinator.Task {
					tk := coordinator.Task{ID: id, Func: "f", Payload: []byte(id), Deps: deps, When: when}
					if id == "b" {
						// Whether b's start was committed before the crash
						// is timing: if it was, the interrupted attempt
						// counts, and b must have one left to stay unended.
						tk.Retry = coordinator.RetryPolicy{MaxAttempts: 2}
					}
					return tk
				}
				mem := storetest.NewMemory()
				s1 := newScheduler(t, coordinator.WithStore(mem.Open()), fn, coordinator.WithWorkers(4), coordinator.WithRetention(0))
				if err := tc.setup(s1, task); err != nil {
					t.Fatal(err)
				}
				synctest.Wait() // b runs; c is final
				if tc.crash {
					crashed := mem.Crash()
					s1.Shutdown(context.Background())
					mem = crashed
				} else if err := s1.Shutdown(context.Background()); err != nil {
					t.Fatal(err)
				}
				s := newScheduler(t, coordinator.WithStore(mem.Open()), fn, coordinator.WithWorkers(4), coordinator.WithRetention(0))
				if _, ok := s.Info("c"); !ok {
					t.Fatal("c was forgotten after the restart while b, its dependency, runs")
				}
				batch := []coordinator.Task{task("y", 0)}
				for i := range 4 {
					batch = append(batch, task(fmt.Sprint("x", i), 0, "y"))
				}
				if err := s.Submit(batch...); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				close(gateB)
				synctest.Wait()
				for len(ran) > 0 {
					if id := <-ran; id[0] == 'x' {
						t.Fatalf("%s ran before its dependency y ended", id)
					}
				}
				close(gateY)
				settle(t, s)
				time.Sleep(time.Hour)
				synctest.Wait()
				for _, id := range []string{"a", "b", "c", "d", "y", "x0"} {
					if _, ok := s.Info(id); ok {
						t.Errorf("%s is still known an hour after everything ended, under WithRetention(0)", id)
					}
				}
			})
		})
	}
}

// A timed-out attempt's error is still a timeout after a restart:
// errors.Is sees worker.ErrTimeout and context.DeadlineExceeded, and the
// function's error's text is kept. Only the text was stored before.
func TestTimeoutErrorSurvivesARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := storetest.NewMemory()
		slow := coordinator.WithFunc("slow", func(ctx context.Context, _ []byte) error {
			<-ctx.Done()
			return fmt.Errorf("query users: %w", ctx.Err())
		})
		s := restored(t, mem, slow)
		if err := s.Submit(coordinator.Task{ID: "q", Func: "slow", Timeout: time.Second}); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		ti, _ := restored(t, mem, slow).Info("q")
		var te *worker.TimeoutError
		if !errors.Is(ti.Err, worker.ErrTimeout) || !errors.Is(ti.Err, context.DeadlineExceeded) ||
			!errors.As(ti.Err, &te) || te.After != time.Second || !strings.Contains(ti.Err.Error(), "query users") {
			t.Fatalf("after a restart q's error is %v; want a *worker.TimeoutError after 1s keeping the function's error", ti.Err)
		}
	})
}

// A store of an older format (version 1) opens without a write, and says
// the current version from its next commit on: an older Baton then
// refuses it (ErrStoreVersion) rather than misreading a timeout's record
// or missing a pause or a family.
func TestOlderFormatIsUpgradedByTheNextCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := storetest.NewMemory()
		st := mem.Open()
		if err := st.Load(func(k, v []byte) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := st.Commit(&coordinator.Changes{Puts: []coordinator.KV{{Key: []byte("m"), Value: []byte{1}}}}); err != nil {
			t.Fatal(err)
		}
		st.Close()
		version := func() byte {
			var v byte
			st := mem.Crash().Open() // a copy: the scheduler may hold mem
			st.Load(func(k, val []byte) error {
				if string(k) == "m" {
					v = val[0]
				}
				return nil
			})
			st.Close()
			return v
		}
		commits := mem.Commits()
		s := restored(t, mem, blockingFuncs())
		if mem.Commits() != commits || version() != 1 {
			t.Fatalf("opening a version 1 store wrote %d commits (version %d); want none", mem.Commits()-commits, version())
		}
		if err := s.Submit(coordinator.Task{ID: "a", Func: "step", Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if v := version(); uint64(v) != batonrecord.Version {
			t.Fatalf("after a commit the store says version %d; want %d", v, batonrecord.Version)
		}
	})
}

// A store opens whatever the size of its pools now (docs/durable.md): a
// final task of more slots than its pool has now never blocks New (the
// default pool follows GOMAXPROCS: a smaller machine was enough to make a
// store unreadable); an unfinished one makes New fail with an error that
// names it and says what to do, and the store opens again once the pool
// is large enough or the task is final.
func TestStoreOpensAfterItsPoolShrank(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := storetest.NewMemory()
		ok := coordinator.WithFunc("ok", func(context.Context, []byte) error { return nil })
		s1, err := coordinator.New(coordinator.WithStore(mem.Open()), coordinator.WithWorkers(4), ok)
		if err != nil {
			t.Fatal(err)
		}
		if err := s1.Submit(coordinator.Task{ID: "done", Func: "ok", Slots: 4},
			coordinator.Task{ID: "later", Func: "ok", Slots: 3, Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if err := s1.WaitTasks(context.Background(), "done"); err != nil {
			t.Fatal(err)
		}
		if err := s1.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}

		_, err = coordinator.New(coordinator.WithStore(mem.Open()), coordinator.WithWorkers(2), ok)
		if !errors.Is(err, coordinator.ErrInvalidOption) || !strings.Contains(err.Error(), `"later"`) || !strings.Contains(err.Error(), "3 slots") {
			t.Fatalf("New with 2 workers, an unfinished task of 3 slots stored = %v; want ErrInvalidOption naming it and its slots", err)
		}

		s2, err := coordinator.New(coordinator.WithStore(mem.Open()), coordinator.WithWorkers(3), ok)
		if err != nil {
			t.Fatalf("New with 3 workers = %v; want nil (the final task of 4 slots never runs again)", err)
		}
		if !s2.Cancel("later") {
			t.Fatal("Cancel(later) = false")
		}
		if err := s2.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}

		s3, err := coordinator.New(coordinator.WithStore(mem.Open()), coordinator.WithWorkers(1), ok)
		if err != nil {
			t.Fatalf("New with 1 worker, every task of several slots final = %v; want nil", err)
		}
		defer s3.Shutdown(context.Background())
		if info, _ := s3.Info("done"); info.Status != coordinator.Succeeded || info.Slots != 4 {
			t.Errorf("Info(done) = %v slots %d; want succeeded, 4 slots", info.Status, info.Slots)
		}
		if st := status(t, s3, "later"); st != coordinator.Cancelled {
			t.Errorf("status(later) = %v; want cancelled", st)
		}
	})
}

// What New decides while it restores a store is told as a live decision
// is: an interrupted attempt retried (Warn) or failed (Error), and what
// that skips (Info), in WithLogger's lines and to WithSubscriber's
// subscribers (a Subscribe after New cannot see them); the restore of a
// store that decides nothing tells nothing.
func TestRestoreDecisionsAreLoggedAndTold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := storetest.NewMemory()
		running := make(chan struct{}, 2)
		step := coordinator.WithFunc("step", func(ctx context.Context, p []byte) error {
			running <- struct{}{}
			<-ctx.Done() // runs until the crash
			return ctx.Err()
		})
		s, err := coordinator.New(coordinator.WithStore(mem.Open()), coordinator.WithWorkers(2), step)
		if err != nil {
			t.Fatal(err)
		}
		err = s.Submit(
			coordinator.Task{ID: "again", Func: "step", Retry: coordinator.RetryPolicy{MaxAttempts: 2, BaseDelay: time.Hour}},
			coordinator.Task{ID: "once", Func: "step"},
			coordinator.Task{ID: "after", Func: "step", Deps: []string{"once"}},
		)
		if err != nil {
			t.Fatal(err)
		}
		<-running
		<-running
		synctest.Wait()
		crashed := mem.Crash()
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}

		var logs logBuffer
		var mu sync.Mutex
		var told []string
		s2, err := coordinator.New(coordinator.WithStore(crashed.Open()), coordinator.WithWorkers(2), step,
			coordinator.WithLogger(logs.logger()),
			coordinator.WithSubscriber(func(e coordinator.Event) {
				mu.Lock()
				defer mu.Unlock()
				told = append(told, fmt.Sprintf("%s %v %v %s", e.TaskID, e.Kind, e.Err, e.Cause))
			}))
		if err != nil {
			t.Fatal(err)
		}
		if err := s2.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		want := []string{
			"again retrying " + coordinator.ErrInterrupted.Error() + " ",
			"once failed " + coordinator.ErrInterrupted.Error() + " ",
			"after skipped <nil> once",
		}
		if len(told) < 3 || !slices.Equal(told[:3], want) { // then Shutdown's cancel of again
			t.Errorf("WithSubscriber told %q; want %q first", told, want)
		}
		for _, line := range []string{
			`level=WARN msg="task retrying" task=again`,
			`level=ERROR msg="task failed" task=once`,
			`level=INFO msg="task skipped" task=after cause=once`,
		} {
			if !logs.contains(line) {
				t.Errorf("WithLogger's lines lack %q:\n%s", line, logs.String())
			}
		}

		// The decisions were committed: the next restore has nothing to
		// decide, and tells nothing.
		told = nil
		s3, err := coordinator.New(coordinator.WithStore(crashed.Open()), coordinator.WithWorkers(2), step,
			coordinator.WithSubscriber(func(e coordinator.Event) { told = append(told, e.TaskID+" "+e.Kind.String()) }))
		if err != nil {
			t.Fatal(err)
		}
		if err := s3.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if want := []string{"again cancelled"}; !slices.Equal(told, want) {
			t.Errorf("a restore with nothing to decide, then Shutdown, told %q; want only %q", told, want)
		}
	})
}

// A function that kills its process as soon as it starts, before its
// start can be committed (here: the store is copied as it is at the call,
// as a SIGKILL would leave it), ends Failed with ErrInterrupted after at
// most MaxAttempts + 1 crashes: after a restart its start is committed
// before it is called (a careful start), so every later crash counts. It
// crash-looped the scheduler for ever. A task beside it that does not
// crash still succeeds.
func TestPoisonTaskEndsAfterMaxAttemptsPlusOneCrashes(t *testing.T) {
	for _, maxAttempts := range []int{1, 3} {
		t.Run(fmt.Sprintf("MaxAttempts=%d", maxAttempts), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cur := storetest.NewMemory()
				crashed := make(chan *storetest.Memory, 1)
				var mu sync.Mutex
				poison := coordinator.WithFunc("poison", func(ctx context.Context, _ []byte) error {
					mu.Lock()
					at := cur.Crash() // the process dies here
					mu.Unlock()
					crashed <- at
					<-ctx.Done()
					return ctx.Err()
				})
				innocent := coordinator.WithFunc("innocent", func(context.Context, []byte) error { return nil })
				crashes := 0
				for gen := 0; ; gen++ {
					if gen > 3*(maxAttempts+1) {
						t.Fatalf("%d crashes and the poison task is not final; want it failed after at most %d", crashes, maxAttempts+1)
					}
					mu.Lock()
					store := cur.Open()
					mu.Unlock()
					s, err := coordinator.New(coordinator.WithStore(store), coordinator.WithWorkers(2), poison, innocent)
					if err != nil {
						t.Fatal(err)
					}
					if gen == 0 {
						err := s.Submit(coordinator.Task{ID: "poison", Func: "poison", Retry: coordinator.RetryPolicy{MaxAttempts: maxAttempts}},
							coordinator.Task{ID: "bystander", Func: "innocent", Delay: time.Millisecond})
						if err != nil {
							t.Fatal(err)
						}
					}
					if info, _ := s.Info("poison"); info.Status.Final() {
						if info.Status != coordinator.Failed || !errors.Is(info.Err, coordinator.ErrInterrupted) || info.Attempts != maxAttempts {
							t.Errorf("Info(poison) after %d crashes = %v %v, %d attempts; want failed, ErrInterrupted, %d attempts",
								crashes, info.Status, info.Err, info.Attempts, maxAttempts)
						}
						if crashes > maxAttempts+1 {
							t.Errorf("the poison task failed after %d crashes; want at most %d", crashes, maxAttempts+1)
						}
						if err := s.WaitTasks(context.Background(), "bystander"); err != nil {
							t.Errorf("WaitTasks(bystander) = %v; want nil", err)
						}
						if err := s.Shutdown(context.Background()); err != nil {
							t.Fatal(err)
						}
						return
					}
					next := <-crashed
					crashes++
					if err := s.Shutdown(context.Background()); err != nil { // writes nothing: as if it had died
						t.Fatal(err)
					}
					mu.Lock()
					cur = next
					mu.Unlock()
				}
			})
		})
	}
}

// Rerun re-opens only what can run with the pools as they are now: on a
// store opened with a smaller pool, a failed task of more slots than the
// pool has now is refused (ErrNotRerunnable, naming it and its slots),
// alone or downstream of another, and nothing of the request re-opens;
// the pool goes on running the tasks it can. A spawner whose function
// returned and which waits for its family (joining) runs no more either:
// its slots do not stop New.
func TestRerunRefusesWhatNoLongerFitsItsPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := storetest.NewMemory()
		fail := coordinator.WithFunc("fail", func(context.Context, []byte) error { return errors.New("boom") })
		ok := coordinator.WithFunc("ok", func(context.Context, []byte) error { return nil })
		spawn := coordinator.WithFunc("spawn", func(ctx context.Context, _ []byte) error {
			return coordinator.Spawn(ctx, coordinator.Task{ID: "child", Func: "ok", Delay: time.Hour})
		})
		s1, err := coordinator.New(coordinator.WithStore(mem.Open()), coordinator.WithWorkers(4), fail, ok, spawn)
		if err != nil {
			t.Fatal(err)
		}
		err = s1.Submit(coordinator.Task{ID: "small", Func: "fail"},
			coordinator.Task{ID: "big", Func: "ok", Slots: 4, Deps: []string{"small"}},
			coordinator.Task{ID: "bigfail", Func: "fail", Slots: 3},
			coordinator.Task{ID: "sp", Func: "spawn", Slots: 4})
		if err != nil {
			t.Fatal(err)
		}
		if err := s1.WaitTasks(context.Background(), "small", "big", "bigfail"); err == nil {
			t.Fatal("WaitTasks = nil; want the failures")
		}
		synctest.Wait()
		if info, _ := s1.Info("sp"); !info.Joining {
			t.Fatalf("Info(sp) = %+v; want joining (its child waits an hour)", info)
		}
		if err := s1.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}

		s2, err := coordinator.New(coordinator.WithStore(mem.Open()), coordinator.WithWorkers(2), fail, ok, spawn)
		if err != nil {
			t.Fatalf("New with 2 workers = %v; want nil (a joining spawner of 4 slots runs no more)", err)
		}
		defer s2.Shutdown(context.Background())
		for _, req := range []coordinator.RerunRequest{
			{IDs: []string{"bigfail"}},
			{IDs: []string{"small"}, Downstream: true}, // big, skipped, is downstream
			{IDs: []string{"small", "bigfail"}},
		} {
			_, err := s2.Rerun(context.Background(), req)
			var te *coordinator.TaskError
			if !errors.Is(err, coordinator.ErrNotRerunnable) || !errors.As(err, &te) || !strings.Contains(err.Error(), "slots") || !strings.Contains(err.Error(), "has 2 workers") {
				t.Fatalf("Rerun(%+v) = %v; want ErrNotRerunnable naming the task of too many slots and its pool's size", req, err)
			}
		}
		for id, want := range map[string]coordinator.Status{"small": coordinator.Failed, "big": coordinator.Skipped, "bigfail": coordinator.Failed} {
			if st := status(t, s2, id); st != want {
				t.Errorf("after the refused re-runs, %s is %v; want %v (nothing re-opened)", id, st, want)
			}
		}
		// What fits re-runs, and the pool goes on.
		res, err := s2.Rerun(context.Background(), coordinator.RerunRequest{IDs: []string{"small"}})
		if err != nil || !slices.Equal(res.Reopened, []string{"small"}) {
			t.Fatalf("Rerun(small) = %v, %v; want small re-opened", res, err)
		}
		if err := s2.Submit(coordinator.Task{ID: "after", Func: "ok"}); err != nil {
			t.Fatal(err)
		}
		if err := s2.WaitTasks(context.Background(), "after"); err != nil {
			t.Fatalf("a task of the pool after the refused re-runs: %v", err)
		}
		if err := s2.WaitTasks(context.Background(), "small"); err == nil || status(t, s2, "small") != coordinator.Failed {
			t.Fatalf("small re-run = %v, %v; want failed again", err, status(t, s2, "small"))
		}
		// A child of a cancelled spawner that could not run either: the
		// error says so rather than advise re-running the spawner.
		if !s2.Cancel("sp") {
			t.Fatal("Cancel(sp) = false")
		}
		_, err = s2.Rerun(context.Background(), coordinator.RerunRequest{IDs: []string{"child"}})
		if !errors.Is(err, coordinator.ErrNotRerunnable) || !strings.Contains(err.Error(), "cannot be re-run either") || !strings.Contains(err.Error(), "4 slots") {
			t.Fatalf("Rerun(child) of a cancelled spawner of 4 slots on 2 workers = %v; want ErrNotRerunnable saying the spawner cannot be re-run either", err)
		}
	})
}

// A pool whose worker ran data and now runs functions (another deploy) is
// a configuration New was given, not a corrupt store: an unfinished task
// of it that names no function makes New fail with ErrInvalidOption
// naming it; once it is final the store opens, and Rerun refuses it
// (it could not run).
func TestPoolThatNowRunsFunctionsIsAnOption(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := storetest.NewMemory()
		s1, err := coordinator.New(coordinator.WithStore(mem.Open()), coordinator.WithPool("data", 2, dataWorker{ran: make(chan string, 1)}))
		if err != nil {
			t.Fatal(err)
		}
		if err := s1.Submit(coordinator.Task{ID: "job-1", Pool: "data", Payload: []byte("x"), Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if err := s1.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}

		_, err = coordinator.New(coordinator.WithStore(mem.Open()), coordinator.WithPool("data", 2, worker.Func{}))
		if !errors.Is(err, coordinator.ErrInvalidOption) || errors.Is(err, coordinator.ErrStoreCorrupt) || !strings.Contains(err.Error(), `"job-1"`) {
			t.Fatalf("New with a pool that now runs functions = %v; want ErrInvalidOption naming job-1, not ErrStoreCorrupt", err)
		}

		s2, err := coordinator.New(coordinator.WithStore(mem.Open()), coordinator.WithPool("data", 2, dataWorker{ran: make(chan string, 1)}))
		if err != nil {
			t.Fatal(err)
		}
		if !s2.Cancel("job-1") {
			t.Fatal("Cancel(job-1) = false")
		}
		if err := s2.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}

		s3, err := coordinator.New(coordinator.WithStore(mem.Open()), coordinator.WithPool("data", 2, worker.Func{}))
		if err != nil {
			t.Fatalf("New once the task is final = %v; want nil", err)
		}
		defer s3.Shutdown(context.Background())
		_, err = s3.Rerun(context.Background(), coordinator.RerunRequest{IDs: []string{"job-1"}})
		if !errors.Is(err, coordinator.ErrNotRerunnable) || !strings.Contains(err.Error(), "names no function") {
			t.Fatalf("Rerun(job-1) = %v; want ErrNotRerunnable: it names no function and its pool now needs one", err)
		}
		if st := status(t, s3, "job-1"); st != coordinator.Cancelled {
			t.Errorf("job-1 is %v; want cancelled still", st)
		}
	})
}

// A task its rule let go keeps going across a restart whatever its
// dependencies did since, as it does without one: here an AnyFailed task
// started by a failure, then waiting for its retry or snooze (or queued,
// on a pool too small to run it yet) when a Rerun re-opens the failed
// dependency, which then succeeds. Restored, it once waited for its rule
// again and was skipped when the last dependency succeeded, its attempt
// spent and its retry lost.
func TestReleasedTaskKeepsGoingAcrossARestartAfterARerun(t *testing.T) {
	for _, wait := range []string{"retry", "snooze", "queued"} {
		for _, restart := range []string{"none", "shutdown", "crash"} {
			t.Run(wait+"/"+restart, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					var mu sync.Mutex
					calls := map[string]int{}
					f := coordinator.WithFunc("f", func(ctx context.Context, p []byte) error {
						mu.Lock()
						calls[string(p)]++
						n := calls[string(p)]
						mu.Unlock()
						switch {
						case string(p) == "x" && n == 1:
							return errors.New("x fails")
						case string(p) == "y" && n == 1 && wait == "retry":
							return errors.New("y fails once")
						case string(p) == "y" && n == 1 && wait == "snooze":
							return coordinator.Snooze(time.Hour)
						case string(p) == "z":
							time.Sleep(5 * time.Hour)
						}
						return nil
					})
					workers := coordinator.WithWorkers(2)
					if wait == "queued" {
						workers = coordinator.WithWorkers(1) // z holds the one worker: y, released, waits in the queue
					}
					mem := storetest.NewMemory()
					s, err := coordinator.New(coordinator.WithStore(mem.Open()), f, workers)
					if err != nil {
						t.Fatal(err)
					}
					y := coordinator.Task{ID: "y", Func: "f", Payload: []byte("y"), Deps: []string{"x", "z"}, When: coordinator.AnyFailed,
						Retry: coordinator.RetryPolicy{MaxAttempts: 2, BaseDelay: time.Hour}}
					if err := s.Submit(coordinator.Task{ID: "x", Func: "f", Payload: []byte("x")},
						coordinator.Task{ID: "z", Func: "f", Payload: []byte("z")}, y); err != nil {
						t.Fatal(err)
					}
					time.Sleep(time.Minute)
					synctest.Wait()
					if info, _ := s.Info("y"); wait == "queued" && info.Status != coordinator.Ready {
						t.Fatalf("Info(y) = %+v; want ready, behind z", info)
					}
					if _, err := s.Rerun(context.Background(), coordinator.RerunRequest{IDs: []string{"x"}}); err != nil {
						t.Fatal(err)
					}
					synctest.Wait()
					if restart != "none" {
						store := mem
						if restart == "crash" {
							store = mem.Crash()
						}
						if err := s.Shutdown(context.Background()); err != nil {
							t.Fatal(err)
						}
						func() {
							defer func() {
								if r := recover(); r != nil {
									t.Fatalf("New after the restart panicked: %v", r)
								}
							}()
							if s, err = coordinator.New(coordinator.WithStore(store.Open()), f, workers); err != nil {
								t.Fatal(err)
							}
						}()
					}
					defer s.Shutdown(context.Background())
					if err := s.Wait(context.Background()); err != nil {
						t.Fatal(err)
					}
					want := 2
					if wait == "queued" {
						want = 1
					}
					mu.Lock()
					defer mu.Unlock()
					if info, _ := s.Info("y"); info.Status != coordinator.Succeeded || calls["y"] != want {
						t.Errorf("y ended %+v after %d calls; want succeeded after %d", info, calls["y"], want)
					}
				})
			})
		}
	}
}

// A wait that ends after 2262 (beyond an int64 of nanoseconds: a snooze,
// a retry's wait or a delay of math.MaxInt64, which end in 2318) is
// restored as it was. It was read back as a time long past: the task ran
// again at once after a restart, a retry spending an attempt each time.
func TestFarWaitsSurviveARestart(t *testing.T) {
	for _, c := range []struct {
		name string
		task coordinator.Task
		ret  error // what the function returns
	}{
		{"snooze", coordinator.Task{ID: "t", Func: "f"}, coordinator.Snooze(math.MaxInt64)},
		{"retry-after", coordinator.Task{ID: "t", Func: "f", Retry: coordinator.RetryPolicy{MaxAttempts: 5}}, coordinator.RetryAfter(errors.New("busy"), math.MaxInt64)},
		{"delay", coordinator.Task{ID: "t", Func: "f", Delay: math.MaxInt64}, nil},
		{"every", coordinator.Task{ID: "t", Func: "f", Every: math.MaxInt64, Times: 2}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := storetest.NewMemory()
				var calls atomic.Int32
				f := coordinator.WithFunc("f", func(context.Context, []byte) error { calls.Add(1); return c.ret })
				s1, err := coordinator.New(coordinator.WithStore(mem.Open()), f)
				if err != nil {
					t.Fatal(err)
				}
				if err := s1.Submit(c.task); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				before, _ := s1.Detail("t")
				infoBefore, _ := s1.Info("t")
				n := calls.Load()
				if before.Next.Before(time.Now().AddDate(200, 0, 0)) {
					t.Fatalf("before the restart: Next %v, want beyond 2200", before.Next)
				}
				if err := s1.Shutdown(context.Background()); err != nil {
					t.Fatal(err)
				}
				s2 := newScheduler(t, coordinator.WithStore(mem.Open()), f)
				synctest.Wait()
				after, _ := s2.Detail("t")
				info, _ := s2.Info("t")
				if calls.Load() != n || !after.Next.Equal(before.Next) || info.Status != infoBefore.Status || info.Attempts != infoBefore.Attempts {
					t.Errorf("after the restart: %d calls (%d before), Next %v (%v before), %v with %d attempts (%v with %d before)",
						calls.Load(), n, after.Next, before.Next, info.Status, info.Attempts, infoBefore.Status, infoBefore.Attempts)
				}
				s2.Cancel("t")
			})
		})
	}
}

// A function's error that wraps ErrCancelled, ErrClosed or ErrInterrupted
// in a text of its own comes back from a restart with that text, and
// errors.Is still finds the sentinel; it came back as the bare sentinel.
func TestWrappedSentinelErrorsSurviveARestart(t *testing.T) {
	for _, sentinel := range []error{coordinator.ErrCancelled, coordinator.ErrClosed, coordinator.ErrInterrupted} {
		t.Run(sentinel.Error(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := storetest.NewMemory()
				fail := fmt.Errorf("upstream said: %w", sentinel)
				f := coordinator.WithFunc("f", func(context.Context, []byte) error { return fail })
				s1, err := coordinator.New(coordinator.WithStore(mem.Open()), f)
				if err != nil {
					t.Fatal(err)
				}
				if err := s1.Submit(coordinator.Task{ID: "t", Func: "f"}); err != nil {
					t.Fatal(err)
				}
				settle(t, s1)
				if err := s1.Shutdown(context.Background()); err != nil {
					t.Fatal(err)
				}
				s2 := newScheduler(t, coordinator.WithStore(mem.Open()), f)
				info, _ := s2.Info("t")
				h, _ := s2.History("t")
				if info.Status != coordinator.Failed || info.Err == nil || info.Err.Error() != fail.Error() || !errors.Is(info.Err, sentinel) {
					t.Errorf("Info after a restart: %v, Err %v; want Failed, Err %q wrapping %v", info.Status, info.Err, fail, sentinel)
				}
				if len(h.Attempts) != 1 || h.Attempts[0].Err == nil || h.Attempts[0].Err.Error() != fail.Error() || !errors.Is(h.Attempts[0].Err, sentinel) {
					t.Errorf("History after a restart: %+v; want one attempt, Err %q", h.Attempts, fail)
				}
			})
		})
	}
}
