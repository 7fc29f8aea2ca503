package dashboard

import "context"

// CaughtUp blocks until the dashboard's copy of the tasks holds
// everything the scheduler had decided when it was called (a feed read
// that began after the call found nothing more), or ctx ends. Only for
// testing.
func (d *Dashboard) CaughtUp(ctx context.Context) error {
	m := d.mir
	m.mu.RLock()
	want := m.caught + 2
	m.mu.RUnlock()
	for {
		m.mu.RLock()
		got, ch := m.caught, m.caughtCh
		m.mu.RUnlock()
		if got >= want {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
