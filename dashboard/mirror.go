package dashboard

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/tidwall/btree"
)

// The mirror is the dashboard's copy of the scheduler's tasks: one row
// per task, kept by one goroutine (follow) from a coordinator.Feed, with
// the indexes the tables need (counts by pool and status, every task and
// the tasks of each status in the order the dashboard first saw them, the
// ready tasks of each pool by how long they wait, the live results of
// the tasks table's other queries: liveresult.go), and the attempts'
// ends from the scheduler's history for the chart and the failures. Every
// table, sort, page and filter is answered from it: a request costs the
// coordinator nothing, and the feed's reads cost it what changed, a
// chunk at a time (feedChunk rows, well under a millisecond each).
//
// Counted B-trees (github.com/tidwall/btree: GetAt finds the n-th row in
// O(log n)) give the deep pages and the last page of the default order
// without walking to them.

const (
	bucketWidth  = 10 * time.Second // the resolution of the chart and the rates
	bucketCount  = 90               // 15 minutes of buckets
	errTextLimit = 2000             // bytes of an error's text kept

	feedChunk     = 1000 // rows (and ends) a feed read takes at most: about 0.2ms of the coordinator's time
	chunksPerTurn = 32   // reads per update interval at most, once caught up: the coordinator's share stays a few percent however fast tasks change
	chunksLoading = 256  // reads per interval while the first pass is under way
	failuresKept  = 50
)

// row is one task in the mirror. Guarded by mirror.mu.
type row struct {
	coordinator.TaskRow
	seq     uint64    // the order the mirror first saw tasks in: newest first sorts by it, descending
	seen    time.Time // when the mirror first saw it; zero if in its first pass (before the dashboard)
	since   time.Time // when it entered its status, as the mirror saw it; zero if in the first pass
	errText string    // its error's text, cut
	errLow  string    // errText lower-cased, for the error filter (most often errText itself: no allocation)
}

// setErr keeps err's text, cut, and its lower-case form.
func (r *row) setErr(err error) {
	text := errText(err)
	if text == r.errText && (text == "" || r.errLow != "") {
		return
	}
	r.errText, r.errLow = text, strings.ToLower(text)
}

// ent is a row in an index: its key inline, so that a tree compares
// without reading the rows (a cache miss each, in a million).
type ent struct {
	seq uint64
	r   *row
}

func bySeq(a, b ent) bool { return a.seq < b.seq }

// went is a ready row in its pool's index, by how long it has waited.
type went struct {
	since int64 // UnixNano; 0 (before the dashboard) first
	seq   uint64
	r     *row
}

func byWait(a, b went) bool {
	if a.since != b.since {
		return a.since < b.since
	}
	return a.seq < b.seq
}

func (r *row) ent() ent { return ent{r.seq, r} }

func (r *row) went() went {
	var ns int64
	if !r.since.IsZero() {
		ns = r.since.UnixNano()
	}
	return went{ns, r.seq, r}
}

type statusCounts [7]int // by coordinator.Status

// failure is an attempt that failed, from the history.
type failure struct {
	ID, Pool     string
	Attempt, Run int
	Outcome      string
	Err          string
	Started, At  time.Time
}

// recentFailures returns the newest n failures, the newest first.
func (m *mirror) recentFailures(n int) []failure {
	out := make([]failure, 0, min(n, m.failN))
	for i := 1; i <= m.failN && len(out) < n; i++ {
		out = append(out, m.fails[(m.failHead-i+failuresKept)%failuresKept])
	}
	return out
}

// endBucket counts one bucketWidth of one pool's attempt ends.
type endBucket struct {
	stamp                    int64 // start of the bucket / bucketWidth
	started, ended, failures uint64
}

type mirror struct {
	s   *coordinator.Scheduler
	clk func() time.Time

	mu       sync.RWMutex
	slots    []*row
	byID     map[string]*row
	all      *btree.BTreeG[ent]
	byStatus [7]*btree.BTreeG[ent]
	ready    map[string]*btree.BTreeG[went] // per pool, by wait
	counts   map[string]*statusCounts       // per pool
	running  map[*row]struct{}
	kids     map[string]map[*row]struct{} // by parent ID
	live     []*liveResult                // the tasks table's queries kept as rows change (liveresult.go)
	liveDone chan struct{}                // closed (and replaced) when a live result is built or dropped: a request waiting for room looks again

	betweenChunks func() // nil but in tests: called while a live result is built, between its chunks, with mu let go
	seq           uint64
	version       uint64 // grows with every read that changed something
	synced        bool   // the first pass is done
	loaded        int    // rows read in the first pass, so far
	buckets       map[string][]endBucket
	fails         [failuresKept]failure // a ring: the newest at failHead-1
	failHead      int                   // where the next failure goes
	failN         int                   // failures in the ring
	dropped       uint64                // ends the history forgot before the mirror read them
	changed       chan struct{}
	caught        uint64        // reads that found nothing more waiting
	caughtCh      chan struct{} // closed at the next such read
	err           error         // the feed's last error
	lastRead      time.Time
}

