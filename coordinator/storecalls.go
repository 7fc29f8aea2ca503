package coordinator

import "sync/atomic"

// storeCalls tells a Shutdown whose context ended that the loop is in
// its store's code (Commit or Close), where it answers nothing until the
// store returns: Shutdown's error says so at once instead of waiting for
// an answer (on a mock clock, a wait bounded by the scheduler's clock
// would never end). The loop goroutine enters and leaves; any goroutine
// may ask, without a lock.
type storeCalls struct {
	in   atomic.Pointer[string]        // what the loop is in (&callCommit, &callClose); nil: none
	wake atomic.Pointer[chan struct{}] // closed by the loop's next enter; installed by a waiter
}

var (
	callCommit = "Commit"
	callClose  = "Close"
)

// enter marks the loop inside its store's call what and wakes whoever
// waits for that. Loop goroutine only.
func (c *storeCalls) enter(what *string) {
	c.in.Store(what)
	if p := c.wake.Swap(nil); p != nil {
		close(*p)
	}
}

// leave marks the loop out of its store. Loop goroutine only.
func (c *storeCalls) leave() { c.in.Store(nil) }

// inside returns the store's call the loop is in ("" if none).
func (c *storeCalls) inside() string {
	if p := c.in.Load(); p != nil {
		return *p
	}
	return ""
}

// entered returns a channel closed when the loop next enters its store.
// Ask inside after it: an enter either comes after the channel was
// installed (and closes it) or is seen by inside.
func (c *storeCalls) entered() <-chan struct{} {
	for {
		if p := c.wake.Load(); p != nil {
			return *p
		}
		ch := make(chan struct{})
		if c.wake.CompareAndSwap(nil, &ch) {
			return ch
		}
	}
}
