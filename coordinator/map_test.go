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
)

// list is a task body whose result is v.
func list[E any](v []E) func(context.Context) error {
	return func(ctx context.Context) error { return coordinator.SetResult(ctx, v) }
}

// values is a reducer that returns the elements' values, in order.
func values(_ context.Context, rs []coordinator.Mapped[int]) ([]int, error) {
	out := make([]int, len(rs))
	for i, r := range rs {
		out[i] = r.Value
	}
	return out, nil
}

// Map: one task per element, the reducer receives the results in the
// input's order whatever order they ended in, and its result is the
// map's, for the map's dependents.
func TestMapOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(4))
		slowFirst := func(_ context.Context, x int) (int, error) {
			time.Sleep(time.Duration(10-x) * time.Second) // element 0 ends last
			return x * x, nil
		}
		var got []int
		err := s.Submit(
			coordinator.Task{ID: "in", Run: list([]int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})},
			coordinator.Map("sq", "in", slowFirst, values),
			coordinator.Task{ID: "use", Deps: []string{"sq"}, Run: func(ctx context.Context) error {
				v, err := coordinator.Result[[]int](ctx, "sq")
				got = v
				return err
			}},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		if want := []int{0, 1, 4, 9, 16, 25, 36, 49, 64, 81}; !slices.Equal(got, want) {
			t.Fatalf("the map's result %v; want %v", got, want)
		}
		if info, _ := s.Info("sq/3"); info.Parent != "sq" || info.Status != coordinator.Succeeded {
			t.Fatalf("Info(sq/3) = %+v; want succeeded, parent sq", info)
		}
		if info, _ := s.Info("sq"); info.Children != 11 {
			t.Fatalf("Info(sq).Children = %d; want 10 elements and the reducer", info.Children)
		}
	})
}

// An empty input runs the reducer alone, with an empty slice.
func TestMapEmpty(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		calls, n := 0, -1
		err := s.Submit(
			coordinator.Task{ID: "in", Run: list([]int{})},
			coordinator.Map("m", "in", func(context.Context, int) (int, error) { return 0, errors.New("never called") },
				func(_ context.Context, rs []coordinator.Mapped[int]) (int, error) {
					calls++
					n = len(rs)
					return 42, nil
				}),
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		if info, _ := s.Info("m"); info.Status != coordinator.Succeeded || info.Result != 42 || calls != 1 || n != 0 {
			t.Fatalf("Info(m) = %+v, reducer called %d times with %d results; want succeeded, 42, once with 0", info, calls, n)
		}
	})
}

// A failed element: under the default rule the reducer is skipped and
// the map fails, naming the element; a tolerant rule runs the reducer,
// which sees the element's error in its place.
func TestMapFailedElement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(2))
		three := errors.New("three")
		sq := func(_ context.Context, x int) (int, error) {
			if x == 3 {
				return 0, three
			}
			return x * x, nil
		}
		var seen []coordinator.Mapped[int]
		tolerant := func(_ context.Context, rs []coordinator.Mapped[int]) (int, error) {
			seen = rs
			return len(rs), nil
		}
		err := s.Submit(
			coordinator.Task{ID: "in", Run: list([]int{1, 2, 3, 4})},
			coordinator.Map("strict", "in", sq, values),
			coordinator.Task{ID: "strict-after", Deps: []string{"strict"}, Run: ok},
			coordinator.Map("tolerant", "in", sq, tolerant, coordinator.MapReduce(coordinator.Task{When: coordinator.AllDone})),
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		info, _ := s.Info("strict")
		var je *coordinator.JoinError
		if info.Status != coordinator.Failed || !errors.Is(info.Err, three) || !errors.As(info.Err, &je) {
			t.Fatalf("Info(strict) = %+v; want failed with a JoinError wrapping the element's error", info)
		}
		if st := status(t, s, "strict/reduce"); st != coordinator.Skipped {
			t.Fatalf("status(strict/reduce) = %v; want skipped", st)
		}
		if st := status(t, s, "strict-after"); st != coordinator.Skipped {
			t.Fatalf("status(strict-after) = %v; want skipped", st)
		}
		if info, _ := s.Info("tolerant"); info.Status != coordinator.Succeeded || info.Result != 4 {
			t.Fatalf("Info(tolerant) = %+v; want succeeded with the reducer's result", info)
		}
		want := []coordinator.Mapped[int]{{Value: 1}, {Value: 4}, {Err: three}, {Value: 16}}
		if len(seen) != len(want) {
			t.Fatalf("reducer saw %v; want %v", seen, want)
		}
		for i := range want {
			if seen[i].Value != want[i].Value || !errors.Is(seen[i].Err, want[i].Err) || (want[i].Err == nil) != (seen[i].Err == nil) {
				t.Fatalf("reducer saw %v; want %v", seen, want)
			}
		}
	})
}

