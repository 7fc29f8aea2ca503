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
	watch     chan<- error // SubmitBatch: where the batch's ends are told once all are final (nil: not watched)
	tasks     []Task
	hstart    []int32 // nil, or: task i's places are handles[hstart[i]:hstart[i+1]]
	handles   []int32
	values    context.Context // nil: no caller values
	scheds    []Schedule      // nil, or per task: its parsed Cron or its Schedule
	owned     bool            // tasks is a copy of the caller's slice: it may be changed
	journaled bool            // SubmitJournaled: its caller keeps it until it is committed (journaled.go)
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
// Static checks (validateTask) have already passed. It runs in phases:
// claimIDs, resolveDeps and checkCycle can refuse the batch (undo then
// leaves the state as it was); storeRecords writes the records and their
// edges; wireEarlier ties the batch to the tasks submitted before; settleBatch
// makes ready, skips or holds each task as its dependencies' ends say (a
// restore stops before it: restore.go lays the stored states first).
func (s *state) submit(b *submission, now time.Time) error {
	if s.closing {
		return ErrClosed
	}
	sb := s.newBatchBuild(b)
	if err := sb.claimIDs(); err != nil {
		sb.undo()
		return err
	}
	if err := sb.resolveDeps(); err != nil {
		sb.undo()
		return err
	}
	if err := sb.checkReserved(); err != nil {
		sb.undo()
		return err
	}
	if err := sb.checkCycle(); err != nil {
		sb.undo()
		return err
	}
	sb.storeRecords(now)
	ended := sb.wireEarlier()
	if s.dur != nil && s.dur.restoring {
		return nil // restore lays the stored states over the graph (restore.go)
	}
	if b.watch != nil {
		// SubmitBatch: watched from the moment it is stored, before any
		// task of it can end (retention may forget a task as soon as it
		// ends; its end is kept in the watch).
		s.watchTasks(0, slices.Clone(sb.idx), b.watch)
	}
	s.settleBatch(sb.idx, ended, now)
	return nil
}

// batchBuild is one submit under way.
type batchBuild struct {
	s       *state
	b       *submission
	idx     []int32  // per task of the batch: its record
	reused  int      // the first reused records come from retention's free list
	base    int32    // the first new record
	hashes  []uint32 // per task: its ID's hash
	claimed int      // IDs inserted so far (undo removes them)
	dstart  []int32  // task i's dependencies are deps[dstart[i]:dstart[i+1]]
	deps    []int32  // record indexes
	places  []int32  // the same, as places in the batch (-1: submitted before)
	forward bool     // a dependency on a later place in the batch: a cycle is possible
	nd      int32    // len(deps): the successor lists follow them in the arena
	sstart  []int32  // task i's successors in the batch are arena[nd+sstart[i]:nd+sstart[i+1]]
	spawner int32    // Spawn: the task whose attempt spawns the batch (noTask: Submit)
	held    bool     // retention holds its dependencies already (a reserved batch): wireEarlier does not count them again
	pool    string   // the pool name record looked up last (a map lookup a task otherwise)
	poolIdx int      // its index; -1: none looked up yet
}

// newBatchBuild gives the batch its records, freed ones first, and their
// specs.
func (s *state) newBatchBuild(b *submission) *batchBuild {
	n := len(b.tasks)
	sb := &batchBuild{s: s, b: b, reused: min(s.recFree.n, n), base: int32(len(s.tasks)), idx: make([]int32, n), spawner: noTask, poolIdx: -1}
	s.recFree.lowest(sb.idx[:sb.reused])
	for i := sb.reused; i < n; i++ {
		sb.idx[i] = sb.base + int32(i-sb.reused)
	}
	s.specs.Grow(sb.base + int32(n-sb.reused))
	for i := range b.tasks {
		*s.spec(sb.idx[i]) = lane.Spec{ID: b.tasks[i].ID}
	}
	return sb
}

// undo takes back what a refused batch claimed.
func (sb *batchBuild) undo() {
	for i := range sb.claimed {
		sb.s.ids.Delete(sb.hashes[i], sb.idx[i])
	}
	for _, t := range sb.idx {
		*sb.s.spec(t) = lane.Spec{}
	}
}

// claimIDs inserts every ID in the table: each is hashed once and
// inserted with one probe, the table's slots touched lookAhead ahead.
func (sb *batchBuild) claimIDs() error {
	s, tasks := sb.s, sb.b.tasks
	n := len(tasks)
	sb.hashes = make([]uint32, n)
	s.ids.Reserve(n)
	for i := range tasks {
		sb.hashes[i] = s.ids.Hash(tasks[i].ID)
	}
	var sink uint64 // the look-ahead's loads, kept so they are not optimised away
	for i := range tasks {
		if i+lookAhead < n {
			sink += s.ids.Touch(sb.hashes[i+lookAhead])
		}
		id := tasks[i].ID
		j, fresh := s.ids.Insert(id, sb.hashes[i], sb.idx[i], s.key)
		if !fresh {
			detail := "submitted before"
			switch {
			case slices.Contains(sb.idx[:i], j):
				detail = "twice in the batch"
			case s.hot[j].status == reserved:
				detail = "spawned by an attempt still running"
			}
			return &TaskError{ID: id, Err: ErrDuplicateID, Detail: detail}
		}
		sb.claimed++
	}
	s.sink += sink
	return nil
}

