package lane

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Context is the context.Context an attempt runs with.
//
// Until the attempt's function calls one of its methods it is one atomic
// word and a few plain fields, so an attempt that never looks at its
// context allocates nothing and its Context is reused for a later attempt
// (Reset). The first method call marks it touched: from then on it is never
// reused, so a goroutine that kept it sees it end as an ordinary context
// does. Done and foreign Value lookups build the machinery of a real
// context underneath (a channel, a cancel-cause context for
// context.Cause, callbacks for children), once.
//
// Err is context.Canceled after Cancel and context.DeadlineExceeded after
// Expire; context.Cause reports the cause given to either, for this
// context and for every context derived from it (children attach through
// AfterFunc, so they inherit DeadlineExceeded too). Deadline reports what
// SetDeadline set: the attempt's start plus its timeout, on the
// scheduler's clock.
//
// Cancel and Expire are safe for concurrent use with the attempt; the
// other setters are called by the worker before the function runs, or by
// the coordinator while nothing else holds the Context.
type Context struct {
	state   atomic.Uint32 // live, canceled or expired
	touched atomic.Bool   // a method was called: never reuse
	lane    *Lane         // immutable: the lane whose slot it serves (nil: none)
	slot    uint32        // immutable: the slot; its item's flags are marked at the first touch
	task    atomic.Int32  // the attempt's task, recorded at the first touch (valid once touched)
	meta    atomic.Uint64 // the attempt's numbers, attempt<<32 | run, recorded at the first touch

	// Attempt data, written before the function runs and read-only while it
	// does.
	deadline time.Time
	hasDL    bool
	values   context.Context // values the caller's context carried (SubmitContext), or nil

	// Result, written by SetResult while the function runs (the function's
	// goroutine), read by the coordinator once the attempt is reported.
	resultMu  sync.Mutex  // guards result and hasResult against SetResult from stray goroutines
	result    any         // guarded by resultMu
	hasResult bool        // guarded by resultMu
	worker    string      // guarded by resultMu: which worker ran it (SetWorker)
	endedID   string      // guarded by resultMu: the task's ID, read by Finish while the worker owned the item (EndedTaskID)
	extra     any         // guarded by resultMu: the owner's per-attempt data (Extra), made on first use
	over      atomic.Bool // the attempt returned: SetResult is ignored

	mu    sync.Mutex
	cause error         // guarded by mu: what ended it
	m     *materialized // guarded by mu; also read through real
	real  atomic.Pointer[materialized]
}

const (
	ctxLive uint32 = iota
	ctxCanceled
	ctxExpired
)

type materialized struct {
	done   chan struct{}
	inner  context.Context // a cancel-cause context: what context.Cause finds
	cancel context.CancelCauseFunc
	after  map[*afterFunc]struct{}
}

type afterFunc struct{ f func() }

// NewContext returns a live Context.
func NewContext() *Context { return &Context{} }

// Reset readies c for another attempt and reports true, if no method of c
// was ever called; otherwise c must be dropped. Only the owner calls it,
// once the attempt is over and reported.
func (c *Context) Reset() bool {
	if c.touched.Load() {
		return false
	}
	// Write only what an attempt that never looked can have changed, so
	// that the common case costs a load or two.
	if c.state.Load() != ctxLive {
		c.state.Store(ctxLive)
		c.cause = nil
	}
	if c.hasDL {
		c.deadline, c.hasDL = time.Time{}, false
	}
	if c.values != nil {
		c.values = nil
	}
	return true
}

// SetDeadline records the attempt's deadline. Called by the worker before
// the function starts.
func (c *Context) SetDeadline(t time.Time) { c.deadline, c.hasDL = t, true }

// SetValues makes c answer Value lookups from values (the context given
// to SubmitContext). Called by the coordinator before the attempt is
// handed out.
func (c *Context) SetValues(values context.Context) { c.values = values }

func (c *Context) touch() {
	if !c.touched.Load() {
		if c.lane != nil {
			// The first touch comes from the attempt's function, while the
			// worker owns the item: its task is the attempt's.
			it := &c.lane.items[c.slot]
			c.task.Store(it.task)
			m := c.lane.meta[c.slot]
			c.meta.Store(uint64(uint32(m.attempt))<<32 | uint64(uint32(m.run)))
			atomic.OrUint32(&it.flags, itemTouched) // so the worker and the coordinator need not read c
		}
		c.touched.Store(true)
	}
}

// Attempt reports the task of the attempt c belongs to and the Env's
// Owner, marking c touched. ok is false for a context of no lane, and
// once the attempt's function has returned.
func (c *Context) Attempt() (task int32, owner any, ok bool) {
	c.touch()
	if c.lane == nil || c.over.Load() {
		return 0, nil, false
	}
	return c.task.Load(), c.lane.env.Owner, true
}

