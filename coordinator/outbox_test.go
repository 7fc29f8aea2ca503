package coordinator

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/record"
)

// The boundary between the state and its loop (ready.go), driven by hand:
// the test is the loop (step: commit, answer, publish, stop, advance), the
// store and every worker. No goroutine but the test's, no channel but the
// answers'.

// durableRig is a rig on a durable state, whose commits the test keeps
// (or fails, while fail is set).
type durableRig struct {
	*rig
	commits []*Changes
	fail    error
}

func newDurableRig(t *testing.T, workers int) *durableRig {
	t.Helper()
	d := &durableRig{rig: newRig(workers)}
	c, err := d.s.openDurable(&durableConfig{funcs: map[string]func(context.Context, []byte) error{}}, &loader{}, d.now)
	if err != nil || c != nil {
		t.Fatalf("openDurable on an empty store = %v, %v; want nothing to commit", c, err)
	}
	d.s.committed(nil)
	d.keepCommits()
	return d
}

// keepCommits makes d's commits land in d.commits, as copies of their
// bytes (the state reuses its encoding buffer once a commit is done), or
// fail while d.fail is set.
func (d *durableRig) keepCommits() {
	d.commit = func(c *Changes) error {
		if d.fail != nil {
			return d.fail
		}
		cp := &Changes{}
		for _, p := range c.Puts {
			cp.Puts = append(cp.Puts, KV{Key: slices.Clone(p.Key), Value: slices.Clone(p.Value)})
		}
		for _, k := range c.Deletes {
			cp.Deletes = append(cp.Deletes, slices.Clone(k))
		}
		d.commits = append(d.commits, cp)
		return nil
	}
}

// submitted stores tasks as submitReq does and queues Submit's answer.
func (d *durableRig) submitted(t *testing.T, reply chan<- error, tasks ...Task) {
	t.Helper()
	b := &submission{tasks: tasks}
	if err := d.s.submit(b, d.now); err != nil {
		t.Fatalf("submit = %v", err)
	}
	d.s.submitted(b)
	d.s.later(answer{err: reply})
}

// A durable state's outbox carries the commit of what the iteration
// decided (the definitions, the states), the answer of the Submit that
// waits for it, and the items it hands out, which the loop publishes
// only after the commit: no worker can claim an item before the end that
// released it is committed.
func TestOutboxCommitsBeforeItPublishes(t *testing.T) {
	d := newDurableRig(t, 1)
	reply := make(chan error, 1)
	d.submitted(t, reply, Task{ID: "a", Run: noop}, Task{ID: "b", Run: noop, Deps: []string{"a"}})
	o := d.s.ready(d.now)
	if o.Commit == nil || len(o.Commit.Puts) < 4 { // two definitions, two states, the version
		t.Fatalf("outbox commit = %+v; want the batch's records", o.Commit)
	}
	if len(o.Answers) != 1 || len(o.Publish) != 1 {
		t.Fatalf("outbox: %d answers, %d publications; want Submit's answer and a's item", len(o.Answers), len(o.Publish))
	}
	ln := d.s.lanes[0].l
	if ln.Step(d.env) {
		t.Fatal("a worker ran an item before the loop published it")
	}
	if err := d.commit(o.Commit); err != nil {
		t.Fatal(err)
	}
	o.Answers[0].deliver(nil)
	o.Publish[0].do()
	d.s.advance(nil)
	if err := <-reply; err != nil {
		t.Fatalf("Submit's answer = %v", err)
	}
	if !ln.Step(d.env) {
		t.Fatal("a's item was not published")
	}
}

// After a failed commit nothing more is published or written: the answers
// waiting for it (and every later one) get the failure, wrapping
// ErrStoreFailed and the store's error.
func TestOutboxPublishesNothingAfterAFailedCommit(t *testing.T) {
	d := newDurableRig(t, 1)
	d.fail = errors.New("disk full")
	reply := make(chan error, 1)
	d.submitted(t, reply, Task{ID: "a", Run: noop})
	d.step()
	if err := <-reply; !errors.Is(err, ErrStoreFailed) || !errors.Is(err, d.fail) {
		t.Fatalf("Submit's answer after a failed commit = %v; want ErrStoreFailed wrapping disk full", err)
	}
	if d.s.lanes[0].l.Step(d.env) {
		t.Fatal("an item was published after the failed commit")
	}
	d.fail = nil
	later := make(chan error, 1)
	d.s.answer(later, nil)
	o := d.step()
	if o.Commit != nil || len(o.Publish) != 0 || !errors.Is(<-later, ErrStoreFailed) {
		t.Fatalf("after the failure: commit %v, %d publications; want nothing, and the failure for every answer", o.Commit, len(o.Publish))
	}
}

