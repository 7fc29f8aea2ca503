package dashboard

import (
	"context"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/tidwall/btree"
)

// A live result is one query of the tasks table beyond what the copy's
// own indexes answer (a filter other than one status, or a sort other
// than the order the tasks came in), kept as the copy changes: the rows
// that match it, in its order, in a counted B-tree, and the counts by
// status of the rows that match its other filters. The first request of
// a query builds it with one pass over the copy, a chunk at a time;
// every later request, and every page of it, is a lookup (GetAt:
// O(log n)) and a read of the page's rows, however many tasks are held;
// each change the copy applies updates the results it concerns (a
// filter and a comparison each). A page is therefore as current as the
// copy, and a client repeating the most expensive query costs neither
// the scheduler nor the dashboard a pass.
//
// At most resultsKept are kept or built at once. Only a built one is
// dropped: the least recently asked for when a new query needs its
// place, or one nobody asked for in resultIdle, at the copy's next read
// of the feed. A live result costs 60-80 bytes per matching task (its
// B-tree's nodes about half full) and its share of the copy's upkeep
// only while someone reads it.
const (
	resultsKept = 4
	resultIdle  = time.Minute
)

// liveResult is one query's rows, by sortEntry. Guarded by mirror.mu
// (changed under its write lock), but for used; key, q and needle are
// immutable.
type liveResult struct {
	key      string    // the query without its page (taskQuery.values)
	q        taskQuery // its filters and sort
	needle   string    // the error-text filter, lower-cased
	rows     *btree.BTreeG[rent]
	counts   statusCounts // rows matching every filter but the statuses, by status
	cursor   uint64       // the rows of seq up to it are in (built so far); math.MaxUint64 once built
	builders int          // requests driving its build now (readLive); it is dropped when the last goes away unbuilt
	used     atomic.Int64 // when it was last asked for (the dashboard's clock, UnixNano)
}

// done reports whether every row is in.
func (lr *liveResult) done() bool { return lr.cursor == math.MaxUint64 }

func newLiveResult(key string, tq taskQuery) *liveResult {
	return &liveResult{key: key, q: tq, needle: strings.ToLower(tq.ErrText),
		rows: btree.NewBTreeGOptions(func(a, b rent) bool { return compareEntries(a, b) < 0 }, btree.Options{NoLocks: true})}
}

// place is where a row stands in a result: whether it matches the
// filters but the statuses (and was scanned), its status, and its entry.
type place struct {
	match bool
	st    coordinator.Status
	e     rent
}

func (lr *liveResult) placeOf(r *row) place {
	if r.seq > lr.cursor || !lr.q.matches(r, lr.needle) { // not scanned yet, or no match
		return place{}
	}
	return place{match: true, st: r.Status, e: sortEntry(lr.q.Sort, r)}
}

// move takes a row from where it stood (from) to where it stands now.
func (lr *liveResult) move(from place, r *row) {
	to := lr.placeOf(r)
	switch {
	case from == to:
	case from.match && to.match && from.e == to.e && lr.q.hasStatus(from.st) && lr.q.hasStatus(to.st):
		lr.counts[from.st]-- // its status changed, not its place
		lr.counts[to.st]++
	default:
		lr.leave(from)
		lr.enter(to)
	}
}

func (lr *liveResult) enter(p place) {
	if !p.match {
		return
	}
	lr.counts[p.st]++
	if lr.q.hasStatus(p.st) {
		lr.rows.Set(p.e)
	}
}

func (lr *liveResult) leave(p place) {
	if !p.match {
		return
	}
	lr.counts[p.st]--
	if lr.q.hasStatus(p.st) {
		lr.rows.Delete(p.e)
	}
}

