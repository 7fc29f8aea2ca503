package coordinator_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
)

// decodeBatch turns bytes into a batch of up to 8 tasks over a small
// alphabet of IDs, so that duplicates, unknown dependencies, cycles and bad
// options all come up.
func decodeBatch(data []byte) []coordinator.Task {
	next := func() int {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return int(b)
	}
	ids := []string{"a", "b", "c", "d", "e", "f", "old1", "old2", "", "zz"}
	n := next() % 9
	var batch []coordinator.Task
	for range n {
		t := coordinator.Task{ID: ids[next()%len(ids)], Priority: next()%5 - 2}
		for range next() % 4 {
			t.Deps = append(t.Deps, ids[next()%len(ids)])
		}
		switch next() % 6 {
		case 0:
			t.Run = nil
		case 1:
			t.Run = func(context.Context) error { return errors.New("fuzzed failure") }
		case 2:
			t.Run = func(context.Context) error { panic("fuzzed panic") }
		case 3:
			t.Run = func(ctx context.Context) error { <-ctx.Done(); return nil }
			t.Timeout = time.Duration(next()%3) * time.Second
			if t.Timeout == 0 {
				t.Timeout = time.Second
			}
		default:
			t.Run = ok
		}
		flags := next()
		if flags&1 != 0 {
			t.Delay = time.Duration(next()%5-1) * time.Second
		}
		if flags&2 != 0 {
			t.Every, t.Times = time.Duration(next()%3-1)*time.Second, next()%4-1
		}
		if flags&4 != 0 {
			t.Retry = coordinator.RetryPolicy{MaxAttempts: next()%4 - 1, BaseDelay: time.Duration(next()%3-1) * time.Second,
				MaxDelay: time.Duration(next()%3) * time.Second, Jitter: float64(next()%6-1) / 4}
		}
		if flags&8 != 0 {
			t.Pool = "nowhere"
		}
		if flags&16 != 0 { // the extremes Submit accepts
			extreme := []time.Duration{math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 / 2, 1}
			pick := func() time.Duration { return extreme[next()%len(extreme)] }
			t.Retry = coordinator.RetryPolicy{MaxAttempts: next()%3 + 1, BaseDelay: pick(), MaxDelay: pick(), Jitter: float64(next()%5) / 4}
			switch next() % 4 {
			case 0:
				t.Delay = pick()
			case 1:
				t.Every, t.Times = pick(), next()%3+1
			case 2:
				t.Timeout = pick()
			}
		}
		batch = append(batch, t)
	}
	return batch
}

// FuzzSubmit: a valid batch is accepted and runs to completion; an invalid
// one returns a typed error and leaves the scheduler as it was (a later
// valid batch still runs); nothing panics.
func FuzzSubmit(f *testing.F) {
	f.Add([]byte{3, 0, 0, 4, 0, 1, 1, 0, 5, 1, 2, 0, 5})
	f.Add([]byte{2, 0, 1, 1, 4, 0, 1, 1, 0, 4, 0})                              // a and b depend on each other
	f.Add([]byte{1, 6, 1, 9, 4, 0})                                             // unknown dependency
	f.Add([]byte{2, 0, 0, 4, 2, 0, 0, 4, 0})                                    // duplicate ID
	f.Add([]byte{1, 2, 1, 6, 3, 7, 3, 4, 2, 3, 2, 1, 2, 5})                     // recurring with retries
	f.Add([]byte{1, 0, 0, 0, 1, 16, 1, 0, 0, 4, 3})                             // fails; retry BaseDelay MaxInt64, Jitter 1
	f.Add([]byte{2, 0, 0, 0, 1, 16, 2, 1, 2, 2, 0, 1, 0, 0, 4, 16, 0, 3, 0, 1}) // MaxInt64 delay; a series of MaxInt64 - 1
	f.Add([]byte{1, 3, 0, 0, 5, 16, 1, 0, 1, 4, 2})                             // extreme timeout and backoff
	f.Fuzz(func(t *testing.T, data []byte) {
		synctest.Test(t, func(t *testing.T) {
			s := newScheduler(t, coordinator.WithWorkers(2))
			if err := s.Submit(
				coordinator.Task{ID: "old1", Run: ok},
				coordinator.Task{ID: "old2", Run: func(context.Context) error { return errors.New("old failure") }},
			); err != nil {
				t.Fatalf("Submit(old) = %v", err)
			}
			settle(t, s)
			batch := decodeBatch(data)
			// far: a wait of more than a day, or an endless series (Every
			// with Times 0): shut down instead of waiting it out.
			far := false
			for _, tk := range batch {
				r := tk.Retry
				far = far || max(tk.Delay, tk.Every, tk.Timeout, r.BaseDelay, r.MaxDelay) > 24*time.Hour
				far = far || (tk.Every > 0 && tk.Times == 0)
			}
			err := s.Submit(batch...)
			if err != nil {
				var te *coordinator.TaskError
				var ce *coordinator.CycleError
				if !errors.As(err, &te) && !errors.As(err, &ce) {
					t.Fatalf("Submit = %v (%T); want a *TaskError or *CycleError", err, err)
				}
				for _, tk := range batch {
					if tk.ID == "old1" || tk.ID == "old2" {
						continue
					}
					if _, found := s.Info(tk.ID); found {
						t.Fatalf("rejected batch (%v) left task %q behind", err, tk.ID)
					}
				}
			}
			if far {
				time.Sleep(time.Hour) // fake time
				synctest.Wait()
				if err := s.Shutdown(context.Background()); err != nil {
					t.Fatalf("Shutdown = %v", err)
				}
			} else {
				settle(t, s)
			}
			for _, tk := range batch {
				info, found := s.Info(tk.ID)
				if (err == nil && !found) || (found && !info.Status.Final()) {
					t.Fatalf("Info(%q) = %+v, %v after Wait; want a final task", tk.ID, info, found)
				}
			}
			if far {
				return // shut down: nothing more to submit
			}
			if err := s.Submit(coordinator.Task{ID: "later", Run: ok, Deps: []string{"old1"}}); err != nil {
				t.Fatalf("Submit(later) = %v", err)
			}
			settle(t, s)
			if st := status(t, s, "later"); st != coordinator.Succeeded {
				t.Fatalf("status(later) = %v; want succeeded", st)
			}
		})
	})
}
