// Package lane is the hand-off between Baton's coordinator and its
// worker goroutines. Nothing here is for users: package worker holds what
// custom worker types need.
//
// # Lanes
//
// Every worker goroutine owns one Lane: a ring of Size items that the
// coordinator fills and the worker runs in order, like the Go runtime's
// per-P run queue (runqput/runqgrab), with the coordinator as the only
// producer and the only thief. Each item carries one claim word that
// exactly one side wins:
//
//	Free ──worker claims──▶ Claimed ──returns nil──▶ Sealed
//	                           │   └──returns error──▶ Returned
//	                           └──coordinator stops──▶ Stopping ──returns──▶ Stopped
//	Free ──coordinator revokes──▶ Revoked
//	Free ──worker passes (the item it follows did not succeed)──▶ Passed
//	Free ──worker passes (its start-by time had passed)──▶ Late
//
// A Free item is the coordinator's to take back (Cancel, a better
// priority, an idle worker stealing); once Claimed, its function runs or is
// about to, and only a stop request (which cancels its context) reaches it.
// An attempt that returned nil is Sealed before any stop: it succeeded, and
// a later Cancel cannot say otherwise.
//
// The coordinator publishes items by raising the lane's count (one atomic
// word with a closed bit, so that "the worker found nothing left and
// stopped" and "the coordinator appended one more" can never both win);
// the worker reports progress at a mark the coordinator sets, after an
// item whose successors someone idle is waiting for, and when it runs dry.
// Outcomes are written in the items themselves and read by the coordinator
// once a report covers them; it walks each reported item once.
package lane

import (
	"context"
	"fmt"
	"math"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/worker"
	"github.com/benbjohnson/clock"
)

// Size is the number of items a lane holds; a power of two.
const Size = 1024

const (
	mask      = Size - 1
	closedBit = uint64(1) << 32
)

// Item states; see the package doc.
const (
	Empty    uint32 = iota // not in use
	Free                   // published, not claimed
	Claimed                // the worker took it: its function runs or is about to
	Sealed                 // its function returned nil before any stop
	Returned               // its function returned an error before any stop
	Stopping               // claimed, then stopped by the coordinator: its context is ending
	Stopped                // stopped, and its function has returned
	Revoked                // taken back by the coordinator before any claim
	Passed                 // not run: the item it follows did not succeed
	Late                   // not run: the worker reached it after its start-by time (SetStartBy)
)

// PassedOver reports whether s is the state of an item the worker went
// past without running it: Passed or Late.
func PassedOver(s uint32) bool { return s == Passed || s == Late }

// Spec is what a worker reads of a task: written before any of its items is
// published and never changed while one is out.
type Spec struct {
	ID  string
	Run func(context.Context) error
	X   *SpecX // nil for a plain task
}

// SpecX holds what few tasks have.
type SpecX struct {
	Payload any
	Timeout time.Duration    // per attempt; 0: none
	RetryIf func(error) bool // nil: every error may be retried
}

// SpecChunk is how many specs one chunk holds: chunks never move, so a
// worker can read a spec while the coordinator adds chunks.
const SpecChunk = 1 << 12

// Specs is the table of every task's Spec, by task index. The coordinator
// writes specs and adds chunks; workers read the specs of items published
// to them (the publish orders the writes before the reads).
type Specs struct {
	table  atomic.Pointer[[]*[SpecChunk]Spec] // published copy of chunks
	chunks []*[SpecChunk]Spec                 // coordinator only
}

// Grow makes room for task indexes below n, publishing a new table when
// chunks are added. Coordinator only.
func (s *Specs) Grow(n int32) {
	if int32(len(s.chunks))*SpecChunk >= n {
		return
	}
	for int32(len(s.chunks))*SpecChunk < n {
		s.chunks = append(s.chunks, new([SpecChunk]Spec))
	}
	tab := s.chunks[:len(s.chunks):len(s.chunks)]
	s.table.Store(&tab)
}

// Own returns task t's spec, for the coordinator, which may write it.
func (s *Specs) Own(t int32) *Spec { return &s.chunks[t/SpecChunk][t%SpecChunk] }

// At returns task t's spec, for a worker holding one of its items.
func (s *Specs) At(t int32) *Spec {
	return &(*s.table.Load())[t/SpecChunk][t%SpecChunk]
}

