package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/coordinator/storetest"
)

// gated submits a gate and n plain tasks behind it, on one worker, then
// opens the gate: the n first successes end together.
func gated(t *testing.T, s *coordinator.Scheduler, prefix string, n int) {
	t.Helper()
	open := make(chan struct{})
	tasks := []coordinator.Task{{ID: prefix + "gate", Run: func(context.Context) error { <-open; return nil }}}
	for i := range n {
		tasks = append(tasks, coordinator.Task{ID: fmt.Sprint(prefix, i), Deps: []string{prefix + "gate"}, Run: ok})
	}
	if err := s.Submit(tasks...); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	close(open)
	settle(t, s)
}

func drain(t *testing.T, f *coordinator.Feed, max int) (tasks int, dropped uint64, entries []coordinator.EndedAttempt) {
	t.Helper()
	for {
		p, err := f.Next(context.Background(), max)
		if err != nil {
			t.Fatal(err)
		}
		dropped += p.Dropped
		for _, e := range p.Ended {
			tasks += e.Tasks
			entries = append(entries, e)
		}
		if !p.More {
			return
		}
	}
}

// FeedPage.Dropped counts the ended attempts the history forgot before
// the feed read them: a shared record lost stands for all of its
// attempts (it once counted as one).
func TestFeedDroppedCountsAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(1), coordinator.WithHistory(2, 2))
		f := s.Feed()
		defer f.Close()
		drain(t, f, 1000) // the feed is at the start
		gated(t, s, "", 300)
		// Two failures push every record of the 301 ends out of the ring.
		fail := func(context.Context) error { return errors.New("planned") }
		if err := s.Submit(coordinator.Task{ID: "bad", Retry: coordinator.RetryPolicy{MaxAttempts: 2}, Run: fail}); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		tasks, dropped, _ := drain(t, f, 1000)
		t.Logf("told %d attempts, dropped %d; ended: 303", tasks, dropped)
		if uint64(tasks)+dropped != 303 {
			t.Errorf("told %d + dropped %d != 303 attempts ended", tasks, dropped)
		}
	})
}

// A durable scheduler keeps across a restart the first successes that
// shared records (WithHistory: more than total attempts in total records);
// restored with no lane, each once took a record of its own, and the ring
// kept 8 of 300.
func TestSharedHistorySurvivesARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := storetest.NewMemory()
		open := make(chan struct{})
		opts := func(st coordinator.Store) []coordinator.Option {
			return []coordinator.Option{coordinator.WithStore(st), coordinator.WithWorkers(1), coordinator.WithHistory(2, 8),
				coordinator.WithFunc("gate", func(context.Context, []byte) error { <-open; return nil }),
				coordinator.WithFunc("ok", func(context.Context, []byte) error { return nil })}
		}
		s1, err := coordinator.New(opts(mem.Open())...)
		if err != nil {
			t.Fatal(err)
		}
		const n = 300
		tasks := []coordinator.Task{{ID: "gate", Func: "gate"}}
		for i := range n {
			tasks = append(tasks, coordinator.Task{ID: fmt.Sprint(i), Deps: []string{"gate"}, Func: "ok"})
		}
		if err := s1.Submit(tasks...); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		close(open)
		settle(t, s1)
		kept := 0
		for i := range n {
			if h, _ := s1.History(fmt.Sprint(i)); len(h.Attempts) == 1 {
				kept++
			}
		}
		if err := s1.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		s2, err := coordinator.New(opts(mem.Open())...)
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Shutdown(context.Background())
		after := 0
		for i := range n {
			if h, _ := s2.History(fmt.Sprint(i)); len(h.Attempts) == 1 {
				after++
			}
		}
		h0, _ := s2.History("0")
		t.Logf("before restart %d of %d tasks have their attempt; after %d; History(0) after = %+v", kept, n, after, h0)
		if after != kept {
			t.Errorf("after the restart %d tasks keep their attempt; before, %d", after, kept)
		}
	})
}