// TaskID is Attempt with the task's ID instead of its index. It reads
// the ID under resultMu, as Finish sets over: once the function returns,
// the coordinator may forget the task and give its spec to another, so
// a goroutine the function left behind must not read it after that.
func (c *Context) TaskID() (id string, owner any, ok bool) {
	c.touch()
	if c.lane == nil {
		return "", nil, false
	}
	c.resultMu.Lock()
	defer c.resultMu.Unlock()
	if c.over.Load() {
		return "", nil, false
	}
	return c.lane.env.Specs.At(c.task.Load()).ID, c.lane.env.Owner, true
}

// Item reports the lane and slot of the attempt c belongs to (the lane's
// ID and the slot its item occupies), marking c touched; ok is false for
// a context of no lane. The coordinator checks it against its own record
// of the attempt, with the Context itself: a touched Context is never
// reused, so it names one attempt.
func (c *Context) Item() (laneID int, slot uint32, ok bool) {
	c.touch()
	if c.lane == nil {
		return 0, 0, false
	}
	return c.lane.ID, c.slot, true
}

// Cancel ends c with context.Canceled and cause. It reports false, and
// changes nothing, if c had already ended.
func (c *Context) Cancel(cause error) bool { return c.end(ctxCanceled, cause) }

// Expire ends c with context.DeadlineExceeded and cause (the timeout). It
// reports false if c had already ended.
func (c *Context) Expire(cause error) bool { return c.end(ctxExpired, cause) }

func (c *Context) end(how uint32, cause error) bool {
	c.mu.Lock()
	if !c.state.CompareAndSwap(ctxLive, how) {
		c.mu.Unlock()
		return false
	}
	c.cause = cause
	m := c.m
	var after []*afterFunc
	if m != nil {
		m.cancel(cause) // first: context.Cause must see the cause once Err is set
		close(m.done)
		for a := range m.after {
			after = append(after, a)
		}
		m.after = nil
	}
	c.mu.Unlock()
	for _, a := range after {
		go a.f() // as context.AfterFunc does: never under our lock
	}
	return true
}

// Ended reports whether Cancel or Expire has succeeded.
func (c *Context) Ended() bool { return c.state.Load() != ctxLive }