// Item is one attempt in a lane: 16 bytes, four to a cache line, since both
// sides touch every item. What only one side needs lives beside it (the
// attempt numbers, the context, the outcome of a failure).
type Item struct {
	state  uint32 // claim state; atomic once published
	flags  uint32 // itemFused, itemReport; atomic once published
	task   int32  // the coordinator's task index
	parent uint32 // when fused: the sequence of the item it follows
}

const (
	itemFused   uint32 = 1 << iota // run only if the parent item succeeded (it was Sealed)
	itemReport                     // report as soon as this one is done if a pool is hungry: it may release work
	itemTouched                    // set by the worker: the function called a method of its context
	itemUrgent                     // report as soon as this one is done: its outcome starts a clock (retry, next run)
	itemStartBy                    // the worker must claim it by its slot's startBy time (SetStartBy)
	itemCareful                    // claimed, the worker calls nothing until the coordinator lets it (SetCareful, Go)
	itemGo                         // set by the coordinator: the careful item's start is committed
	itemStamped                    // set by the worker: its stamps hold this item's times (StampTimed)
)

// Outcome is what a worker says of an attempt that failed.
type Outcome struct {
	Err       error
	Retry     bool // RetryIf(Err), evaluated on the worker
	TimedOut  bool // the attempt's timeout passed
	Abandoned bool // ... and its function had not returned a grace period later (Env.Returned tells when it does)
}

type meta struct{ attempt, run int32 }

// noReady marks a slot whose ready time is unknown (Lane.readys): the
// times are stored with their sign bit flipped, so that the zero value
// means unknown and a clock at Unix 0 (clock.NewMock's) is a time like
// any other.
const noReady = 0

func encodeReady(unixNano int64) int64 { return unixNano ^ math.MinInt64 }

// Running reports whether s is the state of an item whose function has
// been called and has not returned.
func Running(s uint32) bool { return s == Claimed || s == Stopping }

// Ran reports whether s is the state of an item whose function was called.
func Ran(s uint32) bool { return s >= Claimed && s <= Stopped }

// Report tells the coordinator how far a lane's worker has got.
type Report struct {
	Lane    *Lane
	Upto    uint32        // every item before this sequence is done
	Idle    bool          // the lane is closed: its worker waits for a wake
	Elapsed time.Duration // the worker's busy time since its previous report
	Ran     uint32        // functions that returned in that time (a sample of the cost per attempt; one under way only inflates it)
}

// Clock is the part of a clock the worker needs; clock.Clock satisfies it.
type Clock interface {
	Now() time.Time
	Timer(d time.Duration) *clock.Timer
}

// ArmAt returns a timer of c that fires when c reaches due, or nil if it
// has already. Reading the clock and creating the timer are two calls: a
// mock clock advanced between them would set the timer late by the
// advance, so ArmAt reads the clock again and, if it moved (more than a
// microsecond on a real clock, which always moves a little), arms again
// from the new time.
func ArmAt(c Clock, due time.Time) *clock.Timer {
	_, manual := c.(interface{ Add(time.Duration) })
	for {
		before := c.Now()
		d := due.Sub(before)
		if d <= 0 {
			return nil
		}
		t := c.Timer(d)
		after := c.Now()
		if after.Equal(before) || (!manual && after.Sub(before) < time.Microsecond) {
			return t
		}
		t.Stop()
	}
}

// AddSat returns t+d for d >= 0, saturating instead of overflowing.
func AddSat(t time.Time, d time.Duration) time.Time {
	u := t.Add(d)
	if d > 0 && u.Before(t) {
		return time.Unix(1<<62, 0)
	}
	return u
}

// UnixNanoSat is t.UnixNano(), saturated for a time after 2262 or before
// 1678 (AddSat's results included), where UnixNano's result is undefined.
func UnixNanoSat(t time.Time) int64 {
	switch sec := t.Unix(); {
	case sec >= math.MaxInt64/int64(time.Second):
		return math.MaxInt64
	case sec <= math.MinInt64/int64(time.Second):
		return math.MinInt64
	}
	return t.UnixNano()
}

