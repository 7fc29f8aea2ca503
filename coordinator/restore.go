package coordinator

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/batonhq/baton/internal/record"
)

// How a durable scheduler comes back: New hands its store's records to a
// loader (decoding only), and openDurable rebuilds the tasks from them
// (restore), decides what became of the attempts a crash interrupted, and
// returns what that decided as a first commit.

// storedTask is one task as Load found it.
type storedTask struct {
	seq   uint64
	def   record.Def
	state record.State
	hist  *record.History // its history record, if it has one (version 5)
}

// loader decodes a store's records as its Load hands them over (add is
// Load's fn): the version and every task, in submission order. Pure
// decoding: New calls the store.
type loader struct {
	tasks   []storedTask
	pools   map[string]record.Pool // pool records, by name
	version uint64
	seen    bool // the version record was there
}

func (ld *loader) add(key, value []byte) error {
	if bytes.Equal(key, record.MetaKey) {
		v, err := record.DecodeVersion(value)
		if err != nil {
			return corrupt("the version record", err)
		}
		ld.version, ld.seen = v, true
		if v > record.Version {
			return fmt.Errorf("%w: version %d, this one reads up to %d", ErrStoreVersion, v, record.Version)
		}
		return nil
	}
	if name, ok := record.ParsePoolKey(key); ok {
		p, err := record.DecodePool(value)
		if err != nil {
			return corrupt(fmt.Sprintf("the record of pool %q", name), err)
		}
		if ld.pools == nil {
			ld.pools = map[string]record.Pool{}
		}
		ld.pools[name] = p
		return nil
	}
	seq, kind, ok := record.ParseTaskKey(key)
	switch {
	case ok && kind == record.KindDef:
		def, err := record.DecodeDef(value)
		if err != nil {
			return corrupt(fmt.Sprintf("task record %d", seq), err)
		}
		ld.tasks = append(ld.tasks, storedTask{seq: seq, def: def})
		return nil
	case ok && kind == record.KindState:
		if len(ld.tasks) == 0 || ld.tasks[len(ld.tasks)-1].seq != seq {
			return fmt.Errorf("%w: task record %d has a state and no definition", ErrStoreCorrupt, seq)
		}
		st, err := record.DecodeState(value, uint8(Skipped)+1)
		if err != nil {
			return corrupt(fmt.Sprintf("task record %d", seq), err)
		}
		ld.tasks[len(ld.tasks)-1].state = st
		return nil
	case ok && kind == record.KindHistory:
		if len(ld.tasks) == 0 || ld.tasks[len(ld.tasks)-1].seq != seq {
			return fmt.Errorf("%w: task record %d has a history and no definition", ErrStoreCorrupt, seq)
		}
		h, err := record.DecodeHistory(value)
		if err != nil {
			return corrupt(fmt.Sprintf("the history of task record %d", seq), err)
		}
		ld.tasks[len(ld.tasks)-1].hist = &h
		return nil
	}
	return fmt.Errorf("%w: unknown key %q", ErrStoreCorrupt, key)
}

// corrupt is the error of a record that cannot be decoded.
func corrupt(what string, err error) error {
	return fmt.Errorf("%w: %s: %v", ErrStoreCorrupt, what, err)
}

// openDurable restores into s, which is new (nothing was submitted yet
// and no goroutine runs), the tasks a store's Load handed to ld, and
// returns what the restore decided (interrupted attempts, skips) as a
// first commit, nil if nothing: New commits it and tells committed.
func (s *state) openDurable(cfg *durableConfig, ld *loader, now time.Time) (*Changes, error) {
	d := &durable{funcs: cfg.funcs, resumes: cfg.resumes, runs: cfg.runs, rash: cfg.rash, next: 1, epoch: 1}
	s.dur = d
	if !ld.seen {
		if len(ld.tasks) > 0 {
			return nil, fmt.Errorf("%w: task records without a version record", ErrStoreCorrupt)
		}
		d.meta = true // a new store: say which format it holds
	} else if ld.version < record.Version {
		d.meta = true // an older format: say this one from the next commit on
	}
	for name, p := range ld.pools {
		i, ok := s.byName[name]
		switch {
		case !ok && p.Paused:
			return nil, fmt.Errorf("%w: the store says pool %q is paused, and New was not given it", ErrInvalidOption, name)
		case ok:
			s.pools[i].paused = p.Paused // before the tasks: nothing of it is handed out
		}
	}
	if err := s.restore(ld.tasks, now); err != nil {
		return nil, err
	}
	d.keepUnchanged(s, ld.tasks, now)
	return s.takeCommit(now), nil
}

