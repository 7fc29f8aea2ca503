package coordinator

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/batonhq/baton/actor"
)

// Where a re-run is decided: Rerun re-opens final tasks that did not
// succeed, as one request (Airflow's clear, River UI's retry). A
// re-opened task is as if submitted again where it stands: Pending, a
// fresh attempt budget, its dependencies counted again as they are now,
// and then decided by its rule as any task (it may run at once, wait, or
// be skipped again at once if a dependency it needs still did not
// succeed). Its history goes on (History; TaskInfo.Reruns counts the
// re-runs). What depends on it and is not re-opened keeps its end; a
// dependent still waiting waits for the new end.
//
// Families: a re-run spawner runs its function again and spawns a new
// family in place of the old, which is forgotten first (its members'
// IDs are free for the new spawn); a task outside the family that depends
// on a member keeps it, and the re-run is refused. A re-run child whose
// spawner's join failed re-opens that join, and so on up: each spawner
// above whose join failed through it (ErrChildFailed) is Pending (joining)
// again, holding no worker, and ends by its leaves once they are all
// final, as the first time; a spawner above that ended otherwise refuses
// the re-run. Branches choose again when re-run;
// a task a branch did not choose is skipped again as not chosen unless
// its branch is re-run too. A series re-run runs its failed run again,
// then goes on from its next start after now.

// ErrNotRerunnable: Rerun was asked to re-open a task it cannot (wrapped
// in a *TaskError saying why: not final, succeeded, or in a family that
// forbids it); nothing was re-opened.
var ErrNotRerunnable = errors.New("coordinator: cannot re-run")

// RerunRequest is what Rerun re-opens.
type RerunRequest struct {
	IDs        []string // tasks that failed, were cancelled or were skipped
	Downstream bool     // also every task downstream of them (through dependencies and joins) that did not succeed
	By         string   // who asks (an operator, a tool): Event.Cause of their EventReopened and the log lines say it
}

// RerunResult says what Rerun re-opened.
type RerunResult struct {
	Reopened []string // every task re-opened (spawners whose join re-opened included), dependencies before dependents
}

// Rerun re-opens the tasks req names, and with req.Downstream every task
// downstream of them that did not succeed, as one request: either all of
// them are re-opened, or, with an error, none. Each re-opened task is
// Pending again with a fresh attempt budget and is decided by its rule as
// if submitted now; an EventReopened (Cause: req.By) tells each, and a
// log line at Info. See the top of rerun.go, in short: a re-run spawner
// spawns a new family in place of the old; a re-run child re-opens its
// spawners' failed joins; a branch chooses again; a series runs its failed
// run again. Nothing re-runs by itself: only Rerun re-opens.
//
// It returns a *TaskError wrapping ErrUnknownTask for an ID unknown (or
// forgotten by retention), ErrNotRerunnable for a task that is not final,
// succeeded, whose family forbids it (see above), or that could not run
// with its pool as New was given it (a restored store: more slots than
// the pool has now, or no function for a pool whose worker now runs
// functions; the downstream tasks of req included), ErrClosed after
// Shutdown, and ctx.Err() if ctx ends before the coordinator took the
// request. On a durable scheduler (WithStore) it returns once the re-run
// is committed, as Submit does. It blocks for a round trip to the
// coordinator and is safe for concurrent use.
func (s *Scheduler) Rerun(ctx context.Context, req RerunRequest) (RerunResult, error) {
	if s.closed.Load() {
		return RerunResult{}, s.closedErr()
	}
	if err := ctx.Err(); err != nil {
		return RerunResult{}, err
	}
	r := &rerunReq{req: req, reply: make(chan error, 1)}
	if err := s.mailbox.Send(ctx, r); err != nil {
		if errors.Is(err, actor.ErrStopped) {
			return RerunResult{}, s.closedErr()
		}
		return RerunResult{}, err
	}
	err := <-r.reply
	if errors.Is(err, ErrClosed) {
		return RerunResult{}, s.closedErr()
	}
	if err != nil {
		return RerunResult{}, err
	}
	return r.res, nil
}

