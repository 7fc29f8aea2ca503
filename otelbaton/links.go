package otelbaton

import (
	"sync"

	"go.opentelemetry.io/otel/trace"
)

// linkMemory remembers the span context of the last attempt of the last
// n tasks to have run, so that their dependents' spans can link to them.
// It forgets the task that was recorded longest ago. Safe for concurrent
// use.
type linkMemory struct {
	mu   sync.Mutex
	m    map[string]linkEntry // guarded by mu
	ring []string             // guarded by mu: task IDs in the order recorded
	seqs []uint64             // guarded by mu: the sequence each ring slot was recorded with
	next uint64               // guarded by mu
}

type linkEntry struct {
	sc  trace.SpanContext
	seq uint64
}

func newLinkMemory(n int) *linkMemory {
	return &linkMemory{m: make(map[string]linkEntry, n), ring: make([]string, n), seqs: make([]uint64, n)}
}

// put records sc as the span of task id's last attempt.
func (lm *linkMemory) put(id string, sc trace.SpanContext) {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	lm.next++
	pos := lm.next % uint64(len(lm.ring))
	if old := lm.ring[pos]; old != "" || lm.seqs[pos] != 0 {
		// Forget the oldest record, unless its task was recorded again
		// since (then the newer record stays).
		if e, ok := lm.m[old]; ok && e.seq == lm.seqs[pos] {
			delete(lm.m, old)
		}
	}
	lm.ring[pos], lm.seqs[pos] = id, lm.next
	lm.m[id] = linkEntry{sc: sc, seq: lm.next}
}

// get returns the span context recorded for id, if it is remembered.
func (lm *linkMemory) get(id string) (trace.SpanContext, bool) {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	e, ok := lm.m[id]
	return e.sc, ok
}

// len reports how many tasks are remembered.
func (lm *linkMemory) len() int {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	return len(lm.m)
}
