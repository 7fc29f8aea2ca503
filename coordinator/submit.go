package coordinator

import (
	"bytes"
	"context"
	"slices"
	"time"

	"github.com/batonhq/baton/internal/lane"
)

// submission is one Submit, SubmitContext, SubmitGraph or SubmitBatch:
// the tasks, and for a Graph their dependencies inside the batch by place.
type submission struct {
	watch   chan<- error // SubmitBatch: where the batch's ends are told once all are final (nil: not watched)
	tasks   []Task
	hstart  []int32 // nil, or: task i's places are handles[hstart[i]:hstart[i+1]]
	handles []int32
	values  context.Context // nil: no caller values
	scheds  []Schedule      // nil, or per task: its parsed Cron or its Schedule
	owned   bool            // tasks is a copy of the caller's slice: it may be changed
}

// own makes b.tasks a copy of the caller's slice, once, before a task of
// it is changed.
func (b *submission) own() {
	if !b.owned {
		b.tasks, b.owned = slices.Clone(b.tasks), true
	}
}

// copyPayloads gives the batch copies of its []byte payloads: the caller
// may reuse a buffer once Submit has returned, and the attempts (and, on
// a durable scheduler, the store) must see what was submitted.
func (b *submission) copyPayloads() {
	for i := range b.tasks {
		if p, ok := b.tasks[i].Payload.([]byte); ok && p != nil {
			b.own()
			b.tasks[i].Payload = bytes.Clone(p)
		}
	}
}

func (b *submission) places(i int) []int32 {
	if b.hstart == nil {
		return nil
	}
	return b.handles[b.hstart[i]:b.hstart[i+1]]
}

