package refmodel

import (
	"math"
	"slices"
	"time"
)

// Flow control: rate limits of pools, pools of several workers, limits
// per key and tasks of several slots.
//
// A pool's rate limit is the generic cell rate algorithm on the model's
// clock, as WithRateLimit documents it: a start at now is allowed while
// the theoretical arrival time tat is at most (burst-1)·every ahead of
// now, and each start moves tat one interval on from max(tat, now). The
// next token is due at tat - (burst-1)·every. A pool without a token
// starts nothing (a retry waits for a token like any start); its worker
// stays idle, and the pool starts its best ready task at the instant the
// token is due.

// bucket is a pool's rate limit.
type bucket struct {
	every time.Duration // 1/perSecond, rounded up to the nanosecond
	burst int
	tat   time.Duration // the theoretical time of the next start at the steady rate
}

// SetRate gives pool a rate limit of perSecond starts a second with bursts
// of burst, as WithRateLimit does for a scheduler made at the model's
// current time.
func (m *Model) SetRate(pool string, perSecond float64, burst int) {
	if m.rates == nil {
		m.rates = map[string]*bucket{}
	}
	m.rates[pool] = &bucket{every: time.Duration(math.Ceil(float64(time.Second) / perSecond)), burst: burst, tat: m.Now}
}

// hasToken reports whether pool may start an attempt now.
func (m *Model) hasToken(pool string) bool {
	b := m.rates[pool]
	return b == nil || max(b.tat, m.Now)-m.Now <= time.Duration(b.burst-1)*b.every
}

// takeToken uses a token of pool for a start now.
func (m *Model) takeToken(pool string) {
	if b := m.rates[pool]; b != nil {
		b.tat = max(b.tat, m.Now) + b.every
	}
}

// nextToken returns the earliest instant after now and up to target when
// a rate-limited pool gets the token its ready work waits for: a pool that
// runs, has a worker free and a ready task, and no token now.
func (m *Model) nextToken(target time.Duration) (time.Duration, bool) {
	if m.Closing {
		return 0, false
	}
	var at time.Duration
	found := false
	for pool, b := range m.rates {
		if m.Paused[pool] || !m.hasReady(pool) || m.busy(pool) {
			continue
		}
		if h := m.headOf(pool); h < 0 || m.slots(h) > m.idle(pool) {
			continue // it reserves the pool's workers: no token is waited for
		}
		next := b.tat - time.Duration(b.burst-1)*b.every
		if next > m.Now && next <= target && (!found || next < at) {
			at, found = next, true
		}
	}
	return at, found
}

// hasReady reports whether pool has a ready task whose key is not at its
// limit (the others are not counted ready).
func (m *Model) hasReady(pool string) bool {
	for _, r := range m.Tasks {
		if r.Status == Ready && r.Pool == pool && !m.keyBlocked(r.Key) {
			return true
		}
	}
	return false
}

// busy reports whether pool's workers all run attempts (or are held for
// one of several slots).
func (m *Model) busy(pool string) bool {
	if m.fl.workers != nil {
		return m.idle(pool) == 0
	}
	_, ok := m.running[pool]
	return ok
}

// looksAtTurns reports whether the scheduler's dispatch looks at pool's
// ready queue (dropping the dead turns at its head): a pool that runs,
// unless it is rate-limited and its worker is busy (a rate-limited pool
// looks only for an idle worker).
func (m *Model) looksAtTurns(pool string) bool {
	return !m.Paused[pool] && m.hasReady(pool) && (m.rates[pool] == nil || !m.busy(pool))
}