// keepUnchanged drops from this iteration's writes the restored tasks
// whose state record would read as it was stored: a task put back in the
// delayed set at its stored time, or queued again as it was, has nothing
// new to say. Only what the restore decided is written (interrupted
// attempts, skips, missed starts), so that opening a store rewrites
// nothing that did not change: the file does not grow by a copy of every
// waiting task per restart, and a store on a full disk whose restore
// decides nothing opens without a write.
func (d *durable) keepUnchanged(s *state, stored []storedTask, now time.Time) {
	kept := d.dirty[:0]
	for _, t := range d.dirty {
		if int(t) < len(stored) {
			if st, ok := s.stateOf(t, now); !ok || st.SameAs(&stored[t].state) {
				d.mark[t] = 0 // not dirty (epochs start at 1)
				continue
			}
		}
		kept = append(kept, t)
	}
	d.dirty = kept
}

// restore rebuilds the stored tasks, in phases: rebuild (one batch
// through submit, which wires the graph and stops before making anything
// ready), layStates (each task's stored state laid over its record),
// restoreCounts (what the cascade and retention count), then resume
// (what is due: interrupted attempts retried or failed, ready tasks
// queued, waits put back at their times).
func (s *state) restore(stored []storedTask, now time.Time) error {
	if len(stored) == 0 {
		return nil
	}
	if err := s.rebuild(stored, now); err != nil {
		return err
	}
	if err := s.restoreFamilies(stored); err != nil {
		return err
	}
	finals := s.layStates(stored)
	if s.historyOn() {
		s.restoreHistory(stored)
	}
	s.restoreJoins(stored)
	s.restoreRuns()
	s.restoreCounts(finals)
	s.resume(stored, now)
	return nil
}

// taskOf rebuilds the Task a definition describes, its function bound by
// name, and parses its Cron. parent is the Task of its spawner, already
// rebuilt, or nil: a child whose record names no pool or priority of its
// own (a record written before they were stored) takes its spawner's.
// done says whether the stored task runs no more: it has ended, or it is
// a spawner (not recurring) whose function returned and which waits for
// its family (joining). Such a task may need more slots than its pool has
// now, and a function its pool no longer gives it; one that may still
// run may not (a re-run asks again: Rerun refuses what no longer fits).
func (s *state) taskOf(def *record.Def, parent *Task, done bool) (Task, Schedule, error) {
	t := Task{ID: def.ID, Func: def.Func, Pool: def.Pool, Deps: def.Deps, Priority: def.Priority,
		Retry:   RetryPolicy{MaxAttempts: def.MaxAttempts, BaseDelay: def.BaseDelay, MaxDelay: def.MaxDelay, Jitter: def.Jitter},
		Timeout: def.Timeout, Every: def.Every, Cron: def.Cron, Times: def.Times, Missed: Missed(def.Missed), When: Trigger(def.When), Key: def.Key, Slots: def.Slots}
	if def.HasPayload {
		t.Payload = def.Payload
	}
	if parent != nil {
		if t.Pool == "" {
			t.Pool = parent.Pool
		}
		if t.Priority == 0 {
			t.Priority = parent.Priority
		}
	}
	i, ok := s.byName[t.Pool]
	if !ok {
		return t, nil, fmt.Errorf("%w: the store holds task %s of pool %s, which New was not given (WithPool)", ErrInvalidOption, quoteID(t.ID), quoteID(t.Pool))
	}
	if size := s.pools[i].size; t.Slots > size && !done {
		return t, nil, fmt.Errorf("%w: the store holds unfinished task %s of %d slots, and its pool %s now has %d workers: give New a pool of %d or more, or cancel the task with a scheduler that has one",
			ErrInvalidOption, quoteID(t.ID), t.Slots, quoteID(t.Pool), size, t.Slots)
	}
	if t.Func != "" {
		f, ok := s.dur.funcs[t.Func]
		if !ok {
			return t, nil, fmt.Errorf("%w: the store holds task %s of function %s, which New was not given (WithFunc)", ErrInvalidOption, quoteID(t.ID), quoteID(t.Func))
		}
		payload := def.Payload
		t.Run = func(ctx context.Context) error { return f(ctx, payload) }
	} else if s.dur.runs[i] && !done {
		// Only a pool whose worker ran data stores a task without a
		// function name: New was given another kind of worker for it.
		return t, nil, fmt.Errorf("%w: the store holds unfinished task %s of pool %s, which names no function (WithFunc): it was submitted to a worker that runs data, and New gives pool %s one that runs functions; give New the pool's worker, or cancel the task with a scheduler that has it",
			ErrInvalidOption, quoteID(t.ID), quoteID(t.Pool), quoteID(t.Pool))
	}
	if t.Cron == "" {
		return t, nil, nil
	}
	sched, err := parseCron(t.Cron)
	if err != nil {
		return t, nil, fmt.Errorf("%w: task %s: %v", ErrStoreCorrupt, quoteID(t.ID), err)
	}
	return t, sched, nil
}

