package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/worker"
)

// spawner is a task body that spawns kids and returns Spawn's error.
func spawner(kids ...coordinator.Task) func(context.Context) error {
	return func(ctx context.Context) error { return coordinator.Spawn(ctx, kids...) }
}

// Spawn (Spawn's doc, "The join"): the spawner's dependents wait for its
// children; meanwhile it is Pending and Joining, and WaitTasks on it waits
// for them; its events and its children's say who spawned whom.
func TestSpawnJoinWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(1))
		rec := record(s)
		g := newGate()
		err := s.Submit(
			coordinator.Task{ID: "p", Priority: 5, Run: spawner(
				coordinator.Task{ID: "c1", Run: g.run},
				coordinator.Task{ID: "c2", Deps: []string{"c1"}, Run: ok})},
			coordinator.Task{ID: "after", Deps: []string{"p"}, Run: ok},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		synctest.Wait()
		if info, _ := s.Info("p"); info.Status != coordinator.Pending || !info.Joining || info.Children != 2 || info.Parent != "" {
			t.Fatalf("Info(p) while c1 runs = %+v; want pending, joining, 2 children", info)
		}
		if info, _ := s.Info("c1"); info.Status != coordinator.Running || info.Parent != "p" || info.Priority != 5 {
			t.Fatalf("Info(c1) = %+v; want running, parent p, priority 5 (inherited)", info)
		}
		if st := status(t, s, "after"); st != coordinator.Pending {
			t.Fatalf("status(after) = %v while p's children run; want pending", st)
		}
		waited := make(chan error, 1)
		go func() { waited <- s.WaitTasks(context.Background(), "p") }()
		synctest.Wait()
		select {
		case err := <-waited:
			t.Fatalf("WaitTasks(p) = %v while its child runs; want it to wait", err)
		default:
		}
		g.release()
		settle(t, s)
		if err := <-waited; err != nil {
			t.Fatalf("WaitTasks(p) = %v; want nil", err)
		}
		want := []string{"p started", "p joining", "c1 spawned", "c2 spawned", "c1 started", "c1 succeeded",
			"c2 started", "c2 succeeded", "p succeeded", "after started", "after succeeded"}
		if got := rec.lines(); !slices.Equal(got, want) {
			t.Fatalf("events %v; want %v", got, want)
		}
		for _, e := range rec.all() {
			wantParent := ""
			if strings.HasPrefix(e.TaskID, "c") {
				wantParent = "p"
			}
			if e.Parent != wantParent {
				t.Fatalf("event %v %v: Parent %q; want %q", e.TaskID, e.Kind, e.Parent, wantParent)
			}
		}
		if info, _ := s.Info("p"); info.Status != coordinator.Succeeded || info.Joining || info.Attempts != 1 {
			t.Fatalf("Info(p) = %+v; want succeeded after 1 attempt", info)
		}
	})
}

// nested returns a task id that spawns one child id+"/1" that spawns ...,
// depth levels down to a leaf running leaf.
func nested(id string, depth int, leaf func(context.Context) error) coordinator.Task {
	if depth == 0 {
		return coordinator.Task{ID: id, Run: leaf}
	}
	return coordinator.Task{ID: id, Run: spawner(nested(id+"/1", depth-1, leaf), coordinator.Task{ID: id + "/ok", Run: ok})}
}

// Three levels of spawning: each spawner ends once its family below it is
// final; a leaf's failure fails every spawner above it with a JoinError
// that errors.Is sees through.
func TestSpawnNestedThreeLevels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(2))
		rec := record(s)
		leafErr := errors.New("leaf broke")
		err := s.Submit(
			nested("good", 3, ok),
			coordinator.Task{ID: "good-after", Deps: []string{"good"}, Run: ok},
			nested("bad", 3, func(context.Context) error { return leafErr }),
			coordinator.Task{ID: "bad-after", Deps: []string{"bad"}, Run: ok},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		for _, id := range []string{"good", "good/1", "good/1/1", "good/1/1/1", "good-after"} {
			if st := status(t, s, id); st != coordinator.Succeeded {
				t.Fatalf("status(%s) = %v; want succeeded", id, st)
			}
		}
		order := rec.lines(coordinator.EventSucceeded)
		pos := func(id string) int { return slices.Index(order, id+" succeeded") }
		if !(pos("good/1/1/1") < pos("good/1/1") && pos("good/1/1") < pos("good/1") && pos("good/1") < pos("good")) {
			t.Fatalf("successes %v; want each spawner after its family", order)
		}
		if info, _ := s.Info("good/1/1/1"); info.Parent != "good/1/1" {
			t.Fatalf("Info(good/1/1/1).Parent = %q; want good/1/1", info.Parent)
		}
		for _, id := range []string{"bad", "bad/1", "bad/1/1"} {
			info, _ := s.Info(id)
			var je *coordinator.JoinError
			if info.Status != coordinator.Failed || !errors.Is(info.Err, coordinator.ErrChildFailed) ||
				!errors.Is(info.Err, leafErr) || !errors.As(info.Err, &je) || je.Task != id ||
				len(je.Children) != 1 || je.Children[0].ID != id+"/1" {
				t.Fatalf("Info(%s) = %+v; want failed with a JoinError naming %s/1 and wrapping the leaf's error", id, info, id)
			}
			if info.Attempts != 1 {
				t.Fatalf("Info(%s).Attempts = %d; want 1: a failed join is not retried", id, info.Attempts)
			}
		}
		for _, id := range []string{"bad/ok", "bad/1/ok", "bad/1/1/ok"} {
			if st := status(t, s, id); st != coordinator.Succeeded {
				t.Fatalf("status(%s) = %v; want succeeded (a sibling's failure does not touch it)", id, st)
			}
		}
		if info, _ := s.Info("bad-after"); info.Status != coordinator.Skipped || info.Cause != "bad" {
			t.Fatalf("Info(bad-after) = %+v; want skipped because of bad", info)
		}
	})
}

