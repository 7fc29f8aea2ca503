package coordinator

import "time"

// Time in the state: when a task may start (a delay, a retry's backoff, a
// series' next start) it waits in the delayed set, a timerwheel.Wheel
// taking now as an argument; the loop's one timer goroutine wakes it at
// the earliest due time (nextDue), and fire makes what is due ready.

// eligible is called when t's dependencies have all succeeded.
func (s *state) eligible(t int32, now time.Time) {
	if s.hot[t].flags&fExtra == 0 {
		s.pushReady(t, now)
		return
	}
	x := s.tasks[t].x
	start := now
	if x.notBefore.After(now) {
		start = x.notBefore
	}
	if x.recurring() {
		var ok bool
		if start, ok = x.first(start); !ok {
			// No start left once it may start (its dependencies ended
			// after its schedule's last start): it cannot run, as a task
			// whose own rule is not met.
			s.skip(t, noTask, endBenign, now)
			s.cascade(now)
			return
		}
	}
	s.schedule(t, start, now)
}

// schedule makes t ready at due: at once if due has come, else through the
// delayed set.
func (s *state) schedule(t int32, due, now time.Time) {
	if due.After(now) {
		if handle, ok := s.wheel.Add(due, t); ok {
			s.hot[t].status = Pending
			// extra: a restored task that snoozed, with nothing else that
			// needs one (no retry policy, delay or series), has none yet.
			x := s.extra(t)
			x.timer, x.inWheel, x.due = handle, true, due
			s.touched(t)
			return
		}
	}
	s.pushReady(t, now)
}

// fireDue makes the delayed entries due by now ready, whatever woke the
// loop: what is handed out at now is chosen among every task due by then
// (a rate limit's token due at the instant of a better task's delay goes
// to that task, whether the timer's wake or a request came first).
func (s *state) fireDue(now time.Time) {
	if due, ok := s.wheel.NextDue(); ok && !due.After(now) {
		s.fire(now)
	}
}

// fire makes the delayed entries due by now ready, at most maxFirePerStep
// of them (the rest in the next iterations: ready arms the timer for
// them at once).
func (s *state) fire(now time.Time) {
	s.scratch = s.wheel.Advance(now, s.scratch[:0], maxFirePerStep)
	for _, t := range s.scratch {
		s.tasks[t].x.inWheel = false
		s.pushReady(t, now)
	}
	s.scratch = s.scratch[:0]
}

// nextDue is the earliest time the state needs to be woken: a delayed
// entry, the end of a retention, a planned revocation for priority, or a
// lagged subscriber's look at the lanes (lagged.go).
func (s *state) nextDue() (time.Time, bool) {
	due, ok := s.wheel.NextDue()
	consider := func(at time.Time) {
		if !ok || at.Before(due) {
			due, ok = at, true
		}
	}
	if s.expHead < len(s.expiry) {
		consider(addSat(s.expiry[s.expHead].at, s.keep))
	}
	if !s.lagAt.IsZero() {
		consider(s.lagAt)
	}
	for i := range s.pools {
		if at := s.pools[i].revokeAt; !at.IsZero() {
			consider(at)
		}
		if at := s.pools[i].stuckAt; !at.IsZero() {
			consider(at)
		}
		if at := s.pools[i].tokenAt; !at.IsZero() {
			consider(at)
		}
	}
	return due, ok
}

// unqueue takes a Pending or Ready task out of the delayed set; a ready
// queue entry is left behind, recognised as stale when met.
func (s *state) unqueue(t int32) {
	r := &s.tasks[t]
	h := &s.hot[t]
	if h.status == Ready {
		if s.keyed {
			s.unqueueKeyed(t)
		} else {
			s.pools[h.pool].readyLive--
		}
	}
	if x := r.x; x != nil && x.inWheel {
		s.wheel.Cancel(x.timer)
		x.inWheel = false
	}
}
