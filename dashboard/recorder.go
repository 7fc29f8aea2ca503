package dashboard

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/batonhq/baton/coordinator"
)

// The recorder keeps what no single query of the scheduler tells: when
// each running attempt started, how recent attempts ended and how long
// they took, and how many attempts started, ended and failed in each
// bucket of time. It learns it two ways, so that the scheduler makes no
// event per attempt for it:
//
//   - from the events it subscribes to (Kinds): failures, retries,
//     cancellations, skips and pauses, rare by nature, each with its own
//     time and error (record, on the subscription's goroutine: a few map
//     and array writes, nothing allocated but a failure's error text);
//   - from a look at the scheduler on each update of the overview
//     (sample): the Totals, whose growth since the last look is counted
//     in the current bucket, and the tasks running now, of which a task
//     not running at the last look is taken to have started at this one,
//     and a task no longer running, with no failure told of its attempt
//     within an update interval, to have succeeded. Starts and successes
//     are so known to an update interval; an attempt that starts and ends
//     between two looks is counted, and not listed.

const (
	bucketWidth   = 10 * time.Second // the resolution of the rate history
	bucketCount   = 90               // 15 minutes of history
	errTextLimit  = 2000             // bytes of an error's text kept
	defaultRecent = 1 << 16          // attempts kept, every outcome
	defaultFailed = 1 << 13          // failed attempts kept, besides
)

// outcome is how an attempt ended.
type outcome uint8

const (
	outcomeRunning   outcome = iota
	outcomeOK                // succeeded (a run of a recurring task, or its last)
	outcomeRetry             // failed; another attempt follows
	outcomeFailed            // failed, no attempt left
	outcomeCancelled         // cancelled while it ran
)

func (o outcome) String() string {
	return [...]string{"running", "succeeded", "failed, retried", "failed", "cancelled"}[o]
}

// attempt is one attempt the recorder saw start (or end).
type attempt struct {
	Task    string
	Pool    string
	Attempt int
	Run     int
	Start   time.Time // zero: started before the dashboard subscribed
	End     time.Time // zero while it runs
	Outcome outcome
	Err     string
}

// Duration is how long the attempt ran, or 0 if its start is unknown.
func (a *attempt) Duration(now time.Time) time.Duration {
	if a.Start.IsZero() {
		return 0
	}
	end := a.End
	if end.IsZero() {
		end = now
	}
	return max(0, end.Sub(a.Start))
}

// bucket counts one bucketWidth of one pool's attempts, from the Totals
// (OK: tasks that succeeded; Started: attempts that ended, plus the
// growth of those running).
type bucket struct {
	stamp                                            int64 // which bucket of time it holds (At / bucketWidth)
	Started, OK, Retried, Failed, Cancelled, Skipped uint64
}

// poolRec is what the recorder keeps per pool.
type poolRec struct {
	buckets [bucketCount]bucket
}

func (p *poolRec) at(stamp int64) *bucket {
	b := &p.buckets[stamp%bucketCount]
	if b.stamp != stamp {
		*b = bucket{stamp: stamp}
	}
	return b
}

// ring is a ring of at most size attempts, the newest last. It grows as
// attempts come (a dashboard that never sees many keeps little), and once
// full overwrites the oldest.
type ring struct {
	a    []attempt
	size int
	next int // once full: where the next push goes, the oldest
}

func newRing(n int) ring { return ring{size: max(n, 1)} }

func (r *ring) push(a attempt) {
	if len(r.a) < r.size {
		r.a = append(r.a, a)
		return
	}
	r.a[r.next] = a
	if r.next++; r.next == r.size {
		r.next = 0
	}
}

// each calls f with every attempt kept, the newest first, until f
// returns false.
func (r *ring) each(f func(*attempt) bool) {
	n := len(r.a)
	newest := n - 1
	if n == r.size {
		newest = r.next - 1 // full: next is the oldest
	}
	for i := range n {
		j := newest - i
		if j < 0 {
			j += n
		}
		if !f(&r.a[j]) {
			return
		}
	}
}

