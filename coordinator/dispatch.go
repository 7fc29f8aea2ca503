package coordinator

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/batonhq/baton/internal/dispatch"
)

// dispatch hands ready work to the pools' lanes: it tops up the lanes that
// reported progress, gives idle workers a share of the backlog, lets an
// idle worker take half of the largest tail of work handed out but not
// started, and takes worse work back for a better ready task that has
// waited revokeDelay. The lanes it reopens are left in s.wake for the loop.
func (s *state) dispatch(now time.Time) {
	hungry := false
	for pi := range s.pools {
		p := &s.pools[pi]
		if s.closing {
			continue
		}
		target := p.target()
		for _, li := range p.lanes {
			ls := &s.lanes[li]
			if ls.open && ls.refill {
				ls.refill = false
				if room := target - ls.live; room > 0 {
					take := 0
					if s.mayTopUp(ls, p) {
						take = room
					}
					s.fill(ls, p, take, room, now)
				}
			}
		}
		if p.idle > 0 && p.readyLive == 0 {
			s.steal(p, now)
		}
		for _, li := range p.lanes {
			if p.idle == 0 || p.readyLive == 0 {
				break
			}
			ls := &s.lanes[li]
			if !ls.open {
				share := (p.readyLive + p.idle - 1) / p.idle // spread the backlog
				s.fill(ls, p, share, target, now)
			}
		}
		s.checkPriority(p, now)
		if p.idle > 0 && p.readyLive == 0 {
			hungry = true
		}
	}
	if hungry != s.hungry.Load() {
		s.hungry.Store(hungry)
	}
}

// mayTopUp reports whether lane ls, which still holds work, may take the
// pool's best ready work behind it: only if that is no worse than the
// worst it holds (worse work behind better work could be claimed before
// better work the items ahead of it release) and no better than the worst
// it holds unclaimed (better work behind worse work would wait for it; a
// revocation takes that back instead). Otherwise the work waits for an
// idle worker, a revocation, or the lane running dry.
func (s *state) mayTopUp(ls *laneState, p *poolState) bool {
	best, ok := s.bestReady(p)
	if !ok {
		return false
	}
	if ls.live == 0 || (ls.best == best && ls.worst == best) {
		return true // one level only: the common case
	}
	worst, worstFree := int32(math.MinInt32), int32(math.MinInt32)
	for seq := ls.applied; seq != ls.n; seq++ {
		switch st := ls.l.State(seq); st {
		case dispatch.Revoked, dispatch.Passed:
		default:
			prio := s.hot[ls.l.Task(seq)].prio
			worst = max(worst, prio)
			if st == dispatch.Free {
				worstFree = max(worstFree, prio)
			}
		}
	}
	return best <= worst && best >= worstFree
}

// unmeasuredTarget is what a lane holds before its pool's first report: a
// guess, safe either way, since revocation and stealing (not the estimate)
// keep better and idle-worthy work from waiting behind it.
const unmeasuredTarget = 8

// target is how many attempts one lane should hold: the dispatch budget's
// worth at the measured cost, at least 2 (one running, one waiting, so
// that a worker never waits for the coordinator between two attempts).
// Until the pool is measured, 2.
func (p *poolState) target() int {
	if p.maxTarget < 2 {
		return p.maxTarget
	}
	if !p.measured {
		return unmeasuredTarget
	}
	if p.cost <= 0 {
		return p.maxTarget
	}
	return max(2, min(p.maxTarget, int(dispatchBudget/p.cost)))
}

// popReady returns the oldest live entry of the pool's best level.
func (s *state) popReady(p *poolState) (int32, bool) {
	for {
		e, _, ok := p.ready.Pop()
		if !ok {
			return 0, false
		}
		t := int32(uint32(e))
		if s.hot[t].status == Ready && s.hot[t].rseq == uint32(e>>32) {
			p.readyLive--
			return t, true
		}
	}
}

// bestReady reports the best level holding a live entry, dropping stale
// entries from the head.
func (s *state) bestReady(p *poolState) (int32, bool) {
	for p.readyLive > 0 {
		e, prio, ok := p.ready.Peek()
		if !ok {
			break
		}
		t := int32(uint32(e))
		if s.hot[t].status == Ready && s.hot[t].rseq == uint32(e>>32) {
			return int32(prio), true
		}
		p.ready.Pop()
	}
	return 0, false
}

