// Package refmodel is a deliberately simple, sequential model of Baton's
// scheduling rules, used only by tests: the model-based property test runs
// the same random program on a Scheduler and on a Model and compares them
// after every step.
//
// The model covers pools of one worker each with lanes of one attempt (so
// the start order within a pool is exact), priorities, dependencies, skips
// with causes, retries and their waits, delays, recurring tasks at a fixed
// rate, cancellation of waiting, running and recurring tasks, tasks that
// block until cancelled or until released, retention (final tasks are
// forgotten once their time is up and nothing refers to them, and their IDs
// may be submitted again), paused pools (Pause, Resume), rate limits of
// pools (SetRate), keys taking turns within a level (round robin, weighted
// by Weights), Shutdown at any step, and graphs that grow and choose while
// they run (Spawn, joins, Choose: spawn.go). With SetWorkers its pools
// have several workers, with limits per key and tasks of several slots,
// for programs whose tasks return only when a step makes them and do not
// spawn (flow.go). Task functions take no
// time; time moves only by Advance, and entries due at the same instant
// become ready in the order they were scheduled.
//
// It is written for clarity, not speed: every rule is a loop over every
// task.
package refmodel

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Behaviour says what a task's function does on each attempt.
type Behaviour struct {
	Fails      int  // the first Fails calls fail (counted over every run)
	Panics     bool // every attempt after the first Fails panics
	BlockCtx   bool // blocks until its context ends, then returns nil
	BlockDeaf  bool // blocks, ignoring its context, until released
	MaxAttempt int  // RetryPolicy.MaxAttempts (0 means 1)

	Grow Growth // spawns and a choice, before the above (spawn.go)
}

// Task is one task of a program.
type Task struct {
	ID        string
	Deps      []string
	Priority  int
	Pool      string // "" or the name of another pool
	Do        Behaviour
	Delay     time.Duration
	BaseDelay time.Duration // retry wait after the first failure, doubling
	Every     time.Duration
	Times     int
	When      Trigger
	Key       string
	Slots     int // workers its attempt takes, on pools of several workers (flow.go)
}

// Trigger mirrors coordinator.Trigger.
type Trigger int

const (
	AllSucceeded Trigger = iota
	AllDone
	AnyFailed
	NoneFailed
	NoneFailedMinOneSuccess
)

// Status mirrors coordinator.Status.
type Status int

const (
	Pending Status = iota
	Ready
	Running
	Succeeded
	Failed
	Cancelled
	Skipped
)

// Record is the model's view of one task.
type Record struct {
	Task
	Status   Status
	Attempts int
	Runs     int
	Cause    string
	Reruns   int      // times Rerun re-opened it
	Events   []string // kinds, in order: started, retrying, succeeded, ...
	History  []string // each attempt's end, in order: "a1 r1 x0 failed" (attempt, run, re-run, outcome), as History tells them
	Dropped  bool     // forgotten by retention

	unmet     int          // dependencies not yet taken into account (see Submit); 0 once started
	deps      []int        // records it depends on
	succ      []int        // records that depend on it and still hear from it
	heard     map[int]bool // dependencies whose ends are settled, as far as it has heard
	settled   bool         // final, and (if Skipped) every dependency's end settled: its class is final
	kept      int          // Skipped: 1 + the class its skip keeps since its cause was re-opened (Rerun); 0: its cause's status says it
	cancelReq bool
	released  bool
	calls     int // calls of the function, over every run
	seq       int // when it became ready
	notBefore time.Duration
	planned   time.Duration
	finalAt   time.Duration
}

type timer struct {
	due time.Duration
	seq int
	t   int
}

// Errors the model predicts for Submit.
var (
	ErrDuplicate = errors.New("duplicate")
	ErrUnknown   = errors.New("unknown dependency")
	ErrCycle     = errors.New("cycle")
	ErrClosed    = errors.New("closed")
)