// Env is what every lane of one pool shares. Immutable once the workers
// start.
type Env struct {
	Worker   worker.Worker // nil: call Spec.Run directly
	Clock    Clock
	Reports  chan<- Report
	Hungry   *atomic.Bool // set by the coordinator: the pool has idle workers and nothing ready
	Specs    *Specs       // every task's Spec, by index
	Detached *Detached
	Grace    time.Duration       // how long a timed-out function may take to return before it is abandoned
	Armed    func(due time.Time) // nil, or told each time a timeout or grace timer is armed (WithTimerArmed)
	Owner    any                 // what Context.Attempt reports: the scheduler the lanes serve
	// ReportStarts: report every claim at once, not only the first after
	// a wake. A durable scheduler commits an attempt's start as soon as it
	// hears of it, so that a crash during the attempt counts it; without a
	// report the coordinator could hear of it only when the attempt ends.
	ReportStarts bool
	// Inside, if set, is called by every goroutine that runs attempts (a
	// lane's, and a timed attempt's own) when it starts, and what it
	// returns when it stops: the scheduler tells a call made from inside a
	// task by the goroutine it comes from.
	Inside func() (leave func())
	// Go starts a supervised goroutine (the scheduler's errgroup): Run
	// hands its lane to a new one when a task ends the worker goroutine
	// with runtime.Goexit. Nil: the lane stops there (tests).
	Go func(func() error)
	// Returned, if set, is called on the goroutine of an abandoned
	// attempt (Outcome.Abandoned) once its function has returned, with
	// the lane and the item: what the attempt holds (its key's place,
	// the workers its slots keep) is held until then. It is never called
	// for an attempt that was not abandoned.
	Returned func(lane int, seq uint32)
}

// Lane is one worker's ring of items. The coordinator owns the slots it
// has not published and those reported done; the worker owns the rest.
type Lane struct {
	word atomic.Uint64 // published count (low 32 bits, wrapping) | closedBit
	mark atomic.Uint32 // report once the item before this sequence is done
	wake chan struct{} // buffer 1: the coordinator published work on a closed lane
	goc  chan struct{} // buffer 1: the coordinator let a careful item start (Go)
	ID   int           // immutable: the coordinator's index of the lane

	items [Size]Item
	meta  [Size]meta // written with the item; the worker reads it for a Job
	// readys: when each slot's task became ready (encodeReady), written
	// with the item by a coordinator that records it (SetReady), else
	// noReady; the worker reads it for a Job.
	readys [Size]int64
	// startBy: the time by which the worker must claim the slot's item
	// (UnixNano), written with the item if its itemStartBy flag is set
	// (SetStartBy); past it, the worker passes it (Late).
	startBy [Size]int64
	ctxs    [Size]*Context // one per slot, reused while no function looked at it
	outs    [Size]Outcome  // written by the worker for a failure only
	// stamps: when the function of the slot's item started and returned
	// (UnixNano, on the workers' clock), written by the worker for an
	// item with a Timeout (StampTimed), which then flags the item
	// itemStamped, read by the coordinator (Stamps) only for an item so
	// flagged: a plain item's slot is neither written nor read.
	stamps *[Size][2]int64 // allocated by StampTimed, before the first item is published

	// Owned by the worker goroutine.
	next   uint32            // the next sequence to look at
	ok     [Size / 64]uint64 // per sequence (mod Size): that item succeeded
	seen   uint32            // mark last read
	notify bool              // report after the next claim (or when running dry)
	timing bool              // the item running was stamped as it started: stamp its end (never reading stamps, which the coordinator's cache holds)
	since  time.Time         // start of the busy time being measured
	ran    uint32            // functions returned since the previous report
	env    *Env
}

// NewLane returns an empty, closed lane.
func NewLane(id int) *Lane {
	l := &Lane{ID: id, wake: make(chan struct{}, 1), goc: make(chan struct{}, 1)}
	l.word.Store(closedBit)
	return l
}

// Put writes the item for sequence seq, which the coordinator owns and is
// about to publish: Free, with its attempt numbers, and a context for its
// slot. Coordinator only.
func (l *Lane) Put(seq uint32, task int32, parent uint32, fused bool, attempt, run int32, report, urgent bool) {
	i := seq & mask
	it := &l.items[i]
	it.state, it.task, it.parent, it.flags = Free, task, parent, 0
	if fused {
		it.flags |= itemFused
	}
	if report {
		it.flags |= itemReport
	}
	if urgent {
		it.flags |= itemUrgent
	}
	l.meta[i] = meta{attempt, run}
	if l.ctxs[i] == nil {
		l.ctxs[i] = l.newContext(i)
	}
}

