package coordinator

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/batonhq/baton/internal/lane"
)

// dispatch hands ready work to the pools' lanes: it tops up the lanes that
// reported progress, gives idle workers a share of the backlog, lets an
// idle worker take half of the largest tail of work handed out but not
// started, and takes worse work back for a better ready task that has
// waited revokeDelay. What it hands out, the loop publishes (outbox).
func (s *state) dispatch(now time.Time) {
	hungry := false
	for pi := range s.pools {
		p := &s.pools[pi]
		if s.closing || p.paused || s.dur != nil && s.dur.failed != nil { // a failed commit: Shutdown is on its way
			p.revokeAt, p.stuckAt, p.tokenAt, p.tokenFrom = time.Time{}, time.Time{}, time.Time{}, time.Time{} // nothing starts: nothing to plan
			continue
		}
		// Neither a rate-limited pool (one attempt per worker, claimed at
		// once) nor one reserving workers plans revocations behind long
		// attempts (unstick, checkPriority): a plan left from before would
		// fire again and again. A pool of tasks of several slots that does
		// not reserve dispatches, and plans them, as any pool.
		if p.rate != nil {
			p.revokeAt, p.stuckAt = time.Time{}, time.Time{}
			s.handOutOne(p, now) // one attempt per idle worker, a token each (flow.go)
			hungry = hungry || p.idle > 0 && p.readyLive == 0
			continue
		}
		if p.multi && s.slotPass(p, now) {
			// Workers are kept for a task of several slots: only work
			// handed out and not started, all of it better, may move.
			// Better work stuck behind a long attempt still goes back
			// (unstick), and then, if the pool no longer reserves, it is
			// dispatched as any pool's.
			if !s.unstick(p, now) || s.slotPass(p, now) {
				p.revokeAt = time.Time{}
				if p.idle > 0 {
					s.steal(p, now)
				}
				continue
			}
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
			if !ls.open && ls.holder == 0 {
				// Spread the backlog, and its best level first: two tasks
				// of the best level go to two idle workers, not one behind
				// the other while the next worker takes worse ones.
				share := (p.readyLive + p.idle - 1) / p.idle
				if n := p.ready.HeadLen(); n < p.readyLive && p.idle > 1 {
					share = min(share, (n+p.idle-1)/p.idle)
				}
				s.fill(ls, p, share, target, now)
			}
		}
		s.unstick(p, now)
		s.checkPriority(p, now)
		if p.idle > 0 && p.readyLive == 0 {
			hungry = true
		}
	}
	if hungry != s.hungry.Load() {
		s.hungry.Store(hungry)
		// A worker reads the flag after it ends an attempt: one that
		// ended before the flag was set did not see it, and may go on
		// to an attempt of any length without reporting. Look at the
		// lanes once more: an end is seen either here or by its worker.
		if hungry && s.harvestAll(now) {
			s.dispatch(now)
		}
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
		case lane.Revoked, lane.Passed, lane.Late:
		default:
			prio := s.hot[ls.l.Task(seq)].prio
			worst = max(worst, prio)
			if st == lane.Free {
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
// Until the pool is measured, unmeasuredTarget.
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

// popReady returns the oldest live entry of the pool's best level, to be
// handed out at now. A start of a series it passes over (SkipMissed drops
// it: catchUp) waits for the series' next start instead.
func (s *state) popReady(p *poolState, now time.Time) (int32, bool) {
	for {
		e, _, ok := p.ready.Pop()
		if !ok {
			return 0, false
		}
		s.popped = noTask
		var t int32
		if e&turnBit != 0 {
			if t, ok = s.popTurn(p, e); !ok {
				continue
			}
		} else {
			t = int32(uint32(e))
			if s.hot[t].status != Ready || s.hot[t].rseq != uint32(e>>32) {
				continue
			}
			p.readyLive--
		}
		if s.hot[t].flags&fExtra != 0 && !s.startsNow(t, now) {
			continue
		}
		return t, true
	}
}

// startsNow reports whether ready task t may start at now: any task but a
// start of a series that SkipMissed drops, which then waits for the
// series' next start (or, if there is none, ends the series).
func (s *state) startsNow(t int32, now time.Time) bool {
	x := s.tasks[t].x
	if !x.recurring() || s.tasks[t].attempts > 0 {
		return true // not a series, or a retry of a run that has started
	}
	run, wait := x.catchUp(now)
	switch {
	case run:
		if by := addSat(x.planned, x.lateness(x.planned)); x.missed != RunEachMissed && !by.Before(now) {
			x.startBy = by // on time now; missed if no worker takes it by then
		}
	case wait.IsZero():
		s.seriesEnds(t, now)
	default:
		s.schedule(t, wait, now)
	}
	s.touched(t) // its planned start moved, or it ended
	return run
}

// bestReady reports the best level holding a live entry, dropping stale
// entries from the head.
func (s *state) bestReady(p *poolState) (int32, bool) {
	for p.readyLive > 0 {
		e, prio, ok := p.ready.Peek()
		if !ok {
			break
		}
		if e&turnBit != 0 {
			if _, _, live := s.liveTurn(e); live {
				return int32(prio), true
			}
		} else if t := int32(uint32(e)); s.hot[t].status == Ready && s.hot[t].rseq == uint32(e>>32) {
			return int32(prio), true
		}
		p.ready.Pop()
	}
	return 0, false
}

// fill hands to lane ls up to k attempts, of which at most take come
// from the ready queue: first successors of its own items that an earlier
// fill had no room to fuse, then ready tasks of p's best level, each with
// the successors fused behind it. It publishes them. A fill takes one
// level: what follows a worse task in a lane must not be better work that
// the items ahead of it release, and the next level should go to the next
// worker to ask. The exceptions keep a worker from waiting for the
// coordinator between two attempts when levels are short (every task at
// its own priority): while no other worker of the pool is idle, a lane
// holding fewer than two attempts takes the next level too, and the lane
// of a pool of one worker takes levels in order (nobody could start them
// sooner). A better task that their successes release takes worse work
// back (checkPriority).
func (s *state) fill(ls *laneState, p *poolState, take, k int, now time.Time) {
	if s.dur != nil && s.dur.failed != nil {
		return // nothing starts on a scheduler whose store failed
	}
	if take > 0 && p.minPrio < p.maxPrio && (!ls.open || ls.live == 0) {
		// For a worker with nothing left to run, not for a top-up.
		bound, ok := s.bestReady(p)
		if !ok {
			bound = math.MaxInt32
		}
		s.pull(ls, p, bound)
	}
	from := ls.n
	k = min(k, int(lane.Size-(ls.n-ls.applied)))
	placed := s.fuseOn(ls, p, k, now)
	level := int32(math.MinInt32)
	alone := !(p.idle > 0 && (ls.open || p.idle > 1)) // no other worker of the pool is idle
	for took := 0; placed < k && took < take; took++ {
		t, ok := s.popReady(p, now)
		if !ok {
			break
		}
		if p.multi && s.slots(t) > 1 {
			s.unpop(t) // it waits for workers of its own (slotPass)
			break
		}
		if h := &s.hot[t]; level == math.MinInt32 || h.prio == level {
			level = h.prio
		} else if alone && (len(p.lanes) == 1 || ls.live < 2) {
			// The next level, so that the worker does not wait for the
			// coordinator between two attempts; but first what another
			// worker holds unclaimed that is better than it: that goes
			// first (it went back to the ready queue).
			if s.pull(ls, p, h.prio-1) { // h.prio > level: no underflow
				s.unpop(t)
				continue
			}
			level = h.prio
		} else {
			s.unpop(t) // the next level: not in this fill
			break
		}
		s.place(ls, t, false, 0, now)
		placed++
		if r := &s.tasks[t]; r.succ.n > 0 || r.x != nil {
			placed += s.fuseOn(ls, p, k-placed, now)
		} else {
			ls.fuseAt = ls.n // nothing to fuse behind it
		}
	}
	if ls.n != from {
		s.published(ls, p, from)
	}
}

// published sets lane ls up to publish what was written into it from
// sequence from on.
func (s *state) published(ls *laneState, p *poolState, from uint32) {
	// Ask for a report once about half of what the lane holds is done, and
	// not before the first new item.
	mark := ls.n - uint32(ls.live/2)
	if int32(mark-(from+1)) < 0 {
		mark = from + 1
	}
	ls.l.SetMark(mark)
	ls.pub = ls.n // the loop publishes them, after the iteration's commit (outbox)
	if !ls.open {
		ls.open = true
		p.idle--
	}
}

// fuseOn fuses behind the lane's items from ls.fuseAt on, at most k, and
// returns how many. It stops at the first item with a successor left for
// lack of room, to go on from there next time.
func (s *state) fuseOn(ls *laneState, p *poolState, k int, now time.Time) int {
	if int32(ls.fuseAt-ls.applied) < 0 {
		ls.fuseAt = ls.applied
	}
	placed := 0
	best, waiting := s.bestReady(p)
	if s.dur != nil || (waiting && best <= p.minPrio) {
		// No task of the pool is better than what waits: nothing may be
		// fused (wide graphs), so do not look. With several levels, an
		// item's success may still release a task better than work handed
		// out since: have it reported at once. A durable scheduler fuses
		// nothing: a worker would run the follower on an end the store
		// has not committed, which a crash would undo (its dependency
		// would run again after the follower).
		if p.minPrio < p.maxPrio || s.dur != nil {
			for seq := ls.fuseAt; seq != ls.n; seq++ {
				if s.hasSuccessors(ls.l.Task(seq)) {
					ls.l.SetUrgent(seq, int32(seq-ls.pub) < 0)
				}
			}
		}
		ls.fuseAt = ls.n
		return 0
	}
	for ls.fuseAt != ls.n {
		got, done := s.fuse(ls, p, ls.fuseAt, k-placed, best, waiting, now)
		placed += got
		if !done {
			break
		}
		ls.fuseAt++
	}
	return placed
}

// place writes t's next attempt into the lane's next slot.
func (s *state) place(ls *laneState, t int32, fused bool, parent uint32, now time.Time) {
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
	// Report until fuse says better: it may release work. Report at once
	// when someone waits on the outcome: its clock (retry, next run), a
	// successor in another pool, a prompt subscriber, a WaitTasks call.
	urgent := r.x != nil || h.flags&fCross != 0 || s.prompt() || s.watchedTask(t)
	if s.keyed {
		s.keyOut(t)
		urgent = urgent || s.keys[s.keyOf[t]].limit > 0 // its end frees a place of its key
	}
	ls.l.Put(seq, t, parent, fused, r.attempts, r.runs+1, s.hasSuccessors(t), urgent)
	s.handOutCarefully(ls, seq, t)
	if s.historyOn() {
		s.handedOut(ls, seq, now)
	}
	if x := r.x; x != nil && !x.startBy.IsZero() {
		// A series' start on time is missed if it cannot begin in time,
		// which only its worker knows: past this, the worker passes it.
		ls.l.SetStartBy(seq, lane.UnixNanoSat(x.startBy))
		x.startBy = time.Time{}
	}
	if r.x != nil && r.x.values != nil {
		ls.l.Ctx(seq).SetValues(r.x.values)
	}
	if s.stamps {
		if fused {
			ls.l.ClearReady(seq) // it becomes ready in the worker, behind its dependency
		} else {
			ls.l.SetReady(seq, s.readyStamp(t))
		}
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
func (s *state) fuse(ls *laneState, p *poolState, seq uint32, k int, best int32, waiting bool, now time.Time) (int, bool) {
	t := ls.l.Task(seq)
	r := &s.tasks[t]
	h := &s.hot[t]
	if h.status != dispatched || r.link != loc(ls.l.ID, seq) {
		return 0, true // revoked, or passed over and ended
	}
	if r.x != nil && r.x.recurring() {
		return 0, true // its success may start another run instead of releasing successors
	}
	if len(s.pend) > 0 && s.pend[t] != nil {
		return 0, true // it spawned or chose (spawn.go): its success releases nothing by itself
	}
	spread := p.idle > 0 && (ls.open || p.idle > 1) // another worker of the pool is idle
	cand := s.work[:0]
	left := false
	better := false // a successor left waiting is better than the pool's worst level
	for c := range s.successors(t) {
		hc := &s.hot[c]
		switch {
		case hc.status != Pending:
		case hc.unmet != 1 || int(hc.pool) != ls.pool || hc.flags&(fExtra|fRule) != 0 || (waiting && best <= hc.prio) || s.keyLimited(c):
			left = true
			better = better || hc.prio < s.pools[hc.pool].maxPrio
		default:
			cand = append(cand, c)
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
		case fused >= k:
			left, done = true, false
		case hc.prio > ls.worst:
			left = true // worse than all the lane holds: better work the lane's items release would wait behind it
		case ls.worst > hc.prio && s.worseAfter(ls, seq, hc.prio):
			left = true // it would wait behind worse work handed out after its dependency
		default:
			hc.unmet = 0
			s.place(ls, c, true, seq, now)
			fused++
		}
		// Left waiting, or fused behind work handed out after its
		// dependency: once the dependency succeeds, a better task must not
		// wait for the lane's next report.
		better = better || hc.prio < p.maxPrio
	}
	s.work = cand[:0]
	if better {
		// Its success may release a task better than work handed out
		// since: the coordinator must hear of it at once, not half a lane
		// later, or that task would wait behind worse work.
		ls.l.SetUrgent(seq, int32(seq-ls.pub) < 0)
	}
	// Report when done while a pool is hungry if successors were left, or if
	// several were fused: once this item succeeds they may be stolen.
	ls.l.SetReport(seq, left || fused > 1, int32(seq-ls.pub) < 0)
	return fused, done
}

// hurry asks the worker to report as soon as t's handed-out attempt is
// done, because someone now waits on its outcome: a successor submitted
// since it was placed, a WaitTasks call, a new subscriber. Without it the
// outcome could wait for the lane's next report, after attempts of any
// length.
func (s *state) hurry(t int32) {
	if s.hot[t].status != dispatched {
		return
	}
	ls, seq := s.locate(s.tasks[t].link)
	if int32(seq-ls.n) < 0 {
		ls.l.SetUrgent(seq, int32(seq-ls.pub) < 0)
		s.urged = true
	}
}

// hurryAll asks for every handed-out attempt to be reported as soon as it
// is done (a prompt subscriber arrived: events must not lag).
func (s *state) hurryAll() {
	for i := range s.lanes {
		ls := &s.lanes[i]
		for seq := ls.applied; seq != ls.n; seq++ {
			ls.l.SetUrgent(seq, int32(seq-ls.pub) < 0)
		}
	}
	s.urged = true
}

// worseAfter reports whether an item after seq in ls, not yet applied, is
// of a priority worse than prio.
func (s *state) worseAfter(ls *laneState, seq uint32, prio int32) bool {
	for at := seq + 1; at != ls.n; at++ {
		if st := ls.l.State(at); st != lane.Revoked && !lane.PassedOver(st) && s.hot[ls.l.Task(at)].prio > prio {
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
	// A success done and not reported, in any pool, may release work for
	// this one, or a follower that then need not stay with its lane.
	s.harvestAll(now)
	for _, li := range p.lanes {
		if ls := &s.lanes[li]; ls.open {
			s.peek(ls, now, s.tellsStarts())
		}
	}
	s.urgeHeads(p, now)
	for range p.idle {
		// The busiest lane first; if all it holds waits for the attempt it
		// runs, the next one.
		tried := s.tried[:0]
		for {
			var victim *laneState
			most := int32(0)
			for _, li := range p.lanes {
				ls := &s.lanes[li]
				if free := int32(ls.end - ls.peek); ls.open && free > most && !slices.Contains(tried, li) {
					victim, most = ls, free
				}
			}
			if victim == nil {
				s.tried = tried
				return
			}
			if s.revokeTail(victim, int(most+1)/2) {
				break
			}
			tried = append(tried, victim.l.ID)
		}
		s.tried = tried
	}
}

// urgeHeads asks the worker of every lane of p that runs an attempt with
// work behind it to report as soon as that attempt ends: a follower fused
// behind it cannot move to an idle worker until its success is applied,
// and the worker might otherwise report it only after the attempts
// behind it, of any length. It sets the flag and then reads the attempt's
// state, and the worker changes the state and then reads the flag
// (Lane.finish), so an end is never missed by both: a lane whose attempt
// ended meanwhile is harvested here.
func (s *state) urgeHeads(p *poolState, now time.Time) {
	for _, li := range p.lanes {
		ls := &s.lanes[li]
		if !ls.open {
			continue
		}
		if head, running := s.runningHead(ls); running && head+1 != ls.n {
			ls.l.SetUrgent(head, true)
			if !lane.Running(ls.l.State(head)) {
				s.harvest(ls, now)
			}
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

// revokeTail takes back about want free items of ls, for an idle worker.
// It takes whole groups, the oldest first: a free item that follows no
// other, with the free items fused behind it, directly or through one
// another (the thief runs them in order). An item fused
// behind one that stays in the lane (its dependency runs there) stays
// too. A group may take the count beyond want: a chain is taken whole
// rather than not at all. It reports whether it took any.
func (s *state) revokeTail(ls *laneState, want int) bool {
	lo := ls.peek
	// A worker that runs nothing keeps its next item: it is about to claim
	// it, and taking all it has would only make it the next thief. (Items
	// before peek are claimed, passed over or revoked; the worker runs the
	// last one claimed, if it has not returned.)
	busy := false
	for seq := ls.peek; seq != ls.applied && !busy; {
		seq--
		st := ls.l.State(seq)
		busy = lane.Running(st)
		if st != lane.Revoked && !lane.PassedOver(st) {
			break
		}
	}
	if !busy {
		lo++
	}
	if int32(ls.end-lo) <= 0 {
		return false
	}
	// root[i], for the item at lo+i: the offset of the first item of its
	// group (a free item that follows no other, and the free items fused
	// behind it, directly or through one another), or -1 if it cannot move
	// (claimed, gone, or fused behind an item that stays).
	n := int32(ls.end - lo)
	root, size := s.groupRoot[:n], s.groupSize[:n]
	clear(size)
	for i := range n {
		seq := lo + uint32(i)
		root[i] = -1
		if ls.l.State(seq) != lane.Free {
			continue
		}
		parent, fused := ls.l.Fused(seq)
		switch {
		case !fused || s.hot[ls.l.Task(seq)].flags&fFused == 0:
			root[i] = i
		case int32(parent-lo) >= 0 && root[parent-lo] >= 0:
			root[i] = root[parent-lo]
		}
		if root[i] >= 0 {
			size[root[i]]++
		}
	}
	// Want the groups of the oldest items, until about want items: they
	// have waited longest (the Go runtime's runqsteal takes the head of
	// a victim's queue too), and ties start closer to the order they
	// became ready.
	wanted := s.groupWanted[:n]
	clear(wanted)
	count := 0
	for i := range n {
		if count >= want {
			break
		}
		if r := root[i]; r >= 0 && !wanted[r] {
			wanted[r] = true
			count += int(size[r])
		}
	}
	// Revoke from the last; requeue puts each back among its level's
	// ready tasks in the order they became ready.
	took := 0
	for i := n - 1; i >= 0; i-- {
		if r := root[i]; r >= 0 && wanted[r] && s.revokeItem(ls, lo+uint32(i)) {
			took++
		}
	}
	trimEnd(ls)
	return took > 0
}

// trimEnd moves ls.end, where stealing looks next time, back over the
// items at its end that are no longer free (taken back, or claimed), not
// below peek.
func trimEnd(ls *laneState) {
	for int32(ls.end-ls.peek) > 0 && ls.l.State(ls.end-1) != lane.Free {
		ls.end--
	}
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
	s.leftLane(t)
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

// unstick gives back work handed out behind an attempt that has run for
// revokeDelay when it is better than work handed to another worker of the
// pool: otherwise that worse work would start first, for as long as the
// attempt runs. Given back, it goes to whichever worker comes back first,
// and checkPriority takes worse work back for it. Pools with one priority
// level have nothing to reorder: stealing keeps their workers busy. It
// reports whether it gave work back.
func (s *state) unstick(p *poolState, now time.Time) bool {
	p.stuckAt = time.Time{}
	if p.minPrio >= p.maxPrio || len(p.lanes) < 2 {
		return false
	}
	stuck := s.tried[:0] // reused: lanes whose attempt has run revokeDelay with work behind it
	gave := false        // work was given back
	for _, li := range p.lanes {
		ls := &s.lanes[li]
		if !ls.open {
			continue
		}
		head, running := s.runningHead(ls)
		if !running {
			ls.headAt = time.Time{}
			continue
		}
		if ls.headAt.IsZero() || head != ls.head {
			ls.head, ls.headAt = head, now
		}
		switch {
		case ls.n == head+1:
			// Nothing waits behind the attempt it runs.
		case now.Sub(ls.headAt) >= revokeDelay:
			stuck = append(stuck, li)
		default:
			if at := ls.headAt.Add(revokeDelay); p.stuckAt.IsZero() || at.Before(p.stuckAt) {
				p.stuckAt = at
			}
		}
	}
	for _, li := range stuck {
		ls := &s.lanes[li]
		// The worst work handed to another worker: better work here would
		// wait for this attempt while that starts.
		worst := int32(math.MinInt32)
		for _, lj := range p.lanes {
			if o := &s.lanes[lj]; lj != li && o.open {
				worst = max(worst, o.worst)
			}
		}
		for seq := ls.n; seq != ls.head+1; { // from the last; requeue puts each back in its place
			seq--
			t := ls.l.Task(seq)
			h := &s.hot[t]
			if ls.l.State(seq) != lane.Free || h.prio >= worst || h.flags&fFused != 0 {
				continue // fused behind a dependency not done: not ready, nothing to reorder
			}
			if s.revokeItem(ls, seq) {
				_ = s.revokeFollowers(ls, seq)
				gave = true
			}
		}
	}
	s.tried = stuck[:0]
	if gave {
		// What was given back has waited revokeDelay already: the worse
		// work handed to the other workers is taken back for it now
		// (checkPriority, next), not revokeDelay later.
		p.revokeAt = now
	}
	return gave
}

// pull takes back, for lane ls about to be filled, the work handed to the
// other lanes of the pool and not claimed that is as good as the best
// ready task or better: ls would otherwise start worse work while that
// waits (a fill may take the next level), or later work of its level
// while that, ready first, waits behind another worker's attempt. The
// next item of a worker that runs nothing stays: it is about to claim it.
//
// Work of priority bound or better is taken; pull reports whether it took
// any back.
func (s *state) pull(ls *laneState, p *poolState, bound int32) bool {
	took := false
	for _, li := range p.lanes {
		m := &s.lanes[li]
		if m == ls || !m.open || m.best > bound {
			continue
		}
		// One pass, each state read once: the worker claims concurrently,
		// and an item read Free and then Claimed by a second look would
		// make the item after it look like the next one of an idle worker
		// (kept) while its worker runs.
		lo, running := m.applied, false
		for ; lo != m.n; lo++ {
			st := m.l.State(lo)
			if st == lane.Free {
				break
			}
			running = running || lane.Running(st)
		}
		if !running {
			lo++ // its next item stays
		}
		left := int32(math.MaxInt32)
		for seq := m.n; int32(seq-lo) > 0; { // from the last; requeue puts each back in its place
			seq--
			t := m.l.Task(seq)
			h := &s.hot[t]
			if m.l.State(seq) != lane.Free {
				continue // claimed or gone
			}
			if h.flags&fFused != 0 {
				left = min(left, h.prio) // may become free to move once its dependency's success is applied
				continue
			}
			if h.prio <= bound && s.revokeItem(m, seq) {
				_ = s.revokeFollowers(m, seq)
				took = true
				continue
			}
			left = min(left, h.prio)
		}
		if int32(lo-m.n) <= 0 && !running {
			left = min(left, s.hot[m.l.Task(lo-1)].prio) // the next item, kept
		}
		m.best = left
	}
	return took
}

// runningHead returns the item the worker of ls runs, if it runs one: the
// first claimed item not done (the worker runs its items in order).
func (s *state) runningHead(ls *laneState) (uint32, bool) {
	for seq := ls.applied; seq != ls.n; seq++ {
		switch st := ls.l.State(seq); {
		case lane.Running(st):
			return seq, true
		case st == lane.Free:
			return 0, false
		}
	}
	return 0, false
}

// freeTail looks at the items of ls not yet claimed, from the end, for
// one of a priority worse than best; with revoke it takes every such item
// back. It reports whether it found one.
func (s *state) freeTail(ls *laneState, best int32, revoke bool) bool {
	found := false
	for seq := ls.n; seq != ls.applied; {
		seq--
		st := ls.l.State(seq)
		if st != lane.Free && st != lane.Revoked {
			break // the worker got here: everything before is claimed or passed
		}
		if st == lane.Free && s.hot[ls.l.Task(seq)].prio > best {
			found = true
			if !revoke {
				break
			}
			if s.revokeItem(ls, seq) {
				_ = s.revokeFollowers(ls, seq)
			}
		}
	}
	return found
}

// revokeFollowers takes back, with the item at seq just revoked, the free
// items fused behind it, directly or through one another: a follower must
// never stay behind without the item it follows.
func (s *state) revokeFollowers(ls *laneState, seq uint32) int {
	gone := []uint32{seq}
	for at := seq + 1; at != ls.n; at++ {
		if parent, fused := ls.l.Fused(at); fused && slices.Contains(gone, parent) &&
			ls.l.State(at) == lane.Free && s.revokeItem(ls, at) {
			gone = append(gone, at)
		}
	}
	return len(gone) - 1
}

// peek moves ls.peek past the items the worker has claimed, passed or that
// were revoked, and, when report is set, sends EventStarted for the
// attempts it finds started. It stops at a fused item whose parent's
// outcome is not applied yet.
func (s *state) peek(ls *laneState, now time.Time, report bool) {
	for ls.peek != ls.n {
		st := ls.l.State(ls.peek)
		if st == lane.Free {
			return
		}
		if parent, fused := ls.l.Fused(ls.peek); fused && int32(parent-ls.applied) >= 0 {
			// Its parent succeeded (the worker claimed it), but that is not
			// applied yet: its start must not be told before.
			return
		}
		if report && lane.Ran(st) {
			// The worker runs its items in order: those before this one
			// have ended. Their ends are told before this start (not
			// after, as a report still on its way would).
			if int32(ls.peek-ls.applied) > 0 && s.harvest(ls, now) {
				s.caughtUp = true
				continue // the harvest may have moved peek
			}
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
	s.startedCarefully(t, l)
	if s.historyOn() {
		ls, seq := s.locate(l)
		ls.sawStart(seq, now)
	}
}

func (s *state) pushReady(t int32, now time.Time) {
	if s.stamps {
		s.stampReady(t, now)
	}
	h := &s.hot[t]
	h.status = Ready
	if s.chg != nil {
		s.markChanged(t) // Pending to Ready tells no event (changes.go)
	}
	s.rseq++
	h.rseq = s.rseq
	e := uint64(h.rseq)<<32 | uint64(uint32(t))
	if s.keyed {
		s.pushKeyed(t, e, false)
		return
	}
	p := &s.pools[h.pool]
	p.ready.Push(int(h.prio), e)
	p.readyLive++
}

// requeue puts a task whose item was taken back where it was before it
// was handed out: among the ready tasks of its level in the order they
// became ready (its rseq, kept from then: a follower fused behind its
// dependency got its own when that dependency succeeded, unfuse). Tasks
// taken back from several lanes, in any order, come out again in the
// order they became ready: they are older than every task of their level
// never handed out, and Insert places each among the others taken back.
// With keys, that holds within a key's queue; across keys the order is
// the turns' (keys.go), and a key whose task is taken back gets the next
// turn of its level, as before.
func (s *state) requeue(t int32) {
	h := &s.hot[t]
	h.status = Ready
	e := uint64(h.rseq)<<32 | uint64(uint32(t))
	if s.keyed {
		s.pushKeyed(t, e, true)
		return
	}
	p := &s.pools[h.pool]
	p.ready.Insert(int(h.prio), e, olderEntry)
	p.readyLive++
}

// olderEntry reports whether ready-queue entry a became ready before b:
// their rseqs compared as serial numbers (they wrap at 2^32), the task
// index breaking a tie. Two entries more than 2^31 readinesses apart (a
// level starved while two billion tasks became ready) compare the wrong
// way: a task taken back then may come out behind a later one of its
// level, as it could before requeue kept rseqs, and nothing worse.
func olderEntry(a, b uint64) bool {
	if d := int32(uint32(a>>32) - uint32(b>>32)); d != 0 {
		return d < 0
	}
	return uint32(a) < uint32(b)
}

// unfuse makes t, a follower fused behind its dependency, whose success
// was just applied, free to move: it became ready now (requeue).
func (s *state) unfuse(t int32) {
	h := &s.hot[t]
	h.flags &^= fFused
	s.rseq++
	h.rseq = s.rseq
}