// Model is the reference scheduler.
type Model struct {
	Tasks   []*Record
	ByID    map[string]int // live tasks only
	Started []string       // start order, over every pool
	StartIn []string       // the pool of each start in Started
	Now     time.Duration
	Closing bool
	Weights map[string]int  // tasks per turn of a key (KeyPolicy.Weights), 1 if not named; not nil: keys on from the start (WithKeys)
	Paused  map[string]bool // pools that start nothing
	notes   []note          // the trigger-rule cascade's worklist
	frozen  bool            // shut down with nothing running: the scheduler's loop has stopped, and retention with it

	retain  bool
	keep    time.Duration
	running map[string]int // per pool: the index of the task its worker runs
	seq     int
	timers  []timer
	tseq    int

	// Keys. Once a batch with a key is accepted, every level (pool and
	// priority) holds turns: one per key with ready tasks there, in the
	// order they came; the turn at the front hands out the key's oldest
	// ready task, and moves to the back after Weights of them. A turn
	// whose key has no ready task left stays where it is until it reaches
	// the front of its pool's first level (then it is dropped), as the
	// scheduler's entries do: a task of its key made ready meanwhile takes
	// it.
	keyed bool
	turns map[level][]*turn

	rates map[string]*bucket // rate limits by pool (flow.go)
	fl    flow               // pools of several workers, key limits, slots (flow.go)
	g     growth             // spawns, joins and branches (spawn.go)
}

type level struct {
	pool string
	prio int
}

type turn struct {
	key  string
	used int // tasks handed out in this turn
}

// New returns an empty model. With retain, final tasks are forgotten keep
// after they became final, once nothing refers to them.
func New(retain bool, keep time.Duration) *Model {
	return &Model{ByID: map[string]int{}, running: map[string]int{}, retain: retain, keep: keep,
		Paused: map[string]bool{}, turns: map[level][]*turn{}}
}

// Submit adds a batch, or returns the error Baton must return.
func (m *Model) Submit(batch []Task) error {
	if m.Closing {
		return ErrClosed
	}
	local := map[string]int{}
	for i, t := range batch {
		if _, dup := local[t.ID]; dup {
			return ErrDuplicate
		}
		if _, dup := m.ByID[t.ID]; dup || m.reserved(t.ID) != nil {
			return ErrDuplicate
		}
		local[t.ID] = i
	}
	for _, t := range batch {
		for _, d := range t.Deps {
			_, in := local[d]
			_, before := m.ByID[d]
			if !in && !before {
				return ErrUnknown
			}
		}
	}
	if cyclic(batch, local) {
		return ErrCycle
	}
	// Weights stand for WithKeys, which turns keys on at once: the empty
	// key's turns count from the first task.
	if !m.keyed && (m.Weights != nil || slices.ContainsFunc(batch, func(t Task) bool { return t.Key != "" })) {
		m.startKeys()
	}
	base := len(m.Tasks)
	for i, t := range batch {
		m.Tasks = append(m.Tasks, &Record{Task: t, notBefore: m.Now + t.Delay})
		m.ByID[t.ID] = base + i
	}
	m.settleBatch(base, len(batch))
	m.run()
	m.Forget()
	return nil
}

// settleBatch wires the n records from base on, new in the graph, to
// their dependencies, and makes them eligible, skipped or waiting as
// their dependencies' ends say.
func (m *Model) settleBatch(base, n int) {
	var ended [][2]int // (task, its dependency that had already ended)
	for i := range n {
		r := m.Tasks[base+i]
		r.heard = map[int]bool{}
		for _, d := range r.Deps {
			j := m.ByID[d]
			if slices.Contains(r.deps, j) {
				continue // named twice: one edge
			}
			r.deps = append(r.deps, j)
			dr := m.Tasks[j]
			switch {
			case dr.Status == Succeeded && r.When == AllSucceeded && !m.branched(j):
				r.heard[j] = true
			case dr.Status >= Succeeded:
				// Applied once every edge is wired, as its end would have
				// been; a Skipped one not settled goes on telling r.
				r.unmet++
				ended = append(ended, [2]int{base + i, j})
				if !dr.settled {
					dr.succ = append(dr.succ, base+i)
				}
			default:
				dr.succ = append(dr.succ, base+i)
				r.unmet++
			}
		}
	}
	idx := make([]int, n)
	for i := range n {
		idx[i] = base + i
	}
	m.applyEnded(idx, ended)
}

