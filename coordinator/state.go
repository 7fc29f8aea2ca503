package coordinator

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/batonhq/baton/coordinator/readyq"
	"github.com/batonhq/baton/timerwheel"
	"github.com/batonhq/baton/worker"
)

const (
	noTask = -1

	// dispatchBudget bounds the measured work one batch may hold: a ready
	// task of a better priority never waits behind more than about this much
	// work of a batch already handed out. Pools whose attempts take longer
	// than the budget get batches of one, so their order is exact. A hand-off
	// costs a few microseconds when it wakes a parked thread, so the budget
	// must be large beside it for batching to pay.
	dispatchBudget = 50 * time.Microsecond
	// maxBatch caps a batch however cheap its tasks are.
	maxBatch = 1024
	// maxFirePerStep bounds how many delayed entries one loop iteration
	// makes ready; the rest follow in the next iterations.
	maxFirePerStep = 4096
)

// rec is the coordinator's record of one task. Its status and unmet count
// live apart, in hot; fields most tasks never use live in *extra.
type rec struct {
	id        string
	run       func(context.Context) error
	x         *extra // nil for a plain task
	prio      int
	succHead  int32 // first edge of the successor list, or noTask
	succTail  int32
	cause     int32 // for Skipped: the root task that failed or was cancelled
	attempts  int32 // attempts started in the current run
	runs      int32 // runs finished successfully
	pool      uint16
	cancelReq bool // Cancel or Shutdown reached it while running
}

// holds is what retention needs to know of a task, in a slice of its own
// beside the records, so that schedulers without retention do not pay for
// it.
type holds struct {
	preds   int32 // predecessors not final that still hold an edge to it
	refs    int32 // retained Skipped tasks that name it as their cause
	dropDue bool  // its time is up; dropped once preds and refs are 0
}

type extra struct {
	payload   any
	retry     RetryPolicy
	every     time.Duration
	timeout   time.Duration
	times     int
	notBefore time.Time // submission + Delay
	planned   time.Time // recurring: planned start of the current run
	timer     timerwheel.Handle
	inWheel   bool
	err       error // the last failed attempt's error
}

// hot holds the fields read for every successor of every finished task,
// apart from the rest of the record, so that releasing a wide frontier
// walks 8-byte entries instead of whole records.
type hot struct {
	unmet  int32 // dependencies not yet succeeded
	status Status
}

type edge struct{ to, next int32 }

type retention struct {
	at time.Time // when the task became final
	t  int32
}

// poolState is one worker pool as the coordinator sees it.
type poolState struct {
	name      string
	size      int
	ready     readyq.Queue // entries of tasks cancelled while queued stay until popped
	readyLive int          // ready entries of tasks still Ready
	idle      int          // workers without a batch
	inflight  []*worker.Batch
	measured  bool
	cost      time.Duration // moving average of one attempt's measured time
	maxBatch  int           // immutable: maxBatch, unless a test lowered it
}

// state is all scheduling state: task records, dependency edges, ready
// queues and the delayed set. It has no goroutines, channels or clock; its
// methods take now. It is not safe for concurrent use: the coordinator
// goroutine owns it (the one exception is state.final, see Scheduler).
type state struct {
	tasks  []rec
	hot    []hot   // parallel to tasks
	held   []holds // parallel to tasks when retention is on
	ids    map[string]int32
	edges  []edge
	pools  []poolState
	byName map[string]int
	wheel  *timerwheel.Wheel[int32]

	open    int // tasks not final
	running int // attempts handed out and not yet back
	closing bool

	observe bool    // somebody subscribed: record events
	events  []Event // decided since the last flush
	out     []*worker.Batch

	rng      *rand.Rand
	free     []*worker.Batch
	ctxFree  []*worker.Context // attempt contexts to reuse
	scratch  []int32           // reused by submit and advance
	reverted []bool            // reused by complete
	work     []int32           // reused by skipDependents

	// Retention (WithRetention): final tasks are forgotten after keep.
	retain    bool
	keep      time.Duration
	finalized []int32     // final since the last settle
	expiry    []retention // FIFO by final time
	expHead   int
	recFree   []int32 // dropped records, reused by submit
	edgeFree  int32   // head of the list of free edges, linked by next
}