// Children retry and time out as any task; the join sees their last end.
func TestSpawnChildrenRetryAndTimeOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(2))
		var tries atomic.Int32
		err := s.Submit(
			coordinator.Task{ID: "p", Run: spawner(coordinator.Task{ID: "flaky",
				Retry: coordinator.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Second},
				Run: func(context.Context) error {
					if tries.Add(1) < 3 {
						return errors.New("not yet")
					}
					return nil
				}})},
			coordinator.Task{ID: "q", Run: spawner(coordinator.Task{ID: "slow", Timeout: time.Second,
				Run: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }})},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		if info, _ := s.Info("flaky"); info.Status != coordinator.Succeeded || info.Attempts != 3 {
			t.Fatalf("Info(flaky) = %+v; want succeeded on attempt 3", info)
		}
		if st := status(t, s, "p"); st != coordinator.Succeeded {
			t.Fatalf("status(p) = %v; want succeeded: its child succeeded on a retry", st)
		}
		info, _ := s.Info("q")
		if info.Status != coordinator.Failed || !errors.Is(info.Err, coordinator.ErrChildFailed) || !errors.Is(info.Err, worker.ErrTimeout) {
			t.Fatalf("Info(q) = %+v; want failed, its child timed out", info)
		}
	})
}

// Cancel reaches a spawner's family: a joining spawner's children are
// cancelled and it ends Cancelled; a cancelled child fails its spawner's
// join; a spawner cancelled before it returns spawns nothing.
func TestSpawnCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(4))
		block := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
		spawned := make(chan struct{})
		err := s.Submit(
			coordinator.Task{ID: "p", Run: spawner(
				coordinator.Task{ID: "p/run", Run: block},
				coordinator.Task{ID: "p/wait", Deps: []string{"p/run"}, Run: ok},
				coordinator.Task{ID: "p/sub", Run: spawner(coordinator.Task{ID: "p/sub/run", Run: block})})},
			coordinator.Task{ID: "p-after", Deps: []string{"p"}, Run: ok},
			coordinator.Task{ID: "q", Run: spawner(coordinator.Task{ID: "q/run", Run: block})},
			coordinator.Task{ID: "r", Run: func(ctx context.Context) error {
				if err := coordinator.Spawn(ctx, coordinator.Task{ID: "r/never", Run: ok}); err != nil {
					return err
				}
				close(spawned)
				<-ctx.Done()
				return nil // returns nil, but it was cancelled
			}},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		<-spawned
		synctest.Wait()
		if !s.Cancel("p") || !s.Cancel("q/run") || !s.Cancel("r") {
			t.Fatal("Cancel = false; want true")
		}
		settle(t, s)
		for _, id := range []string{"p", "p/run", "p/wait", "p/sub", "p/sub/run", "q/run", "r"} {
			if info, _ := s.Info(id); info.Status != coordinator.Cancelled || !errors.Is(info.Err, coordinator.ErrCancelled) {
				t.Fatalf("Info(%s) = %+v; want cancelled with ErrCancelled", id, info)
			}
		}
		if info, _ := s.Info("p-after"); info.Status != coordinator.Skipped || info.Cause != "p" {
			t.Fatalf("Info(p-after) = %+v; want skipped because of p", info)
		}
		if info, _ := s.Info("q"); info.Status != coordinator.Failed || !errors.Is(info.Err, coordinator.ErrCancelled) {
			t.Fatalf("Info(q) = %+v; want failed, its child was cancelled", info)
		}
		if _, found := s.Info("r/never"); found {
			t.Fatal("Info(r/never) found; want unknown: its spawner's attempt was cancelled")
		}
		if s.Cancel("p") {
			t.Fatal("Cancel(p) again = true; want false")
		}
	})
}

