package coordinator

import (
	"context"
	"slices"
	"time"

	"github.com/batonhq/baton/internal/lane"
	"github.com/benbjohnson/clock"
)

// loop is the coordinator goroutine's private state beside the scheduling
// state: who is waiting and who is listening. Owned by run.
type loop struct {
	s       *Scheduler
	st      *state
	waiters map[uint64]chan<- struct{}
	subs    []*subscriber
	tl      *taskLog      // nil: no task-life logs
	held    []publication // publications a failed commit held back (see do)
}

// run is the coordinator: a thin for-select loop around state. Each
// message changes the state; then the loop asks the state what the world
// must see (ready), does that I/O in the outbox's order, and acknowledges
// it (advance).
func (s *Scheduler) run(l *loop) error {
	st := l.st
	stopc := s.stopc
	var armed bool // the timer goroutine was sent armedAt and it has not fired
	var armedAt time.Time
	// told: the timer goroutine was told that every task is final, since
	// it last changed. A scheduler that starts with no task has nothing to
	// report until one is submitted (a Subscribe before the first Submit
	// made WithTimerArmed report the zero time first).
	told := st.empty()
	for {
		var now time.Time
		select {
		case req := <-s.mailbox.Receive():
			now = s.clk.Now()
			st.harvestAll(now) // answer with what has happened, reported or not
			req.apply(l, now)
		case r := <-s.reports:
			now = s.clk.Now()
			st.report(r, now)
			for more := true; more; { // take every report already in before dispatching
				select {
				case r := <-s.reports:
					st.report(r, now)
				default:
					more = false
				}
			}
		case <-s.wake.C():
			now = s.clk.Now()
			armed = false // ready fires what is due (fireDue), whatever woke the loop
		case <-s.unsubbed.C():
			now = s.clk.Now()
			l.drop()
		case <-stopc:
			now = s.clk.Now()
			stopc = nil
			st.shutdown(now)
			// What a failed commit held back is published now that
			// shutdown has revoked it: its workers find nothing to run,
			// and report themselves idle, which the shutdown waits for.
			for _, p := range l.held {
				p.do()
			}
			l.held = nil
		}

		out := st.iterate(now)
		if st.dur != nil {
			at := now
			if st.storePending() {
				at = s.clk.Now() // written when decided: after every end iterate applied
			}
			st.pack(&out, at)
		}
		if l.do(&out) != nil && s.failure() == nil {
			s.storeFailed(out.Failed) // out.Failed: set by do
		}
		if !out.Settled {
			told = false
		}
		switch {
		case out.HasDue && (!armed || !out.Due.Equal(armedAt)):
			s.due.Set(timerCmd{due: out.Due})
			armed, armedAt = true, out.Due
		case !out.HasDue && (armed || (out.Settled && !told)):
			s.due.Set(timerCmd{settled: out.Settled}) // disarm; settled: say so (WithTimerArmed), once
			armed, told = false, out.Settled
		}
		if out.Settled {
			for id, w := range l.waiters {
				close(w)
				delete(l.waiters, id)
			}
		}
		if out.Done {
			break
		}
	}
	// Every task is final now. Hand the state over for Info, then refuse
	// requests.
	if s.store != nil {
		s.inStore.enter(&callClose)
		if err := s.store.Close(); err != nil {
			s.log.Error("coordinator: closing the store", "error", err)
		}
		s.inStore.leave()
	}
	s.final = st
	close(s.loopDone)
	s.mailbox.Stop()
	for _, w := range l.waiters {
		close(w)
	}
	for _, sub := range l.subs {
		sub.end()
	}
	if l.tl != nil {
		l.tl.sub.end()
	}
	return nil
}