// applyEnded makes the tasks of idx, just wired, eligible if their
// dependencies are met, then applies the ends of the dependencies that
// had already ended (ended), as those ends would have been, a branch that
// did not choose a task last.
func (m *Model) applyEnded(idx []int, ended [][2]int) {
	for _, t := range idx {
		if r := m.Tasks[t]; r.Status == Pending && r.unmet == 0 {
			m.eligible(t)
		}
	}
	var unchosen [][2]int // skipped once the other ends are applied (notChosen)
	for _, e := range ended {
		c, j := e[0], e[1]
		if m.Tasks[j].Status == Succeeded {
			if !m.onPath(c, j) {
				unchosen = append(unchosen, e)
				continue
			}
			m.released(c, j)
			continue
		}
		m.onEnded(c, j)
		m.cascade()
		if m.Tasks[j].settled {
			m.onSettled(c, j)
			m.cascade()
		}
	}
	for _, e := range unchosen {
		m.notChosen(e[0], e[1])
	}
}

// eligible: t's dependencies have all succeeded.
func (m *Model) eligible(t int) {
	r := m.Tasks[t]
	start := max(m.Now, r.notBefore)
	if r.Every > 0 {
		r.planned = start
	}
	m.schedule(t, start)
}

// schedule makes t ready at due: now, or through a timer.
func (m *Model) schedule(t int, due time.Duration) {
	r := m.Tasks[t]
	if due > m.Now {
		r.Status = Pending
		m.tseq++
		m.timers = append(m.timers, timer{due: due, seq: m.tseq, t: t})
		return
	}
	m.ready(r)
}

// Advance moves time on by d, making timers ready instant by instant.
func (m *Model) Advance(d time.Duration) {
	target := m.Now + d
	for {
		next := -1
		for i, tm := range m.timers {
			if tm.due <= target && (next < 0 || tm.due < m.timers[next].due ||
				(tm.due == m.timers[next].due && tm.seq < m.timers[next].seq)) {
				next = i
			}
		}
		if at, ok := m.nextToken(target); ok && (next < 0 || at < m.timers[next].due) {
			m.Now = at // a rate-limited pool's token comes (flow.go)
			m.run()
			continue
		}
		if next < 0 {
			break
		}
		// Every timer of this instant becomes ready, in the order it was
		// set, before the workers pick by priority.
		m.Now = m.timers[next].due
		slices.SortStableFunc(m.timers, func(a, b timer) int { return a.seq - b.seq })
		var later []timer
		for _, tm := range m.timers {
			if tm.due == m.Now {
				m.ready(m.Tasks[tm.t])
			} else {
				later = append(later, tm)
			}
		}
		m.timers = later
		m.run()
	}
	m.Now = target
	m.Forget()
}

// root is the task to blame for r's end without success: r itself, or
// its cause (a task its own rule skipped has none: it is the root).
func (m *Model) root(r *Record) string {
	if r.Status == Skipped && r.Cause != "" {
		return r.Cause
	}
	return r.ID
}

func (m *Model) ready(r *Record) {
	r.Status = Ready
	m.seq++
	r.seq = m.seq
	if m.keyed {
		m.giveTurn(r)
	}
}

// startKeys turns keys on: the tasks ready already are the empty key's,
// each level gets its turn.
func (m *Model) startKeys() {
	m.keyed = true
	for _, r := range m.Tasks {
		if r.Status == Ready {
			m.giveTurn(r)
		}
	}
}