// SetReady records when the task of the item at seq became ready
// (UnixNano), for its Job; ClearReady, that it is unknown. A coordinator
// that records ready times calls one of them after every Put, before the
// item is published (Put leaves the slot's last value). Coordinator only.
func (l *Lane) SetReady(seq uint32, unixNano int64) { l.readys[seq&mask] = encodeReady(unixNano) }

// SetStartBy sets the time (UnixNano, on the workers' clock) by which the
// worker must claim the item at seq, which the coordinator has put and not
// published yet: a worker that reaches it later passes it (Late). A
// series' start is missed when it cannot begin in time, and only the
// worker knows when it could. Coordinator only.
func (l *Lane) SetStartBy(seq uint32, unixNano int64) {
	l.startBy[seq&mask] = unixNano
	l.items[seq&mask].flags |= itemStartBy
}

// SetCareful makes the item at seq, put and not published, a careful
// start: once the worker has claimed it (and reported the claim), it
// calls nothing until the coordinator calls Go for it, or the attempt's
// context ends (the attempt then ends with the context's cause, its
// function never called). A durable scheduler commits a careful
// attempt's start before its function may run. Coordinator only.
func (l *Lane) SetCareful(seq uint32) { l.items[seq&mask].flags |= itemCareful }

// StampTimed asks the worker to read the clock as the function of an item
// with a Timeout starts and as it returns (Stamps): it reads the clock for
// the deadline anyway, and such attempts are not tiny. The worker decides
// from the item's spec, which it reads to run it, so that the coordinator
// need not read every spec as it hands items out (a cache miss each on a
// large graph). Coordinator only, before the lane's first item is
// published.
func (l *Lane) StampTimed() {
	if l.stamps == nil {
		l.stamps = new([Size][2]int64)
	}
}

// Stamps returns when the function of the item at seq started and
// returned (UnixNano; 0 for an item without a Timeout, on a lane without
// StampTimed, or not yet started or returned). The coordinator may call
// it while the item runs.
func (l *Lane) Stamps(seq uint32) (started, ended int64) {
	started, ended, _ = l.Ending(seq)
	return started, ended
}

// Ending returns Stamps and Touched of the item at seq, which is done,
// with one read of its flags: what the coordinator's attempt history
// reads of every item it applies. Coordinator only.
func (l *Lane) Ending(seq uint32) (started, ended int64, touched bool) {
	i := seq & mask
	// The item's flag first: l.stamps shares a cache line with the
	// worker's next, which it writes for every item, so that reading it
	// for every item made the line travel between the cores (the attempt
	// history's largest cost). The flag is set only once stamps exist.
	f := atomic.LoadUint32(&l.items[i].flags)
	if f&itemStamped != 0 && l.stamps != nil {
		started, ended = atomic.LoadInt64(&l.stamps[i][0]), atomic.LoadInt64(&l.stamps[i][1])
	}
	return started, ended, f&itemTouched != 0
}

// Go lets the careful item at seq, claimed, call its function.
// Coordinator only.
func (l *Lane) Go(seq uint32) {
	atomic.OrUint32(&l.items[seq&mask].flags, itemGo)
	select {
	case l.goc <- struct{}{}:
	default:
	}
}

// ClearReady: see SetReady.
func (l *Lane) ClearReady(seq uint32) { l.readys[seq&mask] = noReady }

// newContext returns a context for slot i, whose first touch marks the
// slot's item.
func (l *Lane) newContext(i uint32) *Context { return &Context{lane: l, slot: i} }

// State returns the claim state of the item at seq.
func (l *Lane) State(seq uint32) uint32 { return atomic.LoadUint32(&l.items[seq&mask].state) }

// Task returns the task of the item at seq. Coordinator only.
func (l *Lane) Task(seq uint32) int32 { return l.items[seq&mask].task }

// Fused returns the parent of the item at seq, if it was fused behind one.
// Coordinator only.
func (l *Lane) Fused(seq uint32) (parent uint32, fused bool) {
	it := &l.items[seq&mask]
	return it.parent, atomic.LoadUint32(&it.flags)&itemFused != 0
}

// Ctx returns the context of the item at seq.
func (l *Lane) Ctx(seq uint32) *Context { return l.ctxs[seq&mask] }

// Outcome returns what the worker wrote of a failed attempt at seq. Read
// it only once a report covers the item.
func (l *Lane) Outcome(seq uint32) *Outcome { return &l.outs[seq&mask] }

