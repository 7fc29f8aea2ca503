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
	s.dispatch(now)
	if s.observe || s.dur != nil { // durable: starts are written
		for i := range s.lanes {
			if ls := &s.lanes[i]; ls.open {
				s.peek(ls, now, true)
			}
		}
	}
	due, ok := s.nextDue()
	return actions{Wake: s.wake, Events: s.events, Due: due, HasDue: ok, Settled: s.open == 0, Done: s.settled()}
}

// acknowledge acknowledges the last actions: its lanes are woken and its events
// handed over (the subscribers share the slice from now on).
func (s *state) acknowledge() {
	s.wake = s.wake[:0]
	s.events = nil
}