// giveTurn gives r's key a turn at the back of r's level if it has none.
func (m *Model) giveTurn(r *Record) {
	lv := level{r.Pool, r.Priority}
	if m.keyBlocked(r.Key) {
		return // no turn while its key is at its limit (flow.go)
	}
	if !slices.ContainsFunc(m.turns[lv], func(u *turn) bool { return u.key == r.Key }) {
		m.turns[lv] = append(m.turns[lv], &turn{key: r.Key})
	}
}

// oldest returns key's oldest ready task of level lv, or -1.
func (m *Model) oldest(lv level, key string) int {
	best := -1
	for i, r := range m.Tasks {
		if r.Status == Ready && r.Pool == lv.pool && r.Priority == lv.prio && r.Key == key && (best < 0 || r.seq < m.Tasks[best].seq) {
			best = i
		}
	}
	return best
}

// levels returns pool's levels that hold turns, best first.
func (m *Model) levels(pool string) []level {
	var lvs []level
	for lv, ts := range m.turns {
		if lv.pool == pool && len(ts) > 0 {
			lvs = append(lvs, lv)
		}
	}
	slices.SortFunc(lvs, func(a, b level) int { return a.prio - b.prio })
	return lvs
}

// nextKeyed returns the task pool's turns hand out next, dropping the
// turns without ready tasks met on the way, or -1.
func (m *Model) nextKeyed(pool string) int {
	for {
		lvs := m.levels(pool) // again after a level is emptied: passTurn may have added one
		if len(lvs) == 0 {
			return -1
		}
		lv := lvs[0]
		for len(m.turns[lv]) > 0 {
			if t := m.oldest(lv, m.turns[lv][0].key); t >= 0 {
				return t
			}
			key := m.turns[lv][0].key
			m.turns[lv] = m.turns[lv][1:]
			m.passTurn(lv, key) // at a worse level: met later in this look
		}
	}
}

// handedOut moves the turn that handed out t on.
func (m *Model) handedOut(t int) {
	r := m.Tasks[t]
	lv := level{r.Pool, r.Priority}
	u := m.turns[lv][0]
	u.used++
	w := max(1, m.Weights[r.Key])
	switch {
	case m.oldest(lv, r.Key) < 0:
		m.turns[lv] = m.turns[lv][1:]
		m.passTurn(lv, r.Key)
	case u.used >= w:
		u.used = 0
		m.turns[lv] = append(m.turns[lv][1:], u)
	}
}

// settleTurns drops, in each pool that runs and has ready tasks, the
// turns without ready tasks at the front of its first levels, as the
// scheduler does after each of its decisions.
func (m *Model) settleTurns() {
	if !m.keyed || m.Closing {
		return
	}
	pools := map[string]bool{}
	for _, r := range m.Tasks {
		if r.Status == Ready && m.looksAtTurns(r.Pool) {
			pools[r.Pool] = true
		}
	}
	for pool := range pools {
		m.nextKeyed(pool)
	}
}

// settlePool is settleTurns for one pool.
func (m *Model) settlePool(pool string) {
	if m.Closing || m.Paused[pool] || m.rates[pool] != nil { // a rate-limited pool looks only for an idle worker
		return
	}
	for _, r := range m.Tasks {
		if r.Status == Ready && r.Pool == pool {
			m.nextKeyed(pool)
			return
		}
	}
}

// Pause stops pool from starting anything; Resume lets it start again.
func (m *Model) Pause(pool string) {
	if !m.Closing {
		m.Paused[pool] = true
	}
}

// Resume lets a paused pool start its ready tasks again.
func (m *Model) Resume(pool string) {
	if m.Closing {
		return
	}
	delete(m.Paused, pool)
	m.run()
	m.Forget()
}

