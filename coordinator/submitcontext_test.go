package coordinator_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/worker"
)

type requestID struct{}

// The values of SubmitContext's ctx reach every attempt of its tasks: the
// first, retries, later runs, timed attempts, custom workers, contexts
// derived inside the task; its cancellation and deadline do not.
func TestSubmitContextValues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		seen := map[string][]any{}
		note := func(id string, ctx context.Context) {
			mu.Lock()
			seen[id] = append(seen[id], ctx.Value(requestID{}))
			mu.Unlock()
		}
		w := workerFunc(func(ctx context.Context, j worker.Job) error { note(j.ID, ctx); return nil })
		s := newScheduler(t, coordinator.WithWorkers(2), coordinator.WithPool("custom", 1, w))
		ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), requestID{}, "req-7"), time.Minute)
		tries := 0
		err := s.SubmitContext(ctx,
			coordinator.Task{ID: "retried", Retry: coordinator.RetryPolicy{MaxAttempts: 2}, Run: func(ctx context.Context) error {
				note("retried", ctx)
				if tries++; tries == 1 {
					return errors.New("again")
				}
				return nil
			}},
			coordinator.Task{ID: "series", Every: time.Hour, Times: 2, Run: func(ctx context.Context) error {
				note("series", ctx)
				if _, has := ctx.Deadline(); has {
					return errors.New("the caller's deadline reached the attempt")
				}
				return nil
			}},
			coordinator.Task{ID: "timed", Timeout: time.Second, Run: func(ctx context.Context) error {
				child, stop := context.WithCancel(ctx)
				defer stop()
				note("timed", child)
				return nil
			}},
			coordinator.Task{ID: "custom", Pool: "custom", Payload: 1},
		)
		if err != nil {
			t.Fatalf("SubmitContext = %v", err)
		}
		cancel() // bounds the call only: the tasks go on
		if err := s.Submit(coordinator.Task{ID: "plain", Run: func(ctx context.Context) error { note("plain", ctx); return nil }}); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		want := map[string]int{"retried": 2, "series": 2, "timed": 1, "custom": 1}
		for id, n := range want {
			if len(seen[id]) != n {
				t.Fatalf("%s ran %d times; want %d", id, len(seen[id]), n)
			}
			for _, v := range seen[id] {
				if v != "req-7" {
					t.Fatalf("%s saw request ID %v; want req-7", id, v)
				}
			}
			if info, _ := s.Info(id); info.Status != coordinator.Succeeded {
				t.Fatalf("%s: %+v; want succeeded (the caller's ctx ended after SubmitContext)", id, info)
			}
		}
		if seen["plain"][0] != nil {
			t.Fatalf("a task submitted without values saw %v", seen["plain"][0])
		}
	})
}

// A ctx that has ended before the coordinator takes the batch stores
// nothing and returns ctx.Err().
func TestSubmitContextEnded(t *testing.T) {
	s := newScheduler(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.SubmitContext(ctx, coordinator.Task{ID: "a", Run: ok}); !errors.Is(err, context.Canceled) {
		t.Fatalf("SubmitContext(cancelled ctx) = %v; want context.Canceled", err)
	}
	if _, found := s.Info("a"); found {
		t.Fatalf("a stored although SubmitContext returned an error")
	}
}

type workerFunc func(ctx context.Context, j worker.Job) error

func (f workerFunc) Do(ctx context.Context, j worker.Job) error { return f(ctx, j) }
