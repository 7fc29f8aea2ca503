package refmodel

import (
	"errors"
	"slices"
)

// Re-run (coordinator.Rerun), as its documentation says: a re-opened task
// is Pending again with a fresh attempt budget and decided by its rule as
// if submitted now; with downstream, every task downstream of the named
// ones (through dependencies, and from a child to its spawner whose join
// failed) that did not succeed is re-opened too; a re-run spawner's
// family is forgotten first (refused if a task outside it depends on a
// member); a re-run child re-opens its spawner's failed join (refused if
// its spawner ended otherwise); the re-opened tasks are decided in the
// graph's order, ties by ID.

// Errors the model predicts for Rerun.
var (
	ErrUnknownTask   = errors.New("unknown task")
	ErrNotRerunnable = errors.New("cannot re-run")
)

// Rerun returns what Scheduler.Rerun must: the tasks re-opened, in order,
// or the error.
func (m *Model) Rerun(ids []string, downstream bool) ([]string, error) {
	if m.Closing {
		return nil, ErrClosed
	}
	var named []int
	for _, id := range ids {
		t, ok := m.ByID[id]
		if !ok {
			return nil, ErrUnknownTask
		}
		named = append(named, t)
	}
	set := map[int]bool{}
	var order []int
	add := func(t int) {
		if !set[t] {
			set[t] = true
			order = append(order, t)
		}
	}
	for _, t := range named {
		r := m.Tasks[t]
		if r.Status < Succeeded || m.joining(t) || r.Status == Succeeded {
			return nil, ErrNotRerunnable
		}
		add(t)
	}
	joins := map[int]bool{}
	if downstream {
		seen := map[int]bool{}
		reopens := map[int]bool{} // what runs or joins again: only those re-open a failed join
		work := slices.Clone(order)
		for _, t := range work {
			seen[t], reopens[t] = true, true
		}
		visit := func(c int, join bool) {
			if join {
				joins[c], reopens[c] = true, true
			}
			if !seen[c] {
				seen[c] = true
				work = append(work, c)
				if r := m.Tasks[c]; !join && r.Status > Succeeded {
					add(c)
					reopens[c] = true
				}
			}
		}
		for len(work) > 0 {
			t := work[len(work)-1]
			work = work[:len(work)-1]
			for _, c := range m.dependents(t) {
				visit(c, false)
			}
			if p := m.parentOf(t); p >= 0 && reopens[t] && m.joinFailed(p) {
				visit(p, true)
			}
		}
	}
	var spawners []int
	gone := map[int]bool{}
	for _, t := range order {
		if f := m.g.fam[m.Tasks[t]]; f != nil && len(f.children[f.first:]) > 0 {
			spawners = append(spawners, t)
			for _, c := range m.familyOf(t) {
				gone[c] = true
			}
		}
	}
	spawners = slices.DeleteFunc(spawners, func(p int) bool { return gone[p] }) // in a family replaced whole
	for _, p := range spawners {
		for _, c := range m.familyOf(p) {
			for _, d := range m.dependents(c) {
				if !gone[d] {
					return nil, ErrNotRerunnable
				}
			}
		}
	}
	// Up the spawners, from every task and every join that re-opens: each
	// join that failed through it re-opens (one already marked is walked
	// through: what is above it re-opens or refuses too).
	starts := slices.Clone(order)
	for p := range joins {
		starts = append(starts, p)
	}
	slices.Sort(starts[len(order):])
	for _, t := range starts {
		if gone[t] {
			continue
		}
		for p := m.parentOf(t); p >= 0 && !gone[p] && !set[p] && !m.joining(p); p = m.parentOf(p) {
			if !m.joinFailed(p) {
				return nil, ErrNotRerunnable
			}
			joins[p] = true
		}
	}
	for p := range joins {
		if gone[p] || set[p] {
			delete(joins, p)
		}
	}

	// The skips that blame what re-opens keep their class.
	causes := map[string]bool{}
	for _, t := range order {
		if !gone[t] {
			causes[m.Tasks[t].ID] = true
		}
	}
	for p := range joins {
		causes[m.Tasks[p].ID] = true
	}
	for i, r := range m.Tasks {
		if !r.Dropped && m.ByID[r.ID] == i && r.Status == Skipped && r.kept == 0 && causes[r.Cause] && !causes[r.ID] {
			r.kept = m.classOfID(r.Cause) + 1
		}
	}
	for _, p := range spawners {
		m.dropFamily(p)
	}
	var reopened []int
	for _, t := range order {
		if !gone[t] && !joins[t] {
			m.reopen(t)
			reopened = append(reopened, t)
		}
	}
	var js []int
	for p := range joins {
		js = append(js, p)
	}
	slices.Sort(js)
	for _, p := range js {
		m.reopenJoin(p)
		reopened = append(reopened, p)
	}
	m.recount(reopened)
	reopened = m.rerunOrder(reopened)
	m.settleReopened(reopened)
	m.joinAll()
	m.run()
	m.Forget()
	out := make([]string, len(reopened))
	for i, t := range reopened {
		out[i] = m.Tasks[t].ID
	}
	return out, nil
}