func newMirror(s *coordinator.Scheduler, now func() time.Time) *mirror {
	m := &mirror{s: s, clk: now, byID: map[string]*row{}, ready: map[string]*btree.BTreeG[went]{},
		counts: map[string]*statusCounts{}, running: map[*row]struct{}{}, kids: map[string]map[*row]struct{}{},
		buckets: map[string][]endBucket{}, changed: make(chan struct{}), caughtCh: make(chan struct{}), liveDone: make(chan struct{})}
	opts := btree.Options{NoLocks: true}
	m.all = btree.NewBTreeGOptions(bySeq, opts)
	for i := range m.byStatus {
		m.byStatus[i] = btree.NewBTreeGOptions(bySeq, opts)
	}
	for name := range s.PoolSizes() {
		m.counts[name] = &statusCounts{}
	}
	return m
}

// follow reads the feed until ctx ends: at once while it says more waits
// (at most chunksPerTurn reads, chunksLoading in the first pass), then
// waits (wait) before the next turn: an update interval, or, once the
// first pass is done, nineteen times what the turn took if that is
// longer, so that following a
// scheduler whose tasks change fast costs the dashboard's goroutine at
// most about 5% of a core (the changes coalesce meanwhile: a task read
// once however often it changed) and the pages lag behind by that much.
func (m *mirror) follow(ctx context.Context, feed *coordinator.Feed, wait func(context.Context, time.Duration) bool) {
	for {
		limit := chunksPerTurn
		m.mu.RLock()
		if !m.synced {
			limit = chunksLoading
		}
		m.mu.RUnlock()
		start := m.clk()
		for range limit {
			p, err := feed.Next(ctx, feedChunk)
			if err != nil {
				if ctx.Err() != nil || errors.Is(err, coordinator.ErrFeedClosed) {
					return
				}
				m.mu.Lock()
				m.err = err
				m.mu.Unlock()
				break
			}
			m.apply(p)
			if !p.More {
				break
			}
		}
		pace := 19 * m.clk().Sub(start)
		if limit == chunksLoading {
			pace = 0 // the first pass, once: as fast as the interval allows
		}
		if !wait(ctx, pace) {
			return
		}
	}
}

// apply takes one feed read in.
func (m *mirror) apply(p coordinator.FeedPage) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lastRead = p.At
	first := !m.synced
	if len(m.live) > 0 {
		m.dropIdle(m.clk())
	}
	for i := range p.Rows {
		m.put(&p.Rows[i], p.At, first)
	}
	if first {
		m.loaded += len(p.Rows)
	}
	m.dropped += p.Dropped
	for i := range p.Ended {
		m.ended(&p.Ended[i])
	}
	if first && !p.More {
		m.synced = true
	}
	if !p.More {
		m.caught++
		close(m.caughtCh)
		m.caughtCh = make(chan struct{})
	}
	if len(p.Rows) > 0 || len(p.Ended) > 0 || (first && m.synced) {
		m.version++
		close(m.changed)
		m.changed = make(chan struct{})
	}
}

// put applies one row: a new task, a change, or a task gone.
func (m *mirror) put(tr *coordinator.TaskRow, at time.Time, first bool) {
	for len(m.slots) <= tr.Slot {
		m.slots = append(m.slots, nil)
	}
	old := m.slots[tr.Slot]
	if old != nil && (tr.Gone || old.ID != tr.ID) {
		m.remove(old)
		old = nil
	}
	if tr.Gone {
		return
	}
	if old == nil {
		m.seq++
		r := &row{TaskRow: *tr, seq: m.seq, since: at}
		if !first {
			r.seen = at
		} else {
			r.since = time.Time{}
		}
		r.setErr(tr.Err)
		m.slots[tr.Slot] = r
		m.byID[r.ID] = r
		m.all.Load(r.ent()) // the newest: appended
		m.index(r)
		for _, lr := range m.live {
			lr.enter(lr.placeOf(r))
		}
		if r.Parent != "" {
			k := m.kids[r.Parent]
			if k == nil {
				k = map[*row]struct{}{}
				m.kids[r.Parent] = k
			}
			k[r] = struct{}{}
		}
		return
	}
	var was [resultsKept]place
	for i, lr := range m.live {
		was[i] = lr.placeOf(old)
	}
	if old.Status != tr.Status {
		m.unindex(old)
		old.TaskRow = *tr
		old.since = at
		m.index(old)
	} else {
		old.TaskRow = *tr
	}
	old.setErr(tr.Err)
	for i, lr := range m.live {
		lr.move(was[i], old)
	}
}

