package coordinator_test

import (
	"context"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
)

// Timed attempts (Timeout) are timed by the worker: exact Started/Ended,
// whether they return, panic, call Goexit or are abandoned past their
// deadline and the grace (their end is then the abandon); an untimed one
// after them starts when the timed one ended. (The worker stamps an end
// only if it stamped the start: lane's timing flag.)
func TestHistoryTimesTimedAttemptsHoweverTheyEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(1))
		start := time.Now()
		chain := []coordinator.Task{
			{ID: "t-ok", Timeout: time.Hour, Run: func(context.Context) error { time.Sleep(time.Minute); return nil }},
			{ID: "t-panic", Timeout: time.Hour, Run: func(context.Context) error { time.Sleep(2 * time.Minute); panic("boom") }},
			{ID: "u", Run: func(context.Context) error { time.Sleep(3 * time.Minute); return nil }},
			{ID: "t-goexit", Timeout: time.Hour, Run: func(context.Context) error { time.Sleep(4 * time.Minute); runtime.Goexit(); return nil }},
			{ID: "t-late", Timeout: 5 * time.Minute, Run: func(ctx context.Context) error { <-ctx.Done(); time.Sleep(10 * time.Second); return ctx.Err() }},
			{ID: "t-zero", Timeout: time.Hour, Run: ok},
		}
		for i := range chain {
			if i > 0 {
				chain[i].Deps = []string{chain[i-1].ID}
				chain[i].When = coordinator.AllDone
			}
		}
		if err := s.Submit(chain...); err != nil {
			t.Fatal(err)
		}
		s.Wait(context.Background())
		synctest.Wait()
		want := map[string][2]time.Duration{
			"t-ok": {0, time.Minute}, "t-panic": {time.Minute, 3 * time.Minute}, "u": {3 * time.Minute, 6 * time.Minute},
			// t-late ignores its deadline past the grace: the worker abandons
			// it then (its end), and goes on with t-zero.
			"t-goexit": {6 * time.Minute, 10 * time.Minute}, "t-late": {10 * time.Minute, 15*time.Minute + coordinator.DefaultAbandonAfter},
			"t-zero": {15*time.Minute + coordinator.DefaultAbandonAfter, 15*time.Minute + coordinator.DefaultAbandonAfter},
		}
		for _, tk := range chain {
			h, _ := s.History(tk.ID)
			if len(h.Attempts) != 1 {
				t.Errorf("%s: %+v", tk.ID, h)
				continue
			}
			a := h.Attempts[0]
			w := want[tk.ID]
			if a.Started.Sub(start) != w[0] || a.Ended.Sub(start) != w[1] {
				t.Errorf("%s: started %v ended %v (%v); want %v, %v", tk.ID, a.Started.Sub(start), a.Ended.Sub(start), a.Outcome, w[0], w[1])
			}
		}
	})
}
