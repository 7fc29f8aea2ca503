package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/batonhq/baton/actor"
	"github.com/batonhq/baton/internal/lane"
)

// Spawning: a running attempt adds tasks that belong to its task, and the
// task's dependents wait for them (a join), as Taskflow's subflows do.
//
// A spawn is part of the attempt's outcome, like SetResult: Spawn checks
// the batch at once, against the graph as it is (the usual errors, and a
// cycle through the join), and reserves its IDs; the children join the
// graph only when the attempt succeeds, in the coordinator iteration that
// applies that success (on a durable scheduler, in the commit that
// records it), and vanish if it fails, is cancelled or times out: a retry
// spawns again. Until then a reserved child is invisible (Info, Cancel,
// WaitTasks and Submit's dependencies do not see it) but its ID is taken.
//
// The state keeps, per task, a famRec (in s.fam, allocated by the first
// Spawn, so that schedulers that never spawn pay nothing), the children of
// each spawner in its extra (x.children, in the order spawned), and the
// reservations of each running attempt in s.pend. A spawner whose
// function returned nil with children not all final is joining: an
// internal status, Pending to the outside (TaskInfo.Joining says why),
// holding no worker. Each child's end counts down its parent's open
// children; at zero the parent's join is complete (joinAll, after the
// child's own events): it ends by its leaves (completeJoin).

// famRec is what spawning adds to a task's record, in s.fam, parallel to
// s.tasks. Owned by the coordinator goroutine, like the state.
type famRec struct {
	parent int32 // the task whose attempt spawned it (noTask: submitted); set at reservation
	root   int32 // the oldest ancestor of its family (noTask: in none); set when it joins the graph
	open   int32 // its children not final: its join waits for 0
	first  int32 // where the children of its current join start in x.children
	adopt  int32 // the child whose result becomes its own at a good join (Map's reducer); noTask: none
	famIn  int32 // retention: holds on it (kids, refs) from its own family (retention.go)
	size   int32 // a root: the members of its family, itself included
	ready  int32 // a root: the members counted ready to be forgotten
	sib    int32 // a member of a finished run's family (detachRun): the next of that run's children (noTask: none)
	split  int32 // retention: its finished runs' families not yet forgotten (detachRun); it is not forgotten before them
	ok     bool  // counted in its root's ready
	cut    bool  // its join was ended by Shutdown: a durable scheduler keeps it joining (durable.go)
}

var noFam = famRec{parent: noTask, root: noTask, adopt: noTask, sib: noTask}

// pending is what a running attempt asked for that takes effect only if
// it succeeds: the batches it spawned (reserved, in order) and its branch
// choice (Choose). Owned by the coordinator goroutine.
type pending struct {
	batches []*batchBuild
	chose   bool
	chosen  []string // Choose's successors, distinct, as given
	adopt   int32    // the reserved child whose result becomes the task's (noTask: none)
}

// ErrChildFailed is what a spawner's error wraps when its join failed: a
// task it spawned that nothing else it spawned depends on (a leaf of its
// family) failed, was cancelled, or was skipped because of a failure or
// a cancel. The error is a *JoinError; after a restart of a durable
// scheduler, one that wraps ErrChildFailed and says the same.
var ErrChildFailed = errors.New("coordinator: a spawned task did not succeed")

// JoinError is the error of a spawner whose join failed (see Spawn):
// errors.Is(err, ErrChildFailed) holds, and errors.Is and errors.As see
// the children's own errors (for a child skipped because of a failure
// upstream, that failure's error).
type JoinError struct {
	Task     string     // the spawner
	Children []TaskInfo // the first 10 leaves of its family that did not succeed, in the order spawned
	More     int        // how many more did not
	errs     []error
}

func (e *JoinError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "coordinator: task %s: spawned ", quoteID(e.Task))
	for i, ti := range e.Children {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %v", quoteID(ti.ID), ti.Status)
		switch {
		case ti.Status == Skipped && ti.Cause != "":
			fmt.Fprintf(&b, " because of %s", quoteID(ti.Cause))
		case ti.Err != nil:
			fmt.Fprintf(&b, ": %v", ti.Err)
		}
	}
	if e.More > 0 {
		fmt.Fprintf(&b, " and %d more", e.More)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrChildFailed) true.
