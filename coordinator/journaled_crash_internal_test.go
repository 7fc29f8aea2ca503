package coordinator

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/lane"
)

// restoredRig opens a new durable rig on what commits wrote: the store a
// crash leaves when the commit after them never lands.
func restoredRig(t *testing.T, commits []*Changes, workers int, funcs map[string]func(context.Context, []byte) error) *durableRig {
	t.Helper()
	kv := map[string][]byte{}
	for _, c := range commits {
		for _, p := range c.Puts {
			kv[string(p.Key)] = p.Value
		}
		for _, k := range c.Deletes {
			delete(kv, string(k))
		}
	}
	ld := &loader{}
	for _, k := range slices.Sorted(maps.Keys(kv)) {
		if err := ld.add([]byte(k), kv[k]); err != nil {
			t.Fatal(err)
		}
	}
	d := &durableRig{rig: newRig(workers)}
	c, err := d.s.openDurable(&durableConfig{funcs: funcs, runs: []bool{false}, resumes: []bool{false}, rash: true}, ld, d.now)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	d.keepCommits()
	if c != nil {
		d.commit(c)
	}
	d.s.committed(nil)
	return d
}

// A journaled batch taken in the iteration that applies a spawner's
// success (which joins the child k it spawned) waits for that iteration's
// commit: its acceptance depends on k, which a crash before the commit
// would undo, and its replay would be refused although its root r ran.
// Found by a review: r went out early, and the replay was refused with
// ErrUnknownDependency.
func TestJournaledWaitsForASpawnJoiningInItsIteration(t *testing.T) {
	d := newDurableRig(t, 1)
	rRuns := 0
	spawner := func(ctx context.Context) error {
		c, _ := lane.Of(ctx)
		laneID, slot, _ := c.Item()
		p, _ := d.s.find("s")
		return d.s.spawn(p, c, laneID, slot, &submission{tasks: []Task{{ID: "k", Func: "f", Run: noop, Delay: time.Hour}}}, noTask, d.now)
	}
	reply := make(chan error, 1)
	d.submitted(t, reply, Task{ID: "s", Func: "f", Run: spawner})
	d.step() // s stored and published
	if err := <-reply; err != nil {
		t.Fatal(err)
	}
	if !d.s.lanes[0].l.Step(d.env) { // s spawns k and returns nil; its report is not applied yet
		t.Fatal("s did not run")
	}
	// The loop's next message is the inbox's batch: run's mailbox case
	// harvests first (s's success joins k), then applies the request.
	d.s.harvestAll(d.now)
	d.journaled(t, Task{ID: "r", Func: "f", Run: func(context.Context) error { rRuns++; return nil }},
		Task{ID: "c", Func: "f", Run: noop, Deps: []string{"k"}})
	o := d.s.iterate(d.now)
	d.s.pack(&o, d.now)
	if published(o.Early) != 0 {
		t.Errorf("%d items go out before the commit that joins k; want none", published(o.Early))
	}
	for _, p := range o.Early {
		p.do()
	}
	for i := range d.s.lanes {
		for d.s.lanes[i].l.Step(d.env) {
		}
	}
	if rRuns != 0 {
		t.Fatalf("r ran %d time(s) while the commit that stores the batch (and s's success, k) is under way", rRuns)
	}
	// Crash: that commit never lands. The next scheduler replays the batch.
	d2 := restoredRig(t, d.commits, 1, map[string]func(context.Context, []byte) error{"f": func(context.Context, []byte) error { return nil }})
	b := &submission{tasks: []Task{{ID: "r", Func: "f", Run: noop}, {ID: "c", Func: "f", Run: noop, Deps: []string{"k"}}}, journaled: true}
	err := d2.s.submit(b, d2.now)
	if !errors.Is(err, ErrUnknownDependency) {
		t.Errorf("the replayed batch after the crash = %v; want ErrUnknownDependency (k was undone, and r never ran)", err)
	}
}

// A key at its limit (1): x holds the key's one place; its end, applied
// in the iteration of the journaled batch and not committed, frees the
// place for the batch's root r, which must wait for that commit: a crash
// before it would bring x back (interrupted) to run again after r ran,
// although r waited behind x. Found by a review (r went out early).
func TestJournaledWaitsForAnEndInItsIteration(t *testing.T) {
	d := newDurableRig(t, 2)
	d.s.policy = KeyPolicy{Limit: 1}
	reply := make(chan error, 1)
	d.submitted(t, reply, Task{ID: "x", Func: "f", Run: noop, Key: "acct"})
	d.step()
	<-reply
	li := -1
	for i := range d.s.lanes {
		if d.s.lanes[i].l.Step(d.env) { // x runs and returns nil; not applied yet
			li = i
		}
	}
	if li < 0 {
		t.Fatal("x did not run")
	}
	d.s.harvestAll(d.now) // run's mailbox case
	d.journaled(t, Task{ID: "r", Func: "f", Run: noop, Key: "acct"})
	o := d.s.iterate(d.now)
	d.s.pack(&o, d.now)
	if published(o.Early) > 0 {
		t.Errorf("r goes out early (%d item) on the key place x's end frees, in the commit that stores x's end (%d puts)", published(o.Early), len(o.Commit.Puts))
	}
	if published(o.Publish) != 1 {
		t.Errorf("%d items go out after the commit; want r", published(o.Publish))
	}
	d.s.advance(nil)
}