// recorder is fed by the scheduler's events (record) and by looks at the
// scheduler (sample), and read by the handlers. Safe for concurrent use.
type recorder struct {
	mu      sync.Mutex
	settle  time.Duration       // immutable: how long an attempt gone from the running must wait for a failure before it counts as a success
	running map[string]attempt  // guarded by mu: attempts running at the last look, by task (Start zero: running at the first look)
	gone    map[string]attempt  // guarded by mu: attempts that were running and no longer are, not yet known to have failed (End: the look that missed them)
	pools   map[string]*poolRec // guarded by mu
	recent  ring                // guarded by mu: attempts that ended, every outcome
	failed  ring                // guarded by mu: attempts that failed or were cancelled
	events  uint64              // guarded by mu: events seen
	lastAt  time.Time           // guarded by mu: the newest event's time
	dirty   bool                // guarded by mu: changed closed since the last read
	changed chan struct{}       // guarded by mu: closed at the first event after a read

	// The last look (sample), guarded by mu.
	looked     bool                          // a look was made: the next counts what grew since
	blind      bool                          // the subscription started or ended since (forgetRunning): the tasks running at the next look started unseen
	lookAt     time.Time                     // when
	lookTotals map[string]coordinator.Totals // the Totals then
	lookPools  map[string]int                // tasks running then, by pool
}

func newRecorder(recent, failed int, settle time.Duration) *recorder {
	return &recorder{
		settle:  settle,
		running: make(map[string]attempt),
		gone:    make(map[string]attempt),
		pools:   make(map[string]*poolRec),
		recent:  newRing(recent),
		failed:  newRing(failed),
		changed: make(chan struct{}),
	}
}

// recordedKinds are the kinds the recorder subscribes to: the rest it learns by
// sampling.
var recordedKinds = []coordinator.EventKind{coordinator.EventRetrying, coordinator.EventFailed, coordinator.EventCancelled,
	coordinator.EventSkipped, coordinator.EventPaused, coordinator.EventResumed}

// record applies one event. It is the subscription's callback.
func (r *recorder) record(e coordinator.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events++
	if e.At.After(r.lastAt) {
		r.lastAt = e.At
	}
	switch e.Kind {
	case coordinator.EventRetrying:
		r.end(e, outcomeRetry, true)
	case coordinator.EventFailed:
		r.end(e, outcomeFailed, true)
	case coordinator.EventCancelled:
		r.end(e, outcomeCancelled, false)
	}
	r.notify()
}

// notify wakes the live pages. Called with mu held.
func (r *recorder) notify() {
	if !r.dirty {
		r.dirty = true
		close(r.changed)
	}
}

// end closes the attempt of e's task with o: the one running, or gone
// since the last look, if it is e's attempt; otherwise (always, if ran),
// one the recorder did not see start. A cancel of a task that was not
// running ends no attempt. Called with mu held.
func (r *recorder) end(e coordinator.Event, o outcome, ran bool) {
	same := func(a attempt) bool { return a.Attempt == e.Attempt && a.Run == e.Run }
	a, ok := r.running[e.TaskID]
	if ok && same(a) {
		delete(r.running, e.TaskID)
	} else if a, ok = r.gone[e.TaskID]; ok && same(a) {
		delete(r.gone, e.TaskID)
	} else if ran {
		// Started and ended between two looks, or before the first.
		a, ok = attempt{Task: e.TaskID, Pool: e.Pool, Attempt: e.Attempt, Run: e.Run}, true
	}
	if !ok {
		return
	}
	a.End, a.Outcome = e.At, o
	if e.Err != nil {
		a.Err = cut(e.Err.Error(), errTextLimit)
	}
	r.recent.push(a)
	r.failed.push(a)
}