// flow is the model's state for pools of several workers, limits per key
// and tasks of several slots.
//
// With SetWorkers, the model's pools have several workers each, with
// lanes of one attempt: at each decision every pool, in the scheduler's
// order, hands its best ready tasks to its idle workers. A task of k
// slots starts only when k workers of its pool are idle, and takes them
// until its attempt ends; while it heads its pool's best level and fewer
// are idle, the pool reserves: it hands out nothing (it waits only for the
// attempts already running). A rate-limited pool does the same, a token
// per start. Which idle worker takes which task, and in what order
// workers woken together call their functions, is not modelled: a model
// with several workers is for programs whose tasks return only when a
// step makes them (they block until cancelled or released), so that what
// starts at each step is one set.
//
// A key at its limit (SetKeyLimits: attempts handed out and not
// ended, all pools counted) has no turn: its ready tasks are not counted
// ready, nor are they better work waiting; when an attempt of it ends, it
// gets a turn at the back of its best level in each pool where it has
// ready tasks. A limited key's worse level gets its turn when the key's
// turn at a better one ends for want of ready tasks there (passTurn), or
// when a task of the key becomes ready at it.
type flow struct {
	workers map[string]int // pool sizes (nil: one worker per pool, as run has)
	pools   []string       // in the scheduler's order
	out     map[int]int    // attempts out on workers (several-worker pools): their slots
	keyOut  map[string]int // attempts of each key handed out and not ended
	blocked map[string]bool
	limit   int             // KeyPolicy.Limit
	limits  map[string]int  // KeyPolicy.Limits
	at      []time.Duration // when each start in Started was, on several-worker pools
}

// StartedAt returns when each start of Started was, for a model of
// several-worker pools (SetWorkers).
func (m *Model) StartedAt() []time.Duration { return m.fl.at }

// SetWorkers gives pool n workers (pools in the order the scheduler
// numbers them: the default pool first, then WithPool's order).
func (m *Model) SetWorkers(pool string, n int) {
	if m.fl.workers == nil {
		m.fl.workers, m.fl.out = map[string]int{}, map[int]int{}
	}
	if _, ok := m.fl.workers[pool]; !ok {
		m.fl.pools = append(m.fl.pools, pool)
	}
	m.fl.workers[pool] = n
}

// SetKeyLimits sets KeyPolicy's Limit and Limits.
func (m *Model) SetKeyLimits(limit int, limits map[string]int) {
	m.fl.limit, m.fl.limits = limit, limits
}

// keyLimit is key's limit (0: none; the empty key has none).
func (m *Model) keyLimit(key string) int {
	if key == "" {
		return 0
	}
	if l, ok := m.fl.limits[key]; ok {
		return l
	}
	return m.fl.limit
}

func (m *Model) keyBlocked(key string) bool { return m.fl.blocked[key] }

// flowStart is called as t's attempt is handed out: it takes a token, a
// place of its key and, on a pool of several workers, its slots.
func (m *Model) flowStart(t int) {
	r := m.Tasks[t]
	m.takeToken(r.Pool)
	if m.fl.out != nil {
		m.fl.out[t] = m.slots(t)
	}
	if m.fl.keyOut == nil {
		m.fl.keyOut, m.fl.blocked = map[string]int{}, map[string]bool{}
	}
	m.fl.keyOut[r.Key]++
	if l := m.keyLimit(r.Key); l > 0 && m.fl.keyOut[r.Key] >= l && !m.fl.blocked[r.Key] {
		m.fl.blocked[r.Key] = true
		for lv, ts := range m.turns {
			m.turns[lv] = slices.DeleteFunc(ts, func(u *turn) bool { return u.key == r.Key })
		}
	}
}

// flowEnd is called as t's attempt ends: its slots and its key's place are
// freed; a key below its limit again gets its turns back, at the back of
// its levels.
func (m *Model) flowEnd(t int) {
	r := m.Tasks[t]
	delete(m.fl.out, t)
	if m.fl.keyOut == nil || m.fl.keyOut[r.Key] == 0 {
		return
	}
	m.fl.keyOut[r.Key]--
	if m.fl.blocked[r.Key] && m.fl.keyOut[r.Key] < m.keyLimit(r.Key) {
		delete(m.fl.blocked, r.Key)
		pools := map[string]bool{}
		for _, o := range m.Tasks {
			if o.Status == Ready && o.Key == r.Key && !pools[o.Pool] {
				pools[o.Pool] = true
				m.giveTurn(m.Tasks[m.bestOfKey(o.Pool, r.Key)])
			}
		}
	}
}

// bestOfKey returns key's ready task of pool at the best level, or -1.
func (m *Model) bestOfKey(pool, key string) int {
	best := -1
	for i, r := range m.Tasks {
		if r.Status == Ready && r.Pool == pool && r.Key == key && (best < 0 || r.Priority < m.Tasks[best].Priority) {
			best = i
		}
	}
	return best
}

