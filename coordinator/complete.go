package coordinator

import (
	"math"
	"time"

	"github.com/batonhq/baton/internal/lane"
)

// report applies what a worker reported: every item of its lane before
// r.Upto not yet applied, in order, once. Then the lane is topped up (it
// reported progress) or marked idle (it ran dry at the last item
// published).
func (s *state) report(r lane.Report, now time.Time) {
	ls := &s.lanes[r.Lane.ID]
	p := &s.pools[ls.pool]
	s.endsAt(now)
	for ; int32(r.Upto-ls.applied) > 0; ls.applied++ { // the harvest may have gone further
		s.applyItem(ls, ls.applied, now)
	}
	s.harvest(ls, now)
	if s.tellsStarts() && !s.watchesStarts() {
		// Lagged listeners only (lagged.go): the worker reported anyway,
		// so what it started is told now rather than at the next look.
		s.peek(ls, now, true)
	}
	if r.Ran > 0 {
		p.measure(r.Elapsed / time.Duration(r.Ran))
	}
	if r.Idle && r.Upto == ls.n && ls.open {
		ls.open = false
		ls.worst, ls.best = math.MinInt32, math.MaxInt32
		p.idle++
		return
	}
	ls.refill = true
}

// harvest applies the items at the head of ls whose attempts are over,
// reported or not, and reports whether it applied any: an item's claim word turns final only after its outcome
// is written, so the word alone says it may be read.
func (s *state) harvest(ls *laneState, now time.Time) bool {
	at := ls.applied
	s.endsAt(now)
	for ls.applied != ls.n {
		st := ls.l.State(ls.applied)
		if st == lane.Free || lane.Running(st) {
			break
		}
		s.applyItem(ls, ls.applied, now)
		ls.applied++
		ls.refill = true // room again: top it up
	}
	if int32(ls.peek-ls.applied) < 0 {
		ls.peek = ls.applied
	}
	return ls.applied != at
}

// harvestAll harvests every open lane and reports whether it applied
// anything.
func (s *state) harvestAll(now time.Time) bool {
	applied := false
	for i := range s.lanes {
		if ls := &s.lanes[i]; ls.open && s.harvest(ls, now) {
			applied = true
		}
	}
	return applied
}

// applyItem applies the item at seq: the outcome of an attempt that ran,
// the return of one the worker passed over. An item whose task has moved
// on (revoked, or ended by a cascade or a cancel) is only cleared.
func (s *state) applyItem(ls *laneState, seq uint32, now time.Time) {
	st, t := ls.l.State(seq), ls.l.Task(seq)
	if st != lane.Revoked {
		r := &s.tasks[t]
		h := &s.hot[t]
		if h.status == dispatched && r.link == loc(ls.l.ID, seq) {
			ls.live--
			if !ls.l.Outcome(seq).Abandoned || !s.holdAbandoned(ls, seq, t) {
				s.leftLane(t)
			}
			r.link = noTask
			switch st {
			case lane.Passed: // the item it followed did not succeed
				r.attempts--
				switch {
				case h.flags&fCancelReq != 0:
					h.status = Pending
					s.cancelled(t, now)
				case h.flags&fFused == 0:
					// Its dependency succeeded after all, on another item
					// (this one was revoked and ran elsewhere): ready.
					s.requeue(t)
				default:
					h.status, h.unmet = Pending, 1 // waits for it again
				}
			case lane.Late:
				// A series' start its worker reached after its start-by
				// time: missed. catchUp decides again, now.
				r.attempts--
				h.status = Ready
				if s.startsNow(t, now) {
					s.requeue(t)
				}
			case lane.Sealed, lane.Returned, lane.Stopped:
				dirty := st != lane.Sealed || r.x != nil
				s.ended(ls, seq, t, st, now)
				ls.l.Done(seq, dirty)
				if len(s.joins) > 0 {
					s.joinAll(now) // a child's end may complete its spawner's join
				}
				return
			default:
				panic("coordinator: reported item still running")
			}
		}
	}
	ls.l.Done(seq, true)
}