func newState(now time.Time, pools []poolState, rng *rand.Rand) *state {
	s := &state{
		ids:    make(map[string]int32),
		pools:  pools,
		byName: make(map[string]int, len(pools)),
		wheel:  timerwheel.New[int32](now, time.Millisecond),
		rng:    rng,

		edgeFree: noTask,
	}
	for i := range s.pools {
		p := &s.pools[i]
		p.idle = p.size
		if p.maxBatch == 0 {
			p.maxBatch = maxBatch
		}
		s.byName[p.name] = i
	}
	return s
}

func (s *state) emit(kind EventKind, t int32, now time.Time) *Event {
	if !s.observe {
		return nil
	}
	r := &s.tasks[t]
	s.events = append(s.events, Event{Kind: kind, TaskID: r.id, Attempt: int(r.attempts), Run: int(r.runs) + 1, At: now})
	return &s.events[len(s.events)-1]
}

func (s *state) extra(t int32) *extra {
	r := &s.tasks[t]
	if r.x == nil {
		r.x = &extra{}
	}
	return r.x
}

func needsExtra(t *Task) bool {
	p := t.Retry
	return t.Payload != nil || t.Delay > 0 || t.Every > 0 || t.Timeout > 0 ||
		p.MaxAttempts > 1 || p.BaseDelay > 0 || p.MaxDelay > 0 || p.Jitter > 0 || p.RetryIf != nil
}

// submit checks what only the state can check (duplicates with earlier
// tasks, unknown dependencies, cycles) and then stores the whole batch, or
// nothing. Static checks (validateTask) have already passed.
func (s *state) submit(tasks []Task, now time.Time) error {
	if s.closing {
		return ErrClosed
	}
	// Give every task its record index: a record freed by retention, or a
	// new one at the end. pos maps a record index back to its place in the
	// batch; it is needed only when freed records were reused.
	base := int32(len(s.tasks))
	idx := make([]int32, len(tasks))
	reused := min(len(s.recFree), len(tasks))
	var pos map[int32]int32
	if reused > 0 {
		pos = make(map[int32]int32, len(tasks))
	}
	next := base
	for i := range idx {
		if i < reused {
			idx[i] = s.recFree[len(s.recFree)-1-i]
		} else {
			idx[i] = next
			next++
		}
		if pos != nil {
			pos[idx[i]] = int32(i)
		}
	}
	local := func(j int32) int32 { // j's place in the batch, or -1
		if pos != nil {
			if p, ok := pos[j]; ok {
				return p
			}
			return -1
		}
		if j >= base {
			return j - base
		}
		return -1
	}
	// A batch larger than the map has been so far would make it grow by
	// doubling, rehashing every time: size it once instead.
	if n := len(tasks); n > 1024 && n > len(s.ids) {
		ids := make(map[string]int32, len(s.ids)+n)
		maps.Copy(ids, s.ids)
		s.ids = ids
	}
	// Claim the IDs, so that dependencies resolve with one lookup each;
	// any error below gives them back.
	claimed := 0
	undo := func() {
		for i := range tasks[:claimed] {
			delete(s.ids, tasks[i].ID)
		}
	}
	for i := range tasks {
		id := tasks[i].ID
		if j, dup := s.ids[id]; dup {
			undo()
			detail := "submitted before"
			if local(j) >= 0 {
				detail = "twice in the batch"
			}
			return &TaskError{ID: id, Err: ErrDuplicateID, Detail: detail}
		}
		s.ids[id] = idx[i]
		claimed++
	}
	start := make([]int32, len(tasks)+1)
	total := 0
	for i := range tasks {
		total += len(tasks[i].Deps)
	}
	deps, places := make([]int32, 0, total), make([]int32, 0, total)
	for i := range tasks {
		for _, d := range tasks[i].Deps {
			j, ok := s.ids[d]
			if !ok {
				undo()
				return &TaskError{ID: tasks[i].ID, Err: ErrUnknownDependency, Detail: fmt.Sprintf("%q", d)}
			}
			deps = append(deps, j)
			places = append(places, local(j))
		}
		start[i+1] = int32(len(deps))
	}
	if err := findCycle(tasks, start, places); err != nil {
		undo()
		return err
	}

	s.recFree = s.recFree[:len(s.recFree)-reused]
	s.tasks = slices.Grow(s.tasks, len(tasks)-reused)
	s.hot = slices.Grow(s.hot, len(tasks)-reused)
	for i := range tasks {
		t := &tasks[i]
		r := rec{id: t.ID, run: t.Run, prio: t.Priority, succHead: noTask, succTail: noTask, cause: noTask,
			pool: uint16(s.byName[t.Pool])}
		if needsExtra(t) {
			r.x = &extra{payload: t.Payload, retry: t.Retry, every: t.Every, timeout: t.Timeout, times: t.Times}
			if t.Delay > 0 {
				r.x.notBefore = now.Add(t.Delay)
			}
		}
		if i < reused {
			s.tasks[idx[i]], s.hot[idx[i]] = r, hot{}
		} else {
			s.tasks = append(s.tasks, r)
			s.hot = append(s.hot, hot{})
			if s.retain {
				s.held = append(s.held, holds{})
			}
		}
	}
	s.open += len(tasks)

	// Wire the edges. A dependency that already ended badly skips the task.
	skip := s.scratch[:0]
	for i, t := range idx {
		for _, j := range deps[start[i]:start[i+1]] {
			switch st := s.hot[j].status; {
			case st == Succeeded:
			case st.Final():
				if s.tasks[t].cause == noTask {
					s.tasks[t].cause = s.root(j)
					skip = append(skip, t)
				}
			default:
				s.addEdge(j, t)
				s.hot[t].unmet++
			}
		}
	}
	for _, t := range skip {
		if !s.hot[t].status.Final() {
			s.skipped(t, s.tasks[t].cause, now)
			s.skipDependents(t, s.tasks[t].cause, now)
		}
	}
	s.scratch = skip[:0]
	for _, t := range idx {
		if h := s.hot[t]; h.status == Pending && h.unmet == 0 {
			s.eligible(t, now)
		}
	}
	return nil
}

