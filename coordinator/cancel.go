package coordinator

import (
	"slices"
	"time"

	"github.com/batonhq/baton/internal/lane"
)

// cancel implements Scheduler.Cancel.
func (s *state) cancel(id string, now time.Time) bool {
	t, ok := s.findLive(id)
	if !ok {
		return false
	}
	ok = s.cancelTask(t, ErrCancelled, now)
	if ok {
		s.cancelAsked(t)
	}
	s.joinAll(now)
	return ok
}

// cancelTask cancels t with cause (ErrCancelled or ErrClosed): at once if
// its function is not running; otherwise its context ends and it ends
// Cancelled when the function returns. It reports false for a final task,
// one already being cancelled, and one whose last attempt has returned nil
// (it ends Succeeded).
func (s *state) cancelTask(t int32, cause error, now time.Time) bool {
	r := &s.tasks[t]
	h := &s.hot[t]
	if cause == ErrClosed {
		h.flags |= fClosed
	}
	switch h.status {
	case Pending, Ready:
		s.unqueue(t)
		s.cancelled(t, now)
		return true
	case joining:
		// Its function has returned: its family is cancelled, and it ends
		// Cancelled once every task of it is final.
		if h.flags&fCancelReq != 0 {
			return false
		}
		h.flags |= fCancelReq
		s.cancelFamily(t, cause, now)
		if s.fam[t].open == 0 {
			s.joins = append(s.joins, t)
		}
		return true
	case dispatched:
		ls, seq := s.locate(r.link)
		if ls.l.Revoke(seq) || lane.PassedOver(ls.l.State(seq)) {
			ls.live--
			s.leftLane(t)
			r.attempts--
			r.link = noTask
			h.status = Pending
			s.cancelled(t, now)
			return true
		}
		if h.flags&fCancelReq != 0 {
			return false
		}
		switch ls.l.State(seq) {
		case lane.Claimed:
			if ls.l.Stop(seq) {
				s.peek(ls, now, s.tellsStarts())                                         // it started before it was stopped: say so first
				s.stopReqs = append(s.stopReqs, stopReq{ls: ls, seq: seq, cause: cause}) // the loop ends its context
				h.flags |= fCancelReq
				return true
			}
			return s.cancelTask(t, cause, now) // it returned meanwhile: look again
		case lane.Returned:
			// It failed and is not yet reported: no retry will follow.
			h.flags |= fCancelReq
			return true
		case lane.Sealed:
			// It succeeded. Only a recurring task with runs to come still
			// has something to cancel: its series stops after this run.
			if x := r.x; x != nil && x.recurring() && (x.times == 0 || int(r.runs)+1 < x.times) {
				h.flags |= fCancelReq
				return true
			}
		}
	}
	return false
}

// shutdown cancels every task whose function is not running (all end
// Cancelled: none is skipped, since everything ends); running ones have
// their contexts end and end Cancelled when they return, unless their
// attempt had already succeeded. No attempt starts from now on. The event
// stream says so: first every attempt handed out and not claimed is
// revoked, after which no worker can claim anything; then what finished is
// applied and what was claimed is reported started; only then come the
// cancellations.
func (s *state) shutdown(now time.Time) {
	s.closing = true
	for i := range s.lanes {
		ls := &s.lanes[i]
		for seq := ls.applied; seq != ls.n; seq++ {
			t := ls.l.Task(seq)
			if r := &s.tasks[t]; s.hot[t].status == dispatched && r.link == loc(ls.l.ID, seq) && ls.l.Revoke(seq) {
				ls.live--
				s.leftLane(t)
				r.attempts--
				r.link = noTask
				s.hot[t].status = Pending // cancelled below
			}
		}
	}
	for i := range s.lanes {
		if ls := &s.lanes[i]; ls.open {
			s.harvest(ls, now)
			s.peek(ls, now, s.tellsStarts())
		}
	}
	s.cutting = true
	for t := range s.tasks {
		switch s.hot[t].status {
		case Pending, Ready, dispatched, joining:
			s.cancelTask(int32(t), ErrClosed, now)
		}
	}
	s.joinAll(now)
}

