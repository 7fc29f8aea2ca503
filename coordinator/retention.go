package coordinator

import (
	"slices"
	"time"

	"github.com/batonhq/baton/internal/lane"
)

// settle runs after every operation when retention is on: the tasks whose
// ends are settled give up their hold on their successors (which have
// been released or skipped already, and hear nothing more from them), and
// the tasks that became final start their retention time.
func (s *state) settle(now time.Time) {
	if !s.retain {
		return
	}
	if s.closing && s.dur != nil {
		// A durable scheduler forgets nothing once Shutdown has begun: the
		// tasks Shutdown ends keep their last records so that a restart
		// resumes them, and a task that ended just now must have its end
		// written. The next scheduler on the store forgets them in its turn.
		s.finalized, s.settledEnds = s.finalized[:0], s.settledEnds[:0]
		return
	}
	s.settleEnds()
	for _, t := range s.finalized {
		s.expiry = append(s.expiry, retention{at: now, t: t, rerun: s.reruns(t)})
	}
	s.finalized = s.finalized[:0]
	s.expire(now)
}

// settleEnds lets the successors of the tasks whose ends settled since
// it last ran go (their preds), and drops those that nothing else holds.
// settle runs it after every operation; rerun runs it first, so that the
// counts it makes again (recountAfterRerun) start from ends already
// counted: an end that settled earlier in the same iteration, of a task
// the re-run re-opens, would otherwise be counted once more afterwards,
// and a dependent it still holds dropped while that task is live again,
// its record reused by an unrelated task that the task's next end then
// reached as its successor.
func (s *state) settleEnds() {
	for _, t := range s.settledEnds {
		for c := range s.successors(t) {
			s.held[c].preds--
			s.maybeDrop(c)
		}
	}
	s.settledEnds = s.settledEnds[:0]
}

// expire drops the tasks whose retention time is up, or marks them to be
// dropped as soon as nothing holds them.
func (s *state) expire(now time.Time) {
	for s.expHead < len(s.expiry) {
		x := s.expiry[s.expHead]
		if addSat(x.at, s.keep).After(now) {
			break
		}
		s.expiry[s.expHead] = retention{}
		s.expHead++
		if !s.hot[x.t].status.Final() || x.rerun != s.reruns(x.t) {
			continue // re-opened since (Rerun): its new end plans its drop
		}
		s.held[x.t].dropDue = true
		s.maybeDrop(x.t)
	}
	if s.expHead > 1024 && s.expHead*2 > len(s.expiry) {
		n := copy(s.expiry, s.expiry[s.expHead:])
		clear(s.expiry[n:])
		s.expiry, s.expHead = s.expiry[:n], 0
	}
}

// maybeDrop drops t if its time is up and nothing holds it, and then
// whatever only t held, through a worklist.
func (s *state) maybeDrop(t int32) {
	if !s.free(t) {
		return
	}
	work := []int32{t}
	for len(work) > 0 {
		t := work[len(work)-1]
		work = work[:len(work)-1]
		switch {
		case s.hot[t].status == dropped: // a member of a family dropped whole meanwhile
		case s.fam != nil && s.fam[t].root != noTask:
			work = s.famFree(t, work)
		default:
			work = s.drop(t, work)
		}
	}
}

// free reports whether t's time is up and nothing holds it but members of
// its own family (spawn.go), which go with it.
func (s *state) free(t int32) bool {
	h := &s.held[t]
	if !h.dropDue || h.preds != 0 {
		return false
	}
	if s.fam != nil && s.fam[t].split != 0 {
		return false // the children of its finished runs name it their parent
	}
	if h.kids == 0 && h.refs == 0 {
		return true
	}
	return s.fam != nil && s.fam[t].root != noTask && h.kids+h.refs == s.fam[t].famIn
}

// famFree counts t, a member of a family that is free, towards its
// family's drop: a family is forgotten only whole, once every member is
// free. Then each member is checked again (a member counted may have been
// held since, by a task submitted later: it is counted again when it is
// free again) and the family dropped; the tasks only it held are appended
// to work.
func (s *state) famFree(t int32, work []int32) []int32 {
	f := &s.fam[t]
	root := f.root
	if !f.ok {
		f.ok = true
		s.fam[root].ready++
	}
	if s.fam[root].ready < s.fam[root].size {
		return work
	}
	members := s.members(root)
	whole := true
	for _, m := range members {
		if !s.free(m) {
			s.fam[m].ok = false
			s.fam[root].ready--
			whole = false
		}
	}
	if !whole {
		return work
	}
	parent := s.fam[root].parent // a finished run's family: its spawner, which outlives it
	for _, m := range members {
		work = s.drop(m, work)
	}
	if parent != noTask {
		work = s.runForgotten(parent, work)
	}
	return work
}