// index adds r to the indexes of its status.
func (m *mirror) index(r *row) {
	m.byStatus[r.Status].Load(r.ent()) // Load appends fast, and inserts as Set otherwise
	c := m.counts[r.Pool]
	if c == nil {
		c = &statusCounts{}
		m.counts[r.Pool] = c
	}
	c[r.Status]++
	switch r.Status {
	case coordinator.Running:
		m.running[r] = struct{}{}
	case coordinator.Ready:
		q := m.ready[r.Pool]
		if q == nil {
			q = btree.NewBTreeGOptions(byWait, btree.Options{NoLocks: true})
			m.ready[r.Pool] = q
		}
		q.Set(r.went())
	}
}

func (m *mirror) unindex(r *row) {
	m.byStatus[r.Status].Delete(r.ent())
	m.counts[r.Pool][r.Status]--
	switch r.Status {
	case coordinator.Running:
		delete(m.running, r)
	case coordinator.Ready:
		m.ready[r.Pool].Delete(r.went())
	}
}

func (m *mirror) remove(r *row) {
	for _, lr := range m.live {
		lr.leave(lr.placeOf(r))
	}
	m.unindex(r)
	m.all.Delete(r.ent())
	delete(m.byID, r.ID)
	m.slots[r.Slot] = nil
	if r.Parent != "" {
		if k := m.kids[r.Parent]; k != nil {
			delete(k, r)
			if len(k) == 0 {
				delete(m.kids, r.Parent)
			}
		}
	}
}

// ended counts an attempt's end in the chart's buckets and keeps it if it
// failed.
func (m *mirror) ended(e *coordinator.EndedAttempt) {
	failed := e.Outcome == coordinator.OutcomeFailed || e.Outcome == coordinator.OutcomeInterrupted
	n := uint64(max(e.Tasks, 1)) // several first successes that ended together, or one attempt
	m.bucket(e.Pool, e.Ended.UnixNano()/int64(bucketWidth)).ended += n
	if failed {
		m.bucket(e.Pool, e.Ended.UnixNano()/int64(bucketWidth)).failures += n
	}
	if !e.Started.IsZero() {
		m.bucket(e.Pool, e.Started.UnixNano()/int64(bucketWidth)).started += n
	}
	if failed || e.Outcome == coordinator.OutcomeCancelled {
		m.fails[m.failHead] = failure{ID: e.ID, Pool: e.Pool, Attempt: e.Attempt, Run: e.Run, Outcome: e.Outcome.String(), Err: errText(e.Err), Started: e.Started, At: e.Ended}
		m.failHead = (m.failHead + 1) % failuresKept
		m.failN = min(m.failN+1, failuresKept)
	}
}

// bucket returns pool's bucket of stamp, the buckets kept to bucketCount
// (older ends are not counted).
func (m *mirror) bucket(pool string, stamp int64) *endBucket {
	bs := m.buckets[pool]
	i, found := slices.BinarySearchFunc(bs, stamp, func(b endBucket, s int64) int { return cmp.Compare(b.stamp, s) })
	if !found {
		bs = slices.Insert(bs, i, endBucket{stamp: stamp})
		if len(bs) > bucketCount {
			bs = slices.Delete(bs, 0, len(bs)-bucketCount)
			i -= 1
			if i < 0 {
				i = 0
				bs[0] = endBucket{stamp: bs[0].stamp} // too old: counted nowhere
			}
		}
		m.buckets[pool] = bs
	}
	return &m.buckets[pool][i]
}

// rates returns n buckets up to now, of pool (all: every pool).
func (m *mirror) rates(pool string, all bool, now time.Time, n int) []endBucket {
	last := now.UnixNano() / int64(bucketWidth)
	out := make([]endBucket, n)
	for i := range out {
		out[i].stamp = last - int64(n-1-i)
	}
	for name, bs := range m.buckets {
		if !all && name != pool {
			continue
		}
		for _, b := range bs {
			if k := int(b.stamp - out[0].stamp); k >= 0 && k < n {
				out[k].started += b.started
				out[k].ended += b.ended
				out[k].failures += b.failures
			}
		}
	}
	return out
}

// watch returns a channel closed at the mirror's next change.
func (m *mirror) watch() (<-chan struct{}, uint64) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.changed, m.version
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return cut(err.Error(), errTextLimit)
}

// cut shortens s to at most n bytes, on a rune boundary, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i] + "…"
}