func (c *Context) materialize() *materialized {
	if m := c.real.Load(); m != nil {
		return m
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m != nil {
		return c.m
	}
	parent := c.values
	if parent == nil {
		parent = context.Background()
	}
	inner, cancel := context.WithCancelCause(parent)
	m := &materialized{done: make(chan struct{}), inner: inner, cancel: cancel, after: map[*afterFunc]struct{}{}}
	if c.state.Load() != ctxLive {
		cancel(c.cause)
		close(m.done)
	}
	c.m = m
	c.real.Store(m)
	return m
}

// Deadline reports the attempt's deadline, if it has a timeout.
func (c *Context) Deadline() (time.Time, bool) {
	c.touch()
	return c.deadline, c.hasDL
}

// Done returns a channel closed when the attempt is cancelled or times out.
func (c *Context) Done() <-chan struct{} {
	c.touch()
	return c.materialize().done
}

// Err returns nil while the attempt may go on, context.Canceled once it is
// cancelled and context.DeadlineExceeded once its timeout passed.
func (c *Context) Err() error {
	c.touch()
	switch c.state.Load() {
	case ctxCanceled:
		return context.Canceled
	case ctxExpired:
		return context.DeadlineExceeded
	}
	return nil
}

type attemptKey struct{}

// Value answers the attempt's own key without building anything, and
// other keys from the caller's context (SubmitContext) without building
// anything either: a tracing middleware that looks up the submitter's
// span costs no channel or cancel context. Only the key context.Cause and
// the context package's own children ask for (causeKey) builds the
// cancel-cause context underneath, which answers it.
func (c *Context) Value(key any) any {
	c.touch()
	if key == (attemptKey{}) {
		return c
	}
	if causeKey != nil && key != causeKey {
		if c.values == nil {
			return nil
		}
		return c.values.Value(key)
	}
	return c.materialize().inner.Value(key)
}

// causeKey is the key the context package looks up to find the cancel
// context underneath a context (for context.Cause and to attach
// children), learned once by asking context.Cause; nil if it could not be
// learned, and then every foreign key builds the machinery.
var causeKey = func() any {
	p := &keyProbe{}
	_ = context.Cause(p)
	return p.key
}()

// keyProbe is an ended context that records the key it is asked for.
type keyProbe struct {
	context.Context
	key any
}

func (p *keyProbe) Err() error { return context.Canceled }
func (p *keyProbe) Value(key any) any {
	p.key = key
	return nil
}

// AfterFunc arranges for f to run on its own goroutine once c ends; the
// context package uses it to attach children, so that they end with c's
// error and cause. stop reports whether it kept f from running.
func (c *Context) AfterFunc(f func()) (stop func() bool) {
	c.touch()
	m := c.materialize()
	a := &afterFunc{f: f}
	c.mu.Lock()
	if c.state.Load() != ctxLive {
		c.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	m.after[a] = struct{}{}
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, ok := m.after[a]; !ok {
			return false
		}
		delete(m.after, a)
		return true
	}
}

// String describes c for debugging.
func (c *Context) String() string { return "baton.attemptContext" }

// Of returns the attempt Context that ctx is, or derives from, if any.
func Of(ctx context.Context) (*Context, bool) {
	if ctx == nil {
		return nil, false
	}
	c, ok := ctx.Value(attemptKey{}).(*Context)
	return c, ok
}

// SetResult records v as the attempt's result. It reports false if the
// attempt is over (its function returned).
func (c *Context) SetResult(v any) bool {
	c.resultMu.Lock()
	defer c.resultMu.Unlock()
	if c.over.Load() {
		return false
	}
	c.result, c.hasResult = v, true
	return true
}

// SetWorker records which worker ran the attempt (a custom or remote
// pool's name for it). It reports false if the attempt is over.
func (c *Context) SetWorker(name string) bool {
	c.touch()
	c.resultMu.Lock()
	defer c.resultMu.Unlock()
	if c.over.Load() {
		return false
	}
	c.worker = name
	return true
}

// Extra returns the owner's per-attempt data of c (the scheduler keeps an
// attempt's log lines there), made by make on first use; nil, without
// calling make, once the attempt is over and if make is nil. It marks c
// touched.
func (c *Context) Extra(make func() any) any {
	c.touch()
	c.resultMu.Lock()
	defer c.resultMu.Unlock()
	if c.extra == nil && make != nil && !c.over.Load() {
		c.extra = make()
	}
	return c.extra
}

// Meta reports the attempt's numbers: its attempt within its run and its
// run, both 1-based. It marks c touched.
func (c *Context) Meta() (attempt, run int) {
	c.touch()
	m := c.meta.Load()
	return int(int32(m >> 32)), int(int32(m))
}

// Worker returns what SetWorker recorded. Called by the coordinator once
// the attempt is reported, or while it runs.
func (c *Context) Worker() string {
	if !c.touched.Load() {
		return ""
	}
	c.resultMu.Lock()
	defer c.resultMu.Unlock()
	return c.worker
}

// Finish closes the attempt to SetResult and Keep. Called by the worker
// once a function that looked at its context (SetResult needs to) has
// returned or was abandoned: once it returns, no SetResult or Keep of the
// attempt is under way or to come.
func (c *Context) Finish() {
	c.resultMu.Lock()
	if c.lane != nil {
		// The spec is the task's until the coordinator applies the
		// attempt's end: after that a retention may hand it to another.
		c.endedID = c.lane.env.Specs.At(c.task.Load()).ID
	}
	c.over.Store(true)
	c.resultMu.Unlock()
}

// EndedTaskID is TaskID for an attempt that is over: the ID and owner of
// the task whose function, having touched c, has returned (or was
// abandoned); ok is false while the attempt runs and for a context of no
// lane. It does not mark c touched: an untouched Context is reused, and
// is not over.
func (c *Context) EndedTaskID() (id string, owner any, ok bool) {
	if c.lane == nil || !c.over.Load() {
		return "", nil, false
	}
	c.resultMu.Lock()
	defer c.resultMu.Unlock()
	return c.endedID, c.lane.env.Owner, true
}

// Keep runs f, which records something of the attempt's outcome where the
// task's dependents will read it, unless the attempt is over (its
// function returned, or it was abandoned at its timeout): then it reports
// false and f does not run. A function abandoned at its timeout goes on
// running; Keep makes its late writes impossible once the worker has
// moved on. It marks c touched.
func (c *Context) Keep(f func()) bool {
	c.touch()
	c.resultMu.Lock()
	defer c.resultMu.Unlock()
	if c.over.Load() {
		return false
	}
	f()
	return true
}

// Result returns what SetResult recorded. Called by the coordinator once
// the attempt is reported.
func (c *Context) Result() (any, bool) {
	if !c.touched.Load() {
		return nil, false // SetResult needs a method call: there is none
	}
	c.resultMu.Lock()
	defer c.resultMu.Unlock()
	return c.result, c.hasResult
}