// ended applies the outcome of an attempt whose function was called.
func (s *state) ended(ls *laneState, seq uint32, t int32, st uint32, now time.Time) {
	r := &s.tasks[t]
	h := &s.hot[t]
	s.carefulDone(t)
	var p *pending // what the attempt spawned or chose: applied only if it succeeds
	if len(s.pend) > 0 {
		if p = s.pend[t]; p != nil {
			delete(s.pend, t)
		}
	}
	if h.flags&fStarted == 0 {
		h.flags |= fStarted
		s.emit(EventStarted, t, now)
	}
	h.status = Running
	switch {
	case !s.historyOn():
	case st == lane.Sealed && r.attempts == 1 && r.runs == 0 && r.x == nil && s.joinsPlain(ls, seq, t):
		s.joinPlain(ls, t) // most ends: like the one before it in its lane
	default:
		o, err := OutcomeSucceeded, error(nil)
		switch {
		case st == lane.Sealed:
		case h.flags&fCancelReq != 0:
			o, err = OutcomeCancelled, ErrCancelled
			if h.flags&fClosed != 0 {
				err = ErrClosed
			}
		default:
			o, err = OutcomeFailed, ls.l.Outcome(seq).Err
			if _, ok := snoozeOf(err); ok {
				o, err = OutcomeSnoozed, nil
			}
		}
		s.rememberEnd(ls, seq, t, o, err)
	}
	switch {
	case st == lane.Sealed:
		// The task's result is its last successful attempt's (SetResult
		// needs a look at the context: an untouched one set none).
		if v, ok := s.resultOf(ls, seq); ok {
			x := s.extra(t)
			x.result, x.hasResult = v, true
		} else if r.x != nil && r.x.hasResult {
			r.x.result, r.x.hasResult = nil, false
		}
		if h.flags&fCancelReq != 0 { // a recurring task whose series was cut by Cancel or Shutdown
			if p != nil {
				s.dropPending(p)
			}
			r.runs++
			s.cancelled(t, now)
			return
		}
		if r.x != nil && r.x.branched && (p == nil || !p.chose) {
			// A recurring task's choice is its last run's: a run that
			// does not call Choose chooses nothing.
			r.x.branched, r.x.chosen = false, nil
			s.touched(t)
		}
		if p != nil {
			s.commitPending(t, p, now)
			return
		}
		s.succeeded(t, now)
	case h.flags&fCancelReq != 0:
		if p != nil {
			s.dropPending(p)
		}
		s.cancelled(t, now)
	default:
		if p != nil {
			s.dropPending(p)
		}
		out := ls.l.Outcome(seq)
		if d, ok := snoozeOf(out.Err); ok {
			s.snoozed(t, d, now)
			return
		}
		s.failed(t, out.Err, out.Retry, now)
	}
}

func (s *state) resultOf(ls *laneState, seq uint32) (any, bool) {
	if !ls.l.Touched(seq) {
		return nil, false
	}
	return ls.l.Ctx(seq).Result()
}

func (s *state) succeeded(t int32, now time.Time) {
	r := &s.tasks[t]
	r.runs++
	if x := r.x; x != nil && x.recurring() && (x.times == 0 || int(r.runs) < x.times) {
		if due, ok := x.next(); ok {
			if e := s.emit(EventRecurred, t, now); e != nil {
				e.Run = int(r.runs)
			}
			r.attempts = 0
			s.schedule(t, due, now)
			return
		}
	}
	s.seriesEnds(t, now)
}

// seriesEnds ends t Succeeded: its last run, or the last start of its
// series, is over.
func (s *state) seriesEnds(t int32, now time.Time) {
	r := &s.tasks[t]
	s.finish(t, Succeeded, now)
	if e := s.emit(EventSucceeded, t, now); e != nil {
		e.Run = int(r.runs)
	}
	s.release(t, now)
}

// release lowers the unmet count of t's waiting successors; those at zero
// become eligible. A successor handed out behind t's item is no longer
// bound to it: from now on it may be taken back like any ready task.
func (s *state) release(t int32, now time.Time) {
	if s.hot[t].flags&fExtra != 0 && s.tasks[t].x.branched {
		s.releaseChosen(t, now) // branch.go
		return
	}
	for c := range s.successors(t) {
		s.released(c, now)
	}
}

func (s *state) released(c int32, now time.Time) {
	switch hc := &s.hot[c]; hc.status {
	case Pending:
		if hc.unmet == 0 {
			return // started by its rule before all its dependencies ended (AnyFailed)
		}
		if hc.unmet--; hc.unmet == 0 {
			if hc.rule() == AnyFailed { // all final, none failed
				s.skip(c, noTask, endBenign, now)
				s.cascade(now)
				return
			}
			s.eligible(c, now)
		}
	case Skipped:
		// Skipped because another dependency ended without success: one
		// more dependency settled (cascade.go).
		if hc.unmet > 0 {
			if hc.unmet--; hc.unmet == 0 {
				s.settledSkip(c)
				s.cascade(now)
			}
		}
	case dispatched:
		if hc.flags&fFused != 0 {
			s.unfuse(c)
		} // else handed out already (a rule started it on another end): it keeps its place
	}
}

