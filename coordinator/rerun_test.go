package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/coordinator/storetest"
)

// broken is a task body that fails while its switch is on.
type broken struct{ on atomic.Bool }

func newBroken() *broken { b := &broken{}; b.on.Store(true); return b }

func (b *broken) run(context.Context) error {
	if b.on.Load() {
		return errors.New("planned: broken")
	}
	return nil
}

func statuses(t *testing.T, s *coordinator.Scheduler, ids ...string) map[string]coordinator.Status {
	t.Helper()
	out := map[string]coordinator.Status{}
	for _, id := range ids {
		out[id] = status(t, s, id)
	}
	return out
}

// Rerun (its doc): a failed task and, with Downstream, what it skipped
// run again, with a fresh attempt budget, as one request whose result
// lists them (dependencies first); EventReopened names who asked; the
// history goes on. Without Downstream the skipped stay skipped.
func TestRerunReopensWhatFailedAndItsDownstream(t *testing.T) {
	for _, downstream := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			s := newScheduler(t)
			rec := record(s)
			a := newBroken()
			err := s.Submit(
				coordinator.Task{ID: "a", Retry: coordinator.RetryPolicy{MaxAttempts: 2}, Run: a.run},
				coordinator.Task{ID: "b", Deps: []string{"a"}, Run: ok},
				coordinator.Task{ID: "c", Deps: []string{"b"}, Run: ok},
				coordinator.Task{ID: "cleanup", Deps: []string{"a"}, When: coordinator.AllDone, Run: ok},
			)
			if err != nil {
				t.Fatal(err)
			}
			settle(t, s)
			a.on.Store(false) // the cause is fixed
			res, err := s.Rerun(context.Background(), coordinator.RerunRequest{IDs: []string{"a"}, Downstream: downstream, By: "ops"})
			if err != nil {
				t.Fatalf("Rerun = %v", err)
			}
			want := []string{"a"}
			if downstream {
				want = []string{"a", "b", "c"}
			}
			if !slices.Equal(res.Reopened, want) {
				t.Errorf("Reopened = %v; want %v", res.Reopened, want)
			}
			settle(t, s)
			got := statuses(t, s, "a", "b", "c", "cleanup")
			for id, st := range got {
				wantSt := coordinator.Succeeded
				if !downstream && (id == "b" || id == "c") {
					wantSt = coordinator.Skipped
				}
				if st != wantSt {
					t.Errorf("downstream %v: status(%s) = %v; want %v", downstream, id, st, wantSt)
				}
			}
			info, _ := s.Info("a")
			if info.Attempts != 1 || info.Reruns != 1 {
				t.Errorf("Info(a) = %d attempts, %d reruns; want 1 attempt of a fresh budget, 1 rerun", info.Attempts, info.Reruns)
			}
			h, _ := s.History("a")
			if len(h.Attempts) != 3 || h.Attempts[2].Outcome != coordinator.OutcomeSucceeded {
				t.Errorf("History(a) = %+v; want its 2 failures, then the re-run's success", h)
			}
			var by []string
			for _, e := range rec.all() {
				if e.Kind == coordinator.EventReopened {
					by = append(by, e.TaskID+":"+e.Cause)
				}
			}
			if len(by) != len(want) || by[0] != "a:ops" {
				t.Errorf("EventReopened %v; want one per task re-opened, by ops", by)
			}
		})
	}
}

// Rerun refuses, whole, a task unknown, not final, or that succeeded,
// with a clear error, and re-opens nothing.
func TestRerunRefusesWhole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(2))
		g := newGate()
		err := s.Submit(
			coordinator.Task{ID: "failed", Run: newBroken().run},
			coordinator.Task{ID: "done", Run: ok},
			coordinator.Task{ID: "busy", Run: g.run},
		)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		for _, c := range []struct {
			ids  []string
			want error
		}{
			{[]string{"failed", "ghost"}, coordinator.ErrUnknownTask},
			{[]string{"failed", "busy"}, coordinator.ErrNotRerunnable},
			{[]string{"done"}, coordinator.ErrNotRerunnable},
		} {
			_, err := s.Rerun(context.Background(), coordinator.RerunRequest{IDs: c.ids})
			var te *coordinator.TaskError
			if !errors.Is(err, c.want) || !errors.As(err, &te) {
				t.Errorf("Rerun(%v) = %v; want a *TaskError wrapping %v", c.ids, err, c.want)
			}
		}
		if info, _ := s.Info("failed"); info.Status != coordinator.Failed || info.Reruns != 0 {
			t.Errorf("Info(failed) = %v, %d reruns; want untouched", info.Status, info.Reruns)
		}
		g.release()
		settle(t, s)
	})
}