// resolveDeps turns every dependency into a record index and a place in
// the batch (-1: submitted before): by handle for a Graph, by ID
// otherwise (one lookup each, lookAhead ahead). A dependency named twice
// is one edge.
func (sb *batchBuild) resolveDeps() error {
	s, b, tasks := sb.s, sb.b, sb.b.tasks
	n := len(tasks)
	var reusedAt map[int32]int32 // reused record -> place
	if sb.reused > 0 {
		reusedAt = make(map[int32]int32, sb.reused)
		for i, t := range sb.idx[:sb.reused] {
			reusedAt[t] = int32(i)
		}
	}
	place := func(j int32) int32 {
		if j >= sb.base {
			return int32(sb.reused) + j - sb.base
		}
		if reusedAt != nil && s.hot[j].status == dropped {
			return reusedAt[j]
		}
		return -1
	}
	sb.dstart = make([]int32, n+1)
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
	var sink uint64
	k := 0
	for i := range tasks {
		mark := len(deps)
		var seen map[int32]struct{}
		for _, p := range b.places(i) {
			deps, places = appendDep(deps, places, mark, sb.idx[p], p, &seen)
			sb.forward = sb.forward || p >= int32(i)
		}
		for _, d := range tasks[i].Deps {
			if k+lookAhead < named {
				sink += s.ids.Touch(depHashes[k+lookAhead])
			}
			j, ok := s.ids.Find(d, depHashes[k], s.key)
			k++
			if !ok {
				return &TaskError{ID: tasks[i].ID, Err: ErrUnknownDependency, Detail: quoteID(d)}
			}
			p := place(j)
			deps, places = appendDep(deps, places, mark, j, p, &seen)
			sb.forward = sb.forward || p >= int32(i)
		}
		sb.dstart[i+1] = int32(len(deps))
	}
	s.sink += sink
	sb.deps, sb.places = deps, places
	return nil
}

// checkCycle refuses a batch whose dependencies inside it form a cycle
// (dependencies only on earlier places cannot).
func (sb *batchBuild) checkCycle() error {
	if !sb.forward {
		return nil
	}
	return findCycle(sb.b.tasks, sb.dstart, sb.places)
}

// storeRecords writes the batch's arena (every task's dependencies, then
// every task's successors inside the batch, contiguous, so that releasing
// a wide frontier reads memory in order) and its records.
func (sb *batchBuild) storeRecords(now time.Time) {
	s, tasks, idx := sb.s, sb.b.tasks, sb.idx
	n := len(tasks)
	reused := sb.reused
	sstart := make([]int32, n+1)
	for _, p := range sb.places {
		if p >= 0 {
			sstart[p+1]++
		}
	}
	for i := range n {
		sstart[i+1] += sstart[i]
	}
	nd := int32(len(sb.deps))
	edges := make([]int32, int(nd)+int(sstart[n]))
	copy(edges, sb.deps)
	fill := slices.Clone(sstart[:n])
	for i := range n {
		for k := sb.dstart[i]; k < sb.dstart[i+1]; k++ {
			if p := sb.places[k]; p >= 0 {
				edges[nd+fill[p]] = idx[i]
				fill[p]++
			}
		}
	}
	sb.nd, sb.sstart = nd, sstart
	a := s.newArena(edges, int32(n))

	s.recFree.take(idx[:reused])
	if s.chg != nil {
		for _, t := range idx[:reused] {
			s.markChanged(t) // a forgotten task's record, reused: a change feed reports the new task (changes.go)
		}
	}
	s.tasks = slices.Grow(s.tasks, n-reused)
	s.hot = slices.Grow(s.hot, n-reused)
	if s.retain {
		s.held = slices.Grow(s.held, n-reused)
	}
	for i := range tasks {
		r, hr := sb.record(i, a, now)
		if i < reused {
			s.tasks[idx[i]], s.hot[idx[i]] = r, hr
			if s.retain {
				s.held[idx[i]].hash = sb.hashes[i]
			}
		} else {
			s.tasks = append(s.tasks, r)
			s.hot = append(s.hot, hr)
			if s.retain {
				s.held = append(s.held, holds{hash: sb.hashes[i]})
			}
		}
	}
	if s.keyed {
		if len(s.keyOf) < len(s.tasks) {
			s.keyOf = append(s.keyOf, make([]int32, len(s.tasks)-len(s.keyOf))...)
		}
		for i := range tasks {
			s.keyTask(idx[i], tasks[i].Key)
		}
	}
	s.growFam(idx)
	if s.historyOn() {
		s.growHistory()
	}
	s.open += n
}

