package coordinator

import (
	"testing"
	"time"
)

// journaled stores tasks as submitReq does for SubmitJournaled.
func (d *durableRig) journaled(t *testing.T, tasks ...Task) {
	t.Helper()
	b := &submission{tasks: tasks, journaled: true}
	if err := d.s.submit(b, d.now); err != nil {
		t.Fatalf("submit = %v", err)
	}
	d.s.submitted(b)
	d.s.later(answer{err: make(chan error, 1)})
}

// published returns how many items the outbox's publications (early ones
// if early) make visible.
func published(ps []publication) int {
	n := 0
	for _, p := range ps {
		n += int(p.to - p.from)
	}
	return n
}

// A journaled batch's roots go out before the commit (outbox.Early); its
// tasks with dependencies, and every task of a plain Submit, after it.
func TestJournaledRootsGoOutBeforeTheCommit(t *testing.T) {
	d := newDurableRig(t, 4)
	d.journaled(t, Task{ID: "a", Run: noop}, Task{ID: "b", Run: noop}, Task{ID: "c", Run: noop, Deps: []string{"a"}})
	o := d.s.ready(d.now)
	if o.Commit == nil || published(o.Early) != 2 || published(o.Publish) != 0 {
		t.Fatalf("journaled: commit %v, %d early, %d after; want a commit, a and b early", o.Commit != nil, published(o.Early), published(o.Publish))
	}
	d.s.advance(nil)

	d = newDurableRig(t, 4)
	reply := make(chan error, 1)
	d.submitted(t, reply, Task{ID: "a", Run: noop})
	o = d.s.ready(d.now)
	if published(o.Early) != 0 || published(o.Publish) != 1 {
		t.Fatalf("plain Submit: %d early, %d after; want a after the commit", published(o.Early), published(o.Publish))
	}
	d.s.advance(nil)
}

// Only a prefix of a lane goes out early: an item behind one that must
// wait for the commit waits too (a lane publishes in order).
func TestJournaledEarlyIsALanePrefix(t *testing.T) {
	d := newDurableRig(t, 1)
	reply := make(chan error, 1)
	d.submitted(t, reply, Task{ID: "p", Run: noop})
	d.journaled(t, Task{ID: "j", Run: noop})
	o := d.s.ready(d.now)
	if published(o.Early) != 0 || published(o.Publish) != 2 {
		t.Fatalf("plain then journaled on one lane: %d early, %d after; want both after", published(o.Early), published(o.Publish))
	}
	d.s.advance(nil)
}

// Nothing goes out early in an iteration that changes a pool's pause or
// forgets a task: a crash would undo the change, and with it what let
// the task run (a resumed pool; an ID free again).
func TestJournaledWaitsForPoolsAndForgets(t *testing.T) {
	d := newDurableRig(t, 1)
	d.s.pausePool(0, d.now)
	d.step()
	d.s.resumePool(0, d.now)
	d.journaled(t, Task{ID: "a", Run: noop})
	o := d.s.ready(d.now)
	if published(o.Early) != 0 || published(o.Publish) != 1 {
		t.Fatalf("journaled in the iteration of a Resume: %d early, %d after; want a after the commit", published(o.Early), published(o.Publish))
	}
	d.s.advance(nil)

	d = newDurableRig(t, 1)
	d.s.retain, d.s.keep = true, time.Second
	reply := make(chan error, 1)
	d.submitted(t, reply, Task{ID: "old", Run: noop})
	d.step()
	d.drain(0)
	d.step()
	d.now = d.now.Add(time.Hour)
	d.journaled(t, Task{ID: "new", Run: noop})
	o = d.s.ready(d.now)
	if len(o.Commit.Deletes) == 0 {
		t.Fatal("old was not forgotten in the iteration")
	}
	if published(o.Early) != 0 || published(o.Publish) != 1 {
		t.Fatalf("journaled in the iteration of a forget: %d early, %d after; want new after the commit", published(o.Early), published(o.Publish))
	}
	d.s.advance(nil)
}
