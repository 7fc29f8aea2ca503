package coordinator

import "time"

// How the end of a task that did not succeed reaches what waits on it.
//
// Each task under a trigger rule sees its dependencies' ends by class (a
// failure, a cancel, or a skip by a rule upstream: endClass). A Skipped
// task's class is that of the worst end among its dependencies that did
// not succeed (a failure outranks a cancel, which outranks a skip by a
// rule), so it may still get worse while some of its dependencies run: a
// task skipped at once because one dependency was cancelled is seen as
// failed if another one fails later. The outcome of every task is thus a
// function of the graph and of the ends alone, never of the order they
// came in:
//
//   - A Skipped task is settled once every dependency is final and
//     settled (Succeeded, Failed and Cancelled tasks are settled when they
//     end): its class cannot change any more. Its unmet count, from its
//     skip on, counts the dependencies not yet settled.
//   - A task under AnyFailed or NoneFailed takes a Skipped dependency into
//     account (decides on it) once its class is final: when it is failed
//     (nothing is worse), or when it is settled.
//   - Under AllSucceeded a task is skipped as soon as one dependency ends
//     without success, whatever its class; AllDone counts every end.
//
// The news travels as notes on one worklist (last in, first out), three
// kinds per task at most: it ended without success, its class got worse,
// its end is settled. A task's ended note always comes before its settled
// note, and each kind reaches each successor once (worse: once per change
// of class, two at most), so the counts are exact without any per-edge
// state.

type noteKind uint8

const (
	noteEnded   noteKind = iota // the task ended without success
	noteWorse                   // the task, Skipped and not settled, took a worse root cause
	noteSettled                 // the task's end is settled
)

type note struct {
	t    int32
	kind noteKind
}

// settledEnd reports whether t is final and its class can no longer
// change.
func (s *state) settledEnd(t int32) bool {
	h := &s.hot[t]
	return h.status.Final() && (h.status != Skipped || h.unmet == 0)
}

// endedBadly tells what waits on t, which has just ended Failed or
// Cancelled (settled at once), and runs the cascade.
func (s *state) endedBadly(t int32, now time.Time) {
	s.notes = append(s.notes, note{t, noteSettled}, note{t, noteEnded})
	s.cascade(now)
}

// skip ends t Skipped because of cause (noTask: its own rule was not met),
// whose end has class c as t sees it (causeclass.go), and queues the news;
// t's unmet count from now on counts its dependencies not yet settled.
func (s *state) skip(t, cause int32, c endClass, now time.Time) {
	s.skipped(t, cause, c, now)
	if s.hot[t].unmet == 0 {
		s.settledSkip(t)
	}
	s.notes = append(s.notes, note{t, noteEnded})
}

// settledSkip records that Skipped task t is settled: it no longer holds
// its successors for retention, and they hear of it.
func (s *state) settledSkip(t int32) {
	s.rewatch(t, true)
	if s.retain {
		s.settledEnds = append(s.settledEnds, t)
	}
	s.childSettled(t)
	s.notes = append(s.notes, note{t, noteSettled})
}

// cascade applies the queued notes, and the notes they queue, until none
// is left. It walks a worklist, so a chain of any length uses no stack.
func (s *state) cascade(now time.Time) {
	if s.cascading {
		return // called from inside a cascade: the notes are its to apply
	}
	s.cascading = true
	defer func() { s.cascading = false }()
	for len(s.notes) > 0 {
		n := s.notes[len(s.notes)-1]
		s.notes = s.notes[:len(s.notes)-1]
		for c := range s.successors(n.t) {
			switch n.kind {
			case noteEnded:
				s.onEnded(c, n.t, now)
			case noteWorse:
				s.onWorse(c, n.t, now)
			case noteSettled:
				s.onSettled(c, n.t, now)
			}
		}
	}
}

// onEnded applies to c the end of its dependency t, which did not succeed.
func (s *state) onEnded(c, t int32, now time.Time) {
	hc := &s.hot[c]
	if hc.status == Skipped {
		s.maybeWorse(c, t)
		return
	}
	switch hc.rule() {
	case AllSucceeded:
		if s.takeBack(c) {
			s.skip(c, s.root(t), s.classOfEnd(t), now)
		}
	case AllDone:
		if hc.status == Pending && hc.unmet > 0 {
			if hc.unmet--; hc.unmet == 0 {
				s.eligible(c, now)
			}
		}
	default:
		if s.hot[t].status != Skipped || s.classOfEnd(t) == endFailed {
			s.decide(c, t, false, now)
		}
	}
}

// onWorse applies to c that its dependency t, Skipped and not settled,
// took a worse root cause.
func (s *state) onWorse(c, t int32, now time.Time) {
	if hc := &s.hot[c]; hc.status == Skipped {
		s.maybeWorse(c, t)
		return
	}
	if s.classOfEnd(t) == endFailed {
		s.decide(c, t, false, now) // AnyFailed, NoneFailed: failed is final
	}
}

// onSettled applies to c that its dependency t's end is settled.
func (s *state) onSettled(c, t int32, now time.Time) {
	hc := &s.hot[c]
	if hc.status == Skipped {
		if hc.unmet > 0 {
			if hc.unmet--; hc.unmet == 0 {
				s.settledSkip(c)
			}
		}
		return
	}
	if r := hc.rule(); (r == AnyFailed || r == NoneFailed) && s.hot[t].status == Skipped && s.classOfEnd(t) != endFailed {
		s.decide(c, t, true, now)
	}
}

// maybeWorse gives Skipped task c, not settled, the root cause of its
// dependency t if that is worse than its own.
func (s *state) maybeWorse(c, t int32) {
	if s.hot[c].unmet == 0 || s.classOfEnd(t) >= s.classOfEnd(c) {
		return
	}
	root, class := s.root(t), s.classOfEnd(t)
	r := &s.tasks[c]
	if s.retain {
		if old := r.link; old != noTask {
			s.held[old].refs--
			s.famHold(c, old, -1)
			s.maybeDrop(old)
		}
		s.held[root].refs++
		s.famHold(c, root, 1)
	}
	r.link = root
	s.blamed(c, root, class)
	s.touched(c)
	s.rewatch(c, false)
	s.notes = append(s.notes, note{c, noteWorse})
}

// decide applies to c, under AnyFailed or NoneFailed, the end of its
// dependency t, whose class is final; settled says whether t's end is
// settled (its note came, or comes no more).
func (s *state) decide(c, t int32, settled bool, now time.Time) {
	hc := &s.hot[c]
	if hc.status != Pending || hc.unmet == 0 {
		return // started by its rule already, or final
	}
	class := s.classOfEnd(t)
	switch hc.rule() {
	case AnyFailed:
		if class == endFailed {
			hc.unmet = 0
			s.eligible(c, now)
		} else if hc.unmet--; hc.unmet == 0 {
			s.skip(c, noTask, endBenign, now) // all final, none failed: its own rule skips it
		}
	case NoneFailed:
		if class == endBenign {
			if hc.unmet--; hc.unmet == 0 {
				if s.minOne(c) && !s.anySucceeded(c) {
					s.skip(c, noTask, endBenign, now) // NoneFailedMinOneSuccess, and none succeeded: its own rule skips it
					return
				}
				s.eligible(c, now)
			}
			return
		}
		// Skipped: its unmet count goes on counting the dependencies
		// whose ends are not settled; t's is not counted any more if it
		// is settled already.
		if settled {
			hc.unmet--
		}
		s.skip(c, s.root(t), class, now)
	}
}