// record builds task i's record, its hot part and its spec.
func (sb *batchBuild) record(i int, a int32, now time.Time) (rec, hot) {
	s, b, t := sb.s, sb.b, &sb.b.tasks[i]
	if sb.poolIdx < 0 || sb.pool != t.Pool {
		sb.pool, sb.poolIdx = t.Pool, s.byName[t.Pool]
	}
	pool, prio := sb.poolIdx, int32(t.Priority)
	if sb.spawner != noTask { // a child: its spawner's pool and priority unless set
		if t.Pool == "" {
			pool = int(s.hot[sb.spawner].pool)
		}
		if prio == 0 {
			prio = s.hot[sb.spawner].prio
		}
	}
	s.pools[pool].minPrio = min(s.pools[pool].minPrio, prio)
	s.pools[pool].maxPrio = max(s.pools[pool].maxPrio, prio)
	hr := hot{pool: uint16(pool), prio: prio, flags: uint8(min(t.When, NoneFailed)) << fRuleShift}
	if t.Key != "" && !s.keyed {
		s.startKeys() // the batch's keys are numbered once its records are stored
	}
	r := rec{link: noTask, arena: a,
		deps: span{sb.dstart[i], sb.dstart[i+1] - sb.dstart[i]},
		succ: span{sb.nd + sb.sstart[i], sb.sstart[i+1] - sb.sstart[i]}}
	sp := s.spec(sb.idx[i])
	sp.Run = t.Run
	if t.Payload != nil || t.Timeout > 0 || t.Retry.RetryIf != nil {
		sp.X = &lane.SpecX{Payload: t.Payload, Timeout: t.Timeout, RetryIf: t.Retry.RetryIf}
	}
	if needsExtra(t) || b.values != nil {
		hr.flags |= fExtra
		r.x = &extra{retry: t.Retry, every: t.Every, times: t.Times, values: b.values, missed: t.Missed,
			minOne: t.When == NoneFailedMinOneSuccess}
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
		if t.Slots > 1 {
			r.x.slots = int32(t.Slots)
			s.pools[pool].multi = true
		}
	}
	return r, hr
}

// wireEarlier ties the batch to the tasks submitted before it (edges in
// the batch are in its arena already). A dependency that has ended
// already counts like any other; it is returned, to be applied once
// every edge is wired, as its end would have been (settleBatch): a success
// under a rule, an end without success under every rule (a Skipped one
// that is not settled yet goes on telling the task what changes).
func (sb *batchBuild) wireEarlier() (ended [][2]int32) {
	s := sb.s
	for i, t := range sb.idx {
		for k := sb.dstart[i]; k < sb.dstart[i+1]; k++ {
			j := sb.deps[k]
			if s.retain && !sb.held {
				s.held[j].kids++
			}
			if sb.places[k] >= 0 { // in the batch: pending, its succ list holds t
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
			case st == Succeeded && s.hot[t].flags&fRule == 0 && !s.isBranch(j):
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
	return ended
}

// settleBatch makes the batch's tasks whose dependencies are met eligible, and
// then applies the ends of the dependencies that had ended before the
// batch came (wireEarlier), each as its end would have been.
func (s *state) settleBatch(idx []int32, ended [][2]int32, now time.Time) {
	for _, t := range idx {
		if h := &s.hot[t]; h.status == Pending && h.unmet == 0 {
			s.eligible(t, now)
		}
	}
	var unchosen [][2]int32
	for _, e := range ended {
		t, j := e[0], e[1]
		if s.hot[j].status == Succeeded {
			if s.isBranch(j) && !s.chose(j, t) {
				// A branch that ended before t came: t is not on its path.
				// Skipped once the other ends are applied, so that its
				// count of dependencies to hear from is exact (notChosen).
				unchosen = append(unchosen, e)
				continue
			}
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
	// A task two branches left out is skipped by the first (in the order
	// of its Deps); the count notChosen takes then leaves out every
	// settled dependency, the other branches included, so they are not
	// heard of again.
	skipped := int32(noTask)
	for _, e := range unchosen {
		if e[0] == skipped {
			continue
		}
		if s.notChosen(e[0], e[1], now) {
			skipped = e[0]
		}
	}
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
	return t.Delay > 0 || t.Every > 0 || t.Cron != "" || t.Schedule != nil || p.MaxAttempts > 1 || p.BaseDelay > 0 || p.MaxDelay > 0 || p.Jitter > 0 ||
		t.Slots > 1 || t.When == NoneFailedMinOneSuccess
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