// An ID freed by an end not committed: s's failed attempt drops the child
// x it reserved (no record is deleted). The batch {x} waits for that
// commit: after a crash s would run again and reserve x before the
// journal's replay, refused although x ran. Found by a review.
func TestJournaledWaitsForADroppedReservation(t *testing.T) {
	d := newDurableRig(t, 1)
	xRuns := 0
	spawnX := func(d *durableRig, then func() error) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			c, _ := lane.Of(ctx)
			laneID, slot, _ := c.Item()
			p, _ := d.s.find("s")
			if err := d.s.spawn(p, c, laneID, slot, &submission{tasks: []Task{{ID: "x", Func: "f", Run: noop}}}, noTask, d.now); err != nil {
				return err
			}
			return then()
		}
	}
	reply := make(chan error, 1)
	d.submitted(t, reply, Task{ID: "s", Func: "spawner", Run: spawnX(d, func() error { return errors.New("boom") }), Retry: RetryPolicy{MaxAttempts: 3, BaseDelay: time.Minute}})
	d.step()
	<-reply
	if !d.s.lanes[0].l.Step(d.env) {
		t.Fatal("s did not run")
	}
	d.s.harvestAll(d.now) // s's failure drops its reservation of x
	d.journaled(t, Task{ID: "x", Func: "f", Run: func(context.Context) error { xRuns++; return nil }})
	o := d.s.iterate(d.now)
	d.s.pack(&o, d.now)
	for _, p := range o.Early {
		p.do()
	}
	for d.s.lanes[0].l.Step(d.env) {
	}
	if xRuns != 0 || published(o.Early) != 0 {
		t.Fatalf("x ran %d time(s) before the commit that drops s's reservation (%d early); want none", xRuns, published(o.Early))
	}
	// Crash. The next scheduler runs s again; the journal's replay comes
	// while that attempt runs.
	var replay error
	var d2 *durableRig
	funcs := map[string]func(context.Context, []byte) error{
		"f": func(context.Context, []byte) error { return nil },
		"spawner": func(ctx context.Context, _ []byte) error {
			return spawnX(d2, func() error {
				replay = d2.s.submit(&submission{tasks: []Task{{ID: "x", Func: "f", Run: noop}}, journaled: true}, d2.now)
				return nil
			})(ctx)
		},
	}
	d2 = restoredRig(t, d.commits, 1, funcs)
	d2.now = d2.now.Add(time.Hour)
	d2.step()
	for d2.s.lanes[0].l.Step(d2.env) {
	}
	if !errors.Is(replay, ErrDuplicateID) {
		t.Errorf("the replay while s runs again = %v; want ErrDuplicateID (x reserved again; x never ran)", replay)
	}
}

// A journaled batch that names a task submitted before it ({r, c after
// d}, d final under retention) waits for its commit: a crash could take d
// away before the replay comes (the next scheduler forgets it at once if
// its time came while the process was down, or the loop took the batch
// before the timer's wake), and the replay would be refused although r
// ran. Found by a review, at both moments.
func TestJournaledWaitsWhenItNamesATaskBefore(t *testing.T) {
	for _, at := range []time.Duration{59 * time.Minute, time.Hour + time.Second} {
		d := newDurableRig(t, 1)
		d.s.retain, d.s.keep = true, time.Hour
		reply := make(chan error, 1)
		d.submitted(t, reply, Task{ID: "d", Run: noop})
		d.step()
		<-reply
		d.drain(0)
		d.step() // d's success committed
		d.now = d.now.Add(at)
		rRuns := 0
		d.journaled(t, Task{ID: "r", Run: func(context.Context) error { rRuns++; return nil }},
			Task{ID: "c", Run: noop, Deps: []string{"d"}})
		o := d.s.iterate(d.now)
		d.s.pack(&o, d.now)
		for _, p := range o.Early {
			p.do()
		}
		for d.s.lanes[0].l.Step(d.env) {
		}
		if published(o.Early) != 0 || rRuns != 0 {
			t.Errorf("%v after d's end: %d items early, r ran %d time(s) before the commit; want none", at, published(o.Early), rRuns)
		}
		d.s.advance(nil)
	}
	// A batch whose dependencies are all its own still goes out early.
	d := newDurableRig(t, 2)
	d.journaled(t, Task{ID: "a", Run: noop}, Task{ID: "b", Run: noop, Deps: []string{"a"}})
	if o := d.s.ready(d.now); published(o.Early) != 1 {
		t.Errorf("a self-contained batch: %d items early; want its root", published(o.Early))
	}
	d.s.advance(nil)
}