type rerunReq struct {
	req   RerunRequest
	res   RerunResult // written before the reply
	reply chan error
}

func (r *rerunReq) apply(l *loop, now time.Time) {
	res, err := l.st.rerun(&r.req, now)
	if err != nil {
		r.reply <- err
		return
	}
	r.res = res
	l.st.later(answer{err: r.reply}) // once committed, on a durable scheduler
}

// rerun implements Rerun.
func (s *state) rerun(req *RerunRequest, now time.Time) (RerunResult, error) {
	if s.closing {
		return RerunResult{}, ErrClosed
	}
	if s.dur != nil && s.dur.failed != nil {
		return RerunResult{}, s.dur.failed
	}
	refuse := func(t int32, why string, args ...any) error {
		return &TaskError{ID: s.key(t), Err: ErrNotRerunnable, Detail: fmt.Sprintf(why, args...)}
	}
	if s.retain {
		s.settleEnds() // the ends this iteration settled before it, counted first (settleEnds)
	}
	var named []int32
	for _, id := range req.IDs {
		t, ok := s.findLive(id)
		if !ok || s.hot[t].status == reserved {
			return RerunResult{}, &TaskError{ID: id, Err: ErrUnknownTask}
		}
		named = append(named, t)
	}
	set := map[int32]bool{}
	var order []int32 // the set, as found
	add := func(t int32) {
		if !set[t] {
			set[t] = true
			order = append(order, t)
		}
	}
	for _, t := range named {
		switch st := s.status(t); {
		case !st.Final():
			return RerunResult{}, refuse(t, "it is %v: only a final task can be re-run", st)
		case st == Succeeded:
			return RerunResult{}, refuse(t, "it succeeded: re-run the tasks downstream of it that did not")
		}
		add(t)
	}
	joins := map[int32]bool{} // spawners whose failed join re-opens
	// Who depends on whom, those submitted after a dependency's end had
	// settled included (wireEarlier left them off its successors: it had
	// nothing more to tell them). A re-run is rare: one look at every task.
	dependents := s.dependentsIndex()
	if req.Downstream {
		s.rerunDownstream(order, add, joins, dependents)
	}
	// Families: a spawner re-run replaces its family; a child re-run
	// re-opens its spawner's failed join.
	var spawners []int32
	for _, t := range order {
		if x := s.tasks[t].x; s.fam != nil && x != nil && len(x.children[s.fam[t].first:]) > 0 {
			spawners = append(spawners, t)
		}
	}
	gone := map[int32]bool{} // members of the families replaced
	for _, p := range spawners {
		for _, m := range s.familyOf(p) {
			gone[m] = true
		}
	}
	spawners = slices.DeleteFunc(spawners, func(p int32) bool { return gone[p] }) // in a family replaced whole
	for _, p := range spawners {
		members := s.familyOf(p)
		for _, m := range members {
			for _, c := range dependents[m] {
				if !gone[c] {
					return RerunResult{}, refuse(p, "%s, outside its family, depends on %s, which it spawned: its family cannot be replaced", quoteID(s.key(c)), quoteID(s.key(m)))
				}
			}
		}
	}
	// Up the spawners, from every task that re-opens and every join that
	// re-opens (Downstream finds joins of its own): a join that failed
	// through the task's (its child failed, or a child's join did)
	// re-opens too, so that no final spawner keeps a family member that
	// runs again (a re-run of it would replace a family still running).
	// A join already marked is walked through, not stopped at: what is
	// above it must re-open or refuse as well.
	starts := append(slices.Clone(order), sortedTasks(joins)...)
	for _, t := range starts {
		if gone[t] {
			continue
		}
		p := int32(noTask)
		if s.fam != nil {
			p = s.fam[t].parent
		}
		for up := false; p != noTask && !gone[p] && !set[p]; up = true {
			hp := &s.hot[p]
			if hp.status == joining {
				break
			}
			if hp.status == Failed && errors.Is(s.errOf(p), ErrChildFailed) {
				joins[p] = true
				p = s.fam[p].parent
				continue
			}
			what := "its spawner"
			if up {
				what = "a spawner above it"
			}
			if why := s.cannotRun(p); why != "" {
				return RerunResult{}, refuse(t, "%s %s is %v, and cannot be re-run either: %s", what, quoteID(s.key(p)), s.status(p), why)
			}
			return RerunResult{}, refuse(t, "%s %s is %v: re-run %s instead", what, quoteID(s.key(p)), s.status(p), quoteID(s.key(p)))
		}
	}
	for p := range joins {
		if gone[p] || set[p] { // re-run whole (a new family), or replaced with its spawner's
			delete(joins, p)
		}
	}
	// What runs again must fit the pools as they are now: a store restored
	// with a smaller pool, or another kind of worker for it, keeps final
	// tasks that no longer would (restore.go's taskOf).
	for _, t := range order {
		if gone[t] || joins[t] {
			continue
		}
		if why := s.cannotRun(t); why != "" {
			return RerunResult{}, refuse(t, "%s", why)
		}
	}

	// Apply: keep the class of the skips that blame what re-opens
	// (causeclass.go), forget the families replaced, re-open the tasks and
	// the joins, count their dependencies again, decide.
	causes := maps.Clone(joins)
	for _, t := range order {
		if !gone[t] {
			causes[t] = true
		}
	}
	s.freezeBlamers(causes)
	for _, p := range spawners {
		s.dropFamily(p)
	}
	var reopened []int32
	for _, t := range order {
		if !gone[t] && !joins[t] {
			s.reopen(t, req.By, now)
			reopened = append(reopened, t)
		}
	}
	for _, p := range sortedTasks(joins) {
		s.reopenJoin(p, req.By, now)
		reopened = append(reopened, p)
	}
	s.recountAfterRerun(reopened, dependents)
	reopened = s.rerunOrder(reopened)
	s.settleReopened(reopened, now)
	s.joinAll(now)
	res := RerunResult{Reopened: make([]string, len(reopened))}
	for i, t := range reopened {
		res.Reopened[i] = s.key(t)
	}
	return res, nil
}

