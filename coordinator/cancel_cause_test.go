package coordinator_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
)

// A cancelled task's error says who cancelled it, whether or not the task
// keeps more than the plain record (a retry policy does): ErrCancelled
// for Cancel, ErrClosed for Shutdown; in Info, in its event, and in what
// a Map's reducer is told of an element.
func TestCancelCauseWithAndWithoutExtra(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := coordinator.New(coordinator.WithWorkers(1))
		if err != nil {
			t.Fatal(err)
		}
		rec := record(s)
		retry := coordinator.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Millisecond}
		err = s.Submit(
			coordinator.Task{ID: "gate", Run: untilDone},
			coordinator.Task{ID: "plain", Run: ok, Deps: []string{"gate"}},
			coordinator.Task{ID: "retried", Run: ok, Deps: []string{"gate"}, Retry: retry},
			coordinator.Task{ID: "plain-closed", Run: ok, Deps: []string{"gate"}},
			coordinator.Task{ID: "retried-closed", Run: ok, Deps: []string{"gate"}, Retry: retry},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		synctest.Wait()
		for _, id := range []string{"plain", "retried"} {
			if !s.Cancel(id) {
				t.Fatalf("Cancel(%s) = false", id)
			}
		}
		synctest.Wait()
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatalf("Shutdown = %v", err)
		}
		synctest.Wait()
		want := map[string]error{"plain": coordinator.ErrCancelled, "retried": coordinator.ErrCancelled,
			"plain-closed": coordinator.ErrClosed, "retried-closed": coordinator.ErrClosed}
		for id, cause := range want {
			info, _ := s.Info(id)
			if info.Status != coordinator.Cancelled || !errors.Is(info.Err, cause) {
				t.Errorf("Info(%s) = %v, %v; want cancelled, %v", id, info.Status, info.Err, cause)
			}
			evs := rec.of(id)
			if len(evs) == 0 || evs[len(evs)-1].Kind != coordinator.EventCancelled || !errors.Is(evs[len(evs)-1].Err, cause) {
				t.Errorf("events of %s = %v; want the last cancelled with %v", id, evs, cause)
			}
		}
	})
}

// A Map's reducer that runs whatever its elements did (AllDone) is told
// an element's cancel as its error, for an element that keeps nothing
// but the plain record.
func TestMapReducerToldOfACancelledElement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(1))
		first := newGate()
		each := func(ctx context.Context, x int) (int, error) {
			if x == 0 {
				first.run(ctx)
			}
			return x, nil
		}
		var seen []coordinator.Mapped[int]
		reduce := func(_ context.Context, rs []coordinator.Mapped[int]) (int, error) {
			seen = rs
			return len(rs), nil
		}
		err := s.Submit(coordinator.Task{ID: "in", Run: list([]int{0, 1, 2})},
			coordinator.Map("m", "in", each, reduce, coordinator.MapReduce(coordinator.Task{When: coordinator.AllDone})))
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		synctest.Wait() // element 0 runs on the one worker; 1 and 2 wait
		if !s.Cancel("m/1") {
			t.Fatal("Cancel(m/1) = false")
		}
		first.release()
		settle(t, s)
		if len(seen) != 3 || !errors.Is(seen[1].Err, coordinator.ErrCancelled) || seen[0].Err != nil || seen[2].Err != nil {
			t.Fatalf("reducer saw %+v; want element 1 cancelled, the others succeeded", seen)
		}
	})
}

// Shutdown cancels every task still waiting without allocating for each
// (a cancel's cause is told by a flag, not kept in a record of its own):
// a service with a large backlog stops quickly and without a burst of
// memory.
func TestShutdownOfManyWaitingTasksAllocatesLittle(t *testing.T) {
	const n = 20000
	s, err := coordinator.New(coordinator.WithWorkers(2))
	if err != nil {
		t.Fatal(err)
	}
	tasks := []coordinator.Task{{ID: "gate", Run: untilDone}}
	for i := range n {
		tasks = append(tasks, coordinator.Task{ID: strconv.Itoa(i), Run: ok, Deps: []string{"gate"}})
	}
	if err := s.Submit(tasks...); err != nil {
		t.Fatalf("Submit = %v", err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	runtime.ReadMemStats(&after)
	if m := after.Mallocs - before.Mallocs; m > n/10 {
		t.Errorf("Shutdown of %d waiting tasks allocated %d objects; want at most %d", n, m, n/10)
	}
	for _, id := range []string{"0", strconv.Itoa(n - 1)} {
		if info, _ := s.Info(id); info.Status != coordinator.Cancelled || !errors.Is(info.Err, coordinator.ErrClosed) {
			t.Errorf("Info(%s) = %v, %v; want cancelled, ErrClosed", id, info.Status, info.Err)
		}
	}
}

// untilDone runs until its context ends (Cancel, Shutdown).
func untilDone(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}