// members lists root's family: root (with, for a finished run's family,
// the other children of that run), and the children of every member in
// the same family, through a worklist.
func (s *state) members(root int32) []int32 {
	out := []int32{root}
	for m := s.fam[root].sib; m != noTask; m = s.fam[m].sib {
		out = append(out, m)
	}
	for i := 0; i < len(out); i++ {
		if x := s.tasks[out[i]].x; x != nil {
			for _, c := range x.children {
				if s.fam[c].root == root {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// detachRun makes kids, the children of a finished run of recurring
// spawner t (its join succeeded), with their own children, a family of
// their own, rooted at kids[0]: a family is forgotten only whole, and t,
// which runs again, would otherwise keep every run's children for as
// long as its series lasts. The new family is forgotten whole, as any,
// once each member is free; t is not forgotten before it (split), and
// then drops them from its children (runForgotten).
func (s *state) detachRun(t int32, kids []int32) {
	if len(kids) == 0 {
		return
	}
	old, sub := s.fam[t].root, kids[0]
	members := slices.Clone(kids)
	for i := 0; i < len(members); i++ {
		if x := s.tasks[members[i]].x; x != nil {
			for _, c := range x.children {
				if s.fam[c].root == old {
					members = append(members, c)
				}
			}
		}
	}
	for i, c := range kids {
		s.fam[c].sib = noTask
		if i+1 < len(kids) {
			s.fam[c].sib = kids[i+1]
		}
	}
	for _, m := range members {
		f := &s.fam[m]
		if f.ok {
			s.fam[old].ready--
		}
		f.ok, f.root, f.famIn = false, sub, 0
	}
	s.fam[old].size -= int32(len(members))
	s.fam[sub].size, s.fam[sub].ready = int32(len(members)), 0
	// The holds inside a family do not keep it (famIn): count again those
	// inside the new family, and no longer those of its members on the
	// tasks left in the old one.
	refam := func(held int32) {
		switch f := &s.fam[held]; f.root {
		case sub:
			f.famIn++
		case old:
			f.famIn--
		}
	}
	for _, m := range members {
		r := &s.tasks[m]
		for _, d := range s.edges(r, r.deps) {
			refam(d)
		}
		if s.hot[m].status == Skipped && r.link != noTask {
			refam(r.link)
		}
	}
	s.fam[t].split++
	for _, m := range members {
		s.maybeDrop(m)
	}
}

// runForgotten is called when a finished run's family, children of t,
// has been forgotten: t's list of children drops them, and t may be
// forgotten in its turn (appended to work).
func (s *state) runForgotten(t int32, work []int32) []int32 {
	x := s.tasks[t].x
	f := &s.fam[t]
	n, cut := 0, int32(0)
	for i, c := range x.children {
		if s.hot[c].status == dropped {
			if int32(i) < f.first {
				cut++
			}
			continue
		}
		x.children[n] = c
		n++
	}
	clear(x.children[n:])
	x.children = x.children[:n]
	f.first -= cut
	s.touched(t) // its stored JoinFrom counts its children
	if f.split--; f.split == 0 && s.free(t) {
		work = append(work, t)
	}
	return work
}

// famHold adds delta to what holder, retained, holds of held as its
// dependent or as a Skipped task naming it its cause, when both are
// members of one family: such holds do not keep the family (famFree).
func (s *state) famHold(holder, held int32, delta int32) {
	if s.fam != nil && held != noTask {
		if r := s.fam[held].root; r != noTask && r == s.fam[holder].root {
			s.fam[held].famIn += delta
		}
	}
}

// drop forgets a final task nothing holds: its ID is free again and its
// record is reused by a later Submit. The tasks it held and that can go now
// are appended to work.
func (s *state) drop(t int32, work []int32) []int32 {
	r := &s.tasks[t]
	h := &s.hot[t]
	release := func(j int32) {
		if j == noTask {
			return
		}
		if s.free(j) {
			work = append(work, j)
		}
	}
	// A task held by t and dropped already is a member of t's family,
	// dropped with it just now (famFree): its holds are cleared, and its
	// record may not be touched (a later batch reuses it).
	for _, d := range s.edges(r, r.deps) {
		if s.hot[d].status != dropped {
			s.held[d].kids--
			release(d)
		}
	}
	if h.status == Skipped && r.link != noTask && s.hot[r.link].status != dropped {
		s.held[r.link].refs--
		release(r.link)
	}
	s.unlink(t, s.held[t].hash)
	return work
}

// unlink forgets final task t, whose ID hashes to hash: its ID is free
// again, its records (durable) and history go, and its record is reused
// by a later Submit. What held it or what it held is the caller's (drop,
// dropFamily).
func (s *state) unlink(t int32, hash uint32) {
	r := &s.tasks[t]
	s.forgot(t)
	s.forgetHistory(t)
	s.unfreeze(t)
	s.ids.Delete(hash, t)
	a := &s.arenas[r.arena]
	if a.live--; a.live == 0 {
		*a = arena{}
		s.arenaFree = append(s.arenaFree, r.arena)
	}
	*r = rec{link: noTask}
	s.hot[t] = hot{status: dropped}
	if s.chg != nil {
		s.markChanged(t) // a change feed reports it gone (changes.go)
	}
	*s.spec(t) = lane.Spec{}
	if s.retain {
		s.held[t] = holds{}
	}
	if s.fam != nil {
		s.fam[t] = noFam
	}
	s.unkey(t)
	s.recFree.add(t)
}