func (e *JoinError) Is(target error) bool { return target == ErrChildFailed }

// Unwrap returns the children's errors.
func (e *JoinError) Unwrap() []error { return e.errs }

// errNotLocal is what Spawn and Choose return for a context that is no
// attempt's of this process: most often a remote handler's.
var errNotLocal = fmt.Errorf("%w: Spawn and Choose work in a task's function or a local Worker's Do; remote handlers cannot spawn or choose", ErrNoAttempt)

// Spawn adds tasks that belong to the running attempt whose context is
// ctx (the context of a task's function or of a custom Worker's Do, or one
// derived from it): children of its task, the spawner. It returns nil or
// the error Submit would, and then nothing is spawned: a *TaskError
// wrapping ErrInvalidTask, ErrDuplicateID, ErrUnknownDependency,
// ErrUnknownPool or ErrNotDurable, a *CycleError (a child depending on its
// spawner, or on a task that waits for it, makes a cycle through the
// join), ErrNoAttempt if ctx is not a running attempt's (an error that
// wraps it and says so if ctx is no attempt's of this process, a remote
// handler's for one), the context's
// cause if the attempt was cancelled or timed out, ErrClosed after
// Shutdown. A spawner may handle the error as it likes.
//
// The children join the graph when the attempt succeeds, in the same
// coordinator iteration (on a durable scheduler, in the same commit);
// if the attempt fails (an error, a panic, a timeout, a cancel) they are
// dropped, their IDs free again: a retry spawns afresh. Until then they
// are reserved: their IDs are taken, but Info, Cancel, WaitTasks and
// other batches do not see them; a later Spawn of the same attempt may
// depend on them. A child's Delay counts from its Spawn.
//
// A child may depend on its siblings (of any Spawn of the attempt) and on
// any task in the graph. It runs in its spawner's pool and at its
// priority unless its Pool or Priority is set (so a child of a task of a
// named pool cannot be put in the default pool), and its attempts' contexts
// carry the values of ctx: a span a middleware put there (otelbaton)
// becomes the parent of the children's spans.
//
// The join: the spawner's dependents wait until its function has returned
// nil and every task it spawned, and theirs, is final; meanwhile the
// spawner is Pending (TaskInfo.Joining), holds no worker, and its events
// say EventJoining. Then it ends by the leaves of its family, the children
// no other child of the same join depends on: if each succeeded or was
// skipped by a rule (a branch not taken, an AnyFailed with no failure),
// the spawner succeeds (a recurring one goes on to its next run); if one
// failed, was cancelled, or was skipped because of a failure or a cancel,
// the spawner fails with a *JoinError, without retry (its function
// succeeded; the children had their own retries). A spawner that wants to
// decide for itself spawns a last child that depends on the others under
// AllDone and returns what it decides. Cancel of a joining spawner
// cancels every task of its family not final and ends it Cancelled once
// they are all final; Shutdown does the same. WaitTasks on a spawner waits
// for its family. The join ends once each leaf's outcome is settled: a
// leaf skipped by a rule whose other dependencies (outside the family)
// still run may yet be skipped because of a failure, and the join waits.
//
// With WithRetention a family is forgotten only when every member of it
// can be. A recurring spawner (Every, Cron, Schedule) is not final while
// its series lasts: each run's children (and theirs) become a family of
// their own once that run's join has succeeded, forgotten whole as any,
// while the spawner runs on; it is not forgotten before them. Until then
// their IDs are taken, and a later run that spawns the same IDs gets
// ErrDuplicateID: a later run may reuse the IDs of an earlier run's
// children only once those are forgotten (at once under WithRetention(0),
// as its join ends), so give each run's children IDs of their own (the
// run's time or number in them) unless retention is 0. Without retention
// every run's children are kept, as every task is.
//
// Spawn blocks for a round trip to the coordinator. It is safe for
// concurrent use by the goroutines of one attempt. Remote handlers
// (remote/jetstream) run in another process with a context of their own:
// they cannot spawn; spawn from a local task into the remote pool.
func Spawn(ctx context.Context, tasks ...Task) error {
	return spawn(ctx, &submission{tasks: tasks}, noTask)
}

