package coordinator_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/coordinator/storetest"
	records "github.com/batonhq/baton/internal/record"
	"github.com/batonhq/baton/worker"
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

// A join that Shutdown cut resumes after a restart as it was: joining,
// with no error (Shutdown's cancel was no end of it), and ends as its
// family does.
func TestJoinCutByShutdownResumesWithoutAnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := storetest.NewMemory()
		spawned := make(chan struct{}, 1)
		never := make(chan struct{})
		s1, err := coordinator.New(coordinator.WithStore(mem.Open()), durableFamily(nil, spawned), blockOrRelease(never), okFunc)
		if err != nil {
			t.Fatal(err)
		}
		if err := s1.Submit(coordinator.Task{ID: "p", Func: "spawn", Payload: []byte("p")},
			coordinator.Task{ID: "yes", Func: "ok", Deps: []string{"p"}}); err != nil {
			t.Fatal(err)
		}
		<-spawned
		synctest.Wait()
		if err := s1.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		s2 := newScheduler(t, coordinator.WithStore(mem.Open()), durableFamily(nil, nil), blockOrRelease(release), okFunc)
		synctest.Wait()
		if info, _ := s2.Info("p"); info.Status != coordinator.Pending || !info.Joining || info.Err != nil {
			t.Fatalf("Info(p) after Shutdown and restart = %+v; want pending, joining, no error", info)
		}
		close(release)
		if err := s2.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if info, _ := s2.Info("p"); info.Status != coordinator.Succeeded || info.Err != nil {
			t.Fatalf("Info(p) = %+v; want succeeded, no error", info)
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

// dataWorker runs data: a payload "spawn" spawns a data-only child (no
// Func, no Run: this pool runs it), any other payload is sent to ran.
type dataWorker struct{ ran chan<- string }

func (w dataWorker) Do(ctx context.Context, j worker.Job) error {
	p, _ := j.Payload.([]byte)
	if string(p) == "spawn" {
		return coordinator.Spawn(ctx, coordinator.Task{ID: j.ID + "/child", Payload: []byte("child-data")})
	}
	w.ran <- j.ID + ":" + string(p)
	return nil
}

// A spawned child keeps across a restart the pool and priority it
// inherited from its spawner (README, "Graphs that grow": its spawner's
// pool and priority unless set): it was restored in the default pool at
// priority 0, where it ignored its pool's pause and size, a child of
// several slots made New fail on a small default pool, and a data-only
// child of a custom pool came back without a function and panicked.
func TestSpawnedChildKeepsWhatItInheritedAcrossARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := storetest.NewMemory()
		ran := make(chan string, 4)
		never := make(chan struct{})
		spawnIO := coordinator.WithFunc("spawn-io", func(ctx context.Context, _ []byte) error {
			again := coordinator.RetryPolicy{MaxAttempts: 2} // those running at the crash run again
			return coordinator.Spawn(ctx,
				coordinator.Task{ID: "io/a", Func: "block", Retry: again},
				coordinator.Task{ID: "io/b", Func: "block", Slots: 3, Retry: again},
				coordinator.Task{ID: "io/c", Func: "block", Priority: 2, Retry: again}) // its own priority
		})
		opts := func(store coordinator.Store, release <-chan struct{}) []coordinator.Option {
			return []coordinator.Option{coordinator.WithStore(store), coordinator.WithWorkers(1),
				coordinator.WithPool("io", 4, worker.Func{}), coordinator.WithPool("data", 2, dataWorker{ran: ran}),
				spawnIO, blockOrRelease(release)}
		}
		s1, err := coordinator.New(opts(mem.Open(), never)...)
		if err != nil {
			t.Fatal(err)
		}
		err = s1.Submit(
			coordinator.Task{ID: "io", Pool: "io", Priority: 5, Func: "spawn-io"},
			coordinator.Task{ID: "data", Pool: "data", Priority: 7, Payload: []byte("spawn")},
		)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if err := s1.Pause("io"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		crashed := mem.Crash()
		want := map[string]coordinator.TaskInfo{
			"io/a":       {Pool: "io", Priority: 5, Slots: 1},
			"io/b":       {Pool: "io", Priority: 5, Slots: 3},
			"io/c":       {Pool: "io", Priority: 2, Slots: 1},
			"data/child": {Pool: "data", Priority: 7, Slots: 1},
		}
		if err := s1.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := <-ran; got != "data/child:child-data" {
			t.Fatalf("the data child ran as %q; want data/child:child-data", got)
		}

		for _, old := range []bool{false, true} {
			store := crashed.Crash()
			if old {
				// Records written before a child's pool and priority were
				// stored name neither: the restore takes its spawner's.
				forgetInheritance(t, store, "io/c")
			}
			runRestartedFamily(t, opts, store, want)
		}
	})
}

// runRestartedFamily restarts the family of
// TestSpawnedChildKeepsWhatItInheritedAcrossARestart on store and checks
// it.
func runRestartedFamily(t *testing.T, opts func(coordinator.Store, <-chan struct{}) []coordinator.Option, store *storetest.Memory, want map[string]coordinator.TaskInfo) {
	release := make(chan struct{})
	s2, err := coordinator.New(opts(store.Open(), release)...)
	if err != nil {
		t.Fatalf("New after the crash = %v; want nil (the children's pool has room)", err)
	}
	defer s2.Shutdown(context.Background())
	for id, w := range want {
		info, found := s2.Info(id)
		if !found || info.Pool != w.Pool || info.Priority != w.Priority || info.Slots != w.Slots {
			t.Errorf("Info(%s) after the restart = pool %q priority %d slots %d; want pool %q priority %d slots %d",
				id, info.Pool, info.Priority, info.Slots, w.Pool, w.Priority, w.Slots)
		}
	}
	synctest.Wait()
	for _, id := range []string{"io/a", "io/b", "io/c"} {
		if st := status(t, s2, id); st != coordinator.Ready {
			t.Errorf("status(%s) after the restart = %v; want ready: its pool io is paused", id, st)
		}
	}
	close(release)
	if err := s2.Resume("io"); err != nil {
		t.Fatal(err)
	}
	if err := s2.WaitTasks(context.Background(), "io", "data"); err != nil {
		t.Fatalf("WaitTasks after the restart = %v; want nil", err)
	}
	if err := s2.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// forgetInheritance rewrites the definitions of the spawned children in
// m as they were written before a child's pool and priority were stored:
// no pool, and priority 0 unless the child set its own (keep).
func forgetInheritance(t *testing.T, m *storetest.Memory, keep ...string) {
	t.Helper()
	st := m.Open()
	var c coordinator.Changes
	err := st.Load(func(key, value []byte) error {
		if _, kind, ok := records.ParseTaskKey(key); !ok || kind != records.KindDef {
			return nil
		}
		def, err := records.DecodeDef(value)
		if err != nil || def.Parent == "" {
			return err
		}
		def.Pool = ""
		if !slices.Contains(keep, def.ID) {
			def.Priority = 0
		}
		c.Puts = append(c.Puts, coordinator.KV{Key: bytes.Clone(key), Value: def.Append(nil)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(&c); err != nil {
		t.Fatal(err)
	}
	st.Close()
}
