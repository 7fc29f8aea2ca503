package coordinator

// WithMaxBatch caps the attempts a worker's lane holds at n; 1 turns
// look-ahead and fusion off, so that one worker runs tasks in exactly the
// order a sequential model would. only for testing
func WithMaxBatch(n int) Option {
	return func(c *config) error {
		c.testMaxBatch = n
		return nil
	}
}
