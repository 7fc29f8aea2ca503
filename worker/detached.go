package worker

import (
	"slices"
	"sync"
)

// Detached keeps track of the attempts that run on goroutines of their own
// (those with a timeout), including the ones abandoned at their timeout
// whose functions have not returned yet. The zero value is ready to use; it
// is safe for concurrent use.
type Detached struct {
	wg      sync.WaitGroup
	mu      sync.Mutex
	running map[*Context]string // guarded by mu: attempt -> task ID
}

func (d *Detached) add(c *Context, id string) {
	d.wg.Add(1)
	d.mu.Lock()
	if d.running == nil {
		d.running = make(map[*Context]string)
	}
	d.running[c] = id
	d.mu.Unlock()
}

func (d *Detached) done(c *Context) {
	d.mu.Lock()
	delete(d.running, c)
	d.mu.Unlock()
	d.wg.Done()
}

// Running returns the IDs of the tasks whose detached attempts are still
// running, sorted.
func (d *Detached) Running() []string {
	d.mu.Lock()
	ids := make([]string, 0, len(d.running))
	for _, id := range d.running {
		ids = append(ids, id)
	}
	d.mu.Unlock()
	slices.Sort(ids)
	return slices.Compact(ids)
}

// Wait blocks until every detached attempt has returned.
func (d *Detached) Wait() { d.wg.Wait() }