// SpawnGraph is Spawn for a Graph: the children's dependencies on each
// other by handle, with the same rules; g is not retained.
func SpawnGraph(ctx context.Context, g *Graph) error {
	if g == nil {
		return ErrNilGraph
	}
	if g.bad != nil {
		return g.bad
	}
	return spawn(ctx, &submission{tasks: g.tasks, hstart: g.hstart, handles: g.handles}, noTask)
}

// spawn sends a batch of children of the attempt of ctx to the
// coordinator; adopt, if not noTask, is the place in the batch of the
// child whose result becomes the spawner's at a good join.
func spawn(ctx context.Context, b *submission, adopt int32) error {
	a, err := graphAttempt(ctx)
	if err != nil {
		return err
	}
	s, c := a.s, a.c
	if len(b.tasks) == 0 {
		return nil
	}
	if err := s.check(b, s.lanePools[a.laneID]); err != nil {
		return err
	}
	if ctx != context.Context(c) {
		// Derived from the attempt's context: its values (a middleware's
		// span) go to the children. The bare context's values are the
		// spawner's own, which the coordinator hands down.
		b.values = context.WithoutCancel(ctx)
	}
	reply := make(chan error, 1)
	return a.call(ctx, spawnReq{task: a.task, ctx: c, laneID: a.laneID, slot: a.slot, b: b, adopt: adopt, reply: reply}, reply)
}

// attempt is the running local attempt a call from inside a task (Spawn,
// Choose) belongs to: its scheduler, its context, and its task and item.
type attempt struct {
	s      *Scheduler
	c      *lane.Context
	task   int32
	laneID int
	slot   uint32
}

// graphAttempt returns the attempt of ctx, or why a call from it cannot
// change the graph: errNotLocal outside any local attempt, ErrNoAttempt
// for an attempt that is over (attemptOf), the scheduler's closed error
// after Shutdown, and the context's cause once the attempt was cancelled
// or timed out (it cannot succeed).
func graphAttempt(ctx context.Context) (attempt, error) {
	c, ok := lane.Of(ctx)
	if !ok {
		return attempt{}, errNotLocal
	}
	s, _, task, err := attemptOf(ctx)
	if err != nil {
		return attempt{}, err
	}
	laneID, slot, _ := c.Item()
	if s.closed.Load() {
		return attempt{}, s.closedErr()
	}
	if ctx.Err() != nil {
		return attempt{}, context.Cause(ctx)
	}
	return attempt{s: s, c: c, task: task, laneID: laneID, slot: slot}, nil
}

// call sends req to a's coordinator and waits for its answer on reply.
func (a attempt) call(ctx context.Context, req request, reply <-chan error) error {
	if err := a.s.mailbox.Send(ctx, req); err != nil {
		if errors.Is(err, actor.ErrStopped) {
			return a.s.closedErr()
		}
		return context.Cause(ctx)
	}
	return <-reply
}

type spawnReq struct {
	task   int32
	ctx    *lane.Context
	laneID int
	slot   uint32
	b      *submission
	adopt  int32
	reply  chan<- error
}

func (r spawnReq) apply(l *loop, now time.Time) {
	r.reply <- l.st.spawn(r.task, r.ctx, r.laneID, r.slot, r.b, r.adopt, now)
}

