package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/coordinator/storetest"
	"github.com/batonhq/baton/worker"
)

// History (WithHistory's doc): every attempt with when it was handed out,
// started and ended, its pool and worker, outcome and error, oldest
// first; the attempt running now last; a task's history goes with it.
func TestHistoryTellsEveryAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(1), coordinator.WithPool("io", 2, worker.Func{}))
		start := time.Now()
		calls := 0
		g := newGate()
		err := s.Submit(
			coordinator.Task{ID: "flaky", Pool: "io", Retry: coordinator.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Second},
				Run: func(ctx context.Context) error {
					calls++
					time.Sleep(time.Duration(calls) * time.Minute)
					if calls < 3 {
						return fmt.Errorf("attempt %d: planned", calls)
					}
					return nil
				}},
			coordinator.Task{ID: "slow", Run: func(ctx context.Context) error { return g.run(ctx) }},
		)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		h, ok := s.History("slow")
		if !ok || len(h.Attempts) != 1 || h.Attempts[0].Outcome != coordinator.OutcomeRunning || !h.Attempts[0].Started.Equal(start) || !h.Attempts[0].Ended.IsZero() {
			t.Fatalf("History(slow) while it runs = %+v, %v; want one attempt, running since %v", h, ok, start)
		}
		time.Sleep(time.Hour)
		g.release()
		settle(t, s)
		h, _ = s.History("flaky")
		if len(h.Attempts) != 3 || h.Dropped != 0 {
			t.Fatalf("History(flaky) = %+v; want 3 attempts", h)
		}
		at := start
		for i, a := range h.Attempts {
			want := coordinator.OutcomeFailed
			if i == 2 {
				want = coordinator.OutcomeSucceeded
			}
			if i > 0 {
				at = at.Add(time.Second << (i - 1)) // the retry's wait: BaseDelay·2^(failures-1)
			}
			dur := time.Duration(i+1) * time.Minute
			if a.Attempt != i+1 || a.Run != 1 || a.Pool != "io" || a.Worker == "" || a.Outcome != want ||
				!a.HandedOut.Equal(at) || !a.Started.Equal(at) || !a.Ended.Equal(at.Add(dur)) || a.Duration(time.Now()) != dur {
				t.Errorf("attempt %d = %+v; want attempt %d of run 1 in pool io, %v, from %v for %v", i, a, i+1, want, at, dur)
			}
			if (a.Err == nil) != (i == 2) {
				t.Errorf("attempt %d: Err %v", i, a.Err)
			}
			at = at.Add(dur)
		}
		if e := h.Attempts[0].Err; e == nil || e.Error() != "attempt 1: planned" {
			t.Errorf("attempt 1's error = %v; want its own", e)
		}
		if _, ok := s.History("ghost"); ok {
			t.Error("History(ghost) found; want unknown")
		}
	})
}

// An attempt with a Timeout is timed by its worker, which reads the clock
// for the deadline anyway (lane.StampTimed, decided by the worker from the
// spec it reads to run it): its Started and Ended are when its function
// began and returned, behind another attempt of its worker's lane.
func TestHistoryTimesAnAttemptWithATimeoutExactly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(1))
		start := time.Now()
		err := s.Submit(
			coordinator.Task{ID: "first", Run: func(context.Context) error { time.Sleep(2 * time.Minute); return nil }},
			coordinator.Task{ID: "timed", Timeout: time.Hour, Run: func(context.Context) error { time.Sleep(3 * time.Minute); return nil }},
		)
		if err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		h, _ := s.History("timed")
		if len(h.Attempts) != 1 {
			t.Fatalf("History(timed) = %+v; want one attempt", h)
		}
		a := h.Attempts[0]
		if !a.Started.Equal(start.Add(2*time.Minute)) || !a.Ended.Equal(start.Add(5*time.Minute)) || a.Duration(time.Now()) != 3*time.Minute {
			t.Errorf("timed's attempt: started %v, ended %v, %v; want from %v for 3m0s", a.Started.Sub(start), a.Ended.Sub(start), a.Duration(time.Now()), 2*time.Minute)
		}
	})
}