func (m *Model) finish(r *Record, s Status, event string) {
	wasReady := r.Status == Ready
	r.Status = s
	r.Events = append(r.Events, event)
	r.finalAt = m.Now
	r.settled = s != Skipped
	if wasReady && m.keyed {
		m.leftReady(r)
	}
	m.childEnded(r)
}

// leftReady is called when ready task r ended without a hand-out
// (cancelled, skipped): if it was its key's last ready task at its level,
// the key's turn there ends now, as the scheduler's does (unqueueKeyed),
// so that a task of the key ready later gets a turn at the back, behind
// those given meanwhile, rather than the old turn's place.
func (m *Model) leftReady(r *Record) {
	lv := level{r.Pool, r.Priority}
	if m.oldest(lv, r.Key) >= 0 {
		return
	}
	i := slices.IndexFunc(m.turns[lv], func(u *turn) bool { return u.key == r.Key })
	if i < 0 {
		return
	}
	m.turns[lv] = slices.Delete(m.turns[lv], i, i+1)
	m.passTurn(lv, r.Key)
}

// The trigger-rule cascade. A task's end without success reaches what
// waits on it by class: "failed" (its root cause failed), "cancelled", or
// "benign" (a rule upstream skipped it). A Skipped task's class is the
// worst among its dependencies' ends, so it may get worse while some of
// them still run; it is settled once every dependency's end is settled.
// Rules that tell failed from cancelled from benign (AnyFailed,
// NoneFailed) take a Skipped dependency into account only once its class
// is final: failed, or settled. The news travels as notes on a worklist,
// last in, first out.

type noteKind int

const (
	noteEnded noteKind = iota
	noteWorse
	noteSettled
)

type note struct {
	t    int
	kind noteKind
}

// class ranks an end: failed 0, cancelled 1, benign 2 (lower is worse); a
// skip whose cause was re-opened since keeps its class.
func (m *Model) class(r *Record) int {
	if r.Status == Skipped && r.kept > 0 {
		return r.kept - 1
	}
	return m.classOfID(m.root(r))
}

// classOfID ranks the end of the task of ID id as a root cause ("": a
// rule's own skip, benign).
func (m *Model) classOfID(id string) int {
	if id == "" {
		return 2
	}
	switch m.Tasks[m.ByID[id]].Status {
	case Failed:
		return 0
	case Cancelled:
		return 1
	}
	return 2
}

// blame makes Skipped rc blame cause with class c, kept if cause's
// status does not say it.
func (m *Model) blame(rc *Record, cause string, c int) {
	rc.Cause, rc.kept = cause, 0
	if c != m.classOfID(cause) {
		rc.kept = c + 1
	}
}

// endedBadly: t failed or was cancelled.
func (m *Model) endedBadly(t int) {
	m.notes = append(m.notes, note{t, noteSettled}, note{t, noteEnded})
	m.cascade()
}

func (m *Model) skip(c int, cause string, class int) {
	rc := m.Tasks[c]
	m.blame(rc, cause, class)
	m.finish(rc, Skipped, "skipped")
	m.maybeSettle(c)
	m.notes = append(m.notes, note{c, noteEnded})
}

// maybeSettle settles Skipped task c once it has heard every dependency's
// end settled.
func (m *Model) maybeSettle(c int) {
	rc := m.Tasks[c]
	if rc.Status != Skipped || rc.settled {
		return
	}
	for _, d := range rc.deps {
		if !rc.heard[d] {
			return
		}
	}
	rc.settled = true
	m.childSettled(rc)
	m.notes = append(m.notes, note{c, noteSettled})
}

func (m *Model) cascade() {
	for len(m.notes) > 0 {
		n := m.notes[len(m.notes)-1]
		m.notes = m.notes[:len(m.notes)-1]
		for _, c := range m.Tasks[n.t].succ {
			switch n.kind {
			case noteEnded:
				m.onEnded(c, n.t)
			case noteWorse:
				m.onWorse(c, n.t)
			default:
				m.onSettled(c, n.t)
			}
		}
	}
}

