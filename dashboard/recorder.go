package dashboard

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/batonhq/baton/coordinator"
)

// The recorder keeps, from the scheduler's events, what no query of the
// scheduler tells: when each running attempt started, how every recent
// attempt ended and how long it took, and how many attempts started,
// ended and failed in each bucket of time. Its callback runs on the
// subscription's goroutine for every event, so it does a few map and
// array writes and allocates nothing, except for a failure's error text.

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

// bucket counts one bucketWidth of one pool's events.
type bucket struct {
	stamp                                                  int64 // which bucket of time it holds (At / bucketWidth)
	Started, OK, Retried, Failed, Cancelled, Skipped, Runs uint64
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

// ring is a fixed-size ring of attempts, the newest last.
type ring struct {
	a    []attempt
	next int
	full bool
}

func newRing(n int) ring { return ring{a: make([]attempt, max(n, 1))} }

func (r *ring) push(a attempt) {
	r.a[r.next] = a
	if r.next++; r.next == len(r.a) {
		r.next, r.full = 0, true
	}
}

// each calls f with every attempt kept, the newest first, until f
// returns false.
func (r *ring) each(f func(*attempt) bool) {
	n := r.next
	if r.full {
		n = len(r.a)
	}
	for i := range n {
		j := r.next - 1 - i
		if j < 0 {
			j += len(r.a)
		}
		if !f(&r.a[j]) {
			return
		}
	}
}

// recorder is fed by the scheduler's events (see record) and read by the
// handlers. Safe for concurrent use.
type recorder struct {
	mu       sync.Mutex
	running  map[string]attempt  // guarded by mu: attempts running, by task
	pools    map[string]*poolRec // guarded by mu
	lastPool string              // guarded by mu: the pool of the last event, and
	lastRec  *poolRec            // its record, so that one pool costs no map lookup
	recent   ring                // guarded by mu: attempts that ended, every outcome
	failed   ring                // guarded by mu: attempts that failed or were cancelled
	events   uint64              // guarded by mu: events seen
	lastAt   time.Time           // guarded by mu: the newest event's time
	dirty    bool                // guarded by mu: changed closed since the last read
	changed  chan struct{}       // guarded by mu: closed at the first event after a read
}

func newRecorder(recent, failed int) *recorder {
	return &recorder{
		running: make(map[string]attempt),
		pools:   make(map[string]*poolRec),
		recent:  newRing(recent),
		failed:  newRing(failed),
		changed: make(chan struct{}),
	}
}

// record applies one event. It is the subscription's callback.
func (r *recorder) record(e coordinator.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events++
	if e.At.After(r.lastAt) {
		r.lastAt = e.At
	}
	p := r.lastRec
	if p == nil || e.Pool != r.lastPool {
		if p = r.pools[e.Pool]; p == nil {
			p = new(poolRec)
			r.pools[e.Pool] = p
		}
		r.lastPool, r.lastRec = e.Pool, p
	}
	b := p.at(e.At.UnixNano() / int64(bucketWidth))
	switch e.Kind {
	case coordinator.EventStarted:
		b.Started++
		r.running[e.TaskID] = attempt{Task: e.TaskID, Pool: e.Pool, Attempt: e.Attempt, Run: e.Run, Start: e.At}
	case coordinator.EventSucceeded:
		b.OK++
		r.end(e, outcomeOK)
	case coordinator.EventRecurred:
		b.OK++
		b.Runs++
		r.end(e, outcomeOK)
	case coordinator.EventRetrying:
		b.Retried++
		r.end(e, outcomeRetry)
	case coordinator.EventFailed:
		b.Failed++
		r.end(e, outcomeFailed)
	case coordinator.EventCancelled:
		b.Cancelled++
		if _, ok := r.running[e.TaskID]; ok {
			r.end(e, outcomeCancelled)
		}
	case coordinator.EventSkipped:
		b.Skipped++
	case coordinator.EventPaused, coordinator.EventResumed:
		// Nothing to count: the scheduler tells whether a pool is paused
		// (CountsByPool); the event only wakes the live pages.
	}
	if !r.dirty {
		r.dirty = true
		close(r.changed)
	}
}

// end closes the running attempt of e's task with o. Called with mu held.
func (r *recorder) end(e coordinator.Event, o outcome) {
	a, ok := r.running[e.TaskID]
	if ok {
		delete(r.running, e.TaskID)
	} else {
		// Started before the subscription: its start is unknown.
		a = attempt{Task: e.TaskID, Pool: e.Pool, Attempt: e.Attempt, Run: e.Run}
	}
	a.End, a.Outcome = e.At, o
	if e.Err != nil && o != outcomeOK {
		a.Err = cut(e.Err.Error(), errTextLimit)
	}
	r.recent.push(a)
	if o != outcomeOK {
		r.failed.push(a)
	}
}

// forgetRunning forgets the running attempts: their ends will not be
// seen (the subscription ends), or were not (it starts again).
func (r *recorder) forgetRunning() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.running)
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
		out = append(out, a)
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
			o.Runs += b.Runs
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