// The history keeps the newest WithHistory perTask attempts of a task and
// says how many it dropped; the total bound drops the oldest of all.
func TestHistoryIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(1), coordinator.WithHistory(3, 5))
		fail := func(context.Context) error { return errors.New("planned") }
		err := s.Submit(
			coordinator.Task{ID: "a", Retry: coordinator.RetryPolicy{MaxAttempts: 4}, Run: fail},
			coordinator.Task{ID: "b", Deps: []string{"a"}, When: coordinator.AllDone, Retry: coordinator.RetryPolicy{MaxAttempts: 3}, Run: fail},
		)
		if err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		ha, _ := s.History("a")
		hb, _ := s.History("b")
		// a's 4 attempts, the first dropped by perTask; then b's 3 push two
		// more of a's out of the ring of 5.
		if len(hb.Attempts) != 3 || hb.Dropped != 0 {
			t.Errorf("History(b) = %d attempts, %d dropped; want 3, 0", len(hb.Attempts), hb.Dropped)
		}
		if len(ha.Attempts) != 2 || ha.Dropped != 2 || ha.Attempts[0].Attempt != 3 || ha.Attempts[1].Attempt != 4 {
			t.Errorf("History(a) = %+v; want its attempts 3 and 4, 2 dropped", ha)
		}
	})
}

// WithHistory(0, 0) turns the history off: only the attempt running is
// told.
func TestHistoryOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithHistory(0, 0))
		if err := s.Submit(coordinator.Task{ID: "a", Run: ok}); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		if h, ok := s.History("a"); !ok || len(h.Attempts) != 0 {
			t.Errorf("History(a) = %+v, %v; want known, no attempt", h, ok)
		}
	})
}

// A durable scheduler keeps the history across a restart: what ended is
// told as it was, an attempt a crash interrupted is OutcomeInterrupted;
// retention forgets a task's history with it.
func TestHistorySurvivesARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := storetest.NewMemory()
		calls := 0
		running := make(chan struct{}, 1)
		funcs := []coordinator.Option{
			coordinator.WithFunc("flaky", func(ctx context.Context, _ []byte) error {
				calls++
				time.Sleep(time.Minute)
				if calls < 3 {
					return fmt.Errorf("attempt %d: planned", calls)
				}
				return nil
			}),
			coordinator.WithFunc("plain", func(context.Context, []byte) error { time.Sleep(time.Second); return nil }),
			coordinator.WithFunc("hang", func(ctx context.Context, _ []byte) error {
				running <- struct{}{}
				<-ctx.Done()
				return ctx.Err()
			}),
		}
		s1, err := coordinator.New(append([]coordinator.Option{coordinator.WithStore(mem.Open()), coordinator.WithWorkers(2)}, funcs...)...)
		if err != nil {
			t.Fatal(err)
		}
		err = s1.Submit(
			coordinator.Task{ID: "flaky", Func: "flaky", Retry: coordinator.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Second}},
			coordinator.Task{ID: "plain", Func: "plain"},
		)
		if err != nil {
			t.Fatal(err)
		}
		if err := s1.WaitTasks(context.Background(), "flaky", "plain"); err != nil {
			t.Fatal(err)
		}
		if err := s1.Submit(coordinator.Task{ID: "hang", Func: "hang", Retry: coordinator.RetryPolicy{MaxAttempts: 2}}); err != nil {
			t.Fatal(err)
		}
		<-running
		synctest.Wait()
		before := map[string]coordinator.History{}
		for _, id := range []string{"flaky", "plain"} {
			before[id], _ = s1.History(id)
		}
		crashed := mem.Crash()
		if err := s1.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}

		s2, err := coordinator.New(append([]coordinator.Option{coordinator.WithStore(crashed.Open()), coordinator.WithWorkers(2)}, funcs...)...)
		if err != nil {
			t.Fatal(err)
		}
		for id, want := range before {
			got, _ := s2.History(id)
			if len(got.Attempts) != len(want.Attempts) || got.Dropped != want.Dropped {
				t.Fatalf("History(%s) after the restart = %+v; want %+v", id, got, want)
			}
			for i := range want.Attempts {
				g, w := got.Attempts[i], want.Attempts[i]
				if g.Attempt != w.Attempt || g.Run != w.Run || g.Outcome != w.Outcome || g.Worker != w.Worker ||
					!g.HandedOut.Equal(w.HandedOut) || !g.Started.Equal(w.Started) || !g.Ended.Equal(w.Ended) || fmt.Sprint(g.Err) != fmt.Sprint(w.Err) {
					t.Errorf("History(%s) attempt %d after the restart = %+v; want %+v", id, i, g, w)
				}
			}
		}
		h, _ := s2.History("hang")
		if len(h.Attempts) == 0 || h.Attempts[0].Outcome != coordinator.OutcomeInterrupted || !errors.Is(h.Attempts[0].Err, coordinator.ErrInterrupted) {
			t.Errorf("History(hang) after the restart = %+v; want its first attempt interrupted", h)
		}
		if err := s2.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// Remembering an attempt allocates nothing (WithHistory's cost: a record
