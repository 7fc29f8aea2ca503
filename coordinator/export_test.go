package coordinator

import "time"

// WithArmedHook reports every time the timer goroutine arms its timer, with
// the due time. Tests that drive a mock clock wait for it before Add, so the
// timer cannot miss the advance. only for testing
func WithArmedHook(f func(due time.Time)) Option {
	return func(c *config) error {
		c.testHookArmed = f
		return nil
	}
}

// WithMaxBatch caps the attempts a worker's lane holds at n; 1 turns
// look-ahead and fusion off, so that one worker runs tasks in exactly the
// order a sequential model would. only for testing
func WithMaxBatch(n int) Option {
	return func(c *config) error {
		c.testMaxBatch = n
		return nil
	}
}