// dependents returns the live tasks that depend on t, in submission order.
func (m *Model) dependents(t int) []int {
	var out []int
	for i, r := range m.Tasks {
		if !r.Dropped && m.ByID[r.ID] == i && slices.Contains(r.deps, t) {
			out = append(out, i)
		}
	}
	return out
}

// parentOf returns t's spawner, or -1.
func (m *Model) parentOf(t int) int {
	if f := m.g.fam[m.Tasks[t]]; f != nil {
		return f.parent
	}
	return -1
}

// joinFailed reports whether t ended Failed by its join.
func (m *Model) joinFailed(t int) bool {
	f := m.g.fam[m.Tasks[t]]
	return f != nil && f.failedJoin && m.Tasks[t].Status == Failed
}

// familyOf lists the family of t's current join: its children and theirs.
func (m *Model) familyOf(t int) []int {
	var out []int
	work := []int{t}
	for len(work) > 0 {
		u := work[len(work)-1]
		work = work[:len(work)-1]
		f := m.g.fam[m.Tasks[u]]
		if f == nil {
			continue
		}
		kids := f.children
		if u == t {
			kids = kids[f.first:]
		}
		for _, c := range kids {
			if !m.Tasks[c].Dropped {
				out = append(out, c)
				work = append(work, c)
			}
		}
	}
	return out
}

// dropFamily forgets the family of t's current join, which its re-run
// replaces.
func (m *Model) dropFamily(t int) {
	for _, c := range m.familyOf(t) {
		r := m.Tasks[c]
		r.Dropped = true
		if m.ByID[r.ID] == c {
			delete(m.ByID, r.ID)
		}
	}
	f := m.g.fam[m.Tasks[t]]
	f.children = f.children[:f.first]
	f.open = 0
}

// reopen makes final task t Pending again, with a fresh attempt budget.
func (m *Model) reopen(t int) {
	r := m.Tasks[t]
	r.Status = Pending
	r.Attempts = 0
	r.Cause, r.kept = "", 0
	r.Reruns++
	r.cancelReq = false
	r.settled = false
	r.Events = append(r.Events, "reopened")
	if f := m.g.fam[r]; f != nil {
		f.branched, f.chosen, f.failedJoin = false, nil, false
	}
}

// reopenJoin makes t, whose join failed, join its children again.
func (m *Model) reopenJoin(t int) {
	r := m.Tasks[t]
	f := m.g.fam[r]
	f.joining, f.failedJoin = true, false
	r.Status = Pending
	r.Reruns++
	r.cancelReq = false
	r.settled = false
	r.Events = append(r.Events, "reopened")
}

