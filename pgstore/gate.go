package pgstore

import (
	"context"
	"fmt"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/worker"
)

// Middleware returns a coordinator.Middleware that starts an attempt only
// while the Store's lease is surely its own (LeaseValid): a leader paused
// or cut off from the database for most of a lease holds its attempts
// until a renewal lands, and fails them (ErrFenced) once another instance
// has taken over. A Service puts it around every pool, outermost; give it
// to coordinator.WithMiddleware when you run a Store alone with
// standbys of your own. Safe for concurrent use; after Close it fails
// every attempt.
//
// The gate narrows the window, it cannot close it: an attempt let through
// a moment before the process was paused runs when it resumes, maybe
// after a standby took over. Functions must be safe to run twice.
func (s *Store) Middleware() coordinator.Middleware {
	return func(pool string, next worker.Worker) worker.Worker { return gate{s: s, next: next} }
}

type gate struct {
	s    *Store
	next worker.Worker
}

func (g gate) Do(ctx context.Context, j worker.Job) error {
	for {
		valid, renewal, lost := g.s.lease()
		if valid {
			return g.next.Do(ctx, j)
		}
		select {
		case <-renewal:
		case <-lost:
			return fmt.Errorf("pgstore: attempt not started: %w", g.s.lostErr())
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}
