package coordinator

import (
	"math"
	"time"

	"github.com/batonhq/baton/internal/lane"
)

// Flow control of a pool: pause, a rate limit on starts, and tasks that
// take several of its slots. (Per-key limits and turns: keys.go.)
//
// A paused pool hands out nothing; Pause takes back what was handed out
// and not claimed. A rate-limited pool hands out one attempt to each idle
// worker that can claim it at once, one token each, and nothing behind
// an attempt that runs (whose start would come at an unknown time, maybe
// after the bucket allowed others): a start is then a hand-out, to within
// the time a woken worker takes to claim. A task of k slots is handed to
// an idle worker while k-1 other idle workers of its pool are held idle
// for it until its attempt ends; while it heads its pool's best level and
// k workers are not idle, the pool reserves: it takes back what it handed
// out of a worse level and not started, and hands out nothing, so that the
// task waits only for the attempts already running and for those of its
// level handed out ahead of it (they came first, and taking them back
// would put them at the head of the level again, ahead of it). Better work
// handed out behind a long attempt is still given back (unstick), and once
// the task no longer heads the best level the pool dispatches, and keeps
// priority (checkPriority), as any pool.

// rateLimit is a pool's limit on starts: the generic cell rate algorithm,
// a token bucket kept as one time. A start at now is allowed while tat is
// at most (burst-1)·every ahead of now; each start moves tat one interval
// on. Integer times: exact on a mock clock.
type rateLimit struct {
	perSecond float64
	every     time.Duration // one start per every: 1/perSecond, rounded up to the nanosecond
	burst     int
	tat       time.Time // the theoretical time of the next start at the steady rate (zero: the bucket is full)
}

func newRateLimit(perSecond float64, burst int, now time.Time) *rateLimit {
	return &rateLimit{perSecond: perSecond, every: rateEvery(perSecond), burst: burst, tat: now}
}

// rateEvery is the interval of a rate: never shorter than the rate allows.
func rateEvery(perSecond float64) time.Duration {
	return time.Duration(math.Ceil(float64(time.Second) / perSecond))
}

// maxCatchUp bounds how late a token may be taken for work that waited for
// it (take's from): a wake of the coordinator that comes late loses no
// time to the rate, up to this; a pool whose workers, not its rate, held
// work back for longer owes it nothing.
const maxCatchUp = 10 * time.Millisecond

// take uses a token at now, if one is there. from is now, or, for work
// that has waited for its token since it came (a wake that came late), the
// time the token came: the bucket goes on from there, and the time the
// wake lost is not lost to the rate (burst 1 started 867 a second at
// 3,000 a second).
func (r *rateLimit) take(now, from time.Time) bool {
	tat := r.tat
	if tat.Before(from) {
		tat = from
	}
	if tat.Sub(now) > time.Duration(r.burst-1)*r.every {
		return false
	}
	r.tat = tat.Add(r.every)
	return true
}

// next is when the next token will be there.
func (r *rateLimit) next() time.Time {
	return r.tat.Add(-time.Duration(r.burst-1) * r.every)
}

// set changes the limit at now, keeping the tokens there are (at most the
// new burst).
func (r *rateLimit) set(perSecond float64, burst int, now time.Time) {
	tokens := float64(r.burst)
	if r.tat.After(now) {
		tokens -= float64(r.tat.Sub(now)) / float64(r.every)
	}
	tokens = max(0, min(tokens, float64(burst)))
	r.perSecond, r.every, r.burst = perSecond, rateEvery(perSecond), burst
	r.tat = now.Add(time.Duration((float64(burst) - tokens) * float64(r.every)))
}

// slots returns the slots task t takes in its pool.
func (s *state) slots(t int32) int {
	if x := s.tasks[t].x; x != nil && x.slots > 1 {
		return int(x.slots)
	}
	return 1
}

// pausePool stops pool i from starting anything: every item handed out
// and not claimed is taken back. It reports false if it was paused
// already.
func (s *state) pausePool(i int, now time.Time) bool {
	p := &s.pools[i]
	if p.paused {
		return false
	}
	p.paused = true
	p.revokeAt, p.stuckAt, p.tokenAt, p.tokenFrom = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	s.takeBackUnclaimed(p)
	s.poolEvent(EventPaused, i, now)
	return true
}

// takeBackUnclaimed takes back every item handed to p's workers and not
// claimed: ready again, or waiting again on the item it was fused behind.
func (s *state) takeBackUnclaimed(p *poolState) {
	for _, li := range p.lanes {
		ls := &s.lanes[li]
		if ls.open {
			s.freeTail(ls, math.MinInt32, true)
			trimEnd(ls)
		}
	}
}

// resumePool lets pool i start work again; it reports false if it was
// not paused.
func (s *state) resumePool(i int, now time.Time) bool {
	p := &s.pools[i]
	if !p.paused {
		return false
	}
	p.paused = false
	s.poolEvent(EventResumed, i, now)
	return true
}

// poolEvent records a pool's event, and on a durable scheduler its new
// state.
func (s *state) poolEvent(kind EventKind, i int, now time.Time) {
	if s.dur != nil {
		s.dur.touchPool(i)
	}
	if s.kinds.has(kind) {
		s.events = append(s.events, Event{Kind: kind, Pool: s.pools[i].name, At: now})
	}
}

