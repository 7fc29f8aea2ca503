package worker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

const (
	ctxRunning   uint32 = iota // the attempt may still run, or is running
	ctxCancelled               // cancelled (Cancel, timeout or shutdown); the cause is kept
	ctxSealed                  // the attempt returned nil before any cancel: it can no longer be cancelled
)

// Context is the context.Context an attempt runs with.
//
// It allocates nothing until the attempt's function first asks for its Done
// channel or a Value (context.Cause and context.WithCancel do both); until
// then Err is answered from one atomic word. An attempt that never looks at
// its context therefore costs no allocation, and its Context can be reused
// for a later attempt (Recycle). Once a function has looked, the Context
// becomes an ordinary cancelable context underneath and is never reused, so
// a goroutine that kept it sees it end as usual.
//
// The coordinator cancels it (Cancel) on Cancel and Shutdown, the pool loop
// on timeout; context.Cause reports the cause given. When the function
// returns nil the loop seals it (Seal): from then on Cancel fails, because
// the attempt is over and succeeded.
type Context struct {
	state atomic.Uint32
	real  atomic.Pointer[materialized] // set once, under mu

	mu    sync.Mutex
	cause error // guarded by mu
}

type materialized struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// NewContext returns a Context that has not been cancelled.
func NewContext() *Context { return &Context{} }

func (c *Context) materialize() context.Context {
	if m := c.real.Load(); m != nil {
		return m.ctx
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.real.Load(); m != nil {
		return m.ctx
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	if c.state.Load() == ctxCancelled {
		cancel(c.cause)
	}
	c.real.Store(&materialized{ctx, cancel})
	return ctx
}

// Deadline reports no deadline: timeouts are enforced by the pool loop.
func (c *Context) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done returns a channel closed when the attempt is cancelled.
func (c *Context) Done() <-chan struct{} { return c.materialize().Done() }

// Err returns context.Canceled once the attempt is cancelled, else nil.
func (c *Context) Err() error {
	if m := c.real.Load(); m != nil {
		return m.ctx.Err()
	}
	if c.state.Load() == ctxCancelled {
		return context.Canceled
	}
	return nil
}

// Value answers as an empty context does, except that context.Cause finds
// the cause of the cancellation.
func (c *Context) Value(key any) any { return c.materialize().Value(key) }

// String describes the context for debugging.
func (c *Context) String() string { return "worker.Context" }

// Cancel cancels the attempt with cause. It returns false, and changes
// nothing, if the attempt was already cancelled or sealed. Safe for
// concurrent use.
func (c *Context) Cancel(cause error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.state.CompareAndSwap(ctxRunning, ctxCancelled) {
		return false
	}
	c.cause = cause
	if m := c.real.Load(); m != nil {
		m.cancel(cause)
	}
	return true
}

// Seal marks an attempt that returned nil as over: Cancel fails from now
// on. It returns false if the attempt was cancelled first.
func (c *Context) Seal() bool {
	// No lock: Cancel changes the state with the same compare-and-swap, and
	// a sealed context has no cause to publish.
	return c.state.CompareAndSwap(ctxRunning, ctxSealed)
}

// Cancelled reports whether Cancel has succeeded.
func (c *Context) Cancelled() bool { return c.state.Load() == ctxCancelled }

// Sealed reports whether Seal has succeeded.
func (c *Context) Sealed() bool { return c.state.Load() == ctxSealed }

// Recycle readies c for another attempt and returns true, if the attempt's
// function never looked at it. Otherwise it releases the context underneath
// (ending it, as a finished attempt's context should end) and returns false:
// the caller must drop c. Only the owner may call Recycle, once the attempt
// and anything it started with c are done with it.
func (c *Context) Recycle() bool {
	if m := c.real.Load(); m != nil {
		m.cancel(context.Canceled)
		return false
	}
	// No lock: the owner recycles only when nobody else holds c.
	c.cause = nil
	c.state.Store(ctxRunning)
	return true
}
