package coordinator_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/coordinator/storetest"
)

// durableFamily registers the functions of a durable family: "spawn"
// spawns the children its payload names ("a" blocks until released or
// its context ends, "b" succeeds) and chooses "yes"; "ok" succeeds.
func durableFamily(release <-chan struct{}, spawned chan<- struct{}) coordinator.Option {
	return coordinator.WithFunc("spawn", func(ctx context.Context, p []byte) error {
		err := coordinator.Spawn(ctx,
			coordinator.Task{ID: string(p) + "/a", Func: "block", Retry: coordinator.RetryPolicy{MaxAttempts: 3}},
			coordinator.Task{ID: string(p) + "/b", Func: "ok", Deps: []string{string(p) + "/a"}})
		if err != nil {
			return err
		}
		if err := coordinator.Choose(ctx, "yes"); err != nil {
			return err
		}
		if spawned != nil {
			spawned <- struct{}{}
		}
		return nil
	})
}

func blockOrRelease(release <-chan struct{}) coordinator.Option {
	return coordinator.WithFunc("block", func(ctx context.Context, _ []byte) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
}

var okFunc = coordinator.WithFunc("ok", func(context.Context, []byte) error { return nil })

// A durable spawn is committed with the spawner's success: a crash while
// the spawner runs (after Spawn) leaves no child, and the spawner runs
// again; a crash during the join leaves the whole family, which resumes
// with the spawner joining and its choice kept.
func TestSpawnDurable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := storetest.NewMemory()
		spawnedOnce := make(chan struct{}, 1)
		spawnHeld := coordinator.WithFunc("spawn", func(ctx context.Context, p []byte) error {
			if err := coordinator.Spawn(ctx, coordinator.Task{ID: "p/a", Func: "block"}); err != nil {
				return err
			}
			spawnedOnce <- struct{}{}
			<-ctx.Done() // crash while it runs, its spawn not committed
			return ctx.Err()
		})
		never := make(chan struct{})
		s1, err := coordinator.New(coordinator.WithStore(mem.Open()), spawnHeld, blockOrRelease(never), okFunc)
		if err != nil {
			t.Fatal(err)
		}
		if err := s1.Submit(coordinator.Task{ID: "p", Func: "spawn", Payload: []byte("p"), Retry: coordinator.RetryPolicy{MaxAttempts: 2}},
			coordinator.Task{ID: "yes", Func: "ok", Deps: []string{"p"}},
			coordinator.Task{ID: "no", Func: "ok", Deps: []string{"p"}}); err != nil {
			t.Fatal(err)
		}
		<-spawnedOnce
		synctest.Wait()
		crash1 := mem.Crash()
		if info, _ := s1.Info("p"); info.Joining || info.Children != 0 {
			t.Fatalf("Info(p) while it runs = %+v; want no child yet", info)
		}
		if err := s1.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}

		// After the first crash: no child; p runs again and spawns; crash
		// during the join.
		spawned := make(chan struct{}) // unbuffered: p's second attempt has not returned when Info looks
		s2, err := coordinator.New(coordinator.WithStore(crash1.Open()), durableFamily(nil, spawned), blockOrRelease(never), okFunc)
		if err != nil {
			t.Fatal(err)
		}
		if _, found := s2.Info("p/a"); found {
			t.Fatal("Info(p/a) after the first crash: found; want unknown, its spawner's end was lost")
		}
		<-spawned
		synctest.Wait()
		if info, _ := s2.Info("p"); !info.Joining || info.Attempts != 2 {
			t.Fatalf("Info(p) = %+v; want joining, on its second attempt (the first was interrupted)", info)
		}
		crash2 := crash1.Crash()
		if err := s2.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}

		// After the second crash: the family is whole; released, it ends.
		release := make(chan struct{})
		s3 := newScheduler(t, coordinator.WithStore(crash2.Open()), durableFamily(nil, nil), blockOrRelease(release), okFunc)
		if info, _ := s3.Info("p"); info.Status != coordinator.Pending || !info.Joining || info.Children != 2 {
			t.Fatalf("Info(p) after the crash = %+v; want pending, joining, 2 children", info)
		}
		for _, id := range []string{"p/a", "p/b"} {
			if info, _ := s3.Info(id); info.Parent != "p" || info.Status.Final() {
				t.Fatalf("Info(%s) after the crash = %+v; want a child of p, not final", id, info)
			}
		}
		close(release)
		if err := s3.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		for id, want := range map[string]coordinator.Status{"p": coordinator.Succeeded, "p/a": coordinator.Succeeded,
			"p/b": coordinator.Succeeded, "yes": coordinator.Succeeded, "no": coordinator.Skipped} {
			if info, _ := s3.Info(id); info.Status != want {
				t.Fatalf("Info(%s) = %+v; want %v", id, info, want)
			}
		}
		if info, _ := s3.Info("no"); !errors.Is(info.Err, coordinator.ErrNotChosen) {
			t.Fatalf("Info(no) = %+v; want not chosen (the choice survived the crash)", info)
		}
	})
}

