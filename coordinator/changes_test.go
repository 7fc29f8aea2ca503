package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
)

// mirror is what a feed's reader keeps: the rows by slot, and the ends.
type mirror struct {
	rows  map[int]coordinator.TaskRow
	ended []coordinator.EndedAttempt
	reads int
}

// drain reads f until nothing more waits, max rows at a time, checking
// that no read returns more than max.
func (m *mirror) drain(t *testing.T, f *coordinator.Feed, max int) {
	t.Helper()
	if m.rows == nil {
		m.rows = map[int]coordinator.TaskRow{}
	}
	for {
		p, err := f.Next(context.Background(), max)
		if err != nil {
			t.Fatalf("Next = %v", err)
		}
		m.reads++
		if len(p.Rows) > max || len(p.Ended) > max {
			t.Fatalf("Next(%d) = %d rows, %d ends; want at most %d", max, len(p.Rows), len(p.Ended), max)
		}
		for _, r := range p.Rows {
			if r.Gone {
				delete(m.rows, r.Slot)
				continue
			}
			m.rows[r.Slot] = r
		}
		m.ended = append(m.ended, p.Ended...)
		if !p.More {
			return
		}
	}
}

func (m *mirror) byID() map[string]coordinator.TaskRow {
	out := map[string]coordinator.TaskRow{}
	for _, r := range m.rows {
		out[r.ID] = r
	}
	return out
}

// A feed opened after the work reports every task and the ends the
// history keeps (a dashboard opened late tells the truth at once), in
// chunks of at most max; then only what changed; Close ends it.
func TestFeedReportsEverythingThenChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(2))
		var tasks []coordinator.Task
		for i := range 50 {
			tasks = append(tasks, coordinator.Task{ID: fmt.Sprintf("t%02d", i), Run: ok})
		}
		tasks = append(tasks,
			coordinator.Task{ID: "bad", Retry: coordinator.RetryPolicy{MaxAttempts: 2}, Run: func(context.Context) error { return errors.New("planned") }},
			coordinator.Task{ID: "after", Deps: []string{"bad"}, Run: ok})
		if err := s.Submit(tasks...); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		f := s.Feed()
		defer f.Close()
		var m mirror
		m.drain(t, f, 7)
		got := m.byID()
		if len(got) != 52 || m.reads < 52/7 {
			t.Fatalf("first reads: %d rows in %d reads; want 52 in at least %d", len(got), m.reads, 52/7)
		}
		if r := got["bad"]; r.Status != coordinator.Failed || r.Attempts != 2 || r.Err == nil || r.Err.Error() != "planned" {
			t.Errorf("row bad = %+v; want Failed after 2 attempts, err planned", r)
		}
		if r := got["after"]; r.Status != coordinator.Skipped || r.Cause != "bad" {
			t.Errorf("row after = %+v; want Skipped, cause bad", r)
		}
		failed, ends := 0, 0
		for _, e := range m.ended {
			ends += e.Tasks
			if e.Tasks != 1 && (e.ID != "" || e.Outcome != coordinator.OutcomeSucceeded || e.Attempt != 1) {
				t.Errorf("ended %+v; an entry for several attempts is of first successes, with no ID", e)
			}
			if e.ID == "bad" {
				failed++
				if e.Outcome != coordinator.OutcomeFailed || e.Err == nil || e.Ended.IsZero() {
					t.Errorf("ended %+v; want a failure with its error and end", e)
				}
			}
		}
		if ends != 52 || failed != 2 {
			t.Errorf("ended: %d attempts, %d of bad; want 52, 2", ends, failed)
		}

		// Nothing changed: an empty read.
		p, err := f.Next(context.Background(), 100)
		if err != nil || len(p.Rows) != 0 || len(p.Ended) != 0 || p.More {
			t.Fatalf("Next with no change = %d rows, %d ends, more %v, %v; want none", len(p.Rows), len(p.Ended), p.More, err)
		}
		// A new task, run: reported with its end.
		g := newGate()
		if err := s.Submit(coordinator.Task{ID: "new", Run: g.run}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		m.drain(t, f, 100)
		if r := m.byID()["new"]; r.Status != coordinator.Running || r.Attempts != 1 {
			t.Errorf("row new while it runs = %+v; want Running, attempt 1", r)
		}
		g.release()
		settle(t, s)
		before := len(m.ended)
		m.drain(t, f, 100)
		if r := m.byID()["new"]; r.Status != coordinator.Succeeded {
			t.Errorf("row new = %+v; want Succeeded", r)
		}
		if len(m.ended) != before+1 || m.ended[len(m.ended)-1].ID != "new" {
			t.Errorf("ended after new = %d (last %+v); want one more, new", len(m.ended)-before, m.ended[len(m.ended)-1])
		}
		f.Close()
		f.Close()
		if _, err := f.Next(context.Background(), 10); !errors.Is(err, coordinator.ErrFeedClosed) {
			t.Errorf("Next after Close = %v; want ErrFeedClosed", err)
		}
	})
}