// settled reports whether the scheduler may stop: closing, and every
// worker idle.
func (s *state) settled() bool {
	if !s.closing {
		return false
	}
	for i := range s.pools {
		if p := &s.pools[i]; p.idle != len(p.lanes) {
			return false
		}
	}
	return true
}

// status is what Info reports of t: for a task handed out, what its
// item's claim state says.
func (s *state) status(t int32) Status {
	r := &s.tasks[t]
	h := &s.hot[t]
	if h.status != dispatched {
		if h.status == joining {
			return Pending // its function returned; it waits for the tasks it spawned
		}
		return h.status
	}
	ls, seq := s.locate(r.link)
	if s.frozen && int32(seq-s.frontier[ls.l.ID]) >= 0 {
		// Claimed since the scan began: report it as it was then.
		if h.flags&fFused == 0 {
			return Ready
		}
		return Pending
	}
	switch st := ls.l.State(seq); {
	case lane.Ran(st):
		return Running
	case st == lane.Free && h.flags&fFused == 0:
		return Ready
	}
	return Pending // fused behind a dependency that has not succeeded, or passed over
}

// freeze notes, for each lane, where its worker was: until thaw, status
// reads the items from there on as unclaimed, so that a scan of every
// task (census, snapshot) describes one moment, not the attempts the
// workers started and finished while it ran. It first applies what ended;
// the frontier is then just past the lane's first item if that one was
// claimed (the attempt its worker runs, reported Running even if it ends
// during the scan), so a scan never shows more attempts running than
// there are workers.
func (s *state) freeze(now time.Time) {
	s.frontier = s.frontier[:0]
	for i := range s.lanes {
		ls := &s.lanes[i]
		if ls.open {
			s.harvest(ls, now)
		}
		seq := ls.applied
		if seq != ls.n && ls.l.State(seq) != lane.Free {
			seq++
		}
		s.frontier = append(s.frontier, seq)
	}
	s.frozen = true
}

func (s *state) thaw() { s.frozen = false }

// runningIDs lists the tasks whose functions are running now.
func (s *state) runningIDs() []string {
	var ids []string
	for i := range s.lanes {
		ls := &s.lanes[i]
		for seq := ls.applied; seq != ls.n; seq++ {
			if lane.Running(ls.l.State(seq)) {
				ids = append(ids, s.key(ls.l.Task(seq)))
			}
		}
	}
	slices.Sort(ids)
	return ids
}

// info implements Scheduler.Info.
func (s *state) info(id string) (TaskInfo, bool) {
	t, ok := s.findLive(id)
	if !ok {
		return TaskInfo{}, false
	}
	return s.infoOf(t)
}

// infoOf describes task t, which must be known.
func (s *state) infoOf(t int32) (TaskInfo, bool) {
	id := s.key(t)
	r := &s.tasks[t]
	h := &s.hot[t]
	st := s.status(t)
	ti := TaskInfo{ID: id, Status: st, Pool: s.pools[h.pool].name, Priority: int(h.prio),
		When: s.when(t), Attempts: int(r.attempts), Runs: int(r.runs), Slots: s.slots(t)}
	if h.status == dispatched && st != Running {
		ti.Attempts-- // handed out, not started
	}
	if s.keyed {
		ti.Key = s.keys[s.keyOf[t]].name
	}
	if st == Skipped && s.notChosenCause(t, r.link) {
		ti.Err = ErrNotChosen
	}
	if st != Succeeded && st != Skipped {
		ti.Err = s.errOf(t)
	}
	if x := r.x; x != nil {
		if x.hasResult {
			ti.Result = x.result
		}
		ti.Reruns = int(x.reruns)
	}
	if st == Skipped && r.link != noTask {
		ti.Cause = s.key(r.link)
	}
	if s.fam != nil {
		f := &s.fam[t]
		if f.parent != noTask {
			ti.Parent = s.key(f.parent)
		}
		if r.x != nil {
			ti.Children = len(r.x.children)
		}
		ti.Joining = h.status == joining
	}
	return ti, true
}
