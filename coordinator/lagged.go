package coordinator

import "time"

// Lagged observation. A prompt subscriber makes every attempt urgent: its
// worker reports as soon as it ends, which costs a wake of the coordinator
// per attempt, several times the cost of an empty task. When every
// listener accepts events up to s.lag late (MaxLag), nothing is made
// urgent: the events are decided, in the order a prompt listener would see
// them, when the coordinator learns what the workers did from the reports
// they send anyway (lane marks, idle workers, failures, urgent items of
// their own) and, so that nothing waits longer than s.lag for one, from a
// look at every lane every s.lag while work handed out is not applied
// (lagAt, one more due time of the timer goroutine: nextDue).

// lagDue looks at every lane if the lag has run out since the last look
// was planned, and reports whether it did: then ready also looks for the
// starts the workers did not report (peek), after the ends before them.
// ready calls it first: what it applies is dispatched and told in the
// same iteration.
func (s *state) lagDue(now time.Time) bool {
	if s.lagAt.IsZero() || now.Before(s.lagAt) {
		return false
	}
	s.lagAt = time.Time{}
	s.harvestAll(now)
	return true
}

// planLag plans the next look at the lanes, lag from now, if none is
// planned and work handed out is not applied: until its worker reports,
// the coordinator does not know what became of it. With nothing out, no
// look is planned: the scheduler is not woken for nothing. ready calls it
// last, before nextDue.
func (s *state) planLag(now time.Time) {
	if s.lag == 0 {
		s.lagAt = time.Time{}
		return
	}
	for i := range s.lanes {
		if ls := &s.lanes[i]; ls.open && ls.applied != ls.n {
			if s.lagAt.IsZero() {
				s.lagAt = addSat(now, s.lag)
			}
			return
		}
	}
	s.lagAt = time.Time{}
}