func (m *Model) onEnded(c, t int) {
	rc, rt := m.Tasks[c], m.Tasks[t]
	if rc.Status == Skipped {
		m.maybeWorse(c, t)
		return
	}
	switch rc.When {
	case AllSucceeded:
		if rc.Status == Pending {
			m.skip(c, m.root(rt), m.class(rt))
		}
	case AllDone:
		if rc.Status == Pending && rc.unmet > 0 {
			if rc.unmet--; rc.unmet == 0 {
				m.eligible(c)
			}
		}
	default:
		if rt.Status != Skipped || m.class(rt) == 0 {
			m.decide(c, t)
		}
	}
}

func (m *Model) onWorse(c, t int) {
	if m.Tasks[c].Status == Skipped {
		m.maybeWorse(c, t)
	} else if m.class(m.Tasks[t]) == 0 {
		m.decide(c, t)
	}
}

func (m *Model) onSettled(c, t int) {
	rc, rt := m.Tasks[c], m.Tasks[t]
	rc.heard[t] = true
	if rc.Status == Skipped {
		m.maybeSettle(c)
		return
	}
	if rc.When >= AnyFailed && rt.Status == Skipped && m.class(rt) != 0 {
		m.decide(c, t)
	}
}

// maybeWorse gives c, Skipped and not settled, the root cause of t if its
// class is worse.
func (m *Model) maybeWorse(c, t int) {
	rc, rt := m.Tasks[c], m.Tasks[t]
	if rc.settled || m.class(rt) >= m.class(rc) {
		return
	}
	m.blame(rc, m.root(rt), m.class(rt))
	m.notes = append(m.notes, note{c, noteWorse})
}

// decide applies to c (AnyFailed, NoneFailed) the end of t, whose class is
// final.
func (m *Model) decide(c, t int) {
	rc := m.Tasks[c]
	if rc.Status != Pending || rc.unmet == 0 {
		return
	}
	class := m.class(m.Tasks[t])
	switch rc.When {
	case AnyFailed:
		if class == 0 {
			rc.unmet = 0
			m.eligible(c)
		} else if rc.unmet--; rc.unmet == 0 {
			m.skip(c, "", 2)
		}
	case NoneFailed, NoneFailedMinOneSuccess:
		if class < 2 {
			m.skip(c, m.root(m.Tasks[t]), class)
		} else if rc.unmet--; rc.unmet == 0 {
			if rc.When == NoneFailedMinOneSuccess && !slices.ContainsFunc(rc.deps, func(d int) bool { return m.Tasks[d].Status == Succeeded }) {
				m.skip(c, "", 2) // none succeeded: its own rule
				return
			}
			m.eligible(c)
		}
	}
}

// released applies to c the success of its dependency t.
func (m *Model) released(c, t int) {
	rc := m.Tasks[c]
	rc.heard[t] = true
	switch rc.Status {
	case Skipped:
		m.maybeSettle(c)
		m.cascade()
	case Pending:
		if rc.unmet == 0 {
			return
		}
		if rc.unmet--; rc.unmet == 0 {
			if rc.When == AnyFailed {
				m.skip(c, "", 2)
				m.cascade()
				return
			}
			m.eligible(c)
		}
	}
}