// A spawner that fails (an error, a panic) after spawning spawns nothing:
// its children vanish, their IDs free; its retry spawns afresh.
func TestSpawnThenFail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(2))
		rec := record(s)
		var runs, attempts atomic.Int32
		count := func(context.Context) error { runs.Add(1); return nil }
		err := s.Submit(
			coordinator.Task{ID: "p", Retry: coordinator.RetryPolicy{MaxAttempts: 2},
				Run: func(ctx context.Context) error {
					if err := coordinator.Spawn(ctx, coordinator.Task{ID: "p/c", Run: count}); err != nil {
						return err
					}
					if attempts.Add(1) == 1 {
						panic("after spawning")
					}
					return nil
				}},
			coordinator.Task{ID: "q", Run: func(ctx context.Context) error {
				if err := coordinator.Spawn(ctx, coordinator.Task{ID: "q/c", Run: count}); err != nil {
					return err
				}
				return errors.New("changed my mind")
			}},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		if got := runs.Load(); got != 1 {
			t.Fatalf("children ran %d times; want 1 (p/c of p's second attempt)", got)
		}
		if info, _ := s.Info("p"); info.Status != coordinator.Succeeded || info.Attempts != 2 || info.Children != 1 {
			t.Fatalf("Info(p) = %+v; want succeeded on attempt 2 with 1 child", info)
		}
		if got := rec.lines(coordinator.EventSpawned); !slices.Equal(got, []string{"p/c spawned"}) {
			t.Fatalf("spawned events %v; want p/c once", got)
		}
		if _, found := s.Info("q/c"); found {
			t.Fatal("Info(q/c) found; want unknown: q failed")
		}
		if err := s.Submit(coordinator.Task{ID: "q/c", Run: ok}); err != nil {
			t.Fatalf("Submit(q/c) = %v; want nil: the ID is free", err)
		}
		settle(t, s)
	})
}

// A batch is refused whole, with Submit's errors, and the spawner can go
// on: nothing of a refused batch is in the graph, and its IDs are free.
func TestSpawnRefusedWhole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(2))
		errs := map[string]error{}
		err := s.Submit(
			coordinator.Task{ID: "other", Run: ok},
			coordinator.Task{ID: "p", Run: func(ctx context.Context) error {
				try := func(name string, kids ...coordinator.Task) {
					errs[name] = coordinator.Spawn(ctx, kids...)
				}
				good := coordinator.Task{ID: "x", Run: ok}
				try("duplicate", good, coordinator.Task{ID: "other", Run: ok})
				try("twice", good, good)
				try("unknown dep", good, coordinator.Task{ID: "y", Deps: []string{"nope"}, Run: ok})
				try("unknown pool", good, coordinator.Task{ID: "y", Pool: "nope", Run: ok})
				try("no run", good, coordinator.Task{ID: "y"})
				try("on spawner", good, coordinator.Task{ID: "y", Deps: []string{"p"}, Run: ok})
				try("on dependent", good, coordinator.Task{ID: "y", Deps: []string{"after"}, Run: ok})
				try("cycle", coordinator.Task{ID: "x", Deps: []string{"y"}, Run: ok}, coordinator.Task{ID: "y", Deps: []string{"x"}, Run: ok})
				try("good", good)
				return nil
			}},
			coordinator.Task{ID: "after", Deps: []string{"p"}, Run: ok},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		want := map[string]error{
			"duplicate":    coordinator.ErrDuplicateID,
			"twice":        coordinator.ErrDuplicateID,
			"unknown dep":  coordinator.ErrUnknownDependency,
			"unknown pool": coordinator.ErrUnknownPool,
			"no run":       coordinator.ErrInvalidTask,
		}
		for name, sentinel := range want {
			var te *coordinator.TaskError
			if !errors.Is(errs[name], sentinel) || !errors.As(errs[name], &te) {
				t.Errorf("Spawn(%s) = %v; want a *TaskError wrapping %v", name, errs[name], sentinel)
			}
		}
		for _, name := range []string{"on spawner", "on dependent", "cycle"} {
			var ce *coordinator.CycleError
			if !errors.As(errs[name], &ce) {
				t.Errorf("Spawn(%s) = %v; want a *CycleError", name, errs[name])
			}
		}
		if errs["good"] != nil {
			t.Fatalf("Spawn(good) after the refusals = %v; want nil: the refused batches left nothing", errs["good"])
		}
		if info, _ := s.Info("p"); info.Status != coordinator.Succeeded || info.Children != 1 {
			t.Fatalf("Info(p) = %+v; want succeeded with 1 child", info)
		}
		if _, found := s.Info("y"); found {
			t.Fatal("Info(y) found; want unknown")
		}
		if err := coordinator.Spawn(context.Background(), coordinator.Task{ID: "z", Run: ok}); !errors.Is(err, coordinator.ErrNoAttempt) {
			t.Fatalf("Spawn outside an attempt = %v; want ErrNoAttempt", err)
		}
	})
}