func (e *Event) setCause(s *state, cause int32) {
	if e != nil {
		e.Cause = s.tasks[cause].id
	}
}

// root is the task to blame for j's bad end: j itself, or j's own cause.
func (s *state) root(j int32) int32 {
	if s.hot[j].status == Skipped {
		return s.tasks[j].cause
	}
	return j
}

func (s *state) addEdge(from, to int32) {
	var e int32
	if s.retain && s.edgeFree != noTask {
		e = s.edgeFree
		s.edgeFree = s.edges[e].next
		s.edges[e] = edge{to: to, next: noTask}
	} else {
		e = int32(len(s.edges))
		s.edges = append(s.edges, edge{to: to, next: noTask})
	}
	if s.retain {
		s.held[to].preds++
	}
	r := &s.tasks[from]
	if r.succTail == noTask {
		r.succHead = e
	} else {
		s.edges[r.succTail].next = e
	}
	r.succTail = e
}

// eligible is called when t's dependencies have all succeeded.
func (s *state) eligible(t int32, now time.Time) {
	x := s.tasks[t].x
	if x == nil {
		s.pushReady(t)
		return
	}
	start := now
	if x.notBefore.After(now) {
		start = x.notBefore
	}
	if x.every > 0 {
		x.planned = start
	}
	s.schedule(t, start, now)
}

// schedule makes t ready at due: at once if due has come, else through the
// delayed set.
func (s *state) schedule(t int32, due, now time.Time) {
	r := &s.tasks[t]
	if due.After(now) {
		if h, ok := s.wheel.Add(due, t); ok {
			s.hot[t].status = Pending
			r.x.timer, r.x.inWheel = h, true
			return
		}
	}
	s.pushReady(t)
}