func (s *state) failed(t int32, err error, retry bool, now time.Time) {
	x := s.extra(t)
	x.err = err
	r := &s.tasks[t]
	h := &s.hot[t]
	if retry && int(r.attempts) < x.retry.attempts() {
		wait := s.retryWait(x, int(r.attempts), err)
		h.status = Pending
		s.pools[h.pool].totals.Retries++
		if e := s.emit(EventRetrying, t, now); e != nil {
			e.Err, e.Wait = err, wait
		}
		s.schedule(t, addSat(now, wait), now)
		return
	}
	s.finish(t, Failed, now)
	if e := s.emit(EventFailed, t, now); e != nil {
		e.Err = err
	}
	s.endedBadly(t, now)
}

// cancelled ends t Cancelled, with ErrCancelled or, under Shutdown,
// ErrClosed as its error.
func (s *state) cancelled(t int32, now time.Time) {
	h := &s.hot[t]
	cause := ErrCancelled
	if h.flags&fClosed != 0 || (s.closing && h.flags&fCancelReq == 0) {
		cause = ErrClosed
		h.flags |= fClosed // errOf tells the cause from the flag
	}
	if x := s.tasks[t].x; x != nil {
		x.err = cause
	} // else errOf tells it: no extra for each of a million tasks a Shutdown cancels
	s.finish(t, Cancelled, now)
	if e := s.emit(EventCancelled, t, now); e != nil {
		e.Err = cause
	}
	if !s.closing {
		s.endedBadly(t, now) // under Shutdown every waiting task is cancelled instead
	}
}

// errOf is task t's error: its last failed attempt's, or the cause of its
// cancel, which a task without an extra record does not store (ErrClosed
// if fClosed, else ErrCancelled). Nil if it has none.
func (s *state) errOf(t int32) error {
	if x := s.tasks[t].x; x != nil && x.err != nil {
		return x.err
	}
	if h := &s.hot[t]; h.status == Cancelled {
		if h.flags&fClosed != 0 {
			return ErrClosed
		}
		return ErrCancelled
	}
	return nil
}

func (s *state) finish(t int32, st Status, now time.Time) {
	s.hot[t].status = st
	s.pools[s.hot[t].pool].totals.count(st)
	s.open--
	if s.fam != nil {
		if p := s.fam[t].parent; p != noTask {
			s.childEnded(p)
		}
	}
	if s.watchedTask(t) {
		s.watched(t)
	}
	if s.retain {
		s.finalized = append(s.finalized, t)
		if st != Skipped { // a Skipped task holds its successors until it is settled (cascade.go)
			s.settledEnds = append(s.settledEnds, t)
		}
	}
}

// skipped records that t was skipped because of cause.
func (s *state) skipped(t, cause int32, c endClass, now time.Time) {
	s.tasks[t].link = cause // before finish: a WaitTasks call reads it there
	s.blamed(t, cause, c)
	s.finish(t, Skipped, now)
	if s.retain && cause != noTask {
		s.held[cause].refs++
		s.famHold(t, cause, 1)
	}
	e := s.emit(EventSkipped, t, now)
	e.setCause(s, cause)
	if e != nil && s.notChosenCause(t, cause) {
		e.Err = ErrNotChosen
	}
}

// endClass is how a trigger rule sees a dependency that did not succeed,
// by the root cause of its end.
type endClass uint8

const (
	endFailed    endClass = iota // it failed, or was skipped because something upstream failed
	endCancelled                 // it was cancelled, or skipped because something upstream was
	endBenign                    // it was skipped because a rule upstream was not met
)

// classOf classifies a root cause: a Failed or Cancelled task, or one a
// rule skipped.
func (s *state) classOf(root int32) endClass {
	switch s.hot[root].status {
	case Failed:
		return endFailed
	case Cancelled:
		return endCancelled
	}
	return endBenign
}

// takeBack prepares a waiting task to end before it runs: a Pending one
// is ready for it; one handed out behind its dependency is taken back if
// its function was not called. It reports false for a task that is final,
// ready or running.
func (s *state) takeBack(c int32) bool {
	rc := &s.tasks[c]
	hc := &s.hot[c]
	switch hc.status {
	case Pending:
		return true
	case dispatched:
		if hc.flags&fFused == 0 {
			return false
		}
		ls, seq := s.locate(rc.link)
		if !ls.l.Revoke(seq) && ls.l.State(seq) != lane.Passed {
			return false
		}
		ls.live--
		s.leftLane(c)
		rc.attempts--
		rc.link = noTask
		hc.status, hc.unmet = Pending, 1 // it waited on one dependency: the one ending now
		return true
	}
	return false
}

// measure adds a sample of one attempt's cost. The estimate is the least
// of the last len(p.samples) samples: a worker measures wall time, and
// time it spent descheduled only ever inflates a sample.
func (p *poolState) measure(sample time.Duration) {
	p.samples[p.sampled%len(p.samples)] = sample
	p.sampled++
	n := min(p.sampled, len(p.samples))
	p.cost = p.samples[0]
	for _, c := range p.samples[1:n] {
		p.cost = min(p.cost, c)
	}
	p.measured = true
}