// attempt finds the running attempt of t that ctx belongs to, and
// prepares it to report its end at once, with no successor fused behind
// it: its success is decided by the coordinator (a join, a branch). It
// returns ErrNoAttempt if the attempt is over, and the cancel cause if it
// is being cancelled.
func (s *state) attempt(t int32, ctx *lane.Context, laneID int, slot uint32) (*pending, error) {
	if s.closing {
		return nil, ErrClosed
	}
	if s.dur != nil && s.dur.failed != nil {
		return nil, s.dur.failed
	}
	if int(t) >= len(s.tasks) {
		return nil, ErrNoAttempt
	}
	r := &s.tasks[t]
	h := &s.hot[t]
	if h.status != dispatched || r.link != loc(laneID, slot) {
		return nil, ErrNoAttempt
	}
	ls, seq := s.locate(r.link)
	if ls.l.Ctx(seq) != ctx {
		return nil, ErrNoAttempt
	}
	// Take back what was fused behind it first: once it is taken, the
	// worker cannot run it however the attempt ends; then look at the
	// attempt, which the worker may end meanwhile (a stray goroutine's
	// Spawn): if it is over, the spawn is refused and the followers are
	// released by its success as any waiting task.
	s.revokeFollowers(ls, seq)
	switch ls.l.State(seq) {
	case lane.Claimed:
	case lane.Stopping:
		return nil, s.cancelCause(t)
	default:
		return nil, ErrNoAttempt
	}
	if h.flags&fCancelReq != 0 {
		return nil, s.cancelCause(t)
	}
	ls.l.SetUrgent(seq, true)
	if s.pend == nil {
		s.pend = map[int32]*pending{}
	}
	p := s.pend[t]
	if p == nil {
		p = &pending{adopt: noTask}
		s.pend[t] = p
	}
	return p, nil
}

// cancelCause is why t, running, is being stopped.
func (s *state) cancelCause(t int32) error {
	if s.hot[t].flags&fClosed != 0 || s.closing {
		return ErrClosed
	}
	return ErrCancelled
}

// spawn implements Spawn: it checks and reserves the batch b of children
// of t's running attempt.
func (s *state) spawn(t int32, ctx *lane.Context, laneID int, slot uint32, b *submission, adopt int32, now time.Time) error {
	p, err := s.attempt(t, ctx, laneID, slot)
	if err != nil {
		return err
	}
	if b.values == nil && s.tasks[t].x != nil {
		b.values = s.tasks[t].x.values // the spawner's own SubmitContext values
	}
	sb, err := s.reserveChildren(t, b, now)
	if err != nil {
		return err
	}
	p.batches = append(p.batches, sb)
	if adopt != noTask {
		p.adopt = sb.idx[adopt]
	}
	return nil
}

// ensureFam allocates the family table on the first spawn.
func (s *state) ensureFam() {
	if s.fam != nil {
		return
	}
	s.fam = make([]famRec, len(s.tasks))
	for i := range s.fam {
		s.fam[i] = noFam
	}
}

// growFam gives the records of a new batch their family entries.
func (s *state) growFam(idx []int32) {
	if s.fam == nil {
		return
	}
	if n := len(s.tasks); n > len(s.fam) {
		// As large as the records at once: growing by append, a batch of
		// 100,000 copied the table some 40 times (append grows large
		// slices by a quarter).
		s.fam = slices.Grow(s.fam, cap(s.tasks)-len(s.fam))
		for len(s.fam) < n {
			s.fam = append(s.fam, noFam)
		}
	}
	for _, t := range idx {
		s.fam[t] = noFam
	}
}

// reserveChildren checks and stores b as children of t, reserved: in the ID table
// and the records, holding their dependencies for retention, and in no
// dependency's successor list yet (activate wires them).
func (s *state) reserveChildren(t int32, b *submission, now time.Time) (*batchBuild, error) {
	s.ensureFam()
	sb := s.newBatchBuild(b)
	sb.spawner = t
	fail := func(err error) (*batchBuild, error) {
		sb.undo()
		return nil, err
	}
	if err := sb.claimIDs(); err != nil {
		return fail(err)
	}
	if err := sb.resolveDeps(); err != nil {
		return fail(err)
	}
	if err := sb.checkReserved(); err != nil {
		return fail(err)
	}
	if err := sb.checkCycle(); err != nil {
		return fail(err)
	}
	if err := sb.checkJoin(); err != nil {
		return fail(err)
	}
	sb.storeRecords(now)
	for _, c := range sb.idx {
		s.hot[c].status = reserved
		s.fam[c].parent = t
	}
	if s.retain {
		sb.held = true // its dependencies are held from now on, not from activate
		for _, j := range sb.deps {
			s.held[j].kids++
		}
	}
	return sb, nil
}