// rebuild submits the stored tasks as one batch, in submission order (so
// that record i is stored task i), restoring: nothing is made ready.
func (s *state) rebuild(stored []storedTask, now time.Time) error {
	d := s.dur
	b := &submission{tasks: make([]Task, len(stored))}
	latest := make(map[string]int, len(stored)) // by ID: the latest stored task before the one at hand
	for i := range stored {
		def := &stored[i].def
		var parent *Task
		if def.Parent != "" {
			if p, ok := latest[def.Parent]; ok {
				parent = &b.tasks[p]
			}
		}
		st := &stored[i].state
		done := Status(st.Status).Final() || st.Joining && def.Every == 0 && def.Cron == ""
		t, sched, err := s.taskOf(def, parent, done)
		if err != nil {
			return err
		}
		latest[def.ID] = i
		if sched != nil {
			if b.scheds == nil {
				b.scheds = make([]Schedule, len(stored))
			}
			b.scheds[i] = sched
		}
		b.tasks[i] = t
		d.next = max(d.next, stored[i].seq+1)
	}
	d.restoring = true
	err := s.submit(b, now)
	d.restoring = false
	if err != nil {
		return fmt.Errorf("%w: its tasks do not form a graph: %w", ErrStoreCorrupt, err)
	}
	return nil
}

// layStates lays each stored state over its record (submit numbered the
// records 0..n-1 in batch order): attempts, runs, error, result, the
// series' plan, a Cancel that reached it while it ran, its end if it is
// final, the cause of a skip. It returns the final tasks with the time
// each ended, for retention.
func (s *state) layStates(stored []storedTask) []retention {
	d := s.dur
	d.seq = make([]uint64, len(stored))
	var finals []retention
	for i := range stored {
		t := int32(i)
		st := &stored[i].state
		d.seq[t] = stored[i].seq
		r := &s.tasks[t]
		h := &s.hot[t]
		r.attempts, r.runs = st.Attempts, st.Runs
		if nb := stored[i].def.NotBefore; !nb.IsZero() {
			s.extra(t).notBefore = nb
		}
		if e := stateErr(st); e != nil {
			s.extra(t).err = e
		}
		if st.HasResult {
			x := s.extra(t)
			x.result, x.hasResult = any(st.Result), true
			if st.NilResult {
				x.result = nil // SetResult(ctx, nil): nil, not a []byte(nil)
			}
		}
		if r.x != nil && r.x.recurring() {
			r.x.planned = st.Planned
		}
		if st.Branched {
			x := s.extra(t)
			x.branched, x.chosen = true, st.Chosen
		}
		if st.Reruns > 0 {
			s.extra(t).reruns = st.Reruns
		}
		if st.CancelReq {
			if d.cancels == nil {
				d.cancels = map[int32]bool{}
			}
			d.cancels[t] = true
		}
		if status := Status(st.Status); status.Final() {
			h.status = status
			h.unmet = 0
			s.open--
			if s.retain {
				finals = append(finals, retention{at: st.At, t: t, rerun: st.Reruns})
			}
		}
	}
	for i := range stored {
		st := &stored[i].state
		if Status(st.Status) != Skipped || st.Cause == "" {
			continue
		}
		if c, ok := s.find(st.Cause); ok {
			s.tasks[i].link = c
			if st.CauseClass != 0 {
				s.blamedFrozen(int32(i), endClass(st.CauseClass-1))
			}
			if s.retain {
				s.held[c].refs++
				s.famHold(int32(i), c, 1)
			}
		}
	}
	return finals
}