// Shutdown at each step of a spawn: before the Spawn call, between the
// Spawn and the spawner's return, and during the join.
func TestSpawnShutdown(t *testing.T) {
	block := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	cases := []struct {
		name  string
		run   func(ready chan<- struct{}) func(context.Context) error
		check func(t *testing.T, s *coordinator.Scheduler, spawnErr error)
	}{
		{"before Spawn", func(ready chan<- struct{}) func(context.Context) error {
			return func(ctx context.Context) error {
				close(ready)
				<-ctx.Done()
				return coordinator.Spawn(ctx, coordinator.Task{ID: "c", Run: ok})
			}
		}, func(t *testing.T, s *coordinator.Scheduler, spawnErr error) {
			if !errors.Is(spawnErr, coordinator.ErrClosed) {
				t.Fatalf("Spawn after Shutdown = %v; want ErrClosed", spawnErr)
			}
		}},
		{"before return", func(ready chan<- struct{}) func(context.Context) error {
			return func(ctx context.Context) error {
				if err := coordinator.Spawn(ctx, coordinator.Task{ID: "c", Run: ok}); err != nil {
					return err
				}
				close(ready)
				<-ctx.Done()
				return nil
			}
		}, nil},
		{"joining", func(ready chan<- struct{}) func(context.Context) error {
			return func(ctx context.Context) error {
				defer close(ready)
				return coordinator.Spawn(ctx, coordinator.Task{ID: "c", Run: block})
			}
		}, func(t *testing.T, s *coordinator.Scheduler, _ error) {
			if info, _ := s.Info("c"); info.Status != coordinator.Cancelled || !errors.Is(info.Err, coordinator.ErrClosed) {
				t.Fatalf("Info(c) = %+v; want cancelled by Shutdown", info)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, err := coordinator.New(coordinator.WithWorkers(2))
				if err != nil {
					t.Fatal(err)
				}
				ready := make(chan struct{})
				var spawnErr error
				body := tc.run(ready)
				err = s.Submit(
					coordinator.Task{ID: "p", Run: func(ctx context.Context) error { spawnErr = body(ctx); return spawnErr }},
					coordinator.Task{ID: "after", Deps: []string{"p"}, Run: ok},
				)
				if err != nil {
					t.Fatalf("Submit = %v", err)
				}
				<-ready
				synctest.Wait()
				if err := s.Shutdown(context.Background()); err != nil {
					t.Fatalf("Shutdown = %v", err)
				}
				for _, id := range []string{"p", "after"} {
					if info, _ := s.Info(id); info.Status != coordinator.Cancelled || !errors.Is(info.Err, coordinator.ErrClosed) {
						t.Fatalf("Info(%s) = %+v; want cancelled by Shutdown", id, info)
					}
				}
				if tc.check != nil {
					tc.check(t, s, spawnErr)
				} else if _, found := s.Info("c"); found {
					t.Fatal("Info(c) found; want unknown: the spawner's attempt was stopped")
				}
			})
		})
	}
}

type ctxKey struct{}

// Children run in their spawner's pool, at its priority, with its context
// values, unless they set their own.
func TestSpawnInherits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(1), coordinator.WithPool("io", 1, worker.Func{}))
		seen := map[string]any{}
		look := func(id string) func(context.Context) error {
			return func(ctx context.Context) error { seen[id] = ctx.Value(ctxKey{}); return nil }
		}
		ctx := context.WithValue(context.Background(), ctxKey{}, "submitted")
		err := s.SubmitContext(ctx,
			coordinator.Task{ID: "p", Pool: "io", Priority: 3, Run: spawner(
				coordinator.Task{ID: "same", Run: look("same")},
				coordinator.Task{ID: "own", Pool: "io", Priority: 9, Run: look("own")})},
			coordinator.Task{ID: "q", Pool: "io", Run: func(ctx context.Context) error {
				return coordinator.Spawn(context.WithValue(ctx, ctxKey{}, "derived"), coordinator.Task{ID: "derived", Run: look("derived")})
			}},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		if info, _ := s.Info("same"); info.Pool != "io" || info.Priority != 3 || seen["same"] != "submitted" {
			t.Fatalf("Info(same) = %+v, value %v; want pool io, priority 3, the spawner's values", info, seen["same"])
		}
		if info, _ := s.Info("own"); info.Pool != "io" || info.Priority != 9 {
			t.Fatalf("Info(own) = %+v; want its own priority", info)
		}
		if seen["derived"] != "derived" {
			t.Fatalf("child of a derived context saw %v; want the derived value", seen["derived"])
		}
	})
}