// A failed child's re-run re-opens its spawner's join; a re-run spawner
// spawns a new family in place of the old (the old one's IDs free).
func TestRerunInFamilies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		c1 := newBroken()
		var spawns atomic.Int32
		err := s.Submit(
			coordinator.Task{ID: "p", Run: func(ctx context.Context) error {
				spawns.Add(1)
				return coordinator.Spawn(ctx,
					coordinator.Task{ID: "p/1", Run: c1.run},
					coordinator.Task{ID: "p/2", Run: ok})
			}},
			coordinator.Task{ID: "after", Deps: []string{"p"}, Run: ok},
		)
		if err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		if got := statuses(t, s, "p", "p/1", "p/2", "after"); got["p"] != coordinator.Failed || got["after"] != coordinator.Skipped {
			t.Fatalf("statuses %v; want p failed by its join, after skipped", got)
		}
		c1.on.Store(false)
		res, err := s.Rerun(context.Background(), coordinator.RerunRequest{IDs: []string{"p/1"}, Downstream: true})
		if err != nil {
			t.Fatalf("Rerun(p/1) = %v", err)
		}
		if !slices.Equal(res.Reopened, []string{"p", "p/1", "after"}) && !slices.Equal(res.Reopened, []string{"p/1", "p", "after"}) {
			t.Errorf("Reopened = %v; want p/1, its spawner's join p, and after", res.Reopened)
		}
		settle(t, s)
		for id, st := range statuses(t, s, "p", "p/1", "p/2", "after") {
			if st != coordinator.Succeeded {
				t.Errorf("status(%s) = %v; want succeeded", id, st)
			}
		}
		if n := spawns.Load(); n != 1 {
			t.Errorf("p ran %d times; want once: its join re-opened, not its function", n)
		}

		// A re-run spawner: its family is replaced.
		c1.on.Store(true)
		err = s.Submit(coordinator.Task{ID: "q", Run: func(ctx context.Context) error {
			return coordinator.Spawn(ctx, coordinator.Task{ID: "q/1", Run: c1.run})
		}})
		if err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		c1.on.Store(false)
		if _, err := s.Rerun(context.Background(), coordinator.RerunRequest{IDs: []string{"q"}}); err != nil {
			t.Fatalf("Rerun(q) = %v", err)
		}
		settle(t, s)
		if info, _ := s.Info("q/1"); info.Status != coordinator.Succeeded || info.Attempts != 1 || info.Reruns != 0 || info.Parent != "q" {
			t.Errorf("Info(q/1) = %+v; want the new family's child, succeeded on its first attempt", info)
		}
		if st := status(t, s, "q"); st != coordinator.Succeeded {
			t.Errorf("status(q) = %v; want succeeded", st)
		}
	})
}