// cannotRun says why t could not run with its pool as New gave it ("":
// it can): a store restored with a smaller pool, or another kind of
// worker for it, keeps final tasks that no longer would (restore.go's
// taskOf).
func (s *state) cannotRun(t int32) string {
	pool := s.hot[t].pool
	if x := s.tasks[t].x; x != nil && x.slots > int32(s.pools[pool].size) {
		return fmt.Sprintf("it takes %d slots, and its pool %s now has %d workers", x.slots, quoteID(s.pools[pool].name), s.pools[pool].size)
	}
	if s.dur != nil && s.dur.runs[pool] && s.spec(t).Run == nil {
		return fmt.Sprintf("it names no function (WithFunc), and its pool %s now has a worker that runs functions", quoteID(s.pools[pool].name))
	}
	return ""
}

// rerunDownstream adds to the set, through add, every final task that did
// not succeed downstream of the tasks in order (through dependencies, and
// from a child to its spawner, whose failed join joins re-opens),
// transitively.
func (s *state) rerunDownstream(order []int32, add func(int32), joins map[int32]bool, dependents map[int32][]int32) {
	seen := map[int32]bool{}
	reopens := map[int32]bool{} // what runs again or joins again: only those re-open their spawner's failed join
	work := slices.Clone(order)
	for _, t := range work {
		seen[t], reopens[t] = true, true
	}
	visit := func(c int32, join bool) {
		if join {
			joins[c], reopens[c] = true, true // its join re-opens; it does not run again
		}
		if !seen[c] && !hidden(s.hot[c].status) {
			seen[c] = true
			work = append(work, c)
			if st := s.status(c); !join && st.Final() && st != Succeeded {
				add(c)
				reopens[c] = true
			}
		}
	}
	for len(work) > 0 {
		t := work[len(work)-1]
		work = work[:len(work)-1]
		for _, c := range dependents[t] {
			visit(c, false)
		}
		// A Succeeded task on the way (an AnyFailed child, say) stays as it
		// is: its family has nothing that runs again because of it.
		if s.fam != nil && reopens[t] {
			if p := s.fam[t].parent; p != noTask && s.hot[p].status == Failed && errors.Is(s.errOf(p), ErrChildFailed) {
				visit(p, true)
			}
		}
	}
}