// submit checks what only the state can check (duplicates, unknown
// dependencies, cycles) and then stores the whole batch, or nothing.
// Static checks (validateTask) have already passed. Each ID is hashed
// once and inserted with one probe; dependencies given by place need no
// lookup at all.
func (s *state) submit(b *submission, now time.Time) error {
	if s.closing {
		return ErrClosed
	}
	tasks := b.tasks
	n := len(tasks)
	// Record indexes: records freed by retention first, then new ones.
	reused := min(len(s.recFree), n)
	base := int32(len(s.tasks))
	idx := make([]int32, n)
	for i := range idx {
		if i < reused {
			idx[i] = s.recFree[len(s.recFree)-1-i]
		} else {
			idx[i] = base + int32(i-reused)
		}
	}
	s.specs.Grow(base + int32(n-reused))
	for i := range tasks {
		*s.spec(idx[i]) = lane.Spec{ID: tasks[i].ID}
	}
	hashes := make([]uint32, n)
	s.ids.Reserve(n)
	claimed := 0
	undo := func() {
		for i := range claimed {
			s.ids.Delete(hashes[i], idx[i])
		}
		for _, t := range idx {
			*s.spec(t) = lane.Spec{}
		}
	}
	for i := range tasks {
		hashes[i] = s.ids.Hash(tasks[i].ID)
	}
	var sink uint64 // the look-ahead's loads, kept so they are not optimised away
	for i := range tasks {
		if i+lookAhead < n {
			sink += s.ids.Touch(hashes[i+lookAhead])
		}
		id := tasks[i].ID
		j, fresh := s.ids.Insert(id, hashes[i], idx[i], s.key)
		if !fresh {
			detail := "submitted before"
			if slices.Contains(idx[:i], j) {
				detail = "twice in the batch"
			}
			undo()
			return &TaskError{ID: id, Err: ErrDuplicateID, Detail: detail}
		}
		claimed++
	}
	// Resolve dependencies: deps[dstart[i]:dstart[i+1]] are task i's, as
	// record indexes; places the same, as places in the batch (-1: before).
	var reusedAt map[int32]int32 // reused record -> place
	if reused > 0 {
		reusedAt = make(map[int32]int32, reused)
		for i, t := range idx[:reused] {
			reusedAt[t] = int32(i)
		}
	}
	place := func(j int32) int32 {
		if j >= base {
			return int32(reused) + j - base
		}
		if reusedAt != nil && s.hot[j].status == dropped {
			return reusedAt[j]
		}
		return -1
	}
	dstart := make([]int32, n+1)
	total, named := 0, 0
	for i := range tasks {
		total += len(tasks[i].Deps) + len(b.places(i))
		named += len(tasks[i].Deps)
	}
	deps, places := make([]int32, 0, total), make([]int32, 0, total)
	depHashes := make([]uint32, 0, named)
	for i := range tasks {
		for _, d := range tasks[i].Deps {
			depHashes = append(depHashes, s.ids.Hash(d))
		}
	}
	forward := false // a dependency on a later place in the batch: a cycle is possible
	k := 0
	for i := range tasks {
		mark := len(deps)
		var seen map[int32]struct{}
		for _, p := range b.places(i) {
			deps, places = appendDep(deps, places, mark, idx[p], p, &seen)
			forward = forward || p >= int32(i)
		}
		for _, d := range tasks[i].Deps {
			if k+lookAhead < named {
				sink += s.ids.Touch(depHashes[k+lookAhead])
			}
			j, ok := s.ids.Find(d, depHashes[k], s.key)
			k++
			if !ok {
				undo()
				return &TaskError{ID: tasks[i].ID, Err: ErrUnknownDependency, Detail: quoteID(d)}
			}
			p := place(j)
			deps, places = appendDep(deps, places, mark, j, p, &seen)
			forward = forward || p >= int32(i)
		}
		dstart[i+1] = int32(len(deps))
	}
	s.sink += sink
	if forward { // dependencies only on earlier places cannot form a cycle
		if err := findCycle(tasks, dstart, places); err != nil {
			undo()
			return err
		}
	}

	// The arena: every task's dependencies, then every task's successors
	// inside the batch, contiguous, so that releasing a wide frontier reads
	// memory in order.
	sstart := make([]int32, n+1)
	for _, p := range places {
		if p >= 0 {
			sstart[p+1]++
		}
	}
	for i := range n {
		sstart[i+1] += sstart[i]
	}
	nd := int32(len(deps))
	edges := make([]int32, int(nd)+int(sstart[n]))
	copy(edges, deps)
	fill := slices.Clone(sstart[:n])
	for i := range n {
		for k := dstart[i]; k < dstart[i+1]; k++ {
			if p := places[k]; p >= 0 {
				edges[nd+fill[p]] = idx[i]
				fill[p]++
			}
		}
	}
	a := s.newArena(edges, int32(n))

	s.recFree = s.recFree[:len(s.recFree)-reused]
	s.tasks = slices.Grow(s.tasks, n-reused)
	s.hot = slices.Grow(s.hot, n-reused)
	if s.retain {
		s.held = slices.Grow(s.held, n-reused)
	}
	for i := range tasks {
		t := &tasks[i]
		pool := s.byName[t.Pool]
		s.pools[pool].minPrio = min(s.pools[pool].minPrio, int32(t.Priority))
		s.pools[pool].maxPrio = max(s.pools[pool].maxPrio, int32(t.Priority))
		hr := hot{pool: uint16(pool), prio: int32(t.Priority), flags: uint8(t.When) << fRuleShift}
		r := rec{link: noTask, arena: a,
			deps: span{dstart[i], dstart[i+1] - dstart[i]}, succ: span{nd + sstart[i], sstart[i+1] - sstart[i]}}
		sp := s.spec(idx[i])
		sp.Run = t.Run
		if t.Payload != nil || t.Timeout > 0 || t.Retry.RetryIf != nil {
			sp.X = &lane.SpecX{Payload: t.Payload, Timeout: t.Timeout, RetryIf: t.Retry.RetryIf}
		}
		if needsExtra(t) || b.values != nil {
			hr.flags |= fExtra
			r.x = &extra{retry: t.Retry, every: t.Every, times: t.Times, values: b.values, missed: t.Missed}
			if b.scheds != nil {
				r.x.sched = b.scheds[i]
			}
			if r.x.missed == MissedDefault {
				r.x.missed = RunEachMissed
				if r.x.sched != nil {
					r.x.missed = RunOnceForMissed
				}
			}
			if t.Delay > 0 {
				r.x.notBefore = addSat(now, t.Delay)
			}
		}
		if i < reused {
			s.tasks[idx[i]], s.hot[idx[i]] = r, hr
		} else {
			s.tasks = append(s.tasks, r)
			s.hot = append(s.hot, hr)
			if s.retain {
				s.held = append(s.held, holds{})
			}
		}
	}
	s.open += n

	// Wire the edges from earlier tasks. A dependency that has ended
	// already counts like any other and is applied once every edge is
	// wired, as its end would have been (cascade.go): a success under a
	// rule, an end without success under every rule (a Skipped one that is
	// not settled yet goes on telling the task what changes).
	var ended [][2]int32 // (task, its dependency that has ended already)
	for i, t := range idx {
		for k := dstart[i]; k < dstart[i+1]; k++ {
			j := deps[k]
			if s.retain {
				s.held[j].kids++
			}
			if places[k] >= 0 { // in the batch: pending, its succ list holds t
				s.hot[t].unmet++
				if s.hot[t].pool != s.hot[j].pool {
					s.hot[j].flags |= fCross
				}
				if s.retain {
					s.held[t].preds++
				}
				continue
			}
			switch st := s.hot[j].status; {
			case st == Succeeded && s.hot[t].flags&fRule == 0:
			case st.Final():
				s.hot[t].unmet++
				ended = append(ended, [2]int32{t, j})
				if !s.settledEnd(j) {
					x := s.extra(j)
					x.more = append(x.more, t)
					if s.retain {
						s.held[t].preds++
					}
				}
			default:
				x := s.extra(j)
				x.more = append(x.more, t)
				s.hot[t].unmet++
				if s.hot[t].pool != s.hot[j].pool {
					s.hot[j].flags |= fCross
				}
				s.hurry(j) // handed out before t was known: its success now releases t
				if s.retain {
					s.held[t].preds++
				}
			}
		}
	}
	if s.dur != nil && s.dur.restoring {
		return nil // restore lays the stored states over the graph (durable.go)
	}
	for _, t := range idx {
		if h := &s.hot[t]; h.status == Pending && h.unmet == 0 {
			s.eligible(t, now)
		}
	}
	for _, e := range ended {
		t, j := e[0], e[1]
		if s.hot[j].status == Succeeded {
			s.released(t, now)
			continue
		}
		s.onEnded(t, j, now)
		s.cascade(now) // what t's end changed reaches its dependents before t settles
		if s.settledEnd(j) {
			s.onSettled(t, j, now)
			s.cascade(now)
		}
	}
	return nil
}