func (s *state) pushReady(t int32) {
	r := &s.tasks[t]
	s.hot[t].status = Ready
	p := &s.pools[r.pool]
	p.ready.Push(r.prio, t)
	p.readyLive++
}

// advance makes the delayed entries due by now ready.
func (s *state) advance(now time.Time) {
	s.scratch = s.wheel.Advance(now, s.scratch[:0], maxFirePerStep)
	for _, t := range s.scratch {
		s.tasks[t].x.inWheel = false
		s.pushReady(t)
	}
	s.scratch = s.scratch[:0]
}

// dispatch hands ready tasks to idle workers, one batch per worker, and
// leaves the batches in s.out for the loop to send.
func (s *state) dispatch(now time.Time) {
	for pi := range s.pools {
		p := &s.pools[pi]
		for p.idle > 0 && p.readyLive > 0 {
			b := s.newBatch(pi)
			limit := p.batchLimit()
			// Take from the best level only: a batch never mixes priorities.
			level := 0
			for len(b.Items) < limit {
				prio, ok := p.ready.Best()
				if !ok || (len(b.Items) > 0 && prio != level) {
					break
				}
				t, _, _ := p.ready.Pop()
				if s.hot[t].status != Ready {
					continue // cancelled while queued
				}
				level = prio
				p.readyLive--
				s.start(t, b, now, 0)
			}
			s.fuse(b, p, now)
			p.idle--
			p.inflight = append(p.inflight, b)
			s.out = append(s.out, b)
		}
	}
}

// batchLimit sizes the next batch: the backlog spread over the idle
// workers, capped by budgetLimit.
func (p *poolState) batchLimit() int {
	return min((p.readyLive+p.idle-1)/p.idle, p.budgetLimit())
}

// budgetLimit is the most tasks whose expected work stays within
// dispatchBudget, at most maxBatch. Until a pool has been measured its
// batches hold one task.
func (p *poolState) budgetLimit() int {
	switch {
	case !p.measured:
		return 1
	case p.cost > 0:
		return min(p.maxBatch, max(1, int(dispatchBudget/p.cost)))
	}
	return p.maxBatch
}

// fuse appends to b the successors that only b's own tasks hold back, each
// after the item it waits for: the worker runs it only if that one
// succeeded, so a chain runs without a hand-off per link. Only plain tasks
// of b's pool are fused, and only when no ready task of the same or a
// better priority is waiting, so fusion never reorders the ready queue.
func (s *state) fuse(b *worker.Batch, p *poolState, now time.Time) {
	limit := p.budgetLimit()
	best, waiting := p.ready.Best() // fusing pushes nothing, so this holds throughout
	waiting = waiting && p.readyLive > 0
	for k := 0; k < len(b.Items) && len(b.Items) < limit; k++ {
		r := &s.tasks[b.Items[k].Ref]
		if r.x != nil && r.x.every > 0 {
			continue // its success may start another run instead of releasing successors
		}
		for e := r.succHead; e != noTask && len(b.Items) < limit; e = s.edges[e].next {
			c := s.edges[e].to
			rc := &s.tasks[c]
			if s.hot[c].status != Pending || s.hot[c].unmet != 1 || rc.x != nil || int(rc.pool) != b.Pool {
				continue
			}
			if waiting && best <= rc.prio {
				continue
			}
			s.hot[c].unmet = 0
			s.start(c, b, now, int32(k)+1)
		}
	}
}

func (s *state) newBatch(pool int) *worker.Batch {
	var b *worker.Batch
	if n := len(s.free); n > 0 {
		b, s.free = s.free[n-1], s.free[:n-1]
	} else {
		b = &worker.Batch{}
	}
	b.Pool = pool
	return b
}