// checkReserved refuses a dependency on a reserved task, unless the batch
// is spawned by the same attempt: until that attempt succeeds the task is
// not in the graph.
func (sb *batchBuild) checkReserved() error {
	s := sb.s
	if len(s.pend) == 0 {
		return nil
	}
	for i := range sb.b.tasks {
		for k := sb.dstart[i]; k < sb.dstart[i+1]; k++ {
			j := sb.deps[k]
			if sb.places[k] < 0 && s.hot[j].status == reserved && (sb.spawner == noTask || s.fam[j].parent != sb.spawner) {
				return &TaskError{ID: sb.b.tasks[i].ID, Err: ErrUnknownDependency,
					Detail: quoteID(s.key(j)) + ", spawned by an attempt still running"}
			}
		}
	}
	return nil
}

// checkJoin refuses children that would wait, through the graph, for
// their own spawner: it waits for them (a cycle through the join). It
// walks what the batch's dependencies outside it wait for, through tasks
// not final only: their dependencies, and the children (joined or
// reserved) of spawners.
func (sb *batchBuild) checkJoin() error {
	s, t := sb.s, sb.spawner
	from := map[int32]int32{} // a task reached -> the task it was reached from (noTask: a batch dependency)
	var work []int32
	for i := range sb.b.tasks {
		for k := sb.dstart[i]; k < sb.dstart[i+1]; k++ {
			if j := sb.deps[k]; sb.places[k] < 0 {
				if _, seen := from[j]; !seen {
					from[j] = -2 - int32(i) // reached from task i of the batch
					work = append(work, j)
				}
			}
		}
	}
	for len(work) > 0 {
		u := work[len(work)-1]
		work = work[:len(work)-1]
		if u == t {
			return sb.joinCycle(from)
		}
		if s.hot[u].status.Final() {
			continue
		}
		visit := func(v int32) {
			if _, seen := from[v]; !seen {
				from[v] = u
				work = append(work, v)
			}
		}
		r := &s.tasks[u]
		for _, d := range s.edges(r, r.deps) {
			visit(d)
		}
		if r.x != nil {
			for _, c := range r.x.children {
				visit(c)
			}
		}
		if p := s.pend[u]; p != nil {
			for _, b := range p.batches {
				for _, c := range b.idx {
					visit(c)
				}
			}
		}
	}
	return nil
}

// joinCycle builds the error of a cycle through the spawner's join: the
// path from a child to the spawner.
func (sb *batchBuild) joinCycle(from map[int32]int32) error {
	s := sb.s
	ids := []string{s.key(sb.spawner)}
	for u := from[sb.spawner]; ; u = from[u] {
		if u <= -2 {
			ids = append(ids, sb.b.tasks[-2-u].ID)
			break
		}
		ids = append(ids, s.key(u))
	}
	slices.Sort(ids)
	return &CycleError{InCycle: slices.Compact(ids)}
}

// commitPending applies what t's attempt asked for, now that it has
// succeeded: its choice, then its children, which join the graph; t joins
// them, or, with nothing to wait for, succeeds.
func (s *state) commitPending(t int32, p *pending, now time.Time) {
	if p.chose {
		x := s.extra(t)
		x.branched, x.chosen = true, p.chosen
		s.touched(t)
	}
	if len(p.batches) == 0 {
		s.succeeded(t, now)
		return
	}
	h := &s.hot[t]
	x := s.extra(t)
	f := &s.fam[t]
	f.first = int32(len(x.children))
	f.adopt = p.adopt
	if f.root == noTask {
		f.root, f.size = t, 1 // a family begins
	}
	h.status = joining
	s.emit(EventJoining, t, now)
	if s.cutting {
		// Spawned after Shutdown's cancellations: the children are
		// cancelled at once. (Applied before them, as Shutdown applies what
		// finished, they are cancelled with every other task, after the
		// starts Shutdown reports.)
		h.flags |= fCancelReq | fClosed
	}
	for _, sb := range p.batches {
		s.activate(t, sb, now)
	}
	if f.open == 0 {
		s.joins = append(s.joins, t)
	}
}