// lookAhead is how far ahead submit touches the ID table's slots.
const lookAhead = 8

// appendDep adds dependency j (at place p) unless the task already lists
// it since mark: a dependency named twice is one edge. Short lists are
// searched; a long one is checked against seen, built for it on demand.
func appendDep(deps, places []int32, mark int, j, p int32, seen *map[int32]struct{}) ([]int32, []int32) {
	if n := len(deps) - mark; n < 16 {
		if slices.Contains(deps[mark:], j) {
			return deps, places
		}
	} else {
		if *seen == nil {
			*seen = make(map[int32]struct{}, 2*n)
			for _, d := range deps[mark:] {
				(*seen)[d] = struct{}{}
			}
		}
		if _, dup := (*seen)[j]; dup {
			return deps, places
		}
		(*seen)[j] = struct{}{}
	}
	return append(deps, j), append(places, p)
}

func (s *state) newArena(edges []int32, live int32) int32 {
	if k := len(s.arenaFree); k > 0 {
		a := s.arenaFree[k-1]
		s.arenaFree = s.arenaFree[:k-1]
		s.arenas[a] = arena{edges: edges, live: live}
		return a
	}
	s.arenas = append(s.arenas, arena{edges: edges, live: live})
	return int32(len(s.arenas) - 1)
}

func needsExtra(t *Task) bool {
	p := t.Retry
	return t.Delay > 0 || t.Every > 0 || t.Cron != "" || t.Schedule != nil || p.MaxAttempts > 1 || p.BaseDelay > 0 || p.MaxDelay > 0 || p.Jitter > 0
}

// addSat returns t+d, saturating instead of overflowing (the workers'
// deadlines use the same, lane.AddSat).
func addSat(t time.Time, d time.Duration) time.Time { return lane.AddSat(t, d) }

// root is the task to blame for j's end without success: j itself (it
// failed, was cancelled, or its own rule skipped it), or j's cause.
func (s *state) root(j int32) int32 {
	if s.hot[j].status == Skipped && s.tasks[j].link != noTask {
		return s.tasks[j].link
	}
	return j
}

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
			s.skip(t, noTask, now)
			s.cascade(now)
			return
		}
	}
	s.schedule(t, start, now)
}

// schedule makes t ready at due: at once if due has come, else through the
// delayed set.
func (s *state) schedule(t int32, due, now time.Time) {
	r := &s.tasks[t]
	if due.After(now) {
		if handle, ok := s.wheel.Add(due, t); ok {
			s.hot[t].status = Pending
			r.x.timer, r.x.inWheel, r.x.due = handle, true, due
			s.touched(t)
			return
		}
	}
	s.pushReady(t, now)
}

func (s *state) pushReady(t int32, now time.Time) {
	if s.stamps {
		s.stampReady(t, now)
	}
	h := &s.hot[t]
	h.status = Ready
	s.rseq++
	h.rseq = s.rseq
	p := &s.pools[h.pool]
	p.ready.Push(int(h.prio), uint64(h.rseq)<<32|uint64(uint32(t)))
	p.readyLive++
}

// requeue puts a task whose item was taken back at the head of its level,
// where it was before it was handed out.
func (s *state) requeue(t int32) {
	h := &s.hot[t]
	h.status = Ready
	s.rseq++
	h.rseq = s.rseq
	p := &s.pools[h.pool]
	p.ready.PushFront(int(h.prio), uint64(h.rseq)<<32|uint64(uint32(t)))
	p.readyLive++
}

// fire makes the delayed entries due by now ready: the timer goroutine
// woke the loop.
func (s *state) fire(now time.Time) {
	s.scratch = s.wheel.Advance(now, s.scratch[:0], maxFirePerStep)
	for _, t := range s.scratch {
		s.tasks[t].x.inWheel = false
		s.pushReady(t, now)
	}
	s.scratch = s.scratch[:0]
}