// Elements retry and time out per MapEach; a late write of an abandoned
// attempt does not reach the reducer.
func TestMapEachRetryAndTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(2), coordinator.WithAbandonAfter(0))
		var tries [3]atomic.Int32
		release := make(chan struct{})
		each := func(ctx context.Context, x int) (int, error) {
			n := tries[x].Add(1)
			if x == 1 && n == 1 {
				<-release // ignores ctx: abandoned at the timeout, returns later
				return -1, nil
			}
			if x == 2 && n == 1 {
				return 0, errors.New("flaky")
			}
			return x * 10, nil
		}
		err := s.Submit(
			coordinator.Task{ID: "in", Run: list([]int{0, 1, 2})},
			coordinator.Map("m", "in", each, values, coordinator.MapEach(coordinator.Task{Timeout: time.Second,
				Retry: coordinator.RetryPolicy{MaxAttempts: 2, BaseDelay: time.Second}})),
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		close(release) // the abandoned attempt returns -1 after the reducer has run
		synctest.Wait()
		info, _ := s.Info("m")
		if got, _ := info.Result.([]int); info.Status != coordinator.Succeeded || !slices.Equal(got, []int{0, 10, 20}) {
			t.Fatalf("Info(m) = %+v; want succeeded with [0 10 20]", info)
		}
	})
}

// Map's own errors: a template it refuses, an input of the wrong type.
func TestMapErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		id := func(_ context.Context, x int) (int, error) { return x, nil }
		err := s.Submit(
			coordinator.Task{ID: "in", Run: list([]string{"a"})},
			coordinator.Task{ID: "ints", Run: list([]int{1})},
			coordinator.Map("wrongtype", "in", id, values),
			coordinator.Map("badtemplate", "ints", id, values, coordinator.MapEach(coordinator.Task{ID: "x"})),
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		if info, _ := s.Info("wrongtype"); info.Status != coordinator.Failed || !errors.Is(info.Err, coordinator.ErrResultType) {
			t.Fatalf("Info(wrongtype) = %+v; want failed with ErrResultType", info)
		}
		if info, _ := s.Info("badtemplate"); info.Status != coordinator.Failed || !errors.Is(info.Err, coordinator.ErrInvalidTask) {
			t.Fatalf("Info(badtemplate) = %+v; want failed with ErrInvalidTask", info)
		}
	})
}

// 100,000 elements: every one runs once and the reducer sees them all in
// order.
func TestMapHundredThousand(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 tasks")
	}
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(2))
		const n = 100_000
		in := make([]int, n)
		for i := range in {
			in[i] = i
		}
		var sum, ordered int
		err := s.Submit(
			coordinator.Task{ID: "in", Run: list(in)},
			coordinator.Map("m", "in", func(_ context.Context, x int) (int, error) { return 2 * x, nil },
				func(_ context.Context, rs []coordinator.Mapped[int]) (int, error) {
					for i, r := range rs {
						sum += r.Value
						if r.Value == 2*i {
							ordered++
						}
					}
					return len(rs), nil
				}),
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		if info, _ := s.Info("m"); info.Status != coordinator.Succeeded || info.Result != n || info.Children != n+1 {
			t.Fatalf("Info(m) = %+v; want succeeded over %d elements", info, n)
		}
		if sum != n*(n-1) || ordered != n {
			t.Fatalf("reducer: sum %d, %d in order; want %d, %d", sum, ordered, n*(n-1), n)
		}
	})
}