// passTurn is called when key's turn at level lv ended for want of ready
// tasks there: a limited key's best level in that pool gets a turn if it
// has none.
func (m *Model) passTurn(lv level, key string) {
	if m.keyLimit(key) == 0 || m.keyBlocked(key) {
		return
	}
	if b := m.bestOfKey(lv.pool, key); b >= 0 {
		m.giveTurn(m.Tasks[b])
	}
}

// onWorker reports whether t's attempt is out on a worker.
func (m *Model) onWorker(t int) bool {
	if m.fl.workers != nil {
		_, ok := m.fl.out[t]
		return ok
	}
	return m.running[m.Tasks[t].Pool] == t
}

// slots is what t takes of its pool's workers.
func (m *Model) slots(t int) int { return max(1, m.Tasks[t].Slots) }

// idle is how many of pool's workers are free.
func (m *Model) idle(pool string) int {
	if m.fl.workers == nil {
		if _, busy := m.running[pool]; busy {
			return 0
		}
		return 1
	}
	n := m.fl.workers[pool]
	for t, k := range m.fl.out {
		if m.Tasks[t].Pool == pool {
			n -= k
		}
	}
	return n
}

// multi reports whether pool was ever given a task of several slots: its
// dispatch then looks at the head of its queue for one.
func (m *Model) multi(pool string) bool {
	return slices.ContainsFunc(m.Tasks, func(r *Record) bool { return r.Pool == pool && r.Slots > 1 })
}

// next returns the task pool hands out next, or -1; with keys it drops the
// dead turns met on the way, as the scheduler's look does.
func (m *Model) next(pool string) int {
	if m.keyed {
		return m.nextKeyed(pool)
	}
	return m.headOf(pool)
}

// headOf is next without dropping anything.
func (m *Model) headOf(pool string) int {
	if m.keyed {
		for _, lv := range m.levels(pool) {
			for _, u := range m.turns[lv] {
				if t := m.oldest(lv, u.key); t >= 0 {
					return t
				}
			}
		}
		return -1
	}
	best := -1
	for i, r := range m.Tasks {
		if r.Status == Ready && r.Pool == pool && (best < 0 || r.Priority < m.Tasks[best].Priority ||
			(r.Priority == m.Tasks[best].Priority && r.seq < m.Tasks[best].seq)) {
			best = i
		}
	}
	return best
}

// runFlow is run for pools of several workers: every pool, in order,
// hands out what it can, until nothing more starts.
func (m *Model) runFlow() {
	for changed := true; changed; {
		changed = false
		for _, pool := range m.fl.pools {
			if !m.Closing && !m.Paused[pool] && m.handOut(pool) {
				changed = true
			}
		}
	}
	m.settleTurns()
}

// handOut hands pool's best ready tasks to its idle workers and reports
// whether it started any.
func (m *Model) handOut(pool string) bool {
	started := false
	if m.rates[pool] == nil && m.multi(pool) {
		// A task of several slots heading the best level: started if
		// enough workers are idle, else the pool reserves for it.
		for {
			t := m.next(pool)
			if t < 0 || m.slots(t) == 1 {
				break
			}
			if m.slots(t) > m.idle(pool) {
				return started
			}
			m.startOn(t)
			started = true
		}
	}
	for m.idle(pool) > 0 {
		t := m.next(pool)
		switch {
		case t < 0:
			return started
		case m.slots(t) > 1 && m.rates[pool] == nil:
			return true // the next round looks at it first
		case m.slots(t) > m.idle(pool), !m.hasToken(pool):
			return started // reserves, or waits for a token
		}
		m.startOn(t)
		started = true
	}
	return started
}

// startOn starts t's attempt on a worker of its pool (see run for one
// worker); a function that returns at once ends at once (the programs run
// on several workers have at most one such attempt out at a time).
func (m *Model) startOn(t int) {
	r := m.Tasks[t]
	r.Status = Running
	if m.keyed {
		m.handedOut(t)
	}
	m.counted(t)
	m.fl.at = append(m.fl.at, m.Now)
	switch {
	case r.calls <= r.Do.Fails || r.Do.Panics:
		m.outcome(t, false)
	case r.Do.BlockCtx || (r.Do.BlockDeaf && !r.released):
	default:
		m.outcome(t, true)
	}
}