// start adds t's next attempt to b; after is as worker.Item.After.
func (s *state) start(t int32, b *worker.Batch, now time.Time, after int32) {
	r := &s.tasks[t]
	s.hot[t].status = Running
	r.attempts++
	s.running++
	var ctx *worker.Context
	if n := len(s.ctxFree); n > 0 {
		ctx, s.ctxFree = s.ctxFree[n-1], s.ctxFree[:n-1]
	} else {
		ctx = worker.NewContext()
	}
	it := worker.Item{
		Job:   worker.Job{ID: r.id, Run: r.run, Attempt: int(r.attempts), Round: int(r.runs) + 1},
		Ctx:   ctx,
		Ref:   t,
		After: after,
	}
	if x := r.x; x != nil {
		it.Job.Payload, it.Timeout, it.RetryIf = x.payload, x.timeout, x.retry.RetryIf
	}
	b.Items = append(b.Items, it)
	if after == 0 {
		s.emit(EventStarted, t, now)
	} // a fused attempt may never run: complete reports its start if it did
}

// complete takes back a batch from a worker and applies its outcomes.
func (s *state) complete(b *worker.Batch, now time.Time) {
	p := &s.pools[b.Pool]
	p.idle++
	if i := slices.Index(p.inflight, b); i >= 0 {
		p.inflight = slices.Delete(p.inflight, i, i+1)
	}
	// A fused item that did not run because the item it follows did not
	// succeed goes back to waiting on that task, before that task's own
	// outcome is applied (which may skip it, or leave it for a retry).
	reverted := s.reverted[:0]
	for i := range b.Items {
		it := &b.Items[i]
		r := &s.tasks[it.Ref]
		back := it.After > 0 && it.Outcome == worker.NotStarted && !r.cancelReq
		if back {
			s.hot[it.Ref] = hot{status: Pending, unmet: 1}
			r.attempts--
		}
		reverted = append(reverted, back)
	}
	s.reverted = reverted[:0]
	ran := 0
	for i := range b.Items {
		it := &b.Items[i]
		t := it.Ref
		r := &s.tasks[t]
		s.running--
		if it.After > 0 && it.Outcome != worker.NotStarted {
			s.emit(EventStarted, t, now)
		}
		switch {
		case reverted[i]:
		case it.Outcome == worker.NotStarted:
			r.attempts--
			if r.cancelReq {
				s.cancelled(t, now)
			} else {
				s.pushReady(t) // not reached in practice: only Cancel and Shutdown end a context early
			}
		case r.cancelReq:
			ran++
			s.cancelled(t, now)
		case it.Err == nil:
			ran++
			s.succeeded(t, now)
		default:
			ran++
			s.failed(t, it.Err, it.Retry, now)
		}
		// A timed-out attempt may still hold its context: never reuse that one.
		if it.Outcome != worker.TimedOut && it.Ctx.Recycle() {
			s.ctxFree = append(s.ctxFree, it.Ctx)
		}
		it.Job, it.Ctx, it.RetryIf, it.Err = worker.Job{}, nil, nil, nil
	}
	if ran > 0 {
		sample := b.Elapsed / time.Duration(ran)
		if !p.measured {
			p.cost, p.measured = sample, true
		} else {
			p.cost += (sample - p.cost) / 4
		}
	}
	b.Items = b.Items[:0]
	s.free = append(s.free, b)
}

func (s *state) succeeded(t int32, now time.Time) {
	r := &s.tasks[t]
	r.runs++
	if x := r.x; x != nil && x.every > 0 && int(r.runs) < x.times {
		s.hot[t].status = Pending
		if e := s.emit(EventRecurred, t, now); e != nil {
			e.Run = int(r.runs)
		}
		r.attempts = 0
		x.planned = x.planned.Add(x.every)
		s.schedule(t, x.planned, now) // an overrun run is followed at once
		return
	}
	s.finish(t, Succeeded, now)
	if e := s.emit(EventSucceeded, t, now); e != nil {
		e.Run = int(r.runs)
	}
	for e := r.succHead; e != noTask; e = s.edges[e].next {
		c := s.edges[e].to
		if h := &s.hot[c]; h.status == Pending {
			if h.unmet--; h.unmet == 0 {
				s.eligible(c, now)
			}
		}
	}
}