// Shutdown during a durable join keeps the family: the next scheduler on
// the store resumes it. A spawned task must be data-only.
func TestSpawnDurableShutdownAndRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := storetest.NewMemory()
		never := make(chan struct{})
		spawned := make(chan struct{}, 1)
		var closure error
		closureSpawn := coordinator.WithFunc("closure", func(ctx context.Context, _ []byte) error {
			closure = coordinator.Spawn(ctx, coordinator.Task{ID: "c", Run: ok})
			return nil
		})
		s1, err := coordinator.New(coordinator.WithStore(mem.Open()), durableFamily(nil, spawned), blockOrRelease(never), okFunc, closureSpawn)
		if err != nil {
			t.Fatal(err)
		}
		if err := s1.Submit(coordinator.Task{ID: "p", Func: "spawn", Payload: []byte("p")},
			coordinator.Task{ID: "yes", Func: "ok", Deps: []string{"p"}},
			coordinator.Task{ID: "q", Func: "closure"}); err != nil {
			t.Fatal(err)
		}
		<-spawned
		synctest.Wait()
		if !errors.Is(closure, coordinator.ErrNotDurable) {
			t.Fatalf("Spawn of a closure on a durable scheduler = %v; want ErrNotDurable", closure)
		}
		if err := s1.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		close(release)
		s2 := newScheduler(t, coordinator.WithStore(mem.Open()), durableFamily(nil, nil), blockOrRelease(release), okFunc, closureSpawn)
		if err := s2.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"p", "p/a", "p/b", "yes"} {
			if info, _ := s2.Info(id); info.Status != coordinator.Succeeded {
				t.Fatalf("Info(%s) after Shutdown and restart = %+v; want succeeded", id, info)
			}
		}
	})
}

// A failed join's error wraps ErrChildFailed after a restart too, and
// says what it said: whether a child failed, was cancelled or timed out
// (the JoinError wraps the children's errors, and a cancelled or timed
// out child's made the stored error that child's own).
func TestFailedJoinWrapsErrChildFailedAfterRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := storetest.NewMemory()
		fail := coordinator.WithFunc("fail", func(context.Context, []byte) error { return errors.New("boom") })
		spawn := coordinator.WithFunc("spawn", func(ctx context.Context, p []byte) error {
			c := coordinator.Task{ID: string(p) + "/c", Func: string(p)}
			if c.Func == "timeout" {
				c.Timeout = time.Second
			}
			return coordinator.Spawn(ctx, c)
		})
		never := make(chan struct{})
		timeout := coordinator.WithFunc("timeout", func(ctx context.Context, _ []byte) error { <-ctx.Done(); return ctx.Err() })
		s1, err := coordinator.New(coordinator.WithStore(mem.Open()), spawn, fail, blockOrRelease(never), timeout)
		if err != nil {
			t.Fatal(err)
		}
		if err := s1.Submit(coordinator.Task{ID: "fail", Func: "spawn", Payload: []byte("fail")},
			coordinator.Task{ID: "block", Func: "spawn", Payload: []byte("block")},
			coordinator.Task{ID: "timeout", Func: "spawn", Payload: []byte("timeout")}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		s1.Cancel("block/c")
		if err := s1.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		before := map[string]string{}
		for _, id := range []string{"fail", "block", "timeout"} {
			info, _ := s1.Info(id)
			if info.Status != coordinator.Failed || !errors.Is(info.Err, coordinator.ErrChildFailed) {
				t.Fatalf("Info(%s) = %+v; want failed by its join", id, info)
			}
			before[id] = info.Err.Error()
		}
		if err := s1.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		s2 := newScheduler(t, coordinator.WithStore(mem.Open()), spawn, fail, blockOrRelease(never), timeout)
		for id, msg := range before {
			info, _ := s2.Info(id)
			if info.Status != coordinator.Failed || !errors.Is(info.Err, coordinator.ErrChildFailed) || info.Err.Error() != msg {
				t.Errorf("Info(%s) after a restart = %v, err %v; want failed, wrapping ErrChildFailed, saying %q", id, info.Status, info.Err, msg)
			}
		}
	})
}
