package coordinator

import "time"

// actions is the one boundary between the state and the loop that drives
// it, after etcd raft's Ready/Advance: after every message the loop asks
// the state what to do (ready: wake these workers, publish these events,
// arm the timer for this time, release the waiters, stop), does it, and
// acknowledges (acknowledge). Between the two calls the state is not
// touched.
type actions struct {
	Wake    []int     // lanes opened with new work: wake their workers
	Events  []Event   // decided since the last Ready, in order
	Due     time.Time // the earliest time the state must be woken
	HasDue  bool      // false: nothing is due, stop the timer
	Settled bool      // every task is final: release the waiters
	Done    bool      // shut down and every worker idle: stop
}

// ready settles retention, dispatches, reports the starts it can see and
// returns what the loop must do.
func (s *state) ready(now time.Time) actions {
	s.settle(now)
	if s.urged {
		// hurry set a flag its worker may have read too early (it reads
		// it after an attempt ends): what ended before is seen here.
		s.urged = false
		s.harvestAll(now)
	}
	s.dispatch(now)
	for s.tellsStarts() {
		s.caughtUp = false
		for i := range s.lanes {
			if ls := &s.lanes[i]; ls.open {
				s.peek(ls, now, true)
			}
		}
		if !s.caughtUp {
			break
		}
		// peek applied ends to tell starts in order: what they released
		// is dispatched now, not at the next message, which may not come.
		s.settle(now)
		s.dispatch(now)
	}
	s.answerWatches() // after every cascade of the iteration: the causes they report are as worse as they got
	due, ok := s.nextDue()
	return actions{Wake: s.wake, Events: s.events, Due: due, HasDue: ok, Settled: s.open == 0, Done: s.settled()}
}

// acknowledge acknowledges the last actions: its lanes are woken and its events
// handed over (the subscribers share the slice from now on).
func (s *state) acknowledge() {
	s.wake = s.wake[:0]
	s.events = nil
}

// commitFirst, on a durable scheduler, commits what the iteration decided
// so far before fill hands out work: a worker may claim an item the moment
// it is published, and its function must not run on an end that a crash
// would undo (its dependency would run again after it). The loop commits
// the rest (the starts that peek sees) after ready. A failed commit is
// kept in dur.failed, which the loop reports; nothing is published after
// it.
func (s *state) commitFirst(now time.Time) {
	if s.dur != nil && s.dur.failed == nil {
		_ = s.flush(now)
	}
}
