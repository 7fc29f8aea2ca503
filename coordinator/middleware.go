package coordinator

import (
	"fmt"
	"slices"
	"time"

	"github.com/batonhq/baton/worker"
)

// Middleware wraps the Worker of one pool: it returns a Worker whose Do
// runs around next.Do, for every attempt of every task of the pool. pool
// is the pool's name ("" for the default pool). It is how a tracing span,
// a logger or a timer becomes active in an attempt's context: a Do that
// derives a context from ctx (context.WithValue, trace.ContextWithSpan)
// and passes it to next.Do hands it to the task's function, and
// SetResult, Result and Upstream work through such a derived context.
//
// The Worker returned must be safe for concurrent use, call next.Do at
// most once per call and return soon after ctx ends, as Worker says; it
// may read j.Ready, when the attempt became ready. A panic in the
// middleware itself is recovered like a panic of the task (a failed
// attempt with a *worker.PanicError). Submit still validates tasks with
// the pool's own Worker (worker.Validator), not with the wrapped one. A
// middleware that returns nil makes New fail with ErrInvalidOption.
type Middleware func(pool string, next worker.Worker) worker.Worker

// WithMiddleware wraps the Worker of every pool, the default pool's
// (worker.Func) included, in mw. Middlewares given in several calls nest
// in the order given: the first is the outermost, so it sees the attempt
// first and its end last. A nil mw is an error (ErrInvalidOption).
//
// With a middleware, the scheduler records when each task becomes ready
// (8 bytes per task) and hands it to the Worker as worker.Job.Ready. A
// pool without middleware calls the task's function with no Worker in
// between, as before.
func WithMiddleware(mw Middleware) Option {
	return func(c *config) error {
		if mw == nil {
			return fmt.Errorf("%w: WithMiddleware(nil)", ErrInvalidOption)
		}
		c.middleware = append(c.middleware, mw)
		return nil
	}
}

// wrap applies the middleware to the pool's Worker (nil: the default
// pool's worker.Func), outermost first.
func wrap(pool string, w worker.Worker, mws []Middleware) (worker.Worker, error) {
	if len(mws) == 0 {
		return w, nil
	}
	if w == nil {
		w = worker.Func{}
	}
	for _, mw := range slices.Backward(mws) {
		if w = mw(pool, w); w == nil {
			return nil, fmt.Errorf("%w: WithMiddleware: a middleware returned a nil Worker for pool %q", ErrInvalidOption, pool)
		}
	}
	return w, nil
}

// stampReady records when task t became ready, for a middleware
// (WithMiddleware; called only then).
func (s *state) stampReady(t int32, now time.Time) {
	if n := int(t) + 1; n > len(s.readyAt) {
		s.readyAt = slices.Grow(s.readyAt, n-len(s.readyAt))[:max(n, cap(s.readyAt))]
	}
	s.readyAt[t] = now.UnixNano()
}

// readyStamp returns what stampReady recorded for t. Every task handed
// out from the ready queue was stamped when it was queued.
func (s *state) readyStamp(t int32) int64 {
	if int(t) < len(s.readyAt) {
		return s.readyAt[t]
	}
	return 0
}