// A Map task cannot recur (Map's doc): Submit and Spawn refuse Every,
// Cron or Schedule on it, since a second run would spawn the same
// element IDs; a recurring task spawning a Map named after its run works.
func TestMapCannotRecur(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(2))
		double := func(_ context.Context, x int) (int, error) { return 2 * x, nil }
		every := coordinator.Map("every", "in", double, values)
		every.Every = time.Minute
		cron := coordinator.Map("cron", "in", double, values)
		cron.Cron = "@hourly"
		for _, m := range []coordinator.Task{every, cron} {
			err := s.Submit(coordinator.Task{ID: "in", Run: list([]int{1, 2})}, m)
			if !errors.Is(err, coordinator.ErrInvalidTask) || !strings.Contains(err.Error(), "cannot recur") {
				t.Fatalf("Submit(recurring Map %s) = %v; want ErrInvalidTask saying it cannot recur", m.ID, err)
			}
		}
		var spawnErr error
		var run atomic.Int32
		err := s.Submit(coordinator.Task{ID: "in", Run: list([]int{1, 2})},
			coordinator.Task{ID: "spawns", Deps: []string{"in"}, Run: func(ctx context.Context) error {
				spawnErr = coordinator.Spawn(ctx, every)
				return nil
			}},
			coordinator.Task{ID: "cron", Deps: []string{"in"}, Every: time.Minute, Times: 2, Run: func(ctx context.Context) error {
				return coordinator.Spawn(ctx, coordinator.Map(fmt.Sprint("m", run.Add(1)), "in", double, values))
			}})
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		if !errors.Is(spawnErr, coordinator.ErrInvalidTask) {
			t.Fatalf("Spawn(recurring Map) = %v; want ErrInvalidTask", spawnErr)
		}
		for _, id := range []string{"cron", "m1", "m2"} {
			if info, _ := s.Info(id); info.Status != coordinator.Succeeded {
				t.Fatalf("Info(%s) = %+v; want succeeded", id, info)
			}
		}
		if info, _ := s.Info("m2"); !slices.Equal(info.Result.([]int), []int{2, 4}) {
			t.Fatalf("Info(m2).Result = %v; want [2 4]", info.Result)
		}
	})
}

// The reducer's rules (MapReduce's doc): AllDone runs it and shows each
// element's error; NoneFailed and NoneFailedMinOneSuccess skip it on a
// failed element, as AllSucceeded does; AnyFailed runs it on the first
// failure, and skips it by its rule when none fails (the map succeeds
// with no result).
func TestMapReducerRules(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		when    coordinator.Trigger
		fail    bool
		reducer coordinator.Status
		mapped  coordinator.Status
	}{
		{coordinator.AllSucceeded, true, coordinator.Skipped, coordinator.Failed},
		{coordinator.AllDone, true, coordinator.Succeeded, coordinator.Succeeded},
		{coordinator.NoneFailed, true, coordinator.Skipped, coordinator.Failed},
		{coordinator.NoneFailedMinOneSuccess, true, coordinator.Skipped, coordinator.Failed},
		{coordinator.AnyFailed, true, coordinator.Succeeded, coordinator.Succeeded},
		{coordinator.AnyFailed, false, coordinator.Skipped, coordinator.Succeeded},
	} {
		t.Run(fmt.Sprintf("%v/fail=%v", tc.when, tc.fail), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScheduler(t, coordinator.WithWorkers(2))
				each := func(_ context.Context, x int) (int, error) {
					if tc.fail && x == 2 {
						return 0, boom
					}
					return x, nil
				}
				var seen []coordinator.Mapped[int]
				reduce := func(_ context.Context, rs []coordinator.Mapped[int]) (int, error) {
					seen = rs
					return len(rs), nil
				}
				err := s.Submit(coordinator.Task{ID: "in", Run: list([]int{1, 2, 3})},
					coordinator.Map("m", "in", each, reduce, coordinator.MapReduce(coordinator.Task{When: tc.when})))
				if err != nil {
					t.Fatalf("Submit = %v", err)
				}
				settle(t, s)
				if st := status(t, s, "m/reduce"); st != tc.reducer {
					t.Fatalf("status(m/reduce) = %v; want %v", st, tc.reducer)
				}
				info, _ := s.Info("m")
				if info.Status != tc.mapped {
					t.Fatalf("Info(m) = %+v; want %v", info, tc.mapped)
				}
				if tc.reducer == coordinator.Succeeded && (len(seen) != 3 || !errors.Is(seen[1].Err, boom)) {
					t.Fatalf("reducer saw %v; want element 1's error", seen)
				}
				if tc.reducer == coordinator.Skipped && tc.mapped == coordinator.Succeeded && info.Result != nil {
					t.Fatalf("Info(m).Result = %v; want none", info.Result)
				}
			})
		})
	}
}