// The task-life log names each spawned task's parent.
func TestSpawnLogsParent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf syncBuffer
		logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug,
			ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			}}))
		s := newScheduler(t, coordinator.WithWorkers(1), coordinator.WithLogger(logger))
		if err := s.Submit(coordinator.Task{ID: "p", Run: spawner(coordinator.Task{ID: "c", Run: ok})}); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		var got []string
		for _, l := range buf.lines() {
			if strings.Contains(l, "task=c") || strings.Contains(l, "joining") {
				got = append(got, l)
			}
		}
		want := []string{
			`level=DEBUG msg="task joining" task=p attempt=1 run=1`,
			`level=DEBUG msg="task spawned" task=c parent=p`,
		}
		for _, w := range want {
			if !slices.Contains(got, w) {
				t.Fatalf("log lines %q; want %q among them", got, w)
			}
		}
		for _, l := range got {
			if strings.Contains(l, "task=c") && !strings.Contains(l, "parent=p") {
				t.Fatalf("log line %q of a child without parent=p", l)
			}
		}
	})
}

// Retention forgets a family only whole: a child that ended long ago is
// kept while its siblings run, and a family held by a task outside it is
// kept until that task goes; then every member goes at once.
func TestSpawnRetentionWholeFamily(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithRetention(time.Minute), coordinator.WithWorkers(4))
		family := []string{"p", "p/quick", "p/slow", "p/sub", "p/sub/leaf", "p/after-quick"}
		err := s.Submit(coordinator.Task{ID: "p", Run: spawner(
			coordinator.Task{ID: "p/quick", Run: ok},
			coordinator.Task{ID: "p/after-quick", Deps: []string{"p/quick"}, Run: func(ctx context.Context) error {
				time.Sleep(time.Hour)
				return errors.New("late failure") // a member skipped because of a member is held inside the family
			}},
			coordinator.Task{ID: "p/slow", Run: func(context.Context) error { time.Sleep(2 * time.Hour); return nil }},
			coordinator.Task{ID: "p/sub", Run: spawner(coordinator.Task{ID: "p/sub/leaf", Run: ok})})},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		time.Sleep(time.Hour + time.Minute + time.Second)
		synctest.Wait()
		for _, id := range family {
			if _, found := s.Info(id); !found {
				t.Fatalf("Info(%s) at 1h01m: unknown; want known, p/slow still runs", id)
			}
		}
		settle(t, s) // p/slow ends at 2h
		if err := s.Submit(coordinator.Task{ID: "outside", Deps: []string{"p"}, When: coordinator.AllDone, Run: ok, Delay: time.Hour}); err != nil {
			t.Fatalf("Submit(outside) = %v", err)
		}
		time.Sleep(30 * time.Minute)
		synctest.Wait()
		for _, id := range family {
			if _, found := s.Info(id); !found {
				t.Fatalf("Info(%s) held by a task outside: unknown; want known", id)
			}
		}
		settle(t, s)
		time.Sleep(time.Minute)
		synctest.Wait()
		for _, id := range append(family, "outside") {
			if info, found := s.Info(id); found {
				t.Fatalf("Info(%s) = %+v after everything's retention; want unknown", id, info)
			}
		}
		if err := s.Submit(coordinator.Task{ID: "p/quick", Run: ok}); err != nil {
			t.Fatalf("Submit(p/quick) after the family went = %v; want nil", err)
		}
		settle(t, s)
	})
}

// A failed attempt's children vanish and hold nothing (Spawn: "they are
// dropped, their IDs free again"): retention forgets the tasks that come
// after them as usual, those that reuse their records included. Dropping
// a batch whose children depend on each other once left a hold on a
// cleared record, and the family that reused it was never forgotten
// (found by the model test).
func TestSpawnDroppedChildrenHoldNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithRetention(0), coordinator.WithWorkers(1), coordinator.WithMaxBatch(1))
		err := s.Submit(
			coordinator.Task{ID: "q", Priority: -1, Run: func(ctx context.Context) error {
				if err := coordinator.Spawn(ctx, coordinator.Task{ID: "q/a", Run: ok}, coordinator.Task{ID: "q/b", Deps: []string{"q/a"}, Run: ok}); err != nil {
					return err
				}
				return errors.New("changed my mind") // q/a and q/b vanish
			}},
			coordinator.Task{ID: "p", Run: spawner(
				coordinator.Task{ID: "p/a", Run: ok},
				coordinator.Task{ID: "p/b", Deps: []string{"p/a"}, Run: ok})},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		for _, id := range []string{"q", "p", "p/a", "p/b", "q/a", "q/b"} {
			if info, found := s.Info(id); found {
				t.Errorf("Info(%s) = %+v once everything is final under WithRetention(0); want unknown", id, info)
			}
		}
	})
}