// familyOf lists the family of spawner p's current join: its children from
// fam.first on and theirs, through a worklist.
func (s *state) familyOf(p int32) []int32 {
	var out []int32
	work := []int32{p}
	for len(work) > 0 {
		u := work[len(work)-1]
		work = work[:len(work)-1]
		x := s.tasks[u].x
		if x == nil {
			continue
		}
		kids := x.children
		if u == p {
			kids = kids[s.fam[p].first:]
		}
		for _, c := range kids {
			if s.hot[c].status != dropped {
				out = append(out, c)
				work = append(work, c)
			}
		}
	}
	return out
}

// dropFamily forgets the family of p's current join (all final, held by
// nothing outside it: rerun checked), which a re-run of p replaces.
func (s *state) dropFamily(p int32) {
	members := s.familyOf(p)
	in := make(map[int32]bool, len(members))
	for _, m := range members {
		in[m] = true
	}
	var released []int32
	if s.retain {
		root := s.fam[p].root
		for _, m := range members {
			r := &s.tasks[m]
			for _, d := range s.edges(r, r.deps) {
				if !in[d] {
					s.held[d].kids--
					s.famHold(m, d, -1)
					released = append(released, d)
				}
			}
			if s.hot[m].status == Skipped && r.link != noTask && !in[r.link] {
				s.held[r.link].refs--
				s.famHold(m, r.link, -1)
				released = append(released, r.link)
			}
			if f := &s.fam[m]; f.ok && f.root != noTask {
				s.fam[f.root].ready--
			}
		}
		if root != noTask {
			s.fam[root].size -= int32(len(members))
		}
	}
	// A task outside the family that a member depends on, and that has not
	// settled, will walk its successors: the members' records, reused by a
	// later Submit, must not be among them.
	outside := map[int32]bool{}
	for _, m := range members {
		r := &s.tasks[m]
		for _, d := range s.edges(r, r.deps) {
			if !in[d] {
				outside[d] = true
			}
		}
	}
	for _, m := range members {
		s.unlink(m, s.ids.Hash(s.key(m)))
	}
	for d := range outside {
		if s.hot[d].status != dropped {
			s.pruneSuccessors(d)
		}
	}
	x := s.tasks[p].x
	clear(x.children[s.fam[p].first:])
	x.children = x.children[:s.fam[p].first]
	s.fam[p].open = 0
	s.touched(p) // its stored JoinFrom counts its children
	for _, d := range released {
		if s.hot[d].status != dropped {
			s.maybeDrop(d)
		}
	}
}

// reopen makes final task t Pending again, as if submitted now, with a
// fresh attempt budget; recountAfterRerun and decideReopened finish it.
func (s *state) reopen(t int32, by string, now time.Time) {
	r := &s.tasks[t]
	h := &s.hot[t]
	if h.status == Skipped && r.link != noTask {
		s.uncause(t)
	}
	h.status = Pending
	h.flags &^= fCancelReq | fClosed | fStarted | fFused
	r.attempts = 0
	if x := r.x; x != nil {
		x.err = nil
		if !x.recurring() {
			x.result, x.hasResult = nil, false
		}
		x.branched, x.chosen = false, nil
		x.startBy = time.Time{}
	}
	s.extra(t).reruns++
	s.open++
	if s.dur != nil {
		delete(s.dur.cancels, t)
	}
	s.reopened(t, by, now)
}

// reopenJoin makes p, a spawner whose join failed, joining again: it
// waits for its family, which a re-run child re-opens.
func (s *state) reopenJoin(p int32, by string, now time.Time) {
	h := &s.hot[p]
	h.status = joining
	h.flags &^= fCancelReq | fClosed
	x := s.tasks[p].x
	x.err = nil
	x.reruns++
	s.open++
	s.reopened(p, by, now)
}