// recount counts again, for the re-opened tasks and what depends on them,
// what each still waits to hear of, as the ends are now; and the open
// children of each re-opened join.
func (m *Model) recount(reopened []int) {
	touched := map[int]bool{}
	isReopened := map[int]bool{}
	for _, t := range reopened {
		touched[t], isReopened[t] = true, true
		if p := m.parentOf(t); p >= 0 {
			touched[p] = true
		}
		for _, c := range m.dependents(t) {
			touched[c] = true
			if !slices.Contains(m.Tasks[t].succ, c) {
				m.Tasks[t].succ = append(m.Tasks[t].succ, c)
			}
		}
	}
	for t := range touched {
		r := m.Tasks[t]
		switch {
		case m.joining(t):
			f := m.g.fam[r]
			f.open = 0
			for _, c := range f.children[f.first:] {
				if m.Tasks[c].Status < Succeeded || m.joining(c) {
					f.open++
				}
			}
		case r.Status == Skipped:
			for _, d := range r.deps {
				if isReopened[d] {
					delete(r.heard, d) // it may still hear of it
				}
			}
		case isReopened[t]: // settleReopened counts it as a task submitted now
		case r.Status == Pending && r.unmet > 0:
			r.unmet = 0
			for _, d := range r.deps {
				rd := m.Tasks[d]
				if isReopened[d] {
					delete(r.heard, d)
				}
				var counted bool
				switch r.When {
				case AllSucceeded:
					counted = rd.Status == Succeeded
				case AllDone:
					counted = rd.Status >= Succeeded && !m.joining(d)
				default:
					counted = m.decidedEnd(d)
				}
				if !counted {
					r.unmet++
				}
			}
		}
	}
}

// decidedEnd: t is final and, if Skipped, its class is final.
func (m *Model) decidedEnd(t int) bool {
	r := m.Tasks[t]
	return r.Status >= Succeeded && !m.joining(t) && (r.Status != Skipped || r.settled || m.class(r) == 0)
}

// rerunOrder orders the re-opened tasks each after those it waits for
// (dependencies, a joining spawner's children), ties by ID.
func (m *Model) rerunOrder(tasks []int) []int {
	in := map[int]bool{}
	for _, t := range tasks {
		in[t] = true
	}
	waits := map[int]int{}
	next := map[int][]int{}
	for _, t := range tasks {
		for _, d := range m.Tasks[t].deps {
			if in[d] && d != t {
				next[d] = append(next[d], t)
				waits[t]++
			}
		}
		if p := m.parentOf(t); p >= 0 && in[p] {
			next[t] = append(next[t], p)
			waits[p]++
		}
	}
	var ready, out []int
	for _, t := range tasks {
		if waits[t] == 0 {
			ready = append(ready, t)
		}
	}
	for len(ready) > 0 {
		slices.SortFunc(ready, func(a, b int) int {
			if m.Tasks[a].ID < m.Tasks[b].ID {
				return -1
			}
			return 1
		})
		t := ready[0]
		ready = ready[1:]
		out = append(out, t)
		for _, c := range next[t] {
			if waits[c]--; waits[c] == 0 {
				ready = append(ready, c)
			}
		}
	}
	return out
}

// settleReopened decides the re-opened tasks (not the joins), in order,
// as a batch submitted now is decided (settleBatch).
func (m *Model) settleReopened(order []int) {
	var idx []int
	var ended [][2]int
	for _, t := range order {
		r := m.Tasks[t]
		if r.Status != Pending || m.joining(t) {
			continue
		}
		idx = append(idx, t)
		r.heard = map[int]bool{}
		r.unmet = 0
		for _, j := range r.deps {
			dr := m.Tasks[j]
			hear := func() {
				if !slices.Contains(dr.succ, t) {
					dr.succ = append(dr.succ, t)
				}
			}
			switch {
			case dr.Status == Succeeded && r.When == AllSucceeded && !m.branched(j):
				r.heard[j] = true
			case dr.Status >= Succeeded:
				r.unmet++
				ended = append(ended, [2]int{t, j})
				if !dr.settled {
					hear()
				}
			default:
				hear()
				r.unmet++
			}
		}
	}
	m.applyEnded(idx, ended)
}
