package coordinator

import (
	"sync"

	"github.com/batonhq/baton/actor"
)

// subscriber delivers events to one callback on its own goroutine, so a
// slow or blocked callback never holds up the coordinator. Its queue is
// unbounded: a callback that never returns keeps every later event in memory
// until it is unsubscribed.
type subscriber struct {
	fn     func(Event) // immutable
	signal actor.Signal

	mu     sync.Mutex
	queue  [][]Event // guarded by mu: chunks published, not yet delivered
	closed bool      // guarded by mu: unsubscribed; deliver nothing more
	last   bool      // guarded by mu: the scheduler has stopped; exit once the queue is empty
}

// publish appends one loop iteration's events. It reports false once the
// subscriber has unsubscribed. Called only by the coordinator goroutine.
func (sub *subscriber) publish(events []Event) bool {
	sub.mu.Lock()
	closed := sub.closed
	if !closed {
		sub.queue = append(sub.queue, events)
	}
	sub.mu.Unlock()
	sub.signal.Notify()
	return !closed
}

// end tells the delivery goroutine that no more events will come.
func (sub *subscriber) end() {
	sub.mu.Lock()
	sub.last = true
	sub.mu.Unlock()
	sub.signal.Notify()
}

func (sub *subscriber) unsubscribe() {
	sub.mu.Lock()
	sub.closed = true
	sub.queue = nil
	sub.mu.Unlock()
	sub.signal.Notify()
}

// run is the delivery goroutine. It calls fn for every event in order and
// returns after unsubscribe, or when the scheduler has stopped and every
// event has been delivered.
func (sub *subscriber) run() error {
	for range sub.signal.C() {
		for {
			sub.mu.Lock()
			chunks, closed, last := sub.queue, sub.closed, sub.last
			sub.queue = nil
			sub.mu.Unlock()
			if closed {
				return nil
			}
			if len(chunks) == 0 {
				if last {
					return nil
				}
				break
			}
			for _, events := range chunks {
				for _, e := range events {
					if sub.isClosed() {
						return nil
					}
					sub.fn(e)
				}
			}
		}
	}
	return nil
}

func (sub *subscriber) isClosed() bool {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.closed
}