// run dispatches ready tasks to each pool's one worker until it is busy
// with a blocking task or nothing of its pool is ready.
func (m *Model) run() {
	m.joinAll()
	if m.Closing {
		return
	}
	if m.fl.workers != nil {
		m.runFlow() // pools of several workers (flow.go)
		return
	}
	for {
		m.joinAll()
		m.Forget() // the scheduler's retention runs before each hand-out: a Spawn sees what it forgot
		best := -1
		for i, r := range m.Tasks {
			if r.Status != Ready || m.Paused[r.Pool] || !m.hasToken(r.Pool) {
				continue
			}
			if _, busy := m.running[r.Pool]; busy {
				continue
			}
			if m.keyed {
				i = m.nextKeyed(r.Pool)
				r = m.Tasks[i]
			}
			if b := m.Tasks; best < 0 || r.Priority < b[best].Priority || (r.Priority == b[best].Priority && r.seq < b[best].seq) {
				best = i
			}
		}
		if best < 0 {
			m.settleTurns()
			return
		}
		r := m.Tasks[best]
		r.Status = Running
		if m.keyed {
			m.handedOut(best)
			m.settlePool(r.Pool) // the scheduler looks again in the iteration that hands it out, before its end
		}
		m.counted(best)
		switch {
		case !m.attempt(best):
			m.outcome(best, false) // a refused Spawn or Choose is its error
		case r.calls <= r.Do.Fails || r.Do.Panics:
			m.outcome(best, false)
		case r.Do.BlockCtx || (r.Do.BlockDeaf && !r.released):
			m.running[r.Pool] = best
		default:
			m.outcome(best, true)
		}
	}
}

// counted counts the attempt of t that starts (Running already): its
// attempt and call, its event, its place in the start order.
func (m *Model) counted(t int) {
	r := m.Tasks[t]
	m.flowStart(t)
	r.Attempts++
	r.calls++
	r.Events = append(r.Events, "started")
	m.Started = append(m.Started, r.ID)
	m.StartIn = append(m.StartIn, r.Pool)
}

// outcome applies the end of t's running attempt.
func (m *Model) outcome(t int, ok bool) {
	r := m.Tasks[t]
	if m.running[r.Pool] == t {
		delete(m.running, r.Pool)
	}
	m.flowEnd(t)
	if f := m.g.fam[r]; f == nil || !f.joined { // a join's end is no attempt's
		o := "failed"
		switch {
		case r.cancelReq:
			o = "cancelled"
		case ok:
			o = "succeeded"
		}
		r.History = append(r.History, fmt.Sprintf("a%d r%d x%d %s", r.Attempts, r.Runs+1, r.Reruns, o))
	}
	if m.grown(t, ok) {
		return // it joins what it spawned
	}
	switch {
	case r.cancelReq:
		m.finish(r, Cancelled, "cancelled")
		if !m.Closing { // under Shutdown every waiting task is cancelled instead
			m.endedBadly(t)
		}
	case ok && r.Every > 0 && r.Runs+1 < r.Times:
		r.Runs++
		r.Status = Pending
		r.Events = append(r.Events, "recurred")
		r.Attempts = 0
		r.planned += r.Every
		m.schedule(t, r.planned)
	case ok:
		r.Runs++
		m.finish(r, Succeeded, "succeeded")
		m.release(t)
	case r.Attempts < max(1, r.Do.MaxAttempt):
		r.Status = Pending
		r.Events = append(r.Events, "retrying")
		wait := time.Duration(0)
		if r.BaseDelay > 0 {
			wait = r.BaseDelay << (r.Attempts - 1)
		}
		m.schedule(t, m.Now+wait)
	default:
		m.finish(r, Failed, "failed")
		m.endedBadly(t)
	}
}

// Cancel returns what Scheduler.Cancel must return.
func (m *Model) Cancel(id string) bool {
	t, ok := m.ByID[id]
	if !ok || m.Closing {
		return false
	}
	r := m.Tasks[t]
	if m.joining(t) {
		return m.cancelJoin(t)
	}
	switch r.Status {
	case Pending, Ready:
		m.timers = slices.DeleteFunc(m.timers, func(tm timer) bool { return tm.t == t })
		m.finish(r, Cancelled, "cancelled")
		m.endedBadly(t)
		m.run()
		m.Forget()
		return true
	case Running:
		if r.cancelReq {
			return false
		}
		r.cancelReq = true
		if r.Do.BlockCtx {
			m.outcome(t, true)
			m.run()
			m.Forget()
		}
		return true
	}
	return false
}