// A branch: a task it did not choose, re-run, is skipped again as not
// chosen; a re-run branch chooses again.
func TestRerunAndBranches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		pick := "x"
		b := newBroken()
		err := s.Submit(
			coordinator.Task{ID: "pre", Run: b.run},
			coordinator.Task{ID: "branch", Deps: []string{"pre"}, Run: func(ctx context.Context) error { return coordinator.Choose(ctx, pick) }},
			coordinator.Task{ID: "x", Deps: []string{"branch"}, Run: ok},
			coordinator.Task{ID: "y", Deps: []string{"branch"}, Run: ok},
		)
		if err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		b.on.Store(false)
		if _, err := s.Rerun(context.Background(), coordinator.RerunRequest{IDs: []string{"pre"}, Downstream: true}); err != nil {
			t.Fatalf("Rerun = %v", err)
		}
		settle(t, s)
		if got := statuses(t, s, "branch", "x", "y"); got["branch"] != coordinator.Succeeded || got["x"] != coordinator.Succeeded || got["y"] != coordinator.Skipped {
			t.Errorf("statuses %v; want the branch to choose x", got)
		}
		if _, err := s.Rerun(context.Background(), coordinator.RerunRequest{IDs: []string{"y"}}); err != nil {
			t.Fatalf("Rerun(y) = %v", err)
		}
		settle(t, s)
		if info, _ := s.Info("y"); info.Status != coordinator.Skipped || info.Cause != "branch" || !errors.Is(info.Err, coordinator.ErrNotChosen) || info.Reruns != 2 { // the first re-run re-opened it too (downstream of pre)
			t.Errorf("Info(y) after its re-run = %+v; want skipped again, not chosen by branch", info)
		}
	})
}

// A series that failed runs its failed run again, then goes on.
func TestRerunSeries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		runs := 0
		b := newBroken()
		b.on.Store(false)
		err := s.Submit(coordinator.Task{ID: "tick", Every: time.Minute, Times: 3, Run: func(ctx context.Context) error {
			runs++
			if runs == 2 {
				b.on.Store(true)
			}
			return b.run(ctx)
		}})
		if err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		if info, _ := s.Info("tick"); info.Status != coordinator.Failed || info.Runs != 1 {
			t.Fatalf("Info(tick) = %+v; want failed in its second run", info)
		}
		b.on.Store(false)
		if _, err := s.Rerun(context.Background(), coordinator.RerunRequest{IDs: []string{"tick"}}); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		if info, _ := s.Info("tick"); info.Status != coordinator.Succeeded || info.Runs != 3 {
			t.Errorf("Info(tick) = %+v; want succeeded after its 3 runs", info)
		}
	})
}

// A durable scheduler commits a re-run before Rerun returns, and keeps
// it, the re-run count and the history across a restart; retention does
// not forget a re-opened task on its old end's time.
func TestRerunIsDurable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := storetest.NewMemory()
		b := newBroken()
		funcs := coordinator.WithFunc("step", func(ctx context.Context, _ []byte) error { return b.run(ctx) })
		gate := make(chan struct{})
		hold := coordinator.WithFunc("hold", func(ctx context.Context, _ []byte) error {
			select {
			case <-gate:
			case <-ctx.Done():
			}
			return ctx.Err()
		})
		s, err := coordinator.New(coordinator.WithStore(mem.Open()), funcs, hold, coordinator.WithRetention(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Submit(coordinator.Task{ID: "a", Func: "step"}, coordinator.Task{ID: "b", Func: "hold", Deps: []string{"a"}}); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		time.Sleep(50 * time.Minute)
		if err := s.Pause(""); err != nil { // nothing starts: the store holds the re-run as Rerun committed it
			t.Fatal(err)
		}
		if _, err := s.Rerun(context.Background(), coordinator.RerunRequest{IDs: []string{"a"}, Downstream: true}); err != nil {
			t.Fatal(err)
		}
		crashed := mem.Crash()       // the re-run is committed
		time.Sleep(20 * time.Minute) // a's old end is 70 minutes old: its retention must not forget it now
		synctest.Wait()
		if info, ok := s.Info("a"); !ok || info.Reruns != 1 {
			t.Errorf("Info(a) = %+v, %v; want known, re-run once", info, ok)
		}
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		b.on.Store(false)
		s2, err := coordinator.New(coordinator.WithStore(crashed.Open()), funcs, hold)
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Shutdown(context.Background())
		if st := status(t, s2, "a"); st.Final() {
			t.Fatalf("status(a) after the restart = %v; want re-opened, waiting for its paused pool", st)
		}
		if err := s2.Resume(""); err != nil {
			t.Fatal(err)
		}
		close(gate)
		settle(t, s2)
		info, _ := s2.Info("a")
		h, _ := s2.History("a")
		if info.Status != coordinator.Succeeded || info.Reruns != 1 || len(h.Attempts) != 2 {
			t.Errorf("after the restart Info(a) = %+v, history %d attempts; want succeeded, re-run once, its failure and its success", info, len(h.Attempts))
		}
	})
}