func (s *state) failed(t int32, err error, retry bool, now time.Time) {
	x := s.extra(t)
	x.err = err
	r := &s.tasks[t]
	if retry && int(r.attempts) < x.retry.attempts() {
		wait := x.retry.Delay(int(r.attempts))
		if j := x.retry.Jitter; j > 0 && wait > 0 {
			lo := time.Duration(float64(wait) * (1 - j))
			wait = lo + time.Duration(s.rng.Int64N(int64(wait-lo)+1))
		}
		s.hot[t].status = Pending
		if e := s.emit(EventRetrying, t, now); e != nil {
			e.Err, e.Wait = err, wait
		}
		s.schedule(t, now.Add(wait), now)
		return
	}
	s.finish(t, Failed, now)
	if e := s.emit(EventFailed, t, now); e != nil {
		e.Err = err
	}
	s.skipDependents(t, t, now)
}

func (s *state) cancelled(t int32, now time.Time) {
	s.finish(t, Cancelled, now)
	s.emit(EventCancelled, t, now)
	s.skipDependents(t, t, now)
}

func (s *state) finish(t int32, st Status, now time.Time) {
	s.hot[t].status = st
	s.open--
	if s.retain {
		s.finalized = append(s.finalized, t)
	}
}

// skipped records that t was skipped because of cause.
func (s *state) skipped(t, cause int32, now time.Time) {
	s.finish(t, Skipped, now)
	s.tasks[t].cause = cause
	if s.retain {
		s.held[cause].refs++
	}
	s.emit(EventSkipped, t, now).setCause(s, cause)
}

// settle runs after every operation when retention is on: the tasks that
// became final give back their successor edges (their successors have
// been released or skipped already) and start their retention time.
func (s *state) settle(now time.Time) {
	if !s.retain {
		return
	}
	for _, t := range s.finalized {
		r := &s.tasks[t]
		for e := r.succHead; e != noTask; {
			next := s.edges[e].next
			c := s.edges[e].to
			hc := &s.held[c]
			hc.preds--
			if hc.preds == 0 && hc.dropDue && hc.refs == 0 {
				s.drop(c)
			}
			s.edges[e] = edge{to: noTask, next: s.edgeFree}
			s.edgeFree = e
			e = next
		}
		r.succHead, r.succTail = noTask, noTask
		s.expiry = append(s.expiry, retention{at: now, t: t})
	}
	s.finalized = s.finalized[:0]
	s.expire(now)
}

// expire drops the tasks whose retention time is up, or marks them to be
// dropped as soon as nothing refers to them.
func (s *state) expire(now time.Time) {
	for s.expHead < len(s.expiry) {
		x := s.expiry[s.expHead]
		if x.at.Add(s.keep).After(now) {
			break
		}
		s.expiry[s.expHead] = retention{}
		s.expHead++
		if h := &s.held[x.t]; h.preds == 0 && h.refs == 0 {
			s.drop(x.t)
		} else {
			h.dropDue = true
		}
	}
	if s.expHead > 1024 && s.expHead*2 > len(s.expiry) {
		n := copy(s.expiry, s.expiry[s.expHead:])
		clear(s.expiry[n:])
		s.expiry, s.expHead = s.expiry[:n], 0
	}
}

// drop forgets a final task nothing refers to: its ID is free again and its
// record is reused by a later Submit.
func (s *state) drop(t int32) {
	r := &s.tasks[t]
	delete(s.ids, r.id)
	cause := r.cause
	*r = rec{cause: noTask, succHead: noTask, succTail: noTask}
	s.hot[t], s.held[t] = hot{status: dropped}, holds{}
	s.recFree = append(s.recFree, t)
	if cause != noTask {
		hc := &s.held[cause]
		hc.refs--
		if hc.refs == 0 && hc.preds == 0 && hc.dropDue {
			s.drop(cause) // a cause is never Skipped itself: no deeper recursion
		}
	}
}

// nextDue is the earliest time the state needs to be woken: a delayed
// entry, or the end of a retention.
func (s *state) nextDue() (time.Time, bool) {
	due, ok := s.wheel.NextDue()
	if s.expHead < len(s.expiry) {
		at := s.expiry[s.expHead].at.Add(s.keep)
		if !ok || at.Before(due) {
			due, ok = at, true
		}
	}
	return due, ok
}