// sample records one look at the scheduler, at now: its Totals and the
// tasks running (in at most a bucket's time since the last look, the
// growth of the totals is counted in now's bucket; over a longer gap,
// spread evenly over it). It reports whether anything changed since the
// last look.
func (r *recorder) sample(now time.Time, totals map[string]coordinator.Totals, running []coordinator.SnapshotTask) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	byPool := make(map[string]int, len(totals))
	for _, t := range running {
		byPool[t.Pool]++
	}
	if r.looked && now.Before(r.lookAt) {
		return false // a look overtaken by a later one (two pages, or a subscription, at once)
	}
	changed := false
	if r.looked {
		for pool, t := range totals {
			was := r.lookTotals[pool]
			d := bucket{
				OK: grown(t.Succeeded, was.Succeeded), Retried: grown(t.Retries, was.Retries), Failed: grown(t.Failed, was.Failed),
				Cancelled: grown(t.Cancelled, was.Cancelled), Skipped: grown(t.Skipped, was.Skipped),
			}
			started := int64(d.OK+d.Retried+d.Failed) + int64(byPool[pool]-r.lookPools[pool])
			d.Started = uint64(max(started, 0))
			if d != (bucket{}) {
				changed = true
				r.add(pool, d, r.lookAt, now)
			}
		}
	}
	// Attempts gone long enough with no failure told: successes.
	for id, a := range r.gone {
		if now.Sub(a.End) >= r.settle {
			delete(r.gone, id)
			a.Outcome = outcomeOK
			r.recent.push(a)
		}
	}
	seen := make(map[string]bool, len(running))
	for _, t := range running {
		seen[t.ID] = true
		a, ok := r.running[t.ID]
		if ok && a.Attempt == t.Attempts && a.Run == t.Runs+1 {
			continue
		}
		if ok {
			r.leave(a, now)
		}
		start := now
		if !r.looked || r.blind {
			start = time.Time{} // running before the first look: its start is unknown
		}
		r.running[t.ID] = attempt{Task: t.ID, Pool: t.Pool, Attempt: t.Attempts, Run: t.Runs + 1, Start: start}
		changed = true
	}
	for id, a := range r.running {
		if !seen[id] {
			delete(r.running, id)
			r.leave(a, now)
			changed = true
		}
	}
	totals = maps.Clone(totals)
	for pool, was := range r.lookTotals {
		// Totals only grow; ones read a little earlier by a concurrent
		// look, applied after, do not take the baseline back.
		t := totals[pool]
		t.Succeeded, t.Failed, t.Cancelled = max(t.Succeeded, was.Succeeded), max(t.Failed, was.Failed), max(t.Cancelled, was.Cancelled)
		t.Skipped, t.Retries = max(t.Skipped, was.Skipped), max(t.Retries, was.Retries)
		totals[pool] = t
	}
	r.looked, r.blind, r.lookAt, r.lookTotals, r.lookPools = true, false, now, totals, byPool
	return changed
}

// grown is how much a total grew from was to now (0 if a concurrent
// look's later reading came first).
func grown(now, was uint64) uint64 {
	if now < was {
		return 0
	}
	return now - was
}

// leave moves a running attempt the last look missed to gone, ended at
// now, where a failure told of it within settle finds it. Called with mu
// held.
func (r *recorder) leave(a attempt, now time.Time) {
	if a.Start.IsZero() {
		return // neither its start nor its outcome: nothing to list
	}
	a.End = now
	r.gone[a.Task] = a
}

// add counts d in pool's buckets: in to's if from is in the same bucket
// or the one before, else spread evenly over the buckets from from to to
// (the scheduler was not looked at meanwhile). Called with mu held.
func (r *recorder) add(pool string, d bucket, from, to time.Time) {
	p := r.pools[pool]
	if p == nil {
		p = new(poolRec)
		r.pools[pool] = p
	}
	last := to.UnixNano() / int64(bucketWidth)
	first := max(from.UnixNano()/int64(bucketWidth)+1, last-bucketCount+1)
	if first >= last {
		p.at(last).plus(d, 1, 0)
		return
	}
	n := uint64(last - first + 1)
	for i, stamp := uint64(0), first; stamp <= last; i, stamp = i+1, stamp+1 {
		p.at(stamp).plus(d, n, i)
	}
}