// A re-run survives a Shutdown that stops the re-opened task's attempt:
// what Shutdown stops is written as it was before the attempt (it runs
// again in the next process), with its re-runs and its history. (The
// state written then lacked them: the next process ran it as never
// re-run; the crash test found it.)
func TestRerunSurvivesAShutdownThatStopsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := storetest.NewMemory()
		fail := coordinator.WithFunc("f", func(ctx context.Context, _ []byte) error { return errors.New("planned") })
		block := coordinator.WithFunc("f", func(ctx context.Context, _ []byte) error { <-ctx.Done(); return ctx.Err() })
		s, err := coordinator.New(coordinator.WithStore(mem.Open()), fail)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Submit(coordinator.Task{ID: "a", Func: "f"}); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		for round := range 3 {
			s, err := coordinator.New(coordinator.WithStore(mem.Open()), block)
			if err != nil {
				t.Fatal(err)
			}
			if round == 0 {
				if _, err := s.Rerun(context.Background(), coordinator.RerunRequest{IDs: []string{"a"}}); err != nil {
					t.Fatal(err)
				}
			}
			synctest.Wait() // its attempt runs, until Shutdown stops it
			info, _ := s.Info("a")
			h, _ := s.History("a")
			if info.Reruns != 1 || len(h.Attempts) != 2 || h.Attempts[0].Outcome != coordinator.OutcomeFailed {
				t.Fatalf("process %d: Info(a) re-run %d times, history %+v; want re-run once, its failure kept", round, info.Reruns, h)
			}
			if err := s.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// A re-opened task skipped at once names the root cause, as any skip does
// (README rule 4), also when its dependency was itself re-opened and
// skipped since its first skip: c was skipped because b was cancelled; b,
// re-run, is skipped because a failed meanwhile; c, re-run, is skipped
// because of a, not b. (The stress test found c naming b.)
func TestRerunSkipNamesTheRootCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		g := newGate()
		err := s.Submit(
			coordinator.Task{ID: "a", Run: func(ctx context.Context) error {
				if err := g.run(ctx); err != nil {
					return err
				}
				return errors.New("planned")
			}},
			coordinator.Task{ID: "b", Deps: []string{"a"}, Run: ok},
			coordinator.Task{ID: "c", Deps: []string{"b"}, Run: ok},
		)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		s.Cancel("b")
		g.release()
		settle(t, s)
		for _, id := range []string{"b", "c"} {
			if _, err := s.Rerun(context.Background(), coordinator.RerunRequest{IDs: []string{id}}); err != nil {
				t.Fatalf("Rerun(%s) = %v", id, err)
			}
			settle(t, s)
			if info, _ := s.Info(id); info.Status != coordinator.Skipped || info.Cause != "a" {
				t.Errorf("Info(%s) = %v cause %q after its re-run; want skipped because of a", id, info.Status, info.Cause)
			}
		}
	})
}