// skipDependents skips everything waiting on from, transitively, blaming
// cause. It walks a worklist, so a chain of any length uses no stack.
func (s *state) skipDependents(from, cause int32, now time.Time) {
	work := append(s.work[:0], from)
	for len(work) > 0 {
		t := work[len(work)-1]
		work = work[:len(work)-1]
		for e := s.tasks[t].succHead; e != noTask; e = s.edges[e].next {
			c := s.edges[e].to
			if s.hot[c].status != Pending {
				continue
			}
			s.skipped(c, cause, now)
			work = append(work, c)
		}
	}
	s.work = work[:0]
}

// cancel implements Scheduler.Cancel.
func (s *state) cancel(id string, now time.Time) bool {
	t, ok := s.ids[id]
	if !ok {
		return false
	}
	r := &s.tasks[t]
	switch s.hot[t].status {
	case Pending, Ready:
		s.unqueue(t)
		s.cancelled(t, now)
		return true
	case Running:
		if r.cancelReq || !s.cancelAttempt(t, ErrCancelled) {
			return false
		}
		r.cancelReq = true
		return true
	}
	return false
}

// unqueue takes a Pending or Ready task out of the ready queue or the
// delayed set.
func (s *state) unqueue(t int32) {
	r := &s.tasks[t]
	if s.hot[t].status == Ready {
		s.pools[r.pool].readyLive-- // its queue entry is skipped when popped
	}
	if x := r.x; x != nil && x.inWheel {
		s.wheel.Cancel(x.timer)
		x.inWheel = false
	}
}

// cancelAttempt ends the context of t's running attempt with cause. It
// returns false if the attempt had already returned nil (it is sealed): the
// task has in effect succeeded, and will be recorded so when its batch
// comes back. An attempt already cancelled by its timeout can still be
// cancelled as a task.
func (s *state) cancelAttempt(t int32, cause error) bool {
	for _, b := range s.pools[s.tasks[t].pool].inflight {
		for i := range b.Items {
			if it := &b.Items[i]; it.Ref == t {
				return it.Ctx.Cancel(cause) || !it.Ctx.Sealed()
			}
		}
	}
	panic("coordinator: running task has no attempt in flight")
}

// shutdown cancels every task that is not running; running ones have their
// contexts ended and are marked so that they end Cancelled when they come
// back, unless their attempt had already succeeded.
func (s *state) shutdown(now time.Time) {
	s.closing = true
	for t := range s.tasks {
		r := &s.tasks[t]
		switch s.hot[t].status {
		case Pending, Ready:
			s.unqueue(int32(t))
			s.finish(int32(t), Cancelled, now)
			s.emit(EventCancelled, int32(t), now)
		case Running:
			if !r.cancelReq && s.cancelAttempt(int32(t), ErrClosed) {
				r.cancelReq = true
			}
		}
	}
}

// runningIDs lists the tasks whose functions are running now.
func (s *state) runningIDs() []string {
	var ids []string
	for pi := range s.pools {
		for _, b := range s.pools[pi].inflight {
			if i, ok := b.Running(); ok {
				ids = append(ids, s.tasks[b.Items[i].Ref].id)
			}
		}
	}
	return ids
}

// info implements Scheduler.Info.
func (s *state) info(id string) (TaskInfo, bool) {
	t, ok := s.ids[id]
	if !ok {
		return TaskInfo{}, false
	}
	r := &s.tasks[t]
	ti := TaskInfo{ID: r.id, Status: s.hot[t].status, Pool: s.pools[r.pool].name, Priority: r.prio,
		Attempts: int(r.attempts), Runs: int(r.runs)}
	if r.x != nil && (s.hot[t].status == Failed || s.hot[t].status == Pending || s.hot[t].status == Running) {
		ti.Err = r.x.err
	}
	if r.cause != noTask {
		ti.Cause = s.tasks[r.cause].id
	}
	return ti, true
}