// reopened is what every re-opened task shares: its event, its record
// (durable), and retention's plans for it dropped (it is not final).
func (s *state) reopened(t int32, by string, now time.Time) {
	if s.retain {
		s.held[t].dropDue = false
	}
	if e := s.emit(EventReopened, t, now); e != nil {
		e.Cause = by
	}
	s.touched(t)
}

// uncause takes t's skip cause off it (it is no longer skipped).
func (s *state) uncause(t int32) {
	r := &s.tasks[t]
	c := r.link
	r.link = noTask
	s.unfreeze(t)
	if s.retain && c != noTask {
		s.held[c].refs--
		s.famHold(t, c, -1)
		s.maybeDrop(c)
	}
}

// recountAfterRerun counts again, for each re-opened task and each
// dependent of one that waits or is skipped and not settled, the
// dependencies it has still to hear from (cascade.go), as they are now;
// and the open children of each spawner whose join re-opened.
func (s *state) recountAfterRerun(reopened []int32, dependents map[int32][]int32) {
	touched := map[int32]bool{}
	isReopened := map[int32]bool{}
	for _, t := range reopened {
		touched[t], isReopened[t] = true, true
		if s.fam != nil {
			if p := s.fam[t].parent; p != noTask {
				touched[p] = true
			}
		}
	}
	// Every dependent of a re-opened task hears its new end, those left
	// off its successors too; and only they: a task's successors are
	// walked again once it is re-opened, and a dependent forgotten since
	// it settled may have left its record to an unrelated task.
	for _, t := range reopened {
		s.pruneSuccessors(t)
		known := map[int32]bool{}
		for c := range s.successors(t) {
			known[c] = true
		}
		for _, c := range dependents[t] {
			if hidden(s.hot[c].status) {
				// Forgotten with a family this re-run replaced (dropFamily):
				// its record, reused by the new family's spawn, must not be
				// among t's successors twice.
				continue
			}
			touched[c] = true
			if !known[c] {
				x := s.extra(t)
				x.more = append(x.more, c)
				if s.hot[t].pool != s.hot[c].pool {
					s.hot[t].flags |= fCross
				}
			}
		}
	}
	for t := range touched {
		h := &s.hot[t]
		r := &s.tasks[t]
		switch {
		case h.status == joining:
			n := int32(0)
			for _, c := range r.x.children[s.fam[t].first:] {
				if !s.hot[c].status.Final() {
					n++
				}
			}
			s.fam[t].open = n
		case h.status == Skipped && h.unmet == 0: // settled: it keeps its end
		case h.status == Skipped:
			h.unmet = s.countUnsettled(t)
		case isReopened[t]: // settleReopened counts it as a task submitted now
		case h.status == Pending && h.unmet > 0:
			h.unmet = s.countUnmet(t)
		case h.status == Ready || h.status == dispatched:
			// Its rule let it go before the re-run (an AnyFailed task a
			// failure released) and it keeps going. A durable scheduler
			// writes it now: its readiness is otherwise not stored (a
			// restart works it out from its dependencies' ends, which no
			// longer say so), and a restart would take it back (restore's
			// released).
			s.touched(t)
		}
		if s.retain {
			s.held[t].preds = s.countUnsettled(t)
		}
	}
}

// dependentsIndex maps every task to the live tasks that depend on it.
func (s *state) dependentsIndex() map[int32][]int32 {
	out := map[int32][]int32{}
	for c := range s.tasks {
		c := int32(c)
		if hidden(s.hot[c].status) {
			continue
		}
		r := &s.tasks[c]
		for _, d := range s.edges(r, r.deps) {
			out[d] = append(out[d], c)
		}
	}
	return out
}