// A feed open while tasks move reports each task's latest row: pending,
// ready, then its end; a re-run re-opens it; a task retention forgot is
// reported gone.
func TestFeedFollowsTransitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithRetention(time.Minute), coordinator.WithWorkers(1))
		f := s.Feed()
		defer f.Close()
		var m mirror
		a := newBroken()
		g := newGate()
		if err := s.Submit(
			coordinator.Task{ID: "block", Run: g.run},
			coordinator.Task{ID: "a", Run: a.run},
			coordinator.Task{ID: "b", Deps: []string{"a"}, Run: ok},
		); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		m.drain(t, f, 100)
		rows := m.byID()
		if rows["block"].Status != coordinator.Running || rows["b"].Status != coordinator.Pending {
			t.Errorf("rows while block runs: block %v, b %v; want Running, Pending", rows["block"].Status, rows["b"].Status)
		}
		g.release()
		settle(t, s)
		m.drain(t, f, 100)
		rows = m.byID()
		if rows["a"].Status != coordinator.Failed || rows["b"].Status != coordinator.Skipped {
			t.Errorf("rows after: a %v, b %v; want Failed, Skipped", rows["a"].Status, rows["b"].Status)
		}
		a.on.Store(false)
		if _, err := s.Rerun(context.Background(), coordinator.RerunRequest{IDs: []string{"a"}, Downstream: true}); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		m.drain(t, f, 100)
		rows = m.byID()
		if rows["a"].Status != coordinator.Succeeded || rows["a"].Reruns != 1 || rows["b"].Status != coordinator.Succeeded {
			t.Errorf("rows after Rerun: a %+v, b %v; want Succeeded (1 re-run), Succeeded", rows["a"], rows["b"].Status)
		}
		time.Sleep(2 * time.Minute) // in the bubble: retention's time passes
		synctest.Wait()
		m.drain(t, f, 100)
		if len(m.rows) != 0 {
			t.Errorf("rows after retention = %v; want none", m.byID())
		}
	})
}

// After Shutdown a feed reads the final state.
func TestFeedAfterShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := coordinator.New()
		if err != nil {
			t.Fatal(err)
		}
		f := s.Feed()
		if err := s.Submit(coordinator.Task{ID: "x", Run: ok}); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		var m mirror
		m.drain(t, f, 10)
		if r := m.byID()["x"]; r.Status != coordinator.Succeeded {
			t.Errorf("row x after Shutdown = %+v; want Succeeded", r)
		}
		f.Close()
		late := s.Feed()
		var m2 mirror
		m2.drain(t, late, 10)
		if len(m2.rows) != 1 {
			t.Errorf("a feed opened after Shutdown: %d rows; want 1", len(m2.rows))
		}
		late.Close()
	})
}

// Chunks that end inside a word of marks, over many words: every task is
// reported, each once, and the last read says nothing more waits.
func TestFeedChunksCoverEveryTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		var tasks []coordinator.Task
		for i := range 5000 {
			tasks = append(tasks, coordinator.Task{ID: fmt.Sprint("t", i), Run: ok})
		}
		if err := s.Submit(tasks...); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		f := s.Feed()
		defer f.Close()
		seen := map[string]int{}
		for reads := 0; ; reads++ {
			p, err := f.Next(context.Background(), 300)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range p.Rows {
				seen[r.ID]++
			}
			if !p.More {
				break
			}
			if reads > 100 {
				t.Fatalf("still more after %d reads, %d tasks seen", reads, len(seen))
			}
		}
		if len(seen) != 5000 {
			t.Errorf("%d tasks reported; want 5000", len(seen))
		}
		for id, n := range seen {
			if n != 1 {
				t.Errorf("%s reported %d times; want once", id, n)
			}
		}
	})
}