// handOutOne gives each idle worker of p one attempt it can claim at once,
// while the pool's rate limit has tokens: the dispatch of a rate-limited
// pool. A task of k slots waits for k idle workers (reserve).
func (s *state) handOutOne(p *poolState, now time.Time) {
	from := now
	if w := p.tokenFrom; !w.IsZero() && w.Before(now) && now.Sub(w) <= maxCatchUp {
		from = w // the ready work has waited for this token since it came
	}
	p.tokenAt, p.tokenFrom = time.Time{}, time.Time{}
	defer func() {
		// Tokens that came while the wake was late and found no idle
		// worker are still owed to the work waiting (within maxCatchUp):
		// the next worker to come back takes one.
		if p.tokenFrom.IsZero() && p.readyLive > 0 && p.rate != nil && p.rate.next().Before(now) {
			p.tokenFrom = p.rate.next()
		}
	}()
	for _, li := range p.lanes {
		if p.readyLive == 0 || p.idle == 0 {
			return
		}
		ls := &s.lanes[li]
		if ls.open || ls.holder != 0 {
			continue
		}
		t, ok := s.popReady(p, now)
		if !ok {
			return
		}
		if k := s.slots(t); k > p.idle {
			s.unpop(t)
			s.reserve(p, t)
			return
		}
		if p.rate != nil && !p.rate.take(now, from) {
			s.unpop(t)
			p.tokenAt = p.rate.next()
			p.tokenFrom = p.tokenAt
			return
		}
		s.placeAlone(ls, p, t, now)
	}
}

// placeAlone hands t to the idle lane ls, and holds idle for it as many
// more of p's idle lanes as it takes extra slots.
func (s *state) placeAlone(ls *laneState, p *poolState, t int32, now time.Time) {
	from := ls.n
	s.place(ls, t, false, 0, now)
	ls.fuseAt = ls.n // nothing is fused behind it
	s.published(ls, p, from)
	for k := s.slots(t) - 1; k > 0; {
		for _, li := range p.lanes {
			if o := &s.lanes[li]; !o.open && o.holder == 0 {
				o.holder = t + 1
				p.idle--
				k--
				break
			}
		}
	}
}

// releaseHeld frees the lanes held for t's attempt, which has ended (or was
// taken back).
func (s *state) releaseHeld(t int32) {
	p := &s.pools[s.hot[t].pool]
	for _, li := range p.lanes {
		if ls := &s.lanes[li]; ls.holder == t+1 {
			ls.holder = 0
			p.idle++
		}
	}
}

// slotPass is the part of a pool's dispatch that looks at a task of
// several slots heading the pool's best level: handed out if enough
// workers are idle, reserved for otherwise. It reports whether the pool
// reserves (then nothing of that level or worse is handed out).
func (s *state) slotPass(p *poolState, now time.Time) bool {
	t, ok := s.headReady(p)
	if !ok || s.slots(t) == 1 {
		p.reserving = false
		return false
	}
	if k := s.slots(t); k <= p.idle {
		for _, li := range p.lanes {
			ls := &s.lanes[li]
			if !ls.open && ls.holder == 0 {
				if got, ok := s.popReady(p, now); ok {
					if got != t { // a series' start popReady passed over: look again next time
						s.unpop(got)
						break
					}
					s.placeAlone(ls, p, t, now)
				}
				break
			}
		}
		p.reserving = false
		return s.slotPass(p, now) // the next head may take several slots too
	}
	s.reserve(p, t)
	return true
}

// reserve keeps p's workers for t, of several slots and the best ready
// task: what was handed out of a worse level and not claimed is taken
// back, and nothing is handed out until k workers are idle.
func (s *state) reserve(p *poolState, t int32) {
	p.reserving = true
	prio := s.hot[t].prio
	for _, li := range p.lanes {
		if ls := &s.lanes[li]; ls.open && ls.worst > prio {
			s.reserveTail(ls, prio)
			trimEnd(ls)
		}
	}
}

// reserveTail takes back, from the end of lane ls, the free items worse
// than prio. It stops at the first item the worker got to, and at a
// task of several slots: that one was handed out (placeAlone) before the
// task reserving, holds its workers, and goes first (taking it back would
// only hand it out again, and again).
func (s *state) reserveTail(ls *laneState, prio int32) {
	for seq := ls.n; seq != ls.applied; {
		seq--
		st := ls.l.State(seq)
		if st != lane.Free && st != lane.Revoked {
			return
		}
		if st != lane.Free {
			continue
		}
		t := ls.l.Task(seq)
		if s.slots(t) > 1 {
			return
		}
		if s.hot[t].prio > prio && s.revokeItem(ls, seq) {
			_ = s.revokeFollowers(ls, seq)
		}
	}
}

// headReady returns the task popReady would return next, without taking
// it (a live entry at the head of the best level).
func (s *state) headReady(p *poolState) (int32, bool) {
	if _, ok := s.bestReady(p); !ok {
		return 0, false
	}
	e, _, _ := p.ready.Peek()
	if e&turnBit != 0 {
		return s.turnHead(e)
	}
	return int32(uint32(e)), true
}

// leftLane is called when t's item leaves its lane's accounting (its end
// applied, or taken back): its key and its held workers are freed.
func (s *state) leftLane(t int32) {
	if s.keyed {
		s.keyBack(t)
	}
	if s.hot[t].flags&fExtra != 0 && s.tasks[t].x.slots > 1 {
		s.releaseHeld(t)
	}
}