// in a ring): the run phase of 20,000 empty tasks with the history on
// allocates about what it does with it off, far less than once an attempt
// (it once allocated each attempt's detail, error or none).
func TestHistoryAllocatesNothingAnAttempt(t *testing.T) {
	const n = 20000
	mallocs := func(opts ...coordinator.Option) uint64 {
		s := newScheduler(t, append([]coordinator.Option{coordinator.WithWorkers(2)}, opts...)...)
		open := make(chan struct{})
		tasks := []coordinator.Task{{ID: "gate", Run: func(context.Context) error { <-open; return nil }}}
		for i := range n {
			tasks = append(tasks, coordinator.Task{ID: fmt.Sprint(i), Deps: []string{"gate"}, Run: func(context.Context) error { return nil }})
		}
		if err := s.Submit(tasks...); err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		close(open)
		if err := s.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		return after.Mallocs - before.Mallocs
	}
	off, on := mallocs(coordinator.WithHistory(0, 0)), mallocs()
	if on > off+n/20 {
		t.Errorf("the run phase of %d tasks allocated %d times with the history on, %d with it off: an attempt allocates", n, on, off)
	}
}

// First attempts that succeed plainly and end together on one worker
// share one record of the ring (the history's cost on a large graph): each
// task's History still tells its attempt, with its times and worker, and
// a later attempt of the same task (a series' next run) is told after it;
// the total bound counts records, so such attempts outlive it until the
// ring overwrites their record, and are then told as dropped.
func TestHistorySharesFirstSuccesses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 300 // more than one shared record holds
		s := newScheduler(t, coordinator.WithWorkers(1), coordinator.WithHistory(2, 8))
		open := make(chan struct{})
		tasks := []coordinator.Task{{ID: "gate", Run: func(context.Context) error { <-open; return nil }}}
		for i := range n {
			tasks = append(tasks, coordinator.Task{ID: fmt.Sprint(i), Deps: []string{"gate"}, Run: ok})
		}
		tasks = append(tasks, coordinator.Task{ID: "series", Deps: []string{"gate"}, Every: time.Minute, Times: 4, Run: ok})
		if err := s.Submit(tasks...); err != nil {
			t.Fatal(err)
		}
		submitted := time.Now()
		time.Sleep(time.Second)
		close(open)
		synctest.Wait()
		f := s.Feed()
		defer f.Close()
		for i := range n {
			h, _ := s.History(fmt.Sprint(i))
			if len(h.Attempts) != 1 || h.Dropped != 0 {
				t.Fatalf("History(%d) = %+v; want its one attempt, none dropped (of %d, with a ring of 8)", i, h, n)
			}
			a := h.Attempts[0]
			if a.Attempt != 1 || a.Run != 1 || a.Outcome != coordinator.OutcomeSucceeded || a.Worker != "worker 0" ||
				a.HandedOut.IsZero() || a.Started.Before(a.HandedOut) || !a.Started.Equal(submitted.Add(time.Second)) || !a.Ended.Equal(a.Started) {
				t.Fatalf("History(%d) = %+v; want attempt 1 of run 1, succeeded on worker 0, handed out, started and ended as the gate ended", i, a)
			}
		}
		ends := 0
		for {
			p, err := f.Next(context.Background(), 1000)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range p.Ended {
				ends += e.Tasks
			}
			if !p.More {
				break
			}
		}
		// The gate's end, every first success, the series' first run.
		if ends != n+2 {
			t.Errorf("the feed told %d ends; want %d", ends, n+2)
		}

		// The series' later runs chain before its first, shared, which
		// perTask (2) then drops.
		settle(t, s)
		h, _ := s.History("series")
		if len(h.Attempts) != 2 || h.Dropped != 2 || h.Attempts[0].Run != 3 || h.Attempts[1].Run != 4 {
			t.Errorf("History(series) = %+v; want runs 3 and 4, 2 dropped", h)
		}
		// Eight records of failures overwrite the whole ring: the first
		// successes are told as dropped.
		fail := func(context.Context) error { return errors.New("planned") }
		if err := s.Submit(coordinator.Task{ID: "bad", Retry: coordinator.RetryPolicy{MaxAttempts: 8}, Run: fail}); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		if h, _ := s.History("0"); len(h.Attempts) != 0 || h.Dropped != 1 {
			t.Errorf("History(0) after the ring turned = %+v; want none, 1 dropped", h)
		}
	})
}