// A skip keeps its class when its cause is re-run without it (README rule
// 4: what depends on a task is decided by that task's end): b, skipped
// because a failed, stays skipped when a is re-run alone and succeeds, and
// is still a failure's skip for the rules of tasks submitted after, in
// this process and in the next (durable); it names a. (The rules read the
// class from a's status, which the re-run changed: c under AnyFailed was
// skipped, d under NoneFailed ran.)
func TestRerunLeavesASkipAsItWas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := storetest.NewMemory()
		b := newBroken()
		opts := []coordinator.Option{coordinator.WithStore(mem.Open()),
			coordinator.WithFunc("step", func(ctx context.Context, _ []byte) error { return b.run(ctx) }),
			coordinator.WithFunc("ok", func(context.Context, []byte) error { return nil })}
		s, err := coordinator.New(opts...)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Submit(coordinator.Task{ID: "a", Func: "step"}, coordinator.Task{ID: "b", Func: "ok", Deps: []string{"a"}}); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		b.on.Store(false)
		if _, err := s.Rerun(context.Background(), coordinator.RerunRequest{IDs: []string{"a"}}); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		check := func(s *coordinator.Scheduler, suffix string) {
			t.Helper()
			err := s.Submit(
				coordinator.Task{ID: "c" + suffix, Func: "ok", Deps: []string{"b"}, When: coordinator.AnyFailed},
				coordinator.Task{ID: "d" + suffix, Func: "ok", Deps: []string{"b"}, When: coordinator.NoneFailed},
				coordinator.Task{ID: "e" + suffix, Func: "ok", Deps: []string{"b"}},
			)
			if err != nil {
				t.Fatal(err)
			}
			settle(t, s)
			want := map[string]coordinator.Status{"a": coordinator.Succeeded, "b": coordinator.Skipped,
				"c" + suffix: coordinator.Succeeded, "d" + suffix: coordinator.Skipped, "e" + suffix: coordinator.Skipped}
			for id, st := range want {
				info, _ := s.Info(id)
				if info.Status != st {
					t.Errorf("%s: Info(%s) = %v; want %v", suffix, id, info.Status, st)
				}
				if st == coordinator.Skipped && info.Cause != "a" {
					t.Errorf("%s: Info(%s).Cause = %q; want a", suffix, id, info.Cause)
				}
			}
		}
		check(s, "1")
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		opts[0] = coordinator.WithStore(mem.Open())
		s2, err := coordinator.New(opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Shutdown(context.Background())
		check(s2, "2")
	})
}

// A re-run tells its end only to what depends on it now: d, skipped when
// a failed, is forgotten while a is kept (a was re-run later, so its
// retention time is later), and n, submitted after with no dependencies,
// may take d's place in memory. When a is re-run and fails again, n (which
// waits for its delay) is not skipped, and when it is due it runs.
func TestRerunEndReachesOnlyItsDependents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithRetention(time.Minute))
		a := newBroken()
		if err := s.Submit(coordinator.Task{ID: "a", Run: a.run}, coordinator.Task{ID: "d", Deps: []string{"a"}, Run: ok}); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		time.Sleep(30 * time.Second)
		if _, err := s.Rerun(context.Background(), coordinator.RerunRequest{IDs: []string{"a"}}); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		time.Sleep(40 * time.Second) // d's retention is up, a's is not
		if _, found := s.Info("d"); found {
			t.Fatal("d is still kept; the test needs it forgotten")
		}
		var ran atomic.Int32
		for i := range 8 { // several, so that one takes d's record
			id := "n" + string(rune('0'+i))
			err := s.Submit(coordinator.Task{ID: id, Delay: time.Hour, Run: func(context.Context) error { ran.Add(1); return nil }})
			if err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Rerun(context.Background(), coordinator.RerunRequest{IDs: []string{"a"}}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // a has ended; the n wait for their delay
		if st := status(t, s, "a"); st != coordinator.Failed {
			t.Fatalf("a = %v; want failed again", st)
		}
		for i := range 8 {
			id := "n" + string(rune('0'+i))
			if info, _ := s.Info(id); info.Status.Final() {
				t.Errorf("Info(%s) = %v cause %q; want it waiting for its delay", id, info.Status, info.Cause)
			}
		}
		time.Sleep(time.Hour)
		settle(t, s)
		if ran.Load() != 8 {
			t.Errorf("%d of 8 delayed tasks ran", ran.Load())
		}
	})
}