// resume decides, in submission order, what becomes of each restored task
// that is not final. A cascade may reach a task before its turn: then it
// is no longer Pending, or waits in the delayed set.
func (s *state) resume(stored []storedTask, now time.Time) {
	for i := range stored {
		t := int32(i)
		st := &stored[i].state
		h := &s.hot[t]
		if h.status == joining && st.CancelReq {
			s.cancelTask(t, ErrCancelled, now) // Cancel reached the join before the crash
			continue
		}
		if h.status != Pending || (s.tasks[t].x != nil && s.tasks[t].x.inWheel) {
			continue
		}
		// A task its rule let go (it is queued, waits for a retry, a snooze
		// or its delay, or made an attempt) is not judged again: what its
		// dependencies did since (a Rerun re-opened one) does not take it
		// back, as in the scheduler that stored it (recountAfterRerun).
		verdict := ruleRuns
		var cause int32
		var class endClass // cause and class: for ruleSkips only
		if !released(st) {
			verdict, cause, class = s.ruleVerdict(t)
		}
		if verdict == ruleRuns {
			h.unmet = 0 // under AnyFailed, started before every dependency ended: nothing more to count
		}
		switch {
		case st.CancelReq:
			h.flags |= fCancelReq
			s.cancelled(t, now)
		case Status(st.Status) == Running && s.resumes(h.pool):
			// The attempt runs outside this process and may still be
			// running, or have ended, there (worker.Resumer): it is handed
			// out again as the same attempt, for the pool to pick up.
			s.tasks[t].attempts--
			s.pushReady(t, now)
		case Status(st.Status) == Running:
			// The attempt was running when the process died: it counts,
			// and is retried if the policy allows, carefully (careful.go).
			s.markCareful(t)
			if s.historyOn() {
				r := &s.tasks[t]
				s.remember(t, -1, r.attempts, r.runs+1, s.reruns(t), OutcomeInterrupted, &attemptDetail{err: ErrInterrupted}, 0, st.At.UnixNano(), now.UnixNano())
				s.historyChanged(t)
			}
			s.failed(t, ErrInterrupted, true, now)
		case verdict == ruleSkips:
			// Its rule cannot be met any more: a dependency's end was
			// written and its own was not, which one commit per
			// iteration rules out (kept for safety).
			s.skip(t, cause, class, now)
			s.cascade(now)
		case verdict == ruleWaits:
		case Status(st.Status) == Ready:
			s.markCareful(t) // it may have been started by the process that crashed (careful.go)
			s.pushReady(t, now)
		case !st.Due.IsZero():
			if !st.Due.After(now) {
				s.markCareful(t)
			}
			s.schedule(t, st.Due, now) // a start missed meanwhile: catchUp, when it is handed out
		default:
			s.markCareful(t)
			s.eligible(t, now)
		}
	}
}