// activate makes the reserved batch sb, children of t, tasks of the graph:
// wired to what they depend on, written (durable), and eligible, skipped
// or waiting as their dependencies' ends say.
func (s *state) activate(t int32, sb *batchBuild, now time.Time) {
	root := s.fam[t].root
	for _, c := range sb.idx {
		s.hot[c].status = Pending
		s.fam[c].root = root
	}
	s.fam[root].size += int32(len(sb.idx))
	x := s.tasks[t].x
	x.children = append(x.children, sb.idx...)
	s.fam[t].open += int32(len(sb.idx))
	if s.retain {
		for _, c := range sb.idx {
			r := &s.tasks[c]
			for _, d := range s.edges(r, r.deps) {
				s.famHold(c, d, 1)
			}
		}
	}
	ended := sb.wireEarlier()
	s.submitted(sb.b)
	for _, c := range sb.idx {
		s.emit(EventSpawned, c, now)
	}
	s.settleBatch(sb.idx, ended, now)
	if s.cutting {
		for _, c := range sb.idx {
			switch s.hot[c].status {
			case Pending, Ready:
				s.cancelTask(c, ErrClosed, now)
			}
		}
	}
}

// dropPending forgets what a failed attempt asked for: its reserved
// children are dropped, their IDs and records free again.
func (s *state) dropPending(p *pending) {
	for _, sb := range slices.Backward(p.batches) {
		sb.unreserve()
	}
}

// unreserve takes back a reserved batch whole.
func (sb *batchBuild) unreserve() {
	s := sb.s
	for i, c := range sb.idx {
		s.ids.Delete(sb.hashes[i], c)
	}
	r0 := &s.tasks[sb.idx[0]]
	a := r0.arena
	var release []int32
	if s.retain {
		// Every hold first, then the records: a child's hold on a sibling
		// of the batch must not outlive the sibling's cleared record,
		// which a later batch reuses.
		for _, c := range sb.idx {
			r := &s.tasks[c]
			for _, d := range s.edges(r, r.deps) {
				s.held[d].kids--
				release = append(release, d)
			}
		}
	}
	for _, c := range sb.idx {
		if s.retain {
			s.held[c] = holds{}
		}
		*s.spec(c) = lane.Spec{}
		s.tasks[c] = rec{link: noTask}
		s.hot[c] = hot{status: dropped}
		s.fam[c] = noFam
		s.unkey(c)
		s.recFree.add(c)
	}
	s.open -= len(sb.idx)
	s.arenas[a] = arena{}
	s.arenaFree = append(s.arenaFree, a)
	for _, d := range release {
		if s.hot[d].status != dropped {
			s.maybeDrop(d)
		}
	}
}

// childEnded counts down the open children of p, which one of its
// children's end has just made final; at zero its join is complete,
// applied by joinAll after the child's own news.
func (s *state) childEnded(p int32) {
	f := &s.fam[p]
	if f.open--; f.open == 0 && s.hot[p].status == joining {
		s.joins = append(s.joins, p)
	}
}

// joinAll completes the joins whose children are all final and settled,
// and the joins their ends complete in turn.
func (s *state) joinAll(now time.Time) {
	if s.joinBusy || len(s.joins) == 0 {
		return
	}
	s.joinBusy = true
	for len(s.joins) > 0 {
		t := s.joins[0]
		s.joins = s.joins[1:]
		if s.hot[t].status == joining && s.fam[t].open == 0 && s.joinSettled(t) {
			s.completeJoin(t, now)
		}
	}
	s.joins = s.joins[:0]
	s.joinBusy = false
}

// joinSettled reports whether the join of t, whose children are all
// final, may end: its outcome is known once no child is Skipped with a
// class that may still get worse (a dependency outside the family still
// running: cascade.go). Such a child's settlement queues t again
// (childSettled). A join that Cancel or Shutdown reached ends Cancelled
// whatever its leaves say, and does not wait.
func (s *state) joinSettled(t int32) bool {
	if s.hot[t].flags&fCancelReq != 0 {
		return true
	}
	for _, c := range s.tasks[t].x.children[s.fam[t].first:] {
		if h := &s.hot[c]; h.status == Skipped && h.unmet > 0 {
			return false
		}
	}
	return true
}