// Touched reports whether the function of the item at seq called a method
// of its context (SetResult needs one). Coordinator only, once reported.
func (l *Lane) Touched(seq uint32) bool {
	return atomic.LoadUint32(&l.items[seq&mask].flags)&itemTouched != 0
}

// Plain reports whether the function of the item at seq neither called a
// method of its context nor had its times stamped by its worker: all the
// coordinator knows of it is its outcome. Coordinator only, once reported.
func (l *Lane) Plain(seq uint32) bool {
	return atomic.LoadUint32(&l.items[seq&mask].flags)&(itemTouched|itemStamped) == 0
}

// SetReport says whether the worker should report as soon as the item at
// seq is done while a pool is hungry. The coordinator may change it after
// publishing, as it fuses more of the item's successors; published says
// whether it has published the item (if not, a plain write does).
func (l *Lane) SetReport(seq uint32, v, published bool) {
	f := &l.items[seq&mask].flags
	if !published {
		if v {
			*f |= itemReport
		} else {
			*f &^= itemReport
		}
		return
	}
	if on := atomic.LoadUint32(f)&itemReport != 0; on == v {
		return
	}
	if v {
		atomic.OrUint32(f, itemReport)
	} else {
		atomic.AndUint32(f, ^itemReport)
	}
}

// SetUrgent asks the worker to report as soon as the item at seq is done,
// whether or not a pool is hungry: its success releases work the
// coordinator must see at once. published says whether the item was
// published (if not, a plain write does).
func (l *Lane) SetUrgent(seq uint32, published bool) {
	f := &l.items[seq&mask].flags
	if !published {
		*f |= itemUrgent
		return
	}
	atomic.OrUint32(f, itemUrgent)
}

// Revoke takes back the Free item at seq. It reports false if the worker
// got there first.
func (l *Lane) Revoke(seq uint32) bool {
	return atomic.CompareAndSwapUint32(&l.items[seq&mask].state, Free, Revoked)
}

// Stop asks the Claimed item at seq to stop. It reports false if the item
// is not Claimed (not yet claimed, or already returned or stopping). The
// caller then cancels its context.
func (l *Lane) Stop(seq uint32) bool {
	return atomic.CompareAndSwapUint32(&l.items[seq&mask].state, Claimed, Stopping)
}

// Done gives back the slot of an applied item. dirty says the coordinator
// changed its context (cancelled it, gave it values or a deadline) or the
// attempt failed. A context the function looked at is replaced (someone
// may still hold it); one that changed is reset; and the outcome of a
// failure is cleared. An untouched success costs nothing. Coordinator only.
func (l *Lane) Done(seq uint32, dirty bool) {
	i := seq & mask
	if atomic.LoadUint32(&l.items[i].flags)&itemTouched != 0 || (dirty && !l.ctxs[i].Reset()) {
		l.ctxs[i] = l.newContext(i)
	}
	if dirty {
		l.outs[i] = Outcome{}
	}
}

// Publish makes the items written up to sequence n visible to the worker,
// on a lane the worker is running. It reports false, publishing nothing,
// if the worker has closed the lane meanwhile: then Open it again and
// Wake its worker.
func (l *Lane) Publish(from, n uint32) bool {
	return l.word.CompareAndSwap(uint64(from), uint64(n))
}

// Open publishes the items up to sequence n on a closed lane; Wake then
// starts its worker. The worker has reported (or is reporting) itself idle
// at the old count.
func (l *Lane) Open(n uint32) { l.word.Store(uint64(n)) }

// Wake starts the worker of a lane just opened. It never blocks: a wake
// already pending counts for both.
func (l *Lane) Wake() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// SetMark asks the worker to report once every item before sequence m is
// done.
func (l *Lane) SetMark(m uint32) { l.mark.Store(m) }

// Run is the worker goroutine: it waits for a wake, runs what is
// published, reports and waits again, until ctx ends. A task's failure is
// an outcome in its item, never an error of Run, which returns nil.
func (l *Lane) Run(ctx context.Context, env *Env) error { return l.run(ctx, env, false) }