// fill hands to lane ls up to k attempts, of which at most take come
// from the ready queue: first successors of its own items that an earlier
// fill had no room to fuse, then ready tasks of p's best level, each with
// the successors fused behind it. It publishes them. One fill never mixes
// levels: what follows a worse task in a lane must not be better work that
// the items ahead of it release.
func (s *state) fill(ls *laneState, p *poolState, take, k int, now time.Time) {
	from := ls.n
	k = min(k, int(dispatch.Size-(ls.n-ls.applied)))
	placed := s.fuseOn(ls, p, k)
	level := int32(math.MinInt32)
	for took := 0; placed < k && took < take; took++ {
		t, ok := s.popReady(p)
		if !ok {
			break
		}
		if h := &s.hot[t]; level == math.MinInt32 {
			level = h.prio
		} else if h.prio != level {
			s.requeue(t) // the next level: not in this fill
			break
		}
		s.place(ls, t, false, 0)
		placed++
		if r := &s.tasks[t]; r.succ.n > 0 || r.x != nil {
			placed += s.fuseOn(ls, p, k-placed)
		} else {
			ls.fuseAt = ls.n // nothing to fuse behind it
		}
	}
	if ls.n == from {
		return
	}
	// Ask for a report once about half of what the lane holds is done, and
	// not before the first new item.
	mark := ls.n - uint32(ls.live/2)
	if int32(mark-(from+1)) < 0 {
		mark = from + 1
	}
	ls.l.SetMark(mark)
	ls.pub = ls.n
	if ls.open && ls.l.Publish(from, ls.n) {
		return
	}
	// A closed lane (or one its worker closed just now): open it again and
	// have the loop wake the worker. If the worker's idle report is on its
	// way, report sees that the lane has moved on.
	ls.l.Open(ls.n)
	if !ls.open {
		ls.open = true
		p.idle--
	}
	s.wake = append(s.wake, ls.l.ID)
}

// fuseOn fuses behind the lane's items from ls.fuseAt on, at most k, and
// returns how many. It stops at the first item with a successor left for
// lack of room, to go on from there next time.
func (s *state) fuseOn(ls *laneState, p *poolState, k int) int {
	if int32(ls.fuseAt-ls.applied) < 0 {
		ls.fuseAt = ls.applied
	}
	placed := 0
	best, waiting := s.bestReady(p)
	if waiting && best <= p.minPrio {
		// No task of the pool is better than what waits: nothing may be
		// fused (wide graphs), so do not look.
		ls.fuseAt = ls.n
		return 0
	}
	for ls.fuseAt != ls.n {
		got, done := s.fuse(ls, p, ls.fuseAt, k-placed, best, waiting)
		placed += got
		if !done {
			break
		}
		ls.fuseAt++
	}
	return placed
}

// place writes t's next attempt into the lane's next slot.
func (s *state) place(ls *laneState, t int32, fused bool, parent uint32) {
	r := &s.tasks[t]
	h := &s.hot[t]
	seq := ls.n
	r.attempts++
	h.status = dispatched
	r.link = loc(ls.l.ID, seq)
	h.flags &^= fStarted | fFused
	if fused {
		h.flags |= fFused
	}
	// Report until fuse says better: it may release work.
	ls.l.Put(seq, t, parent, fused, r.attempts, r.runs+1, r.succ.n > 0 || (r.x != nil && len(r.x.more) > 0), r.x != nil)
	if r.x != nil && r.x.values != nil {
		ls.l.Ctx(seq).SetValues(r.x.values)
	}
	ls.n++
	ls.end = ls.n
	ls.live++
	ls.worst = max(ls.worst, h.prio)
	ls.best = min(ls.best, h.prio)
}