// readLive calls read with tq's live result, complete and current, under
// one of mu's locks. A result not kept yet is built a chunk at a time
// (liveChunk rows under the write lock, then the lock let go: the copy's
// reads and other requests go on in between), and kept from its first
// chunk on, so that the changes the copy applies meanwhile to rows
// already scanned reach it. Requests for one query share its building;
// at most resultsKept results are kept or built at once, and a result
// being built is never dropped for another: a request for a new query
// while every place is taken by a build waits for one to end. It returns
// ctx's error if ctx ends first; a build is dropped once every request
// that drove it went away. It is safe for concurrent use.
func (m *mirror) readLive(ctx context.Context, tq taskQuery, read func(*liveResult)) error {
	q := tq
	q.Page, q.Size = 1, 0
	key := q.values(1).Encode()
	var joined *liveResult // the build this request drives, counted in its builders
	for {
		if err := ctx.Err(); err != nil {
			if joined != nil {
				m.mu.Lock()
				if joined.builders--; joined.builders == 0 && !joined.done() {
					m.dropLive(joined) // nobody drives it any more: the next request for it starts again
				}
				m.mu.Unlock()
			}
			return err
		}
		now := m.clk()
		m.mu.RLock()
		if lr := m.findLive(key); lr != nil && lr.done() {
			lr.used.Store(now.UnixNano())
			read(lr)
			m.mu.RUnlock()
			return nil
		}
		m.mu.RUnlock()
		m.mu.Lock()
		lr := m.findLive(key) // joined, if any: a build is dropped only once nobody drives it
		if lr == nil && !m.roomForLive() {
			wait := m.liveDone
			m.mu.Unlock()
			select {
			case <-wait:
			case <-ctx.Done():
			}
			continue
		}
		if lr == nil {
			lr = newLiveResult(key, tq)
			m.keepLive(lr)
		}
		if lr != joined {
			lr.builders++
			joined = lr
		}
		lr.used.Store(now.UnixNano())
		if !lr.done() { // another request may have ended its building meanwhile
			m.buildChunk(lr)
		}
		if lr.done() {
			// Read before the lock goes: another request may drop it then.
			m.liveChanged()
			read(lr)
			m.mu.Unlock()
			return nil
		}
		m.mu.Unlock()
		if m.betweenChunks != nil {
			m.betweenChunks()
		}
	}
}

// liveChunk is how many rows a live result's building scans per hold of
// the copy's write lock: a few milliseconds for most queries (an order
// by text about 6 ms, a million rows held).
var liveChunk = 4096

// findLive is the live result of key, or nil. Guarded by mu.
func (m *mirror) findLive(key string) *liveResult {
	for _, lr := range m.live {
		if lr.key == key {
			return lr
		}
	}
	return nil
}

// roomForLive reports whether another result can be kept: fewer than
// resultsKept are, or one of them is built (and may be dropped). Guarded
// by mu.
func (m *mirror) roomForLive() bool {
	return len(m.live) < resultsKept || slices.ContainsFunc(m.live, (*liveResult).done)
}

// liveChanged wakes the requests waiting for room (readLive). Guarded by
// mu (write).
func (m *mirror) liveChanged() {
	close(m.liveDone)
	m.liveDone = make(chan struct{})
}

// buildChunk scans the next liveChunk rows into lr, in the order the
// copy holds them (by seq), and marks it done at the end. Guarded by mu
// (write).
func (m *mirror) buildChunk(lr *liveResult) {
	n := 0
	m.all.Ascend(ent{seq: lr.cursor + 1}, func(e ent) bool {
		if n == liveChunk {
			return false
		}
		n++
		lr.cursor = e.seq
		lr.enter(lr.placeOf(e.r))
		return true
	})
	if n < liveChunk {
		lr.cursor = math.MaxUint64 // every row, and every row to come
	}
}

// keepLive keeps lr, in place of the least recently asked for of the
// results built once resultsKept are kept (roomForLive: there is one).
// Guarded by mu (write).
func (m *mirror) keepLive(lr *liveResult) {
	if len(m.live) >= resultsKept {
		oldest := -1
		for i, o := range m.live {
			if o.done() && (oldest < 0 || o.used.Load() < m.live[oldest].used.Load()) {
				oldest = i
			}
		}
		m.dropLive(m.live[oldest])
	}
	m.live = append(m.live, lr)
}

// dropLive forgets lr. Guarded by mu (write).
func (m *mirror) dropLive(lr *liveResult) {
	i := slices.Index(m.live, lr)
	m.live[i] = m.live[len(m.live)-1]
	m.live[len(m.live)-1] = nil
	m.live = m.live[:len(m.live)-1]
	m.liveChanged()
}

// dropIdle forgets the built live results nobody asked for in
// resultIdle (one being built is asked for at every chunk). Guarded by
// mu (write).
func (m *mirror) dropIdle(now time.Time) {
	cutoff := now.Add(-resultIdle).UnixNano()
	for i := len(m.live) - 1; i >= 0; i-- {
		if lr := m.live[i]; lr.done() && lr.used.Load() < cutoff {
			m.dropLive(lr)
		}
	}
}