// run is Run, draining first when it takes over from a goroutine that a
// task ended with runtime.Goexit.
func (l *Lane) run(ctx context.Context, env *Env, drain bool) error {
	if env.Inside != nil {
		defer env.Inside()()
	}
	returned := false
	defer func() {
		if !returned && env.Go != nil {
			// A task called runtime.Goexit (t.FailNow, say) on this
			// goroutine, or a deferred call of its panicked during one
			// and was recovered (Goexit goes on then): its attempt has
			// failed (runTo) and the goroutine ends; another goes on with
			// the lane. (Task panics are recovered in runTo: nothing else
			// leaves this function early.)
			env.Go(func() error { return l.run(ctx, env, true) })
		}
	}()
	l.serve(ctx, env, drain)
	returned = true
	return nil
}

// serve drains the lane (first, if drain is set) at every wake until ctx
// ends.
func (l *Lane) serve(ctx context.Context, env *Env, drain bool) {
	if drain && !l.Drain(ctx, env) {
		return
	}
	for {
		select {
		case <-l.wake:
		case <-ctx.Done():
			return
		}
		if !l.Drain(ctx, env) {
			return
		}
	}
}

// Drain runs what is published until nothing is left, then closes the lane
// and reports it idle. It returns false if ctx ended while it reported.
// Run calls it after every wake; tests call it directly to be the worker on
// their own goroutine.
func (l *Lane) Drain(ctx context.Context, env *Env) bool {
	if l.env != env {
		l.env = env // once: detached attempts read it
	}
	l.since, l.ran = l.env.Clock.Now(), 0
	l.notify = true // say as soon as the first claim is made: the lane is busy again
	for {
		w := l.word.Load()
		if w&closedBit != 0 {
			return true // a stale wake: nothing was published
		}
		n := uint32(w)
		if l.next != n {
			l.runTo(n)
			continue
		}
		if l.word.CompareAndSwap(w, w|closedBit) {
			return l.send(ctx, true)
		}
	}
}

// runTo runs the items before sequence n. A panic in a task's function
// ends the call: the item records it and the caller goes on from the next.
// A runtime.Goexit is recorded the same way (worker.ErrGoexit), and then
// ends the goroutine, which Run replaces.
func (l *Lane) runTo(n uint32) {
	returned := false
	defer func() {
		if r := recover(); r != nil {
			l.finish(&worker.PanicError{Value: r, Stack: debug.Stack()})
		} else if !returned {
			l.finish(goexitError())
		}
	}()
	for l.next != n {
		l.runOne()
	}
	returned = true
}

// goexitError is the error of an attempt whose function called
// runtime.Goexit, with the stack it was called from.
func goexitError() error { return &worker.PanicError{Value: worker.ErrGoexit, Stack: debug.Stack()} }

// Step runs the next published item, as the worker would, and reports
// false if there is none. Tests use it to interleave coordinator decisions
// with single worker steps; it never closes the lane.
func (l *Lane) Step(env *Env) bool {
	if l.env != env {
		l.env = env
	}
	if w := l.word.Load(); w&closedBit != 0 || uint32(w) == l.next {
		return false
	}
	l.runTo(l.next + 1)
	return true
}

// runOne looks at the item at l.next: passes it over if the item it
// follows did not succeed, skips it if it was revoked, runs it otherwise.
func (l *Lane) runOne() {
	i := l.next & mask
	it := &l.items[i]
	flags := atomic.LoadUint32(&it.flags)
	if flags&itemFused != 0 && !l.succeeded(it.parent) {
		atomic.CompareAndSwapUint32(&it.state, Free, Passed) // fails only if revoked
		l.setOK(l.next, false)
		l.next++
		return
	}
	if flags&itemStartBy != 0 && l.env.Clock.Now().UnixNano() > l.startBy[i] {
		atomic.CompareAndSwapUint32(&it.state, Free, Late) // fails only if revoked
		l.setOK(l.next, false)
		l.next++
		l.notify = true // the coordinator decides again at once
		return
	}
	if !atomic.CompareAndSwapUint32(&it.state, Free, Claimed) {
		l.setOK(l.next, false) // revoked
		l.next++
		return
	}
	if l.notify || l.env.ReportStarts {
		// Report after the claim, not before: the coordinator sees the
		// items done and this one started in one look.
		l.notify = false
		l.progress()
	}
	spec, ctx := l.env.Specs.At(it.task), l.ctxs[i]
	if flags&itemCareful != 0 && !l.waitGo(it, ctx) {
		l.finish(context.Cause(ctx)) // cancelled or shut down before it could start
		return
	}
	if l.stamps != nil && spec.X != nil && spec.X.Timeout > 0 {
		// The slot's times are this item's once flagged: its end is 0
		// until it returns.
		atomic.StoreInt64(&l.stamps[i][1], 0)
		atomic.StoreInt64(&l.stamps[i][0], l.env.Clock.Now().UnixNano())
		atomic.OrUint32(&it.flags, itemStamped)
		l.timing = true
	}
	var err error
	switch {
	case spec.X != nil && spec.X.Timeout > 0:
		err = l.runTimed(spec, ctx, l.job(spec, i))
	case l.env.Worker == nil:
		err = spec.Run(ctx)
	default:
		err = l.env.Worker.Do(ctx, l.job(spec, i))
	}
	l.finish(err)
}

