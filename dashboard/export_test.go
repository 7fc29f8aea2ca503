package dashboard

import "context"

// SeenEvents blocks until the dashboard's subscription has recorded at
// least n events, or ctx ends. Only for testing: the scheduler delivers
// events on the subscription's goroutine, after the tasks are final.
func (d *Dashboard) SeenEvents(ctx context.Context, n uint64) error {
	for {
		ch := d.rec.watch()
		if seen, _ := d.rec.seen(); seen >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