// do carries out an outbox, in its order, and acknowledges it to the
// state: the commit first; then the answers, told the commit's error;
// then, unless a commit failed (what the scheduler decides from then on is
// not stored, and nobody hears of it: the next scheduler on the store
// resumes from the last commit), the publications; the stops, whether or
// not a commit failed (the scheduler stops as if its process had died,
// and a dead process's functions stop too: a failed commit's Shutdown
// ends its running attempts' contexts, and waits for them), with the
// cause ErrClosed after a failed commit, whatever was decided, since the
// decision was not stored; and, unless a
// commit failed, the events. It returns the commit failure that stopped
// the scheduler, if any, and leaves it in out.Failed.
func (l *loop) do(out *outbox) error {
	if out.Failed == nil {
		for _, p := range out.Early {
			p.do() // nothing a crash could undo (journaled.go)
		}
	}
	if out.Failed == nil && out.Commit != nil {
		l.s.inStore.enter(&callCommit)
		err := l.s.store.Commit(out.Commit)
		l.s.inStore.leave()
		if err != nil {
			out.Failed = commitFailure(err)
		}
	}
	for _, a := range out.Answers {
		a.deliver(out.Failed)
	}
	if out.Failed == nil {
		for _, g := range out.Go {
			g.l.Go(g.seq)
		}
		for _, p := range out.Publish {
			p.do()
		}
	} else {
		// Held back, not dropped: a lane the state counts busy for them
		// would never report itself idle (run publishes them at the
		// shutdown, once their items are revoked).
		l.held = append(l.held, out.Publish...)
	}
	for _, st := range out.Stop {
		if out.Failed != nil {
			// The cause decided (ErrCancelled for a Cancel) was not
			// stored: the attempt ends as a dead process's does, with
			// ErrClosed, which tells a worker that acts on a cancel (a
			// remote pool deletes the attempt's queued work) to leave it
			// to the next scheduler on the store.
			st.cause = ErrClosed
		}
		st.do()
	}
	if out.Failed == nil {
		l.publish(out.Events)
	}
	l.logTasks(out.Events)
	if failed := l.st.advance(out.Failed); failed != nil {
		out.Failed = failed
		return failed
	}
	return nil
}

// publish hands this iteration's events to every subscriber that wants
// one of their kinds.
func (l *loop) publish(events []Event) {
	if len(events) == 0 {
		return
	}
	kinds := allKinds
	for _, sub := range l.subs {
		if sub.kinds != allKinds {
			kinds = kindsOf(events) // a filtered subscriber is not woken for nothing
			break
		}
	}
	kept := l.subs[:0]
	for _, sub := range l.subs {
		if sub.kinds&kinds == 0 || sub.publish(events) {
			kept = append(kept, sub)
		}
	}
	clear(l.subs[len(kept):])
	l.subs = kept
	l.observed()
}

// drop forgets the subscribers that have unsubscribed (one told
// Scheduler.unsubbed): the last prompt one gone, events may lag again.
func (l *loop) drop() {
	l.subs = slices.DeleteFunc(l.subs, (*subscriber).isClosed)
	l.observed()
}

// observed tells the state which kinds of events to record (those a
// subscriber or the task log at a level it enables wants) and how late
// they may be told: at once if the task log or any subscriber of a late
// kind wants them so, else the smallest lag the subscribers of late kinds
// accept (MaxLag). A subscriber of timely kinds only (lateKinds) is told
// them at once whatever the lag.
func (l *loop) observed() {
	var kinds kindSet
	lag := time.Duration(-1) // no listener of a late kind yet
	for _, sub := range l.subs {
		kinds |= sub.kinds
		if sub.kinds&lateKinds != 0 && (lag < 0 || sub.lag < lag) {
			lag = sub.lag
		}
	}
	if l.tl != nil {
		k := l.tl.want
		kinds |= k
		if k&lateKinds != 0 {
			lag = 0
		}
	}
	l.st.setObserved(kinds, max(lag, 0))
}

// timerCmd is what the loop tells the timer goroutine: arm for due, or
// (zero due) disarm; settled says every task is final.
type timerCmd struct {
	due     time.Time
	settled bool
}

// timer is the one timer goroutine: it sleeps until the earliest due time
// the loop last sent and then wakes the loop. A new due time replaces the
// timer (a fresh one each time, so no stale value can be read from a
// reused channel). Early or stale wakes are harmless: the loop rechecks.
func (s *Scheduler) timer(ctx context.Context) error {
	var t *clock.Timer
	var fire <-chan time.Time
	stop := func() {
		if t != nil {
			t.Stop()
			t, fire = nil, nil
		}
	}
	for {
		select {
		case cmd := <-s.due.C():
			stop()
			due := cmd.due
			if due.IsZero() {
				if cmd.settled && s.hook != nil {
					s.hook(time.Time{})
				}
				continue
			}
			t = lane.ArmAt(s.clk, due) // nil: due already
			if t == nil {
				s.wake.Notify()
				continue
			}
			fire = t.C
			if s.hook != nil {
				s.hook(due)
			}
		case <-fire:
			t, fire = nil, nil
			s.wake.Notify()
		case <-ctx.Done():
			stop()
			return nil
		}
	}
}