// childSettled queues the join of the spawner of t, a Skipped task whose
// end has just settled, if that join waits for nothing else.
func (s *state) childSettled(t int32) {
	if s.fam == nil {
		return
	}
	if p := s.fam[t].parent; p != noTask && s.hot[p].status == joining && s.fam[p].open == 0 {
		s.joins = append(s.joins, p)
	}
}

// completeJoin ends the join of t, whose children are all final: by its
// leaves (see Spawn), or Cancelled if Cancel or Shutdown reached it.
func (s *state) completeJoin(t int32, now time.Time) {
	h := &s.hot[t]
	x := s.tasks[t].x
	f := &s.fam[t]
	if h.flags&fCancelReq != 0 {
		h.status = Pending
		f.cut = s.closing && h.flags&fClosed != 0
		s.cancelled(t, now)
		return
	}
	if err := s.joinError(t); err != nil {
		h.status = Running
		s.failed(t, err, false, now)
		return
	}
	if s.retain && x.recurring() {
		// Its next run spawns a family of its own: this one's can go.
		s.detachRun(t, x.children[f.first:])
	}
	if a := f.adopt; a != noTask {
		if ax := s.tasks[a].x; ax != nil && ax.hasResult {
			x.result, x.hasResult = ax.result, true
		} else {
			x.result, x.hasResult = nil, false
		}
		f.adopt = noTask
	}
	h.status = Running
	s.succeeded(t, now)
}

// joinError returns the error of t's join, nil if its leaves ended well.
func (s *state) joinError(t int32) error {
	x := s.tasks[t].x
	kids := x.children[s.fam[t].first:]
	var e *JoinError
	var inner map[int32]bool // the children of t that another child of t depends on: no leaves
	for _, c := range kids {
		if s.hot[c].status == Succeeded || s.classOfEnd(c) == endBenign {
			continue
		}
		if inner == nil {
			inner = s.dependedOn(t)
		}
		if inner[c] {
			continue
		}
		if e == nil {
			e = &JoinError{Task: s.key(t)}
		}
		if len(e.Children) == 10 {
			e.More++
			continue
		}
		ti, _ := s.infoOf(c)
		e.Children = append(e.Children, ti)
		err := ti.Err
		if err == nil && ti.Status == Skipped {
			err = s.errOf(s.root(c))
		}
		if err != nil {
			e.errs = append(e.errs, err)
		}
	}
	if e == nil {
		return nil
	}
	return e
}

// dependedOn returns the tasks that a child of t depends on. It reads the
// children's dependencies, not their dependencies' successor lists: a
// child spawned after a sibling's end had settled is in none of the
// sibling's lists (wireEarlier), yet depends on it.
func (s *state) dependedOn(t int32) map[int32]bool {
	deps := map[int32]bool{}
	for _, d := range s.tasks[t].x.children {
		if s.hot[d].status == dropped {
			continue
		}
		r := &s.tasks[d]
		for _, j := range s.edges(r, r.deps) {
			deps[j] = true
		}
	}
	return deps
}

// cancelFamily cancels the tasks of t's family not final, t joining,
// through a worklist.
func (s *state) cancelFamily(t int32, cause error, now time.Time) {
	work := []int32{t}
	for len(work) > 0 {
		u := work[len(work)-1]
		work = work[:len(work)-1]
		x := s.tasks[u].x
		for _, c := range x.children[s.fam[u].first:] {
			switch s.hot[c].status {
			case joining:
				hc := &s.hot[c]
				if hc.flags&fCancelReq == 0 {
					hc.flags |= fCancelReq
					if cause == ErrClosed {
						hc.flags |= fClosed
					}
					work = append(work, c)
					if s.fam[c].open == 0 {
						// Its children are final, its join waited for a
						// skipped one's end to settle: a cancelled join
						// does not wait.
						s.joins = append(s.joins, c)
					}
				}
			case Pending, Ready, dispatched:
				s.cancelTask(c, cause, now)
			}
		}
	}
}