// plus adds the i'th of n even shares of d (the remainders go to the
// last share).
func (b *bucket) plus(d bucket, n, i uint64) {
	share := func(v uint64) uint64 {
		if i == n-1 {
			return v/n + v%n
		}
		return v / n
	}
	b.Started += share(d.Started)
	b.OK += share(d.OK)
	b.Retried += share(d.Retried)
	b.Failed += share(d.Failed)
	b.Cancelled += share(d.Cancelled)
	b.Skipped += share(d.Skipped)
}

// forgetRunning forgets the running attempts: their ends will not be
// seen (the subscription ends), or were not (it starts again).
func (r *recorder) forgetRunning() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.running)
	clear(r.gone)
	r.blind = true
}

// watch returns a channel closed at the first event after the call.
func (r *recorder) watch() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dirty {
		r.dirty = false
		r.changed = make(chan struct{})
	}
	return r.changed
}

// history returns the attempts of task id the recorder holds, the newest
// first: the running one, then those that ended, latest run and attempt
// first.
func (r *recorder) history(id string) []attempt {
	r.mu.Lock()
	var out []attempt
	for _, rg := range []*ring{&r.recent, &r.failed} {
		rg.each(func(a *attempt) bool {
			if a.Task == id {
				out = append(out, *a)
			}
			return true
		})
	}
	cur, running := r.running[id]
	r.mu.Unlock()
	slices.SortStableFunc(out, func(a, b attempt) int {
		if c := cmp.Compare(b.Run, a.Run); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Attempt, a.Attempt); c != 0 {
			return c
		}
		return b.End.Compare(a.End)
	})
	// A failed attempt is in both rings: keep it once.
	out = slices.CompactFunc(out, func(a, b attempt) bool {
		return a.Run == b.Run && a.Attempt == b.Attempt && a.End.Equal(b.End)
	})
	if running {
		out = slices.Insert(out, 0, cur)
	}
	return out
}

// runningNow returns the running attempts the recorder saw start, the
// longest running first, at most limit of them, and how many there are.
func (r *recorder) runningNow(limit int) ([]attempt, int) {
	r.mu.Lock()
	out := make([]attempt, 0, len(r.running))
	for _, a := range r.running {
		if !a.Start.IsZero() {
			out = append(out, a)
		}
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b attempt) int {
		if c := a.Start.Compare(b.Start); c != 0 {
			return c
		}
		return cmp.Compare(a.Task, b.Task)
	})
	n := len(out)
	if len(out) > limit {
		out = out[:limit]
	}
	return out, n
}

// recentFailures returns up to limit attempts that failed or were
// cancelled, the newest first.
func (r *recorder) recentFailures(limit int) []attempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []attempt
	r.failed.each(func(a *attempt) bool {
		out = append(out, *a)
		return len(out) < limit
	})
	return out
}

// rates sums the buckets of pool over the window ending at now: every
// pool if all is true. It returns one bucket per bucketWidth, the oldest
// first, n of them.
func (r *recorder) rates(pool string, all bool, now time.Time, n int) []bucket {
	n = min(n, bucketCount)
	out := make([]bucket, n)
	last := now.UnixNano() / int64(bucketWidth)
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, p := range r.pools {
		if !all && name != pool {
			continue
		}
		for i := range n {
			stamp := last - int64(n-1-i)
			b := &p.buckets[stamp%bucketCount]
			if b.stamp != stamp {
				continue
			}
			o := &out[i]
			o.Started += b.Started
			o.OK += b.OK
			o.Retried += b.Retried
			o.Failed += b.Failed
			o.Cancelled += b.Cancelled
			o.Skipped += b.Skipped
		}
	}
	for i := range out {
		out[i].stamp = last - int64(n-1-i)
	}
	return out
}

// seen returns the number of events recorded and the newest one's time.
func (r *recorder) seen() (uint64, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.events, r.lastAt
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