// A family forgotten whole leaves nothing behind (Spawn: "a family is
// forgotten only when every member of it can be"): the tasks that reuse
// its records are forgotten in their turn. Members that depend on, or
// were skipped because of, a member dropped before them in the same drop
// once took their holds off its cleared record, and a task that reused it
// was never forgotten (found by the model test).
func TestSpawnForgottenFamilyLeavesNoHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithRetention(0), coordinator.WithWorkers(1), coordinator.WithMaxBatch(1))
		fail := func(context.Context) error { return errors.New("planned failure") }
		err := s.Submit(coordinator.Task{ID: "p", Run: spawner(
			coordinator.Task{ID: "p/a", Run: fail},
			coordinator.Task{ID: "p/b", Deps: []string{"p/a"}, Run: ok},                              // skipped because of p/a
			coordinator.Task{ID: "p/c", Deps: []string{"p/a"}, When: coordinator.AllDone, Run: ok})}, // runs after it
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		if _, found := s.Info("p"); found {
			t.Fatal("Info(p) found after its family ended under WithRetention(0); want unknown")
		}
		later := []string{"x", "y", "z", "w"}
		var batch []coordinator.Task // one batch: it reuses every record of the family
		for _, id := range later {
			batch = append(batch, coordinator.Task{ID: id, Run: ok})
		}
		if err := s.Submit(batch...); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		for _, id := range later {
			if info, found := s.Info(id); found {
				t.Errorf("Info(%s) = %+v once final under WithRetention(0); want unknown", id, info)
			}
		}
	})
}

// Snapshot names each task's parent, and the renderers draw a family in
// nested clusters.
func TestSpawnSnapshotClusters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(2))
		err := s.Submit(nested("p", 2, ok), coordinator.Task{ID: "after", Deps: []string{"p"}, Run: ok})
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		snap, err := s.Snapshot(context.Background(), coordinator.SnapshotFilter{})
		if err != nil {
			t.Fatal(err)
		}
		parents := map[string]string{}
		for _, st := range snap.Tasks {
			parents[st.ID] = st.Parent
		}
		want := map[string]string{"p": "", "after": "", "p/1": "p", "p/ok": "p", "p/1/1": "p/1", "p/1/ok": "p/1"}
		for id, p := range want {
			if parents[id] != p {
				t.Fatalf("snapshot parents %v; want %v", parents, want)
			}
		}
		var dot, mer strings.Builder
		if err := snap.WriteDOT(&dot); err != nil {
			t.Fatal(err)
		}
		if err := snap.WriteMermaid(&mer); err != nil {
			t.Fatal(err)
		}
		wantDOT := "\t\"p\" [label=\"p\\nsucceeded\", fillcolor=\"#c8e6c9\", color=\"#2e7d32\"];\n" +
			"\tsubgraph \"cluster_0\" {\n\t\tlabel=\"spawned by p\";\n\t\tstyle=dashed;\n" +
			"\t\t\"p/1\" [label=\"p/1\\nsucceeded\", fillcolor=\"#c8e6c9\", color=\"#2e7d32\"];\n" +
			"\t\tsubgraph \"cluster_2\" {\n"
		if !strings.Contains(dot.String(), wantDOT) {
			t.Fatalf("DOT:\n%s\nwant it to hold\n%s", dot.String(), wantDOT)
		}
		if got := strings.Count(dot.String(), "subgraph"); got != 2 {
			t.Fatalf("DOT has %d clusters; want 2:\n%s", got, dot.String())
		}
		if m := mer.String(); !strings.Contains(m, "    subgraph f0[\"spawned by p\"]\n        t2[\"p/1<br/>succeeded\"]") ||
			strings.Count(m, "subgraph") != 2 || strings.Count(m, " end\n") != 2 {
			t.Fatalf("Mermaid:\n%s\nwant two nested subgraphs", m)
		}
	})
}

// SnapshotFilter.Children takes a task's family, a generation per Depth,
// and nothing that only depends on it.
func TestSnapshotChildrenFilter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(2))
		err := s.Submit(nested("p", 3, ok), coordinator.Task{ID: "after", Deps: []string{"p"}, Run: ok})
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		ids := func(f coordinator.SnapshotFilter) []string {
			t.Helper()
			snap, err := s.Snapshot(context.Background(), f)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, st := range snap.Tasks {
				out = append(out, st.ID)
			}
			slices.Sort(out)
			return out
		}
		for _, tc := range []struct {
			f    coordinator.SnapshotFilter
			want []string
		}{
			{coordinator.SnapshotFilter{Roots: []string{"p"}, Children: true, Depth: 1}, []string{"p", "p/1", "p/ok"}},
			{coordinator.SnapshotFilter{Roots: []string{"p/1"}, Children: true, Depth: 1}, []string{"p/1", "p/1/1", "p/1/ok"}},
			{coordinator.SnapshotFilter{Roots: []string{"p"}, Children: true, Depth: 2}, []string{"p", "p/1", "p/1/1", "p/1/ok", "p/ok"}},
			{coordinator.SnapshotFilter{Roots: []string{"p"}, Children: true}, []string{"p", "p/1", "p/1/1", "p/1/1/1", "p/1/1/ok", "p/1/ok", "p/ok"}},
			{coordinator.SnapshotFilter{Roots: []string{"p/1/1/1"}, Children: true}, []string{"p/1/1/1"}},
			{coordinator.SnapshotFilter{Roots: []string{"after"}, Children: true}, []string{"after"}},
			{coordinator.SnapshotFilter{Roots: []string{"p"}, Children: true, Descendants: true, Depth: 1}, []string{"after", "p", "p/1", "p/ok"}},
		} {
			if got := ids(tc.f); !slices.Equal(got, tc.want) {
				t.Errorf("Snapshot(%+v) = %v; want %v", tc.f, got, tc.want)
			}
		}
	})
}