// released reports whether a stored task that is not final had been let
// go by its rule: Ready, in the delayed set (a retry, a snooze, its
// delay, a series' next start: all scheduled only once it may run), or
// with an attempt made since it was submitted or re-opened (Rerun gives
// it back its attempts).
func released(st *record.State) bool {
	return Status(st.Status) == Ready || !st.Due.IsZero() || st.Attempts > 0
}

// resumes reports whether pool's Worker resumes the attempts a crash
// left running (worker.Resumer).
func (s *state) resumes(pool uint16) bool {
	r := s.dur.resumes
	return int(pool) < len(r) && r[pool]
}

// restoreCounts sets, after a restore, what the cascade counts
// (cascade.go): for a Skipped task, its dependencies whose ends are not
// settled; for a task not final, those it has not taken into account yet
// under its rule; and with retention, what holds each task. Settlement
// spreads from the tasks whose dependencies are all settled, through a
// worklist. finals are the final tasks with the time each ended.
func (s *state) restoreCounts(finals []retention) {
	var work []int32
	for t := range s.tasks {
		t := int32(t)
		if s.hot[t].status != Skipped {
			continue
		}
		r := &s.tasks[t]
		n := int32(0)
		for _, dep := range s.edges(r, r.deps) {
			if ds := s.hot[dep].status; !ds.Final() || ds == Skipped {
				n++ // settled when it ends, or once its own count is 0
			}
		}
		if s.hot[t].unmet = n; n == 0 {
			work = append(work, t)
		}
	}
	for len(work) > 0 {
		t := work[len(work)-1]
		work = work[:len(work)-1]
		for c := range s.successors(t) {
			if hc := &s.hot[c]; hc.status == Skipped && hc.unmet > 0 {
				if hc.unmet--; hc.unmet == 0 {
					work = append(work, c)
				}
			}
		}
	}
	for t := range s.tasks {
		t := int32(t)
		h := &s.hot[t]
		if !h.status.Final() {
			h.unmet = s.countUnmet(t)
		}
		if s.retain {
			// Whatever its own state: a task final already (cancelled, or
			// started early by AnyFailed) still hears from a dependency
			// that has not ended, and must not be forgotten before.
			s.held[t].preds = s.countUnsettled(t)
		}
	}
	if s.retain {
		slices.SortStableFunc(finals, func(a, b retention) int { return a.at.Compare(b.at) })
		s.expiry = append(s.expiry, finals...)
	}
}

// decided reports whether a task under AnyFailed or NoneFailed takes its
// dependency dep into account: dep is final, and if Skipped its class is
// final (failed, or settled).
func (s *state) decided(dep int32) bool {
	ds := s.hot[dep].status
	return ds.Final() && (ds != Skipped || s.hot[dep].unmet == 0 || s.classOfEnd(dep) == endFailed)
}

type verdict uint8

const (
	ruleWaits verdict = iota // a dependency it waits for has not ended
	ruleRuns                 // its rule is met
	ruleSkips                // its rule can no longer be met
)

// ruleVerdict judges a restored task that is not final by its
// dependencies' ends alone, and for a skip names the root cause and its
// class.
func (s *state) ruleVerdict(t int32) (verdict, int32, endClass) {
	h := &s.hot[t]
	r := &s.tasks[t]
	worst, cause := endBenign+1, int32(noTask)
	waiting := false
	for _, dep := range s.edges(r, r.deps) {
		ds := s.hot[dep].status
		switch {
		case ds == Succeeded:
		case !ds.Final():
			waiting = true
		case h.rule() == AllDone:
		case h.rule() != AllSucceeded && !s.decided(dep):
			waiting = true
		default:
			if c := s.classOfEnd(dep); c < worst {
				worst, cause = c, s.root(dep)
			}
		}
	}
	switch h.rule() {
	case AllSucceeded:
		if worst <= endBenign {
			return ruleSkips, cause, worst
		}
	case AnyFailed:
		switch {
		case worst == endFailed:
			return ruleRuns, noTask, endBenign
		case !waiting:
			return ruleSkips, noTask, endBenign
		}
	case NoneFailed:
		if worst < endBenign {
			return ruleSkips, cause, worst
		}
		if !waiting && s.minOne(t) && !s.anySucceeded(t) {
			return ruleSkips, noTask, endBenign
		}
	}
	if waiting {
		return ruleWaits, noTask, endBenign
	}
	return ruleRuns, noTask, endBenign
}

