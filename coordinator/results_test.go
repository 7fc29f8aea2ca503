package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/worker"
)

type point struct{ X, Y int }

func setting(v any) func(context.Context) error {
	return func(ctx context.Context) error { return coordinator.SetResult(ctx, v) }
}

// Results of several types reach direct dependents as those types, and
// every misuse has its own error.
func TestResultsReachDependents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(3))
		var checks []string
		check := func(ctx context.Context) error {
			fail := func(format string, args ...any) { checks = append(checks, fmt.Sprintf(format, args...)) }
			if n, err := coordinator.Result[int](ctx, "int"); err != nil || n != 42 {
				fail("Result[int](int) = %v, %v", n, err)
			}
			if v, err := coordinator.Result[string](ctx, "string"); err != nil || v != "hello" {
				fail("Result[string](string) = %q, %v", v, err)
			}
			if p, err := coordinator.Result[*point](ctx, "pointer"); err != nil || *p != (point{1, 2}) {
				fail("Result[*point](pointer) = %v, %v", p, err)
			}
			if b, err := coordinator.Result[[]byte](ctx, "bytes"); err != nil || string(b) != "raw" {
				fail("Result[[]byte](bytes) = %q, %v", b, err)
			}
			if v, err := coordinator.Result[fmt.Stringer](ctx, "stringer"); err != nil || v.String() != "1s" {
				fail("Result[fmt.Stringer](stringer) = %v, %v", v, err)
			}
			if p, err := coordinator.Result[*point](ctx, "nil"); err != nil || p != nil {
				fail("Result[*point](nil) = %v, %v; want nil, nil", p, err)
			}
			if _, err := coordinator.Result[int](ctx, "nil"); !errors.Is(err, coordinator.ErrResultType) {
				fail("Result[int](nil) = %v; want ErrResultType", err)
			}
			_, err := coordinator.Result[string](ctx, "int")
			if !errors.Is(err, coordinator.ErrResultType) || !strings.Contains(err.Error(), "int") || !strings.Contains(err.Error(), "string") {
				fail("Result[string](int) = %v; want ErrResultType naming int and string", err)
			}
			if _, err := coordinator.Result[int](ctx, "none"); !errors.Is(err, coordinator.ErrNoResult) {
				fail("Result(none) = %v; want ErrNoResult", err)
			}
			if _, err := coordinator.Result[int](ctx, "unrelated"); !errors.Is(err, coordinator.ErrNotDependency) {
				fail("Result(unrelated) = %v; want ErrNotDependency", err)
			}
			if _, err := coordinator.Result[int](ctx, "unknown"); !errors.Is(err, coordinator.ErrNotDependency) {
				fail("Result(unknown) = %v; want ErrNotDependency", err)
			}
			if _, err := coordinator.Result[int](ctx, "grand"); !errors.Is(err, coordinator.ErrNotDependency) {
				fail("Result(grand), a dependency of a dependency = %v; want ErrNotDependency", err)
			}
			// A derived context works as well.
			derived, cancel := context.WithCancel(context.WithValue(ctx, point{}, 1))
			defer cancel()
			if n, err := coordinator.Result[int](derived, "int"); err != nil || n != 42 {
				fail("Result through a derived context = %v, %v", n, err)
			}
			return coordinator.SetResult(derived, "checked")
		}
		err := s.Submit(
			coordinator.Task{ID: "grand", Run: setting(0)},
			coordinator.Task{ID: "int", Run: setting(42), Deps: []string{"grand"}},
			coordinator.Task{ID: "string", Run: setting("hello")},
			coordinator.Task{ID: "pointer", Run: setting(&point{1, 2})},
			coordinator.Task{ID: "bytes", Run: setting([]byte("raw"))},
			coordinator.Task{ID: "stringer", Run: setting(time.Second)},
			coordinator.Task{ID: "nil", Run: setting(nil)},
			coordinator.Task{ID: "none", Run: ok},
			coordinator.Task{ID: "unrelated", Run: setting(7)},
			coordinator.Task{ID: "check", Run: check, Deps: []string{"int", "string", "pointer", "bytes", "stringer", "nil", "none"}},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		for _, c := range checks {
			t.Error(c)
		}
		if info, _ := s.Info("check"); info.Status != coordinator.Succeeded || info.Result != "checked" {
			t.Fatalf("Info(check) = %+v; want succeeded with result \"checked\"", info)
		}
		if info, _ := s.Info("none"); info.Result != nil {
			t.Fatalf("Info(none).Result = %v; want nil", info.Result)
		}
	})
}

// Outside a running attempt, SetResult and Result refuse.
func TestResultOutsideAnAttempt(t *testing.T) {
	if err := coordinator.SetResult(context.Background(), 1); !errors.Is(err, coordinator.ErrNoAttempt) {
		t.Fatalf("SetResult(Background) = %v; want ErrNoAttempt", err)
	}
	if _, err := coordinator.Result[int](context.Background(), "x"); !errors.Is(err, coordinator.ErrNoAttempt) {
		t.Fatalf("Result(Background) = %v; want ErrNoAttempt", err)
	}
	if _, err := coordinator.Upstream(context.Background()); !errors.Is(err, coordinator.ErrNoAttempt) {
		t.Fatalf("Upstream(Background) = %v; want ErrNoAttempt", err)
	}
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(1))
		kept := make(chan context.Context, 1)
		err := s.Submit(coordinator.Task{ID: "a", Run: func(ctx context.Context) error {
			_ = coordinator.SetResult(ctx, "during")
			kept <- ctx
			return nil
		}})
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		ctx := <-kept
		if err := coordinator.SetResult(ctx, "after"); !errors.Is(err, coordinator.ErrNoAttempt) {
			t.Fatalf("SetResult after the attempt returned = %v; want ErrNoAttempt", err)
		}
		if _, err := coordinator.Upstream(ctx); !errors.Is(err, coordinator.ErrNoAttempt) {
			t.Fatalf("Upstream after the attempt returned = %v; want ErrNoAttempt", err)
		}
		if info, _ := s.Info("a"); info.Result != "during" {
			t.Fatalf("Info(a).Result = %v; want \"during\"", info.Result)
		}
	})
}