// A recurring spawner's finished runs are forgotten (Spawn's doc, "A
// recurring spawner"): once a run's join has succeeded, its children
// (and theirs) are a family of their own, forgotten whole when their
// retention is up, while the spawner runs on; a task outside holding one
// member keeps that run's family whole.
func TestRecurringSpawnerForgetsFinishedRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithRetention(time.Minute), coordinator.WithWorkers(2))
		var run atomic.Int32
		family := func(k int32) []string {
			return []string{fmt.Sprint("a", k), fmt.Sprint("b", k), fmt.Sprint("b", k, "/leaf")}
		}
		err := s.Submit(coordinator.Task{ID: "p", Every: time.Minute, Run: func(ctx context.Context) error {
			ids := family(run.Add(1))
			return coordinator.Spawn(ctx,
				coordinator.Task{ID: ids[0], Run: ok},
				coordinator.Task{ID: ids[1], Deps: ids[:1], Run: spawner(coordinator.Task{ID: ids[2], Run: ok})})
		}})
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		time.Sleep(30 * time.Second) // run 1 started at once and is over
		synctest.Wait()
		if err := s.Submit(coordinator.Task{ID: "outside", Deps: []string{"b1/leaf"}, Delay: time.Hour, Run: ok}); err != nil {
			t.Fatalf("Submit(outside) = %v", err)
		}
		time.Sleep(30 * time.Minute)
		synctest.Wait()
		n := run.Load()
		if n < 30 {
			t.Fatalf("%d runs in 30m30s; want at least 30", n)
		}
		for _, id := range family(1) {
			if _, found := s.Info(id); !found {
				t.Fatalf("Info(%s): unknown; want known, its run's family is held by outside", id)
			}
		}
		for k := int32(2); k <= n-3; k++ {
			for _, id := range family(k) {
				if info, found := s.Info(id); found {
					t.Fatalf("Info(%s) = %+v after run %d; want forgotten", id, info, n)
				}
			}
		}
		if st := status(t, s, "p"); st != coordinator.Pending {
			t.Fatalf("status(p) = %v; want pending, its series goes on", st)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		for _, id := range append(family(1), "outside") {
			if info, found := s.Info(id); found {
				t.Fatalf("Info(%s) = %+v after outside's retention; want forgotten", id, info)
			}
		}
		if c := s.Counts(); c.Succeeded > 4 {
			t.Fatalf("Counts() = %+v; want the last runs' children only", c)
		}
		if !s.Cancel("p") {
			t.Fatalf("Cancel(p) = false; want true")
		}
		settle(t, s)
	})
}

// A later run may reuse an earlier run's child IDs once they are
// forgotten (Spawn's doc): with WithRetention(0), at once.
func TestRecurringSpawnerReusesForgottenIDs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithRetention(0), coordinator.WithWorkers(2))
		var errs []error
		err := s.Submit(coordinator.Task{ID: "p", Every: time.Minute, Times: 3, Run: func(ctx context.Context) error {
			err := coordinator.Spawn(ctx, coordinator.Task{ID: "c", Run: ok})
			errs = append(errs, err)
			return err
		}}, coordinator.Task{ID: "after", Deps: []string{"p"}, Delay: time.Hour, Run: ok})
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if len(errs) != 3 || errors.Join(errs...) != nil {
			t.Fatalf("Spawn(c) in each run = %v; want three nils", errs)
		}
		if st := status(t, s, "p"); st != coordinator.Succeeded {
			t.Fatalf("status(p) = %v; want succeeded", st)
		}
		settle(t, s)
	})
}

