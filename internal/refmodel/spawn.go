package refmodel

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Graphs that grow and choose while they run (coordinator.Spawn and
// coordinator.Choose), as their documentation says:
//
//   - An attempt's spawns and its choice are part of its outcome: each
//     batch is checked when spawned (Submit's errors, and a cycle through
//     the join) and reserved, its IDs taken but the children invisible;
//     they join the graph only if the attempt succeeds, and vanish
//     otherwise. A refused batch is the attempt's error: it fails.
//   - A spawner whose attempt succeeded with children waits, Pending,
//     until every child is final and, if Skipped, settled; then it ends by
//     the leaves of its join (the children no other child of it depends
//     on): Failed, without retry, if one failed, was cancelled or was
//     skipped because of a failure or a cancel; else it succeeds (its
//     dependents are released). Cancel of a joining spawner cancels its
//     family not final and ends it Cancelled once they are all final.
//   - Children run in their spawner's pool, and at its priority unless
//     theirs is set; a child's Delay counts from its Spawn.
//   - With retention a family (a spawner submitted and every task spawned
//     under it) is forgotten only whole, once every member could be; the
//     holds of members on each other do not keep it.
//   - A branch's success releases the dependents it chose and skips the
//     others that still wait, its ID their cause (a skip by a rule).
//
// With retention on, spawners do not recur here: a recurring spawner's
// runs then make families of their own (the scheduler's detachRun), which
// the model does not follow. Without it, a later run's Spawn is refused
// (the earlier run's children keep their IDs), as the model says.

// Growth is what every attempt of a task does to the graph before its
// Behaviour (failing, panicking, blocking): it spawns the batches of Spawn
// in order, then, if Chooses, calls Choose with Choose. An attempt whose
// Spawn or Choose is refused returns that error: it fails.
type Growth struct {
	Spawn   [][]Task
	Chooses bool
	Choose  []string
}

func (g Growth) String() string {
	if len(g.Spawn) == 0 && !g.Chooses {
		return "-"
	}
	var parts []string
	for _, b := range g.Spawn {
		var ts []string
		for _, t := range b {
			ts = append(ts, fmt.Sprintf("%s%v %v p%d key %q %+v delay %v base %v every %v×%d", t.ID, t.Deps, t.When, t.Priority, t.Key, t.Do, t.Delay, t.BaseDelay, t.Every, t.Times))
		}
		parts = append(parts, "spawn["+strings.Join(ts, "; ")+"]")
	}
	if g.Chooses {
		parts = append(parts, fmt.Sprintf("choose%v", g.Choose))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

func (t Trigger) String() string {
	return [...]string{"AllSucceeded", "AllDone", "AnyFailed", "NoneFailed", "NoneFailedMinOneSuccess"}[t]
}

// ErrNotDependent is what the model predicts for Choose naming a task that
// does not depend directly on the chooser.
var ErrNotDependent = errors.New("not a direct dependent")

// growth is the model's state for spawns and branches.
type growth struct {
	pend  map[int]*pending    // by running task: what its attempt spawned and chose
	fam   map[*Record]*famRec // tasks that spawned or were spawned, branches
	joins []int               // spawners whose join may be complete, in the order they may
	log   []string            // what each Spawn and Choose returned
}

// pending is what a running attempt asked for.
type pending struct {
	batches [][]*Record // reserved children, by Spawn
	chose   bool
	chosen  []string // sorted, distinct
}

// famRec is a task's part in spawns and branches.
type famRec struct {
	parent   int   // its spawner (-1: submitted)
	root     int   // the spawner submitted its family grew from (-1: in none)
	children []int // in the order spawned
	first    int   // where its current join's children start
	open     int   // children of its current join not final
	joining  bool
	joined   bool // its join has ended well: the success applied now is its attempt's
	// failedJoin: it ended Failed by its join (a leaf did not end well): a
	// re-run child re-opens its join (rerun.go).
	failedJoin bool
	branched   bool // its last run chose (Choose)
	chosen     []string
}

func (m *Model) famOf(r *Record) *famRec {
	if m.g.fam == nil {
		m.g.fam = map[*Record]*famRec{}
	}
	f := m.g.fam[r]
	if f == nil {
		f = &famRec{parent: -1, root: -1}
		m.g.fam[r] = f
	}
	return f
}

// SpawnLog lists, in order, what each attempt's Spawn and Choose calls
// returned: "ID spawn K: ok" (or an error), "ID choose: ok".
func (m *Model) SpawnLog() []string { return m.g.log }

// Family returns the spawner of live task id ("" for one submitted) and
// whether it joins its children.
func (m *Model) Family(id string) (parent string, joining bool) {
	f := m.g.fam[m.Tasks[m.ByID[id]]]
	if f == nil {
		return "", false
	}
	if f.parent >= 0 {
		parent = m.Tasks[f.parent].ID
	}
	return parent, f.joining
}

// joining reports whether t waits for its children.
func (m *Model) joining(t int) bool {
	f := m.g.fam[m.Tasks[t]]
	return f != nil && f.joining
}

// attempt runs the growth of t's attempt, just started: its spawns, then
// its choice. It reports false if one was refused (the attempt fails).
func (m *Model) attempt(t int) bool {
	r := m.Tasks[t]
	g := r.Do.Grow
	if len(g.Spawn) == 0 && !g.Chooses {
		return true
	}
	p := &pending{}
	if m.g.pend == nil {
		m.g.pend = map[int]*pending{}
	}
	m.g.pend[t] = p
	for k, batch := range g.Spawn {
		err := m.reserve(t, p, batch)
		m.logged(fmt.Sprintf("%s spawn %d", r.ID, k), err)
		if err != nil {
			return false
		}
	}
	if !g.Chooses {
		return true
	}
	for _, id := range g.Choose {
		j, ok := m.ByID[id]
		if !ok || !slices.Contains(m.Tasks[j].deps, t) {
			m.logged(r.ID+" choose", ErrNotDependent)
			return false
		}
	}
	m.logged(r.ID+" choose", nil)
	p.chose, p.chosen = true, slices.Compact(slices.Sorted(slices.Values(g.Choose)))
	return true
}

func (m *Model) logged(what string, err error) {
	if err == nil {
		m.g.log = append(m.g.log, what+": ok")
	} else {
		m.g.log = append(m.g.log, what+": "+err.Error())
	}
}

// reserved returns the record of a child reserved under id, or nil.
func (m *Model) reserved(id string) *Record {
	for _, p := range m.g.pend {
		for _, b := range p.batches {
			for _, r := range b {
				if r.ID == id {
					return r
				}
			}
		}
	}
	return nil
}

// reserve checks batch, spawned by t's attempt, as Spawn does, and
// reserves it.
func (m *Model) reserve(t int, p *pending, batch []Task) error {
	if len(batch) == 0 {
		return nil
	}
	local := map[string]int{}
	for i, c := range batch {
		_, dup := local[c.ID]
		_, live := m.ByID[c.ID]
		if dup || live || m.reserved(c.ID) != nil {
			return ErrDuplicate
		}
		local[c.ID] = i
	}
	own := map[string]*Record{} // siblings reserved by earlier Spawns of the attempt
	for _, b := range p.batches {
		for _, r := range b {
			own[r.ID] = r
		}
	}
	for _, c := range batch {
		for _, d := range c.Deps {
			_, in := local[d]
			_, live := m.ByID[d]
			if !in && !live && own[d] == nil {
				return ErrUnknown
			}
		}
	}
	if cyclic(batch, local) || m.waitsFor(t, batch, local, own) {
		return ErrCycle
	}
	if !m.keyed && slices.ContainsFunc(batch, func(c Task) bool { return c.Key != "" }) {
		m.startKeys()
	}
	spawner := m.Tasks[t]
	var recs []*Record
	for _, c := range batch {
		if c.Pool == "" {
			c.Pool = spawner.Pool
		}
		if c.Priority == 0 {
			c.Priority = spawner.Priority
		}
		r := &Record{Task: c, notBefore: m.Now + c.Delay}
		for _, d := range c.Deps {
			if j, live := m.ByID[d]; live && !slices.Contains(r.deps, j) {
				r.deps = append(r.deps, j) // held for retention; wired when it joins the graph
			}
		}
		f := m.famOf(r)
		f.parent = t
		recs = append(recs, r)
	}
	p.batches = append(p.batches, recs)
	return nil
}

// waitsFor reports whether a child of batch would wait, through the
// graph, for its spawner t (a cycle through the join): it walks what the
// batch's dependencies outside it wait for, through tasks not final:
// their dependencies, and the children (joined or reserved) of spawners.
func (m *Model) waitsFor(t int, batch []Task, local map[string]int, own map[string]*Record) bool {
	seen := map[*Record]bool{}
	var work []*Record
	visit := func(r *Record) {
		if !seen[r] {
			seen[r] = true
			work = append(work, r)
		}
	}
	byName := func(d string) {
		if r := own[d]; r != nil {
			visit(r)
		} else if j, ok := m.ByID[d]; ok {
			visit(m.Tasks[j])
		}
	}
	for _, c := range batch {
		for _, d := range c.Deps {
			if _, in := local[d]; !in {
				byName(d)
			}
		}
	}
	for len(work) > 0 {
		u := work[len(work)-1]
		work = work[:len(work)-1]
		if u == m.Tasks[t] {
			return true
		}
		if j, live := m.ByID[u.ID]; !live || m.Tasks[j] != u {
			for _, d := range u.Deps { // reserved: its dependencies by name
				byName(d)
			}
			continue
		}
		if u.Status >= Succeeded {
			continue
		}
		for _, d := range u.deps {
			visit(m.Tasks[d])
		}
		if f := m.g.fam[u]; f != nil {
			for _, c := range f.children {
				visit(m.Tasks[c])
			}
		}
		if p := m.g.pend[m.ByID[u.ID]]; p != nil {
			for _, b := range p.batches {
				for _, r := range b {
					visit(r)
				}
			}
		}
	}
	return false
}

// grown applies what t's attempt, just ended, spawned and chose: nothing
// unless it succeeded (ok, not cancelled); then its choice, and its
// children join the graph. It reports whether t now joins them.
func (m *Model) grown(t int, ok bool) bool {
	r := m.Tasks[t]
	f := m.g.fam[r]
	if f != nil && f.joined {
		f.joined = false // its join ended well: the attempt's success, applied now
		return false
	}
	p := m.g.pend[t]
	delete(m.g.pend, t)
	if !ok || r.cancelReq {
		return false // what it spawned vanishes
	}
	if p != nil && p.chose {
		f = m.famOf(r)
		f.branched, f.chosen = true, p.chosen
	} else if f != nil && f.branched {
		f.branched, f.chosen = false, nil // a run that does not choose chooses nothing
	}
	if p == nil || len(p.batches) == 0 {
		return false
	}
	f = m.famOf(r)
	f.first = len(f.children)
	if f.root < 0 {
		f.root = t
	}
	f.joining = true
	r.Status = Pending
	r.Events = append(r.Events, "joining")
	for _, b := range p.batches {
		m.activate(t, b)
	}
	if f.open == 0 {
		m.g.joins = append(m.g.joins, t)
	}
	return true
}

// activate makes the reserved batch b, children of t, tasks of the graph.
func (m *Model) activate(t int, b []*Record) {
	f := m.g.fam[m.Tasks[t]]
	base := len(m.Tasks)
	for i, r := range b {
		r.deps = nil // wired now
		m.Tasks = append(m.Tasks, r)
		m.ByID[r.ID] = base + i
		m.g.fam[r].root = f.root
		f.children = append(f.children, base+i)
		f.open++
	}
	for _, r := range b {
		r.Events = append(r.Events, "spawned")
	}
	m.settleBatch(base, len(b))
}

// childEnded counts down the open children of r's spawner, r having just
// become final.
func (m *Model) childEnded(r *Record) {
	f := m.g.fam[r]
	if f == nil || f.parent < 0 {
		return
	}
	pf := m.g.fam[m.Tasks[f.parent]]
	if pf.open--; pf.open == 0 && pf.joining {
		m.g.joins = append(m.g.joins, f.parent)
	}
}

// childSettled queues the join of r's spawner, r being a Skipped child
// whose end has just settled.
func (m *Model) childSettled(r *Record) {
	f := m.g.fam[r]
	if f == nil || f.parent < 0 {
		return
	}
	if pf := m.g.fam[m.Tasks[f.parent]]; pf.joining && pf.open == 0 {
		m.g.joins = append(m.g.joins, f.parent)
	}
}

// joinAll ends the joins whose children are all final and settled, in
// the order they became so, and those their ends complete in turn.
func (m *Model) joinAll() {
	for len(m.g.joins) > 0 {
		t := m.g.joins[0]
		m.g.joins = m.g.joins[1:]
		if f := m.g.fam[m.Tasks[t]]; f.joining && f.open == 0 && m.joinSettled(t) {
			m.completeJoin(t)
		}
	}
}

// joinSettled: no child of t's join is Skipped with a class that may still
// get worse (unless Cancel reached the join: it does not wait).
func (m *Model) joinSettled(t int) bool {
	r := m.Tasks[t]
	if r.cancelReq {
		return true
	}
	f := m.g.fam[r]
	for _, c := range f.children[f.first:] {
		if rc := m.Tasks[c]; rc.Status == Skipped && !rc.settled {
			return false
		}
	}
	return true
}

// completeJoin ends t's join: Cancelled if Cancel or Shutdown reached it,
// Failed if a leaf did not end well, else its attempt's success.
func (m *Model) completeJoin(t int) {
	r := m.Tasks[t]
	f := m.g.fam[r]
	f.joining = false
	switch {
	case r.cancelReq:
		m.finish(r, Cancelled, "cancelled")
		if !m.Closing {
			m.endedBadly(t)
		}
	case m.leafFailed(t):
		f.failedJoin = true
		m.finish(r, Failed, "failed")
		m.endedBadly(t)
	default:
		f.joined = true
		m.outcome(t, true)
	}
}

// leafFailed reports whether a leaf of t's join failed, was cancelled, or
// was skipped because of a failure or a cancel.
func (m *Model) leafFailed(t int) bool {
	f := m.g.fam[m.Tasks[t]]
	for _, c := range f.children[f.first:] {
		rc := m.Tasks[c]
		if rc.Status == Succeeded || m.class(rc) == 2 {
			continue
		}
		leaf := !slices.ContainsFunc(f.children, func(d int) bool { return slices.Contains(m.Tasks[d].deps, c) })
		if leaf {
			return true
		}
	}
	return false
}

// cancelJoin is Cancel of joining spawner t.
func (m *Model) cancelJoin(t int) bool {
	r := m.Tasks[t]
	if r.cancelReq {
		return false
	}
	r.cancelReq = true
	stopped := m.cancelFamily(t)
	if m.g.fam[r].open == 0 {
		m.g.joins = append(m.g.joins, t)
	}
	m.joinAll()
	for _, c := range stopped {
		m.outcome(c, true) // it honours its context: it returns, after the cancels
	}
	m.run()
	m.Forget()
	return true
}

// cancelFamily cancels the tasks of t's family not final, through a
// worklist, in the order spawned; it returns the running ones that end as
// soon as their context does (their ends come afterwards).
func (m *Model) cancelFamily(t int) (stopped []int) {
	work := []int{t}
	for len(work) > 0 {
		u := work[len(work)-1]
		work = work[:len(work)-1]
		f := m.g.fam[m.Tasks[u]]
		for _, c := range f.children[f.first:] {
			rc := m.Tasks[c]
			switch {
			case m.joining(c):
				if !rc.cancelReq {
					rc.cancelReq = true
					work = append(work, c)
					if m.g.fam[rc].open == 0 {
						m.g.joins = append(m.g.joins, c) // it waited for a skipped child to settle: no more
					}
				}
			case rc.Status == Pending || rc.Status == Ready:
				m.timers = slices.DeleteFunc(m.timers, func(tm timer) bool { return tm.t == c })
				m.finish(rc, Cancelled, "cancelled")
				if !m.Closing {
					m.endedBadly(c)
				}
			case rc.Status == Running && !rc.cancelReq:
				rc.cancelReq = true
				if rc.Do.BlockCtx {
					stopped = append(stopped, c)
				}
			}
		}
	}
	return stopped
}

// shutJoins marks every joining spawner cancelled, as Shutdown does (its
// family is cancelled with every other task).
func (m *Model) shutJoins() {
	for t, r := range m.Tasks {
		if m.joining(t) {
			r.cancelReq = true
			if m.g.fam[r].open == 0 {
				m.g.joins = append(m.g.joins, t)
			}
		}
	}
}

// branched reports whether t, which succeeded, chose its dependents.
func (m *Model) branched(t int) bool {
	f := m.g.fam[m.Tasks[t]]
	return f != nil && f.branched
}

// onPath reports whether c may run after t's success: t is no branch, or
// chose c.
func (m *Model) onPath(c, t int) bool {
	if !m.branched(t) {
		return true
	}
	_, found := slices.BinarySearch(m.g.fam[m.Tasks[t]].chosen, m.Tasks[c].ID)
	return found
}

// release applies t's success to what depends on it.
func (m *Model) release(t int) {
	for _, c := range m.Tasks[t].succ {
		if m.onPath(c, t) {
			m.released(c, t)
		} else {
			m.notChosen(c, t)
		}
	}
}

// notChosen skips c, a dependent that branch t did not choose, if it still
// waits; one its rule started already (AnyFailed), or final, hears of t's
// success as any dependent.
func (m *Model) notChosen(c, t int) {
	rc := m.Tasks[c]
	if rc.Status != Pending || rc.unmet == 0 || m.joining(c) {
		m.released(c, t)
		return
	}
	rc.heard[t] = true
	m.skip(c, m.Tasks[t].ID, 2) // a branch that succeeded
	m.cascade()
}

// releaseReserved releases a reserved child that ignores its context.
func (m *Model) releaseReserved(id string) {
	if r := m.reserved(id); r != nil {
		r.released = true
	}
}

// heldReserved reports whether a reserved child depends on t.
func (m *Model) heldReserved(t int) bool {
	for _, p := range m.g.pend {
		for _, b := range p.batches {
			for _, r := range b {
				if slices.Contains(r.deps, t) {
					return true
				}
			}
		}
	}
	return false
}

// reservedKeys adds the keys of reserved children to kept.
func (m *Model) reservedKeys(kept map[string]bool) {
	for _, p := range m.g.pend {
		for _, b := range p.batches {
			for _, r := range b {
				kept[r.Key] = true
			}
		}
	}
}

// kin reports whether o and t are members of one family.
func (m *Model) kin(o, t int) bool {
	fo, ft := m.g.fam[m.Tasks[o]], m.g.fam[m.Tasks[t]]
	return fo != nil && ft != nil && fo.root >= 0 && fo.root == ft.root
}

// drop forgets t, final and free, with its family: only whole, once every
// member is final, its time up and free. It reports whether it dropped.
func (m *Model) drop(t int) bool {
	members := []int{t}
	if f := m.g.fam[m.Tasks[t]]; f != nil && f.root >= 0 {
		members = members[:0]
		for i, r := range m.Tasks {
			if !r.Dropped && m.kin(i, t) {
				if r.Status < Succeeded || m.Now < r.finalAt+m.keep || !m.free(i) {
					return false
				}
				members = append(members, i)
			}
		}
	}
	for _, i := range members {
		r := m.Tasks[i]
		r.Dropped = true
		delete(m.ByID, r.ID)
	}
	return true
}
