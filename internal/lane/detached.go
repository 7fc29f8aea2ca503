package lane

import (
	"slices"
	"sync"
)

// Detached keeps track of the attempts that run on goroutines of their own
// (those with a timeout), abandoned ones included, until their functions
// return. Each attempt has its own key, so a late return can never remove
// another attempt's entry. The zero value is ready to use; it is safe for
// concurrent use.
type Detached struct {
	wg      sync.WaitGroup
	mu      sync.Mutex
	last    uint64            // guarded by mu: the last key given out
	running map[uint64]string // guarded by mu: attempt key -> task ID
}

func (d *Detached) add(id string) uint64 {
	d.wg.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.running == nil {
		d.running = make(map[uint64]string)
	}
	d.last++
	d.running[d.last] = id
	return d.last
}

func (d *Detached) done(key uint64) {
	d.mu.Lock()
	delete(d.running, key)
	d.mu.Unlock()
	d.wg.Done()
}

// Running returns the IDs of the tasks whose detached attempts are still
// running, sorted, each once.
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

// Len returns the number of detached attempts still running.
func (d *Detached) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.running)
}

// Wait blocks until every detached attempt has returned.
func (d *Detached) Wait() { d.wg.Wait() }