// A join ends only once its leaves' outcomes are settled (Spawn's doc,
// "The join"): a leaf skipped by a rule, whose other dependency outside
// the family still runs, may yet be skipped because of a failure; the
// spawner waits, and fails when that dependency fails.
func TestJoinWaitsForSettledLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(3))
		gate := make(chan struct{})
		boom := errors.New("boom")
		err := s.Submit(
			coordinator.Task{ID: "x", Run: func(context.Context) error { <-gate; return boom }},
			coordinator.Task{ID: "p", Run: spawner(
				coordinator.Task{ID: "br", Run: chooser()},
				coordinator.Task{ID: "leaf", Deps: []string{"br", "x"}, Run: ok},
			)},
			coordinator.Task{ID: "after", Deps: []string{"p"}, Run: ok},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		synctest.Wait()
		if st := status(t, s, "leaf"); st != coordinator.Skipped {
			t.Fatalf("status(leaf) = %v; want skipped, not chosen", st)
		}
		if info, _ := s.Info("p"); !info.Joining {
			t.Fatalf("Info(p) = %+v while x runs; want joining", info)
		}
		close(gate)
		settle(t, s)
		if info, _ := s.Info("leaf"); info.Cause != "x" {
			t.Fatalf("Info(leaf) = %+v; want skipped because of x", info)
		}
		if info, _ := s.Info("p"); info.Status != coordinator.Failed || !errors.Is(info.Err, coordinator.ErrChildFailed) || !errors.Is(info.Err, boom) {
			t.Fatalf("Info(p) = %+v; want failed by its join, with x's error", info)
		}
		if st := status(t, s, "after"); st != coordinator.Skipped {
			t.Fatalf("status(after) = %v; want skipped", st)
		}
	})
}

// A join's leaves are the children no other child of the join depends
// on (Spawn's doc, "The join"), whichever Spawn of the attempt added them:
// a spawner that decides for itself with a last child under AllDone, in a
// later Spawn, succeeds when that child does, although the children it
// follows were skipped because of a failure. A child skipped as it joined
// the graph was once taken for a leaf when its dependent came in a later
// batch (it was in no successor list of it), and the spawner failed
// (found by the model test).
func TestJoinLeavesAreChildrenNoSiblingDependsOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(1))
		err := s.Submit(
			coordinator.Task{ID: "x", Run: func(context.Context) error { return errors.New("planned failure") }},
			coordinator.Task{ID: "p", Deps: []string{"x"}, When: coordinator.AllDone, Run: func(ctx context.Context) error {
				err := coordinator.Spawn(ctx,
					coordinator.Task{ID: "p/a", Deps: []string{"x"}, Run: ok}, // skipped as it joins: x failed
					coordinator.Task{ID: "p/b", Deps: []string{"p/a"}, Run: ok})
				if err != nil {
					return err
				}
				return coordinator.Spawn(ctx, coordinator.Task{ID: "p/decide", Deps: []string{"p/b"}, When: coordinator.AllDone, Run: ok})
			}},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		if st := status(t, s, "p/b"); st != coordinator.Skipped {
			t.Fatalf("status(p/b) = %v; want skipped because of x", st)
		}
		if info, _ := s.Info("p"); info.Status != coordinator.Succeeded {
			t.Fatalf("Info(p) = %+v; want succeeded: its one leaf, p/decide, succeeded", info)
		}
	})
}

// Cancel of a joining spawner reaches the joins nested in its family
// (Spawn's doc: a join that Cancel reached ends Cancelled and does not
// wait): a child whose own children are final, but whose join waits for
// a skipped one's end to settle, ends Cancelled at once, and so does the
// spawner. Such a nested join was once left waiting for a task outside
// the family, and forever under Shutdown (found by the model test).
func TestSpawnCancelReachesNestedJoin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(3))
		gate := make(chan struct{})
		defer close(gate)
		err := s.Submit(
			coordinator.Task{ID: "x", Run: func(context.Context) error { <-gate; return nil }}, // ignores its context
			coordinator.Task{ID: "p", Run: spawner(coordinator.Task{ID: "p/c", Run: spawner(
				coordinator.Task{ID: "p/c/br", Run: chooser()},
				coordinator.Task{ID: "p/c/leaf", Deps: []string{"p/c/br", "x"}, Run: ok}, // not chosen; its class waits for x
			)})},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		synctest.Wait()
		if info, _ := s.Info("p/c"); !info.Joining {
			t.Fatalf("Info(p/c) = %+v while x runs; want joining", info)
		}
		if !s.Cancel("p") {
			t.Fatal("Cancel(p) = false; want true")
		}
		synctest.Wait()
		for _, id := range []string{"p/c", "p"} {
			if info, _ := s.Info(id); info.Status != coordinator.Cancelled {
				t.Errorf("Info(%s) = %+v after Cancel(p), x still running; want cancelled", id, info)
			}
		}
	})
}

// Spawn and Choose outside any attempt of this process (a remote
// handler's context) say so, and wrap ErrNoAttempt.
func TestSpawnOutsideAttemptSaysWhy(t *testing.T) {
	for name, err := range map[string]error{
		"Spawn":  coordinator.Spawn(context.Background(), coordinator.Task{ID: "c", Run: ok}),
		"Choose": coordinator.Choose(context.Background(), "c"),
	} {
		if !errors.Is(err, coordinator.ErrNoAttempt) || !strings.Contains(err.Error(), "remote handlers cannot spawn or choose") {
			t.Fatalf("%s(context.Background()) = %v; want ErrNoAttempt saying remote handlers cannot spawn or choose", name, err)
		}
	}
}
