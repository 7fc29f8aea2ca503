package refmodel

import (
	"math"
	"time"
)

// Flow control: rate limits of pools.
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
		next := b.tat - time.Duration(b.burst-1)*b.every
		if next > m.Now && next <= target && (!found || next < at) {
			at, found = next, true
		}
	}
	return at, found
}

// hasReady reports whether pool has a ready task.
func (m *Model) hasReady(pool string) bool {
	for _, r := range m.Tasks {
		if r.Status == Ready && r.Pool == pool {
			return true
		}
	}
	return false
}

// busy reports whether pool's worker runs an attempt.
func (m *Model) busy(pool string) bool {
	_, ok := m.running[pool]
	return ok
}

// looksAtTurns reports whether the scheduler's dispatch looks at pool's
// ready queue (dropping the dead turns at its head): a pool that runs,
// unless it is rate-limited and its worker is busy (a rate-limited pool
// looks only for an idle worker).
func (m *Model) looksAtTurns(pool string) bool {
	return !m.Paused[pool] && (m.rates[pool] == nil || !m.busy(pool))
}