// fuse appends behind the item at seq the successors that only it holds
// back, at most k, and returns how many (best and waiting: the pool's best
// ready level, fusing pops nothing), and whether it considered them
// all (false: one was left for lack of room). The worker runs a fused item
// only if the one it follows succeeded, so a chain costs no round trip per
// link. Only plain tasks of the pool are fused, never when a ready task of
// the same or a better priority waits (fusion must not reorder the ready
// queue), and, while another worker of the pool is idle, one per item: the
// rest are released by the item's report and spread. An item whose
// successors are not all fused asks for a report when a pool is hungry.
func (s *state) fuse(ls *laneState, p *poolState, seq uint32, k int, best int32, waiting bool) (int, bool) {
	t := ls.l.Task(seq)
	r := &s.tasks[t]
	h := &s.hot[t]
	if h.status != dispatched || r.link != loc(ls.l.ID, seq) {
		return 0, true // revoked, or passed over and ended
	}
	if r.x != nil && r.x.recurring() {
		return 0, true // its success may start another run instead of releasing successors
	}
	spread := p.idle > 0 && (ls.open || p.idle > 1) // another worker of the pool is idle
	cand := s.work[:0]
	left := false
	for pass, list := 0, s.edges(r, r.succ); pass < 2; pass++ {
		if pass == 1 {
			if r.x == nil {
				break
			}
			list = r.x.more
		}
		for _, c := range list {
			hc := &s.hot[c]
			switch {
			case hc.status != Pending:
			case hc.unmet != 1 || int(hc.pool) != ls.pool || hc.flags&(fExtra|fRule) != 0 || (waiting && best <= hc.prio):
				left = true
			default:
				cand = append(cand, c)
			}
		}
	}
	if len(cand) > 1 && !samePrio(s.hot, cand) {
		slices.SortStableFunc(cand, func(a, b int32) int { return cmp.Compare(s.hot[a].prio, s.hot[b].prio) })
	}
	fused, done := 0, true
	for _, c := range cand {
		hc := &s.hot[c]
		switch {
		case spread && fused > 0:
			left = true
			continue
		case fused >= k:
			left, done = true, false
			continue
		case hc.prio > ls.worst:
			left = true // worse than all the lane holds: better work the lane's items release would wait behind it
			continue
		case ls.worst > hc.prio && s.worseAfter(ls, seq, hc.prio):
			left = true // it would wait behind worse work handed out after its dependency
			continue
		}
		hc.unmet = 0
		s.place(ls, c, true, seq)
		fused++
	}
	s.work = cand[:0]
	// Report when done while a pool is hungry if successors were left, or if
	// several were fused: once this item succeeds they may be stolen.
	ls.l.SetReport(seq, left || fused > 1, int32(seq-ls.pub) < 0)
	return fused, done
}

// worseAfter reports whether an item after seq in ls, not yet applied, is
// of a priority worse than prio.
func (s *state) worseAfter(ls *laneState, seq uint32, prio int32) bool {
	for at := seq + 1; at != ls.n; at++ {
		if st := ls.l.State(at); st != dispatch.Revoked && st != dispatch.Passed && s.hot[ls.l.Task(at)].prio > prio {
			return true
		}
	}
	return false
}

// steal revokes, for each idle worker of p, about half of the largest
// tail of work handed out to a lane of p and not started, and queues it
// again, for the idle lanes to take next. It never splits a fused item
// from the item it follows: a tail it takes holds the parent of every
// fused item in it.
func (s *state) steal(p *poolState, now time.Time) {
	for range p.idle {
		var victim *laneState
		most := 0
		for _, li := range p.lanes {
			ls := &s.lanes[li]
			if !ls.open {
				continue
			}
			s.harvest(ls, now) // a dependency done is one a follower no longer waits for
			s.peek(ls, now, s.observe)
			if free := int32(ls.end - ls.peek); free > int32(most) {
				victim, most = ls, int(free)
			}
		}
		if victim == nil || !s.revokeTail(victim, (most+1)/2) {
			return
		}
	}
}

// samePrio reports whether the tasks ts all have one priority: then they
// are in order already.
func samePrio(hot []hot, ts []int32) bool {
	p := hot[ts[0]].prio
	for _, t := range ts[1:] {
		if hot[t].prio != p {
			return false
		}
	}
	return true
}

// revokeTail takes back about want free items from the end of ls, cutting
// where no item fused behind an unfinished dependency is separated from
// it: the largest such tail of at most want items, or, if there is none,
// the smallest one beyond (a whole fused chain rather than nothing). It
// reports whether it took any.
func (s *state) revokeTail(ls *laneState, want int) bool {
	lo := ls.end
	for lo != ls.peek && ls.l.State(lo-1) == dispatch.Free {
		lo--
	}
	// A worker that runs nothing keeps its next item: it is about to claim
	// it, and taking all it has would only make it the next thief.
	if lo == ls.peek && (ls.peek == ls.applied || !dispatch.Running(ls.l.State(ls.peek-1))) {
		lo++
	}
	// The cut at seq is valid when every item at or after seq that waits
	// for the one it follows follows one at or after seq: minPar tracks the
	// earliest such parent (as an offset from lo) over the suffix.
	minPar := int32(math.MaxInt32)
	cut, beyond := ls.end, ls.end
	for seq := ls.end; int32(seq-lo) > 0; {
		seq--
		if parent, fused := ls.l.Fused(seq); fused && s.hot[ls.l.Task(seq)].flags&fFused != 0 {
			minPar = min(minPar, int32(parent-lo))
		}
		if minPar >= int32(seq-lo) {
			if int(ls.end-seq) <= want {
				cut = seq
			} else if beyond == ls.end {
				beyond = seq
			}
		}
	}
	if cut == ls.end {
		cut = beyond
	}
	took := false
	for seq := ls.end; seq != cut; {
		seq--
		took = s.revokeItem(ls, seq) || took
	}
	ls.end = cut
	return took
}

