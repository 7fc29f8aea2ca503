package replica

import "context"

// Handlers waits until at most n of the leader's request handlers are
// running, or ctx ends (its error); only for testing.
func (r *Replica) Handlers(ctx context.Context, n int) error {
	for r.handling.Load() > int64(n) {
		select {
		case <-r.handled:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