// waitGo waits until the coordinator lets careful item it start (Go), and
// reports false if its context ends first.
func (l *Lane) waitGo(it *Item, ctx *Context) bool {
	for atomic.LoadUint32(&it.flags)&itemGo == 0 {
		select {
		case <-l.goc:
		case <-ctx.Done():
			return atomic.LoadUint32(&it.flags)&itemGo != 0
		}
	}
	return true
}

func (l *Lane) job(spec *Spec, i uint32) worker.Job {
	j := worker.Job{ID: spec.ID, Run: spec.Run, Attempt: int(l.meta[i].attempt), Round: int(l.meta[i].run)}
	if r := l.readys[i]; r != noReady {
		j.Ready = time.Unix(0, encodeReady(r))
	}
	if x := spec.X; x != nil {
		j.Payload = x.Payload
	}
	return j
}

// finish records the end of the attempt at l.next and moves on.
func (l *Lane) finish(err error) {
	i := l.next & mask
	it := &l.items[i]
	flags := atomic.LoadUint32(&it.flags)
	if l.timing {
		atomic.StoreInt64(&l.stamps[i][1], l.env.Clock.Now().UnixNano())
		l.timing = false
	}
	if flags&itemTouched != 0 {
		l.ctxs[i].Finish()
	}
	ok := false
	if err == nil {
		ok = atomic.CompareAndSwapUint32(&it.state, Claimed, Sealed)
	} else {
		o := &l.outs[i]
		o.Err, o.Retry = err, true
		if x := l.env.Specs.At(it.task).X; x != nil && x.RetryIf != nil {
			o.Retry = retryable(x.RetryIf, err)
		}
	}
	if !ok && (err == nil || !atomic.CompareAndSwapUint32(&it.state, Claimed, Returned)) {
		atomic.StoreUint32(&it.state, Stopped) // a stop came first
	}
	// Read the flags again after the state changed: the coordinator sets
	// itemUrgent (or Env.Hungry) and then reads the state (its urgeHeads,
	// and its harvests after hurry and after setting Hungry), so either it
	// sees the attempt over or this read sees the flag.
	flags = atomic.LoadUint32(&it.flags)
	l.setOK(l.next, ok)
	l.next++
	l.ran++
	if k := l.next; int32(k-l.seen) >= 0 {
		l.seen = l.mark.Load()
		if k == l.seen {
			l.notify = true
		}
	}
	if err != nil || flags&itemUrgent != 0 || (flags&itemReport != 0 && l.env.Hungry.Load()) {
		l.notify = true
	}
}

// progress reports how far the worker got. It never blocks: dropped when
// the channel is full, it is covered by a later report.
func (l *Lane) progress() { l.send(context.Background(), false) }

// send reports progress, or idleness. A progress report is dropped when
// the channel is full (a later report covers it); an idle report waits
// for room or for ctx to end, and returns false then.
func (l *Lane) send(ctx context.Context, idle bool) bool {
	now := l.env.Clock.Now()
	r := Report{Lane: l, Upto: l.next, Idle: idle, Elapsed: now.Sub(l.since), Ran: l.ran}
	if !idle {
		select {
		case l.env.Reports <- r:
			l.since, l.ran = now, 0
		default:
		}
		return true
	}
	select {
	case l.env.Reports <- r:
		return true
	case <-ctx.Done():
		return false
	}
}

func (l *Lane) setOK(seq uint32, ok bool) {
	i, bit := (seq&mask)/64, uint64(1)<<(seq%64)
	if ok {
		l.ok[i] |= bit
	} else {
		l.ok[i] &^= bit
	}
}