// Cancel of a running attempt stops its claim and leaves the context to
// the loop (outbox.Stop), after the commit that records the cancel; a
// stop whose attempt was applied in the meantime is dropped (its context
// may be the next attempt's).
func TestOutboxStopsRunningAttempts(t *testing.T) {
	r := newRig(1)
	started, release := make(chan context.Context, 1), make(chan struct{})
	r.submit(t, Task{ID: "slow", Run: func(ctx context.Context) error {
		started <- ctx
		<-release
		return ctx.Err()
	}})
	r.step()
	done := make(chan struct{})
	go func() { r.s.lanes[0].l.Step(r.env); close(done) }() // the worker claims and runs slow
	ctxSeen := <-started
	if !r.s.cancel("slow", r.now) {
		t.Fatal("cancel of a running task = false")
	}
	o := r.s.ready(r.now)
	if len(o.Stop) != 1 {
		t.Fatalf("outbox: %d stops; want the running attempt's", len(o.Stop))
	}
	if ctxSeen.Err() != nil {
		t.Fatal("the state ended the attempt's context itself")
	}
	o.Stop[0].do()
	r.s.advance(nil)
	if !errors.Is(context.Cause(ctxSeen), ErrCancelled) {
		t.Fatalf("the attempt's context cause = %v; want ErrCancelled", context.Cause(ctxSeen))
	}
	close(release)
	<-done
	r.s.harvestAll(r.now)
	if st := r.status(t, "slow"); st != Cancelled {
		t.Fatalf("slow is %v; want cancelled", st)
	}
}

// A WaitTasks call is answered in the outbox of the iteration that ends
// its last task, once that iteration's cascades are done.
func TestOutboxAnswersWaitTasks(t *testing.T) {
	r := newRig(1)
	r.submit(t, Task{ID: "a", Run: fail}, Task{ID: "b", Run: noop, Deps: []string{"a"}})
	reply := make(chan error, 1)
	r.s.watch(1, []string{"a", "b"}, reply)
	r.runAll(t, 10)
	var te *TasksError
	if err := <-reply; !errors.As(err, &te) || len(te.Tasks) != 2 || te.Tasks[1].Cause != "a" {
		t.Fatalf("WaitTasks' answer = %v; want a failed, b skipped because of a", err)
	}
}

// Watches of the same tasks are independent: forgetting some (their
// callers' contexts ended) leaves the others to be answered, in the order
// each listed its tasks, and the refs they used are reused, not grown.
func TestWatchesOfTheSameTasks(t *testing.T) {
	r := newRig(1)
	r.submit(t, Task{ID: "a", Run: fail}, Task{ID: "b", Run: noop, Deps: []string{"a"}}, Task{ID: "c", Run: noop})
	for round := range 100 {
		r.s.watch(uint64(10+round), []string{"c", "b", "a"}, make(chan error, 1))
		r.s.unwatch(uint64(10 + round))
	}
	if n := len(r.s.wrefs); n > 3 {
		t.Fatalf("100 watches made and forgotten left %d refs; want at most 3, reused", n)
	}
	first, second := make(chan error, 1), make(chan error, 1)
	r.s.watch(1, []string{"b", "a", "c"}, first)
	r.s.watch(2, []string{"a", "c"}, make(chan error, 1))
	r.s.watch(3, []string{"c", "a", "b", "a"}, second)
	r.s.unwatch(2)
	r.s.unwatch(2) // twice: nothing more
	r.runAll(t, 10)
	for _, w := range []struct {
		reply chan error
		want  string
	}{{first, "b a"}, {second, "a b"}} {
		var te *TasksError
		if err := <-w.reply; !errors.As(err, &te) {
			t.Fatalf("answer = %v; want a *TasksError", err)
		} else {
			var ids []string
			for _, ti := range te.Tasks {
				ids = append(ids, ti.ID)
			}
			if got := strings.Join(ids, " "); got != w.want {
				t.Errorf("TasksError lists %q; want %q (the order given)", got, w.want)
			}
		}
	}
	if len(r.s.byID) != 0 || slices.ContainsFunc(r.s.watchOf, func(x int32) bool { return x != 0 }) {
		t.Errorf("answered watches left behind: byID %v, watchOf %v", r.s.byID, r.s.watchOf)
	}
}

// A state is written at the time the loop packs the commit, read after
// the iteration applied its ends (pack), not at the iteration's first
// reading of the clock: an end applied in a long iteration (harvested as
// it dispatched) came after that reading, and a replica's test saw a
// task's success written a millisecond before its function began.
func TestStateWrittenWhenCommitted(t *testing.T) {
	d := newDurableRig(t, 1)
	reply := make(chan error, 1)
	d.submitted(t, reply, Task{ID: "a", Run: noop})
	for i := range 10 {
		packed := d.now.Add(time.Duration(i+1) * time.Millisecond)
		kept := len(d.commits)
		o := d.stepPacked(packed)
		for _, c := range d.commits[kept:] { // the rig's copy: advance reuses o.Commit
			for _, kv := range c.Puts {
				if _, kind, ok := record.ParseTaskKey(kv.Key); !ok || kind != record.KindState {
					continue
				}
				st, err := record.DecodeState(kv.Value, uint8(Skipped)+1)
				if err != nil {
					t.Fatal(err)
				}
				if !st.At.Equal(packed) {
					t.Errorf("a's state %v written at %v; want %v, when the commit was packed", Status(st.Status), st.At, packed)
				}
				if Status(st.Status) == Succeeded {
					return
				}
			}
		}
		for _, g := range o.Go { // a careful start, committed: let it run
			g.l.Go(g.seq)
		}
		d.drain(0)
	}
	t.Fatal("a's success was never written")
}