// The result is the last successful attempt's: a failed attempt's is
// dropped, a success that set none leaves none, and a series keeps its
// last run's. Timed attempts (on a goroutine of their own) work the same.
func TestResultIsTheLastSuccessfulAttempts(t *testing.T) {
	for _, timeout := range []time.Duration{0, time.Minute} {
		t.Run(fmt.Sprint("timeout ", timeout), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScheduler(t, coordinator.WithWorkers(2))
				var tries, runs atomic.Int32
				retry := coordinator.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Millisecond}
				err := s.Submit(
					coordinator.Task{ID: "retried", Timeout: timeout, Retry: retry, Run: func(ctx context.Context) error {
						n := tries.Add(1)
						_ = coordinator.SetResult(ctx, fmt.Sprint("attempt ", n))
						if n < 2 {
							return errors.New("flaky")
						}
						return nil
					}},
					coordinator.Task{ID: "series", Timeout: timeout, Every: time.Second, Times: 3, Run: func(ctx context.Context) error {
						if n := runs.Add(1); n != 3 {
							return coordinator.SetResult(ctx, n)
						}
						return nil // the last run sets none
					}},
					coordinator.Task{ID: "reader", Timeout: timeout, Deps: []string{"retried"}, Run: func(ctx context.Context) error {
						v, err := coordinator.Result[string](ctx, "retried")
						if err != nil {
							return err
						}
						return coordinator.SetResult(ctx, "saw "+v)
					}},
				)
				if err != nil {
					t.Fatalf("Submit = %v", err)
				}
				settle(t, s)
				if info, _ := s.Info("reader"); info.Result != "saw attempt 2" {
					t.Fatalf("Info(reader) = %+v; want result \"saw attempt 2\"", info)
				}
				if info, _ := s.Info("series"); info.Status != coordinator.Succeeded || info.Result != nil {
					t.Fatalf("Info(series) = %+v; want succeeded, no result (its last run set none)", info)
				}
			})
		})
	}
}

// A custom worker's Do sets and reads results through the context it is
// given.
type resultWorker struct{}

func (resultWorker) Do(ctx context.Context, j worker.Job) error {
	if dep, ok := j.Payload.(string); ok {
		v, err := coordinator.Result[int](ctx, dep)
		if err != nil {
			return err
		}
		return coordinator.SetResult(ctx, v*10)
	}
	return coordinator.SetResult(ctx, j.Payload)
}

func TestResultsThroughACustomWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithPool("p", 2, resultWorker{}))
		err := s.Submit(
			coordinator.Task{ID: "a", Pool: "p", Payload: 4},
			coordinator.Task{ID: "b", Pool: "p", Payload: "a", Deps: []string{"a"}},
			coordinator.Task{ID: "c", Run: func(ctx context.Context) error {
				v, err := coordinator.Result[int](ctx, "b")
				if err != nil {
					return err
				}
				return coordinator.SetResult(ctx, v+1)
			}, Deps: []string{"b"}},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		if info, _ := s.Info("c"); info.Result != 41 {
			t.Fatalf("Info(c) = %+v; want result 41", info)
		}
	})
}

// With retention, a result is forgotten with its task.
func TestResultForgottenWithItsTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithRetention(time.Minute))
		if err := s.Submit(coordinator.Task{ID: "a", Run: setting("kept")}); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		if info, _ := s.Info("a"); info.Result != "kept" {
			t.Fatalf("Info(a).Result = %v; want kept", info.Result)
		}
		time.Sleep(2 * time.Minute) // fake time: past retention
		synctest.Wait()
		if info, found := s.Info("a"); found {
			t.Fatalf("Info(a) = %+v after retention; want forgotten", info)
		}
		// The ID is free again, and the new task starts without a result.
		if err := s.Submit(coordinator.Task{ID: "a", Run: ok}); err != nil {
			t.Fatalf("Submit(a again) = %v", err)
		}
		settle(t, s)
		if info, _ := s.Info("a"); info.Result != nil {
			t.Fatalf("Info(new a).Result = %v; want nil", info.Result)
		}
	})
}

// Upstream lists the direct dependencies, handles first, each once.
func TestUpstreamListsDirectDependencies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(2))
		if err := s.Submit(coordinator.Task{ID: "earlier", Run: setting(1)}); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		var got []coordinator.TaskInfo
		var g coordinator.Graph
		h1 := g.Add(coordinator.Task{ID: "h1", Run: ok})
		h2 := g.Add(coordinator.Task{ID: "h2", Run: setting("two")})
		g.Add(coordinator.Task{ID: "down", Deps: []string{"earlier", "h1"}, Run: func(ctx context.Context) error {
			var err error
			got, err = coordinator.Upstream(ctx)
			return err
		}}, h2, h1)
		if err := s.SubmitGraph(context.Background(), &g); err != nil {
			t.Fatalf("SubmitGraph = %v", err)
		}
		settle(t, s)
		var ids []string
		for _, ti := range got {
			ids = append(ids, ti.ID)
			if ti.Status != coordinator.Succeeded {
				t.Errorf("upstream %s is %v; want succeeded", ti.ID, ti.Status)
			}
		}
		if fmt.Sprint(ids) != "[h2 h1 earlier]" || got[0].Result != "two" {
			t.Fatalf("Upstream = %+v; want h2 (result two), h1, earlier", got)
		}
	})
}