// restoreFamilies rebuilds who spawned whom from the definitions (a
// child's Parent; stored after its spawner, in the order spawned): each
// spawner's children, each member's family root, and what retention
// counts of holds inside a family.
func (s *state) restoreFamilies(stored []storedTask) error {
	for i := range stored {
		parent := stored[i].def.Parent
		if parent == "" {
			continue
		}
		p, ok := s.find(parent)
		if !ok || int(p) >= i {
			return fmt.Errorf("%w: task %s was spawned by %s, stored after it or not at all", ErrStoreCorrupt, quoteID(stored[i].def.ID), quoteID(parent))
		}
		s.ensureFam()
		c := int32(i)
		root := s.fam[p].root
		if root == noTask {
			root = p
			s.fam[p].root, s.fam[p].size = p, 1
		}
		s.fam[c].parent, s.fam[c].root = p, root
		s.fam[root].size++
		x := s.extra(p)
		x.children = append(x.children, c)
	}
	if s.fam == nil || !s.retain {
		return nil
	}
	for c := range s.tasks {
		r := &s.tasks[c]
		for _, d := range s.edges(r, r.deps) {
			s.famHold(int32(c), d, 1)
		}
	}
	return nil
}

// restoreRuns gives the children of the finished runs of each recurring
// spawner not final, those not forgotten yet, a family of their own
// again (detachRun): one for all of them, which is forgotten whole.
func (s *state) restoreRuns() {
	if s.fam == nil || !s.retain {
		return
	}
	for i := range s.fam {
		t := int32(i)
		x := s.tasks[t].x
		if x == nil || len(x.children) == 0 || !x.recurring() || s.hot[t].status.Final() {
			continue
		}
		end := int32(len(x.children))
		if s.hot[t].status == joining {
			end = s.fam[t].first
		}
		if end > 0 {
			s.detachRun(t, x.children[:end])
		}
	}
}

// restoreJoins puts the spawners whose join was under way back to
// joining, with their open children counted; a join whose children are
// all final completes at the first iteration.
func (s *state) restoreJoins(stored []storedTask) {
	if s.fam == nil {
		return
	}
	for i := range stored {
		st := &stored[i].state
		t := int32(i)
		f := &s.fam[t]
		f.first = st.JoinFrom
		if st.Adopt != "" {
			if a, ok := s.find(st.Adopt); ok {
				f.adopt = a
			}
		}
		if f.parent != noTask && !s.hot[t].status.Final() {
			s.fam[f.parent].open++
		}
		if st.Joining && !s.hot[t].status.Final() {
			s.hot[t].status = joining
		}
	}
	for i := range stored {
		if t := int32(i); s.hot[t].status == joining && s.fam[t].open == 0 {
			s.joins = append(s.joins, t)
		}
	}
}

// countUnmet counts the dependencies of t that its rule still waits for:
// under AllSucceeded those not succeeded, under AllDone those not final,
// under the other rules those not decided (restore, re-run).
func (s *state) countUnmet(t int32) int32 {
	r, h := &s.tasks[t], &s.hot[t]
	var n int32
	for _, d := range s.edges(r, r.deps) {
		var counted bool
		switch h.rule() {
		case AllSucceeded:
			counted = s.hot[d].status == Succeeded
		case AllDone:
			counted = s.hot[d].status.Final()
		default:
			counted = s.decided(d)
		}
		if !counted {
			n++
		}
	}
	return n
}

// countUnsettled counts the dependencies of t whose ends are not settled
// (retention's hold, cascade.go).
func (s *state) countUnsettled(t int32) int32 {
	r := &s.tasks[t]
	var n int32
	for _, d := range s.edges(r, r.deps) {
		if !s.settledEnd(d) {
			n++
		}
	}
	return n
}