// revokeItem takes back the item at seq if it is still free, and puts its
// task back where it was: ready, or waiting on the item it followed.
func (s *state) revokeItem(ls *laneState, seq uint32) bool {
	t := ls.l.Task(seq)
	r := &s.tasks[t]
	h := &s.hot[t]
	if h.status != dispatched || r.link != loc(ls.l.ID, seq) || !ls.l.Revoke(seq) {
		return false
	}
	ls.live--
	r.attempts--
	r.link = noTask
	if h.flags&fFused != 0 {
		h.status, h.unmet = Pending, 1 // waits on its dependency again
	} else {
		s.requeue(t)
	}
	return true
}

// checkPriority takes back worse work handed out and not started once a
// better task of the pool has waited revokeDelay with no worker idle.
func (s *state) checkPriority(p *poolState, now time.Time) {
	best, ok := s.bestReady(p)
	if !ok || p.idle > 0 {
		p.revokeAt = time.Time{}
		return
	}
	worse := false
	for _, li := range p.lanes {
		if ls := &s.lanes[li]; ls.open && ls.worst > best {
			if s.freeTail(ls, best, false) {
				worse = true
			} else {
				ls.worst = best // nothing worse waits there: no need to look again
			}
		}
	}
	if !worse {
		p.revokeAt = time.Time{}
		return
	}
	if p.revokeAt.IsZero() {
		p.revokeAt = now.Add(revokeDelay)
	}
	if now.Before(p.revokeAt) {
		return
	}
	p.revokeAt = time.Time{}
	for _, li := range p.lanes {
		ls := &s.lanes[li]
		if !ls.open || ls.worst <= best {
			continue
		}
		s.freeTail(ls, best, true)
		ls.worst = best
	}
	// The better work stays queued for whichever worker comes back first:
	// the lanes just cut may be busy with a long attempt.
}

// freeTail looks at the items of ls not yet claimed, from the end, for
// one of a priority worse than best; with revoke it takes every such item
// back. It reports whether it found one.
func (s *state) freeTail(ls *laneState, best int32, revoke bool) bool {
	found := false
	for seq := ls.n; seq != ls.applied; {
		seq--
		st := ls.l.State(seq)
		if st != dispatch.Free && st != dispatch.Revoked {
			break // the worker got here: everything before is claimed or passed
		}
		if st == dispatch.Free && s.hot[ls.l.Task(seq)].prio > best {
			found = true
			if !revoke {
				break
			}
			if s.revokeItem(ls, seq) {
				s.revokeFollowers(ls, seq)
			}
		}
	}
	return found
}

// revokeFollowers takes back, with the item at seq just revoked, the free
// items fused behind it, directly or through one another: a follower must
// never stay behind without the item it follows.
func (s *state) revokeFollowers(ls *laneState, seq uint32) {
	gone := []uint32{seq}
	for at := seq + 1; at != ls.n; at++ {
		if parent, fused := ls.l.Fused(at); fused && slices.Contains(gone, parent) &&
			ls.l.State(at) == dispatch.Free && s.revokeItem(ls, at) {
			gone = append(gone, at)
		}
	}
}

// peek moves ls.peek past the items the worker has claimed, passed or that
// were revoked, and, when report is set, sends EventStarted for the
// attempts it finds started. It stops at a fused item whose parent's
// outcome is not applied yet.
func (s *state) peek(ls *laneState, now time.Time, report bool) {
	for ls.peek != ls.n {
		st := ls.l.State(ls.peek)
		if st == dispatch.Free {
			return
		}
		if parent, fused := ls.l.Fused(ls.peek); fused && int32(parent-ls.applied) >= 0 {
			// Its parent succeeded (the worker claimed it), but that is not
			// applied yet: its start must not be told before.
			return
		}
		if report && dispatch.Ran(st) {
			s.started(ls.l.Task(ls.peek), loc(ls.l.ID, ls.peek), now)
		}
		ls.peek++
	}
}

// started sends EventStarted for the attempt at location l, once.
func (s *state) started(t, l int32, now time.Time) {
	r := &s.tasks[t]
	h := &s.hot[t]
	if h.status != dispatched || r.link != l || h.flags&fStarted != 0 {
		return
	}
	h.flags |= fStarted
	s.emit(EventStarted, t, now)
}
