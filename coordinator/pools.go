package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/batonhq/baton/actor"
)

// Pause stops pool from starting attempts ("" is the default pool). When
// it returns, the pool starts nothing more: what was handed to its
// workers and not started was taken back, and is ready again; attempts
// already running go on and end as usual, and so do their retries'
// waits, delays and series' timers, which keep their times. A task that
// becomes ready while its pool is paused waits; a start of a series that
// comes due meanwhile waits too, and on Resume its Missed policy decides,
// as for a start a busy pool could not take: more than a second late (or
// half the time to the next start) is a missed start. Pause of a paused
// pool does nothing.
//
// Subscribers receive EventPaused; the logger writes an Info line;
// CountsByPool and Paused report it. On a durable scheduler (WithStore)
// the pause is committed before Pause returns and survives a restart.
//
// Pause blocks until the coordinator has done it (and committed it). It
// returns an error wrapping ErrUnknownPool for a pool New was not given,
// ErrClosed once Shutdown has begun, and the commit's error if that
// failed. Safe for concurrent use, from a task too.
func (s *Scheduler) Pause(pool string) error { return s.setPaused(pool, true) }

// Resume lets pool start attempts again after Pause: nothing is lost, its
// ready tasks start in the order they would have. Resume of a pool that
// is not paused does nothing. It blocks, errs and is safe as Pause is;
// subscribers receive EventResumed.
func (s *Scheduler) Resume(pool string) error { return s.setPaused(pool, false) }

// PauseAll pauses every pool, as Pause does, in one decision.
func (s *Scheduler) PauseAll() error { return s.setPausedAll(true) }

// ResumeAll resumes every pool, as Resume does, in one decision.
func (s *Scheduler) ResumeAll() error { return s.setPausedAll(false) }

// Paused reports whether pool is paused, as the coordinator last decided
// (false for a pool New was not given). It does not block. Safe for
// concurrent use; after Shutdown it reports the last state.
func (s *Scheduler) Paused(pool string) bool {
	if i, ok := s.poolIndex[pool]; ok {
		return s.paused[i].Load()
	}
	return false
}

// SetRateLimit changes pool's rate limit while the scheduler runs (see
// WithRateLimit); perSecond 0 removes it. The tokens the bucket holds are
// kept, up to the new burst. It blocks until the coordinator has applied
// it; errors wrap ErrInvalidOption (a bad rate), ErrUnknownPool or
// ErrClosed. Safe for concurrent use. A rate limit is an option, not a
// state: a durable scheduler does not store it.
func (s *Scheduler) SetRateLimit(pool string, perSecond float64, burst int) error {
	if err := checkRate(pool, perSecond, burst, true); err != nil {
		return err
	}
	i, ok := s.poolIndex[pool]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownPool, quoteID(pool))
	}
	return s.poolCall(func(reply chan<- error) request {
		return rateReq{pool: i, perSecond: perSecond, burst: burst, reply: reply}
	})
}

// RateLimit reports pool's rate limit as the coordinator last applied it
// (WithRateLimit, SetRateLimit): perSecond 0 and burst 0 for none, and
// for a pool New was not given. It does not block. Safe for concurrent
// use; after Shutdown it reports the last limit.
func (s *Scheduler) RateLimit(pool string) (perSecond float64, burst int) {
	if i, ok := s.poolIndex[pool]; ok {
		if rc := s.rates[i].Load(); rc != nil {
			return rc.perSecond, rc.burst
		}
	}
	return 0, 0
}

func (s *Scheduler) setPaused(pool string, on bool) error {
	i, ok := s.poolIndex[pool]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownPool, quoteID(pool))
	}
	return s.poolCall(func(reply chan<- error) request { return pauseReq{pool: i, on: on, reply: reply} })
}

func (s *Scheduler) setPausedAll(on bool) error {
	return s.poolCall(func(reply chan<- error) request { return pauseReq{pool: -1, on: on, reply: reply} })
}

// poolCall sends a pool request and waits for its answer.
func (s *Scheduler) poolCall(req func(chan<- error) request) error {
	if s.closed.Load() {
		return s.closedErr()
	}
	err, callErr := actor.Call(context.Background(), s.mailbox, req)
	if errors.Is(callErr, actor.ErrStopped) {
		return s.closedErr()
	}
	if callErr != nil {
		return callErr
	}
	return err
}

type pauseReq struct {
	pool  int // -1: every pool
	on    bool
	reply chan<- error
}

func (r pauseReq) apply(l *loop, now time.Time) {
	if l.st.closing {
		r.reply <- l.s.closedErr()
		return
	}
	for i := range l.st.pools {
		if r.pool >= 0 && i != r.pool {
			continue
		}
		if r.on {
			l.st.pausePool(i, now)
		} else {
			l.st.resumePool(i, now)
		}
		l.s.paused[i].Store(r.on)
	}
	l.st.later(answer{err: r.reply}) // once committed, on a durable scheduler
}

type rateReq struct {
	pool      int
	perSecond float64
	burst     int
	reply     chan<- error
}

func (r rateReq) apply(l *loop, now time.Time) {
	p := &l.st.pools[r.pool]
	switch {
	case r.perSecond == 0:
		p.rate, p.tokenAt, p.tokenFrom = nil, time.Time{}, time.Time{}
	case p.rate == nil:
		p.rate = newRateLimit(r.perSecond, r.burst, now)
		l.st.takeBackUnclaimed(p) // what was handed out must pass the bucket too
	default:
		p.rate.set(r.perSecond, r.burst, now)
	}
	if r.perSecond == 0 {
		l.s.rates[r.pool].Store(nil)
	} else {
		l.s.rates[r.pool].Store(&rateConfig{r.perSecond, r.burst})
	}
	r.reply <- nil
}