func (l *Lane) succeeded(seq uint32) bool {
	return l.ok[(seq&mask)/64]&(uint64(1)<<(seq%64)) != 0
}

// runTimed runs an attempt with a timeout on a goroutine of its own. At
// the timeout the context expires (DeadlineExceeded, cause ErrTimeout) and
// the worker waits up to the grace period for the function to return; if
// it has not, the attempt is abandoned and the worker goes on, while the
// function's goroutine stays counted in Detached until it returns.
func (l *Lane) runTimed(spec *Spec, ctx *Context, job worker.Job) error {
	timeout := spec.X.Timeout
	out := &l.outs[l.next&mask]
	deadline := AddSat(l.env.Clock.Now(), timeout)
	ctx.SetDeadline(deadline)
	t, fire := l.arm(deadline) // before the function starts: a test that waits for it may move the clock at once
	res := make(chan error, 1) // an abandoned attempt's late result must not block
	det, w := l.env.Detached, l.env.Worker
	id := det.add(spec.ID)
	inside, told, laneID, seq := l.env.Inside, l.env.Returned, l.ID, l.next
	// fate is decided once: the function returns first (returnedFirst),
	// or the worker abandons it first (abandonedFirst), which then says
	// so when it returns.
	var fate atomic.Int32
	go func() {
		defer det.done(id)
		if inside != nil {
			defer inside()()
		}
		defer func() { // after its result is sent
			if !fate.CompareAndSwap(running, returnedFirst) && told != nil {
				told(laneID, seq)
			}
		}()
		returned := false
		defer func() {
			if !returned { // call recovers panics: this is runtime.Goexit
				res <- goexitError()
			}
		}()
		res <- call(ctx, w, job)
		returned = true
	}()
	select {
	case err := <-res:
		if t != nil {
			t.Stop()
		}
		return err
	case <-fire:
	}
	ctx.Expire(fmt.Errorf("%w after %v", worker.ErrTimeout, timeout))
	out.TimedOut = true
	terr := &worker.TimeoutError{After: timeout}
	g, gfire := l.arm(AddSat(deadline, l.env.Grace))
	select {
	case terr.Err = <-res: // what it returned once its context ended: kept beside the timeout
		if g != nil {
			g.Stop()
		}
	case <-gfire:
		if !fate.CompareAndSwap(running, abandonedFirst) {
			terr.Err = <-res // it returned as the grace period ended: its result is sent
			break
		}
		out.Abandoned = true
		ctx.touch() // the function may still use it: never reuse it (this marks the item too)
	}
	return terr
}

// The fate of a timed attempt's function (runTimed).
const (
	running        int32 = iota
	returnedFirst        // it returned before its worker abandoned it
	abandonedFirst       // its worker abandoned it first
)

// due is a channel that is always ready: the fire channel of a timer whose
// time had come when it was to be armed.
var due = func() chan time.Time { c := make(chan time.Time); close(c); return c }()

// arm arms a timer for due (ArmAt) and tells Env.Armed. It returns the
// timer (nil if due has come) and the channel that fires.
func (l *Lane) arm(at time.Time) (*clock.Timer, <-chan time.Time) {
	t := ArmAt(l.env.Clock, at)
	if t == nil {
		return nil, due
	}
	if l.env.Armed != nil {
		l.env.Armed(at)
	}
	return t, t.C
}

// call runs one attempt, turning a panic into a *worker.PanicError.
func call(ctx context.Context, w worker.Worker, j worker.Job) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &worker.PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	if w == nil {
		return j.Run(ctx)
	}
	return w.Do(ctx, j)
}

// retryable asks a task's RetryIf whether err is worth a retry; one that
// panics or calls runtime.Goexit says no. It runs Contained: a Goexit in
// the middle of finish would end the worker's goroutine with the attempt
// half recorded. (Only failed attempts of tasks with a RetryIf pay for it.)
func retryable(retryIf func(error) bool, err error) bool {
	return Contained(func() bool { return retryIf(err) })
}

// Contained calls f, user code that must not end the caller's goroutine
// (a worker's, the coordinator's), on a goroutine of its own, and returns
// what f returns, or the zero value if f panics or calls runtime.Goexit.
// It blocks until f has returned.
func Contained[T any](f func() T) T {
	answer := make(chan T, 1)
	go func() {
		var v T
		defer func() {
			_ = recover()
			answer <- v
		}()
		v = f()
	}()
	return <-answer
}