// A spawner re-run with a task its family depends on, in one request: the
// old family's records, forgotten, go to the new family, and the task
// re-opened must not count them among its dependents again, or its success
// releases the new children twice: c2 started while c1, which it depends
// on, still ran (a model program found it; the rule: a task starts only
// after every dependency succeeded).
func TestRerunOfASpawnerWithADependencyOfItsFamily(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(2))
		var aRuns atomic.Int32
		aGate, c1Gate := make(chan struct{}), make(chan struct{})
		var c2Started atomic.Bool
		a := coordinator.Task{ID: "a", Run: func(context.Context) error {
			if aRuns.Add(1) == 1 {
				return errors.New("a's first run fails")
			}
			<-aGate // until the new family waits for it
			return nil
		}}
		sp := coordinator.Task{ID: "s", Run: func(ctx context.Context) error {
			return coordinator.Spawn(ctx,
				coordinator.Task{ID: "c1", Deps: []string{"a"}, Run: func(context.Context) error { <-c1Gate; return nil }},
				coordinator.Task{ID: "c2", Deps: []string{"c1", "a"}, Run: func(context.Context) error { c2Started.Store(true); return nil }})
		}}
		if err := s.Submit(a); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if err := s.Submit(sp); err != nil { // a has failed: its children are skipped, its join fails
			t.Fatal(err)
		}
		synctest.Wait()
		if info, _ := s.Info("s"); info.Status != coordinator.Failed {
			t.Fatalf("s = %v after its children were skipped; want failed", info.Status)
		}
		if _, err := s.Rerun(context.Background(), coordinator.RerunRequest{IDs: []string{"a", "s"}}); err != nil {
			t.Fatalf("Rerun(a, s) = %v", err)
		}
		synctest.Wait() // s ran again: its new family waits for a
		close(aGate)
		synctest.Wait()
		if info, _ := s.Info("c1"); info.Status != coordinator.Running {
			t.Fatalf("c1 = %v once a succeeded; want running", info.Status)
		}
		if c2Started.Load() {
			t.Fatalf("c2 started while c1, its dependency, was still running")
		}
		close(c1Gate)
		if err := s.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !c2Started.Load() {
			t.Errorf("c2 never ran after c1 succeeded")
		}
	})
}

// Rerun with Downstream refuses what Rerun alone refuses: a spawner above
// a failed join it re-opens that ended otherwise (here cancelled, or
// succeeded because an AnyFailed task handled the failure). It accepted
// it once: the walk up the spawners stopped at the join Downstream had
// marked, so that a Cancelled spawner kept a family running again, a
// re-run of it then replaced that family with the old attempt still
// running (two at once), and Wait never returned.
func TestRerunDownstreamRefusesUnderASpawnerAboveThatEndedOtherwise(t *testing.T) {
	for _, how := range []string{"cancelled", "succeeded"} {
		for _, down := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/downstream=%v", how, down), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					s := newScheduler(t)
					release := make(chan struct{})
					var running, qRuns atomic.Int32
					c1 := func(ctx context.Context) error {
						if running.Add(1) > 1 {
							t.Error("c1 runs twice at once")
						}
						defer running.Add(-1)
						<-release
						return errors.New("planned")
					}
					g := func(ctx context.Context) error {
						kids := []coordinator.Task{{ID: "p", Run: func(ctx context.Context) error {
							return coordinator.Spawn(ctx, coordinator.Task{ID: "c1", Run: c1})
						}}}
						if how == "cancelled" {
							kids = append(kids, coordinator.Task{ID: "q", Run: func(ctx context.Context) error {
								if qRuns.Add(1) == 1 { // until g's Cancel
									<-ctx.Done()
								}
								return ctx.Err()
							}})
						} else {
							kids = append(kids, coordinator.Task{ID: "alert", Deps: []string{"p"}, When: coordinator.AnyFailed, Run: ok})
						}
						return coordinator.Spawn(ctx, kids...)
					}
					if err := s.Submit(coordinator.Task{ID: "g", Run: g}); err != nil {
						t.Fatal(err)
					}
					synctest.Wait()
					close(release)
					synctest.Wait()
					if how == "cancelled" {
						s.Cancel("g")
					}
					settle(t, s)
					want := coordinator.Succeeded
					if how == "cancelled" {
						want = coordinator.Cancelled
					}
					if info, _ := s.Info("g"); info.Status != want {
						t.Fatalf("g %v, want %v", info.Status, want)
					}
					res, err := s.Rerun(context.Background(), coordinator.RerunRequest{IDs: []string{"c1"}, Downstream: down})
					if err == nil || !errors.Is(err, coordinator.ErrNotRerunnable) || !strings.Contains(err.Error(), `a spawner above it "g"`) {
						t.Fatalf("Rerun(c1) = %v, %v; want refused: g, a spawner above it, is %v", res.Reopened, err, want)
					}
					for id, st := range map[string]coordinator.Status{"g": want, "p": coordinator.Failed, "c1": coordinator.Failed} {
						if info, _ := s.Info(id); info.Status != st {
							t.Errorf("after the refused Rerun, %s is %v, want %v", id, info.Status, st)
						}
					}
					if _, err := s.Rerun(context.Background(), coordinator.RerunRequest{IDs: []string{"g"}}); how == "cancelled" && err != nil {
						t.Fatalf("Rerun(g) = %v", err)
					}
					settle(t, s)
				})
			})
		}
	}
}