// sortedTasks returns the tasks of set in index order.
func sortedTasks(set map[int32]bool) []int32 {
	out := make([]int32, 0, len(set))
	for t := range set {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// rerunOrder orders the re-opened tasks as they are decided (and listed
// in RerunResult): each after the re-opened tasks it waits for (its
// dependencies; a joining spawner's children), ties by ID, so that the
// order is the graph's, whatever order the request found them in.
func (s *state) rerunOrder(tasks []int32) []int32 {
	in := make(map[int32]bool, len(tasks))
	for _, t := range tasks {
		in[t] = true
	}
	waits := map[int32]int{}    // re-opened tasks each waits for
	next := map[int32][]int32{} // who waits for each
	edge := func(from, to int32) { next[from] = append(next[from], to); waits[to]++ }
	for _, t := range tasks {
		r := &s.tasks[t]
		for _, d := range s.edges(r, r.deps) {
			if in[d] && d != t {
				edge(d, t)
			}
		}
		if s.fam != nil {
			if p := s.fam[t].parent; p != noTask && in[p] {
				edge(t, p)
			}
		}
	}
	ready := &idHeap{s: s}
	for _, t := range tasks {
		if waits[t] == 0 {
			heap.Push(ready, t)
		}
	}
	out := make([]int32, 0, len(tasks))
	for ready.Len() > 0 {
		t := heap.Pop(ready).(int32)
		out = append(out, t)
		for _, c := range next[t] {
			if waits[c]--; waits[c] == 0 {
				heap.Push(ready, c)
			}
		}
	}
	return out
}

// idHeap is a heap of tasks by ID (rerunOrder).
type idHeap struct {
	s *state
	t []int32
}

func (h *idHeap) Len() int           { return len(h.t) }
func (h *idHeap) Less(i, j int) bool { return h.s.key(h.t[i]) < h.s.key(h.t[j]) }
func (h *idHeap) Swap(i, j int)      { h.t[i], h.t[j] = h.t[j], h.t[i] }
func (h *idHeap) Push(x any)         { h.t = append(h.t, x.(int32)) }
func (h *idHeap) Pop() any {
	x := h.t[len(h.t)-1]
	h.t = h.t[:len(h.t)-1]
	return x
}

// settleReopened decides the re-opened tasks (not the joins), in order,
// as a batch submitted now is decided: each counts what it waits for as
// wireEarlier counts it, those whose dependencies are met are eligible,
// then the ends of their dependencies that had ended apply as those ends
// would have (settleBatch), a branch that did not choose a task last.
func (s *state) settleReopened(order []int32, now time.Time) {
	var idx []int32
	var ended [][2]int32
	for _, t := range order {
		h := &s.hot[t]
		if h.status != Pending {
			continue // a join: it waits for its children
		}
		idx = append(idx, t)
		h.unmet = 0
		r := &s.tasks[t]
		for _, j := range s.edges(r, r.deps) {
			switch st := s.hot[j].status; {
			case st == Succeeded && h.flags&fRule == 0 && !s.isBranch(j):
			case st.Final():
				h.unmet++
				ended = append(ended, [2]int32{t, j})
			default:
				h.unmet++
			}
		}
	}
	s.settleBatch(idx, ended, now)
}

// pruneSuccessors keeps in t's successor lists, in their order, only the
// live tasks that depend on t, each once: a dependent forgotten (by
// retention once t settled, or with a family a re-run replaced) may have
// left its record to a task that does not.
func (s *state) pruneSuccessors(t int32) {
	r := &s.tasks[t]
	seen := map[int32]bool{}
	keep := func(c int32) bool {
		if hidden(s.hot[c].status) || seen[c] {
			return false
		}
		if !containsTask(s.edges(&s.tasks[c], s.tasks[c].deps), t) {
			return false
		}
		seen[c] = true
		return true
	}
	succ := s.edges(r, r.succ)
	n := int32(0)
	for _, c := range succ {
		if keep(c) {
			succ[n] = c
			n++
		}
	}
	r.succ.n = n
	if x := r.x; x != nil {
		x.more = slices.DeleteFunc(x.more, func(c int32) bool { return !keep(c) })
	}
}