// Shutdown cancels every task not running (none is skipped: all end
// Cancelled); running ones end Cancelled when they return, at once for
// those that honour their context.
func (m *Model) Shutdown() {
	m.Closing = true
	m.timers = nil
	for _, r := range m.Tasks {
		if r.Status == Running {
			r.cancelReq = true
		}
	}
	m.shutJoins()
	for t, r := range m.Tasks {
		if (r.Status == Pending || r.Status == Ready) && !m.joining(t) {
			m.finish(r, Cancelled, "cancelled")
		}
	}
	for t, r := range m.Tasks {
		if r.Status == Running && r.Do.BlockCtx {
			m.outcome(t, true)
		}
	}
	m.joinAll()
	m.Forget()
}

// Release lets a task that ignores its context return nil.
func (m *Model) Release(id string) {
	t, ok := m.ByID[id]
	if !ok {
		m.releaseReserved(id)
		return
	}
	r := m.Tasks[t]
	r.released = true
	if m.onWorker(t) && r.Status == Running && r.Do.BlockDeaf {
		m.outcome(t, true)
		m.run()
	}
	m.Forget()
}

// Forget drops, with retention on, every final task whose time is up and
// that nothing refers to: none of its dependencies is still to end, no task
// kept lists it as a dependency, and no task kept was skipped because of
// it. Dropping one may free others.
func (m *Model) Forget() {
	if !m.retain || m.frozen {
		return
	}
	defer func() { m.frozen = m.Closing && len(m.running) == 0 && len(m.fl.out) == 0 }()
	for changed := true; changed; {
		changed = false
		for t, r := range m.Tasks {
			if r.Dropped || r.Status < Succeeded || m.Now < r.finalAt+m.keep || !m.free(t) {
				continue
			}
			changed = m.drop(t) || changed
		}
	}
	m.forgetKeys()
}

// forgetKeys drops the turns of the keys no kept task has any more: the
// scheduler forgets such a key, and a task of that name later starts a
// new one, whose turn goes to the back of its level.
func (m *Model) forgetKeys() {
	if !m.keyed {
		return
	}
	kept := map[string]bool{"": true}
	m.reservedKeys(kept)
	for _, r := range m.Tasks {
		if !r.Dropped {
			kept[r.Key] = true
		}
	}
	for lv, ts := range m.turns {
		m.turns[lv] = slices.DeleteFunc(ts, func(u *turn) bool { return !kept[u.key] })
	}
}

func (m *Model) free(t int) bool {
	r := m.Tasks[t]
	for _, d := range r.deps {
		if !m.Tasks[d].settled {
			return false // it may still tell r something
		}
	}
	if m.heldReserved(t) {
		return false
	}
	for i, o := range m.Tasks {
		if o.Dropped || m.kin(i, t) {
			continue
		}
		if slices.Contains(o.deps, t) || (o.Status == Skipped && o.Cause == r.ID && m.ByID[r.ID] == t) {
			return false
		}
	}
	return true
}

// Final reports whether every task is final.
func (m *Model) Final() bool {
	return !slices.ContainsFunc(m.Tasks, func(r *Record) bool { return r.Status < Succeeded })
}

// cyclic reports whether the batch's own dependencies form a cycle.
func cyclic(batch []Task, local map[string]int) bool {
	indeg := make([]int, len(batch))
	succ := make([][]int, len(batch))
	for i, t := range batch {
		seen := map[int]bool{}
		for _, d := range t.Deps {
			if j, ok := local[d]; ok && !seen[j] {
				seen[j] = true
				succ[j] = append(succ[j], i)
				indeg[i]++
			}
		}
	}
	var queue []int
	for i := range batch {
		if indeg[i] == 0 {
			queue = append(queue, i)
		}
	}
	for k := 0; k < len(queue); k++ {
		for _, c := range succ[queue[k]] {
			if indeg[c]--; indeg[c] == 0 {
				queue = append(queue, c)
			}
		}
	}
	return len(queue) < len(batch)
}