// A task skipped because its dependency failed says so (Err nil, Cause
// the dependency) after a Rerun of the dependency alone succeeded, and so
// does one submitted behind it later: neither is ErrNotChosen, which only
// a branch that did not choose a path causes (the re-run cause is
// Succeeded, as such a branch is).
func TestSkipWhoseCauseWasRerunIsNotNotChosen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		rec := record(s)
		a := newBroken()
		if err := s.Submit(coordinator.Task{ID: "a", Run: a.run}, coordinator.Task{ID: "b", Deps: []string{"a"}, Run: ok}); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		a.on.Store(false)
		if _, err := s.Rerun(context.Background(), coordinator.RerunRequest{IDs: []string{"a"}}); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		if err := s.Submit(coordinator.Task{ID: "d", Deps: []string{"b"}, When: coordinator.NoneFailed, Run: ok}); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		for _, id := range []string{"b", "d"} {
			info, _ := s.Info(id)
			if info.Status != coordinator.Skipped || info.Cause != "a" || info.Err != nil {
				t.Errorf("Info(%s) = %v, Cause %q, Err %v; want Skipped, Cause a, Err nil", id, info.Status, info.Cause, info.Err)
			}
		}
		for _, e := range rec.of("d") {
			if e.Kind == coordinator.EventSkipped && e.Err != nil {
				t.Errorf("d's EventSkipped Err = %v, want nil", e.Err)
			}
		}
	})
}

// Rerun with Downstream re-opens a spawner's failed join only through a
// family member that runs or joins again. A Succeeded child on the way
// (an AnyFailed task on the re-run one) re-opened its spawner's join,
// with nothing in the family to end it: at the top, the spawner stayed
// Pending and Wait never returned; under a spawner that had succeeded,
// the request was refused although it re-ran nothing of that family.
func TestRerunDownstreamThroughASucceededChildLeavesItsJoin(t *testing.T) {
	for _, nested := range []bool{false, true} {
		t.Run(fmt.Sprint("nested=", nested), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScheduler(t)
				x := newBroken()
				if err := s.Submit(coordinator.Task{ID: "x", Run: x.run}); err != nil {
					t.Fatal(err)
				}
				settle(t, s)
				p := coordinator.Task{ID: "p", Run: func(ctx context.Context) error {
					return coordinator.Spawn(ctx,
						coordinator.Task{ID: "y", Deps: []string{"x"}, When: coordinator.AnyFailed, Run: ok},
						coordinator.Task{ID: "c2", Run: func(context.Context) error { return errors.New("planned") }})
				}}
				top := p
				if nested {
					top = coordinator.Task{ID: "g", Run: func(ctx context.Context) error {
						return coordinator.Spawn(ctx, p, coordinator.Task{ID: "h", Deps: []string{"p"}, When: coordinator.AnyFailed, Run: ok})
					}}
				}
				if err := s.Submit(top); err != nil {
					t.Fatal(err)
				}
				settle(t, s)
				x.on.Store(false)
				res, err := s.Rerun(context.Background(), coordinator.RerunRequest{IDs: []string{"x"}, Downstream: true})
				if err != nil || !slices.Equal(res.Reopened, []string{"x"}) {
					t.Fatalf("Rerun(x, Downstream) = %v, %v; want [x]", res.Reopened, err)
				}
				settle(t, s)
				for id, st := range map[string]coordinator.Status{"x": coordinator.Succeeded, "p": coordinator.Failed, "y": coordinator.Succeeded, "c2": coordinator.Failed} {
					if info, _ := s.Info(id); info.Status != st {
						t.Errorf("%s %v, want %v", id, info.Status, st)
					}
				}
			})
		})
	}
}
