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
// may be submitted again) and Shutdown at any step. Task functions take no
// time; time moves only by Advance, and entries due at the same instant
// become ready in the order they were scheduled.
//
// It is written for clarity, not speed: every rule is a loop over every
// task.
package refmodel

import (
	"errors"
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
}

// Trigger mirrors coordinator.Trigger.
type Trigger int

const (
	AllSucceeded Trigger = iota
	AllDone
	AnyFailed
	NoneFailed
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
	Events   []string // kinds, in order: started, retrying, succeeded, ...
	Dropped  bool     // forgotten by retention

	unmet     int   // dependencies not yet succeeded (under a rule: not yet final); 0 once started
	deps      []int // records it depends on
	succ      []int
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
	frozen  bool // shut down with nothing running: the scheduler's loop has stopped, and retention with it

	retain  bool
	keep    time.Duration
	running map[string]int // per pool: the index of the task its worker runs
	seq     int
	timers  []timer
	tseq    int
}

// New returns an empty model. With retain, final tasks are forgotten keep
// after they became final, once nothing refers to them.
func New(retain bool, keep time.Duration) *Model {
	return &Model{ByID: map[string]int{}, running: map[string]int{}, retain: retain, keep: keep}
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
		if _, dup := m.ByID[t.ID]; dup {
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
	base := len(m.Tasks)
	for i, t := range batch {
		m.Tasks = append(m.Tasks, &Record{Task: t, notBefore: m.Now + t.Delay})
		m.ByID[t.ID] = base + i
	}
	var skip []int
	var ended [][2]int // (task under a rule, its dependency that had already ended)
	for i := range batch {
		r := m.Tasks[base+i]
		for _, d := range r.Deps {
			j := m.ByID[d]
			if slices.Contains(r.deps, j) {
				continue // named twice: one edge
			}
			r.deps = append(r.deps, j)
			dr := m.Tasks[j]
			if final := dr.Status >= Succeeded; r.When != AllSucceeded && final {
				r.unmet++ // applied once every edge is wired
				ended = append(ended, [2]int{base + i, j})
				continue
			}
			switch dr.Status {
			case Succeeded:
			case Failed, Cancelled, Skipped:
				if r.Cause == "" {
					r.Cause = m.root(dr)
					skip = append(skip, base+i)
				}
			default:
				dr.succ = append(dr.succ, base+i)
				r.unmet++
			}
		}
	}
	for _, t := range skip {
		if r := m.Tasks[t]; r.Status < Succeeded {
			m.finish(r, Skipped, "skipped")
			m.skipDependents(t)
		}
	}
	for i := range batch {
		if r := m.Tasks[base+i]; r.Status == Pending && r.unmet == 0 {
			m.eligible(base + i)
		}
	}
	for _, e := range ended {
		if m.Tasks[e[1]].Status == Succeeded {
			m.released(e[0])
		} else if m.react(e[0], m.root(m.Tasks[e[1]])) {
			m.skipDependents(e[0])
		}
	}
	m.run()
	m.Forget()
	return nil
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
}

func (m *Model) finish(r *Record, s Status, event string) {
	r.Status = s
	r.Events = append(r.Events, event)
	r.finalAt = m.Now
}

// skipDependents tells the tasks waiting on from, which ended without
// succeeding, by each one's rule, transitively (last in, first out).
func (m *Model) skipDependents(from int) {
	work := []int{from}
	for len(work) > 0 {
		t := work[len(work)-1]
		work = work[:len(work)-1]
		root := m.root(m.Tasks[t])
		for _, c := range m.Tasks[t].succ {
			if m.react(c, root) {
				work = append(work, c)
			}
		}
	}
}

// react applies to c the end without success of one of its dependencies,
// whose root cause is root, and reports whether c was skipped.
func (m *Model) react(c int, root string) bool {
	rc := m.Tasks[c]
	if rc.Status != Pending || (rc.When != AllSucceeded && rc.unmet == 0) {
		return false
	}
	rr := m.Tasks[m.ByID[root]]
	failed, cancelled := rr.Status == Failed, rr.Status == Cancelled
	skip := func(cause string) bool {
		rc.Cause = cause
		m.finish(rc, Skipped, "skipped")
		return true
	}
	switch rc.When {
	case AllDone:
		if rc.unmet--; rc.unmet == 0 {
			m.eligible(c)
		}
	case AnyFailed:
		if failed {
			rc.unmet = 0
			m.eligible(c)
		} else if rc.unmet--; rc.unmet == 0 {
			return skip("")
		}
	case NoneFailed:
		if failed || cancelled {
			rc.unmet = 0
			return skip(root)
		}
		if rc.unmet--; rc.unmet == 0 {
			m.eligible(c)
		}
	default:
		return skip(root)
	}
	return false
}

// released applies to c the success of one of its dependencies.
func (m *Model) released(c int) {
	rc := m.Tasks[c]
	if rc.Status != Pending || rc.unmet == 0 {
		return
	}
	if rc.unmet--; rc.unmet == 0 {
		if rc.When == AnyFailed {
			rc.Cause = ""
			m.finish(rc, Skipped, "skipped")
			m.skipDependents(c)
			return
		}
		m.eligible(c)
	}
}

// run dispatches ready tasks to each pool's one worker until it is busy
// with a blocking task or nothing of its pool is ready.
func (m *Model) run() {
	if m.Closing {
		return
	}
	for {
		best := -1
		for i, r := range m.Tasks {
			if r.Status != Ready {
				continue
			}
			if _, busy := m.running[r.Pool]; busy {
				continue
			}
			if b := m.Tasks; best < 0 || r.Priority < b[best].Priority || (r.Priority == b[best].Priority && r.seq < b[best].seq) {
				best = i
			}
		}
		if best < 0 {
			return
		}
		r := m.Tasks[best]
		r.Status = Running
		r.Attempts++
		r.calls++
		r.Events = append(r.Events, "started")
		m.Started = append(m.Started, r.ID)
		m.StartIn = append(m.StartIn, r.Pool)
		switch {
		case r.calls <= r.Do.Fails || r.Do.Panics:
			m.outcome(best, false)
		case r.Do.BlockCtx || (r.Do.BlockDeaf && !r.released):
			m.running[r.Pool] = best
		default:
			m.outcome(best, true)
		}
	}
}

// outcome applies the end of t's running attempt.
func (m *Model) outcome(t int, ok bool) {
	r := m.Tasks[t]
	if m.running[r.Pool] == t {
		delete(m.running, r.Pool)
	}
	switch {
	case r.cancelReq:
		m.finish(r, Cancelled, "cancelled")
		m.skipDependents(t)
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
		for _, c := range r.succ {
			m.released(c)
		}
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
		m.skipDependents(t)
	}
}

// Cancel returns what Scheduler.Cancel must return.
func (m *Model) Cancel(id string) bool {
	t, ok := m.ByID[id]
	if !ok || m.Closing {
		return false
	}
	r := m.Tasks[t]
	switch r.Status {
	case Pending, Ready:
		m.timers = slices.DeleteFunc(m.timers, func(tm timer) bool { return tm.t == t })
		m.finish(r, Cancelled, "cancelled")
		m.skipDependents(t)
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
	for _, r := range m.Tasks {
		if r.Status == Pending || r.Status == Ready {
			m.finish(r, Cancelled, "cancelled")
		}
	}
	for t, r := range m.Tasks {
		if r.Status == Running && r.Do.BlockCtx {
			m.outcome(t, true)
		}
	}
	m.Forget()
}

// Release lets a task that ignores its context return nil.
func (m *Model) Release(id string) {
	t, ok := m.ByID[id]
	if !ok {
		return
	}
	r := m.Tasks[t]
	r.released = true
	if m.running[r.Pool] == t && r.Status == Running && r.Do.BlockDeaf {
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
	defer func() { m.frozen = m.Closing && len(m.running) == 0 }()
	for changed := true; changed; {
		changed = false
		for t, r := range m.Tasks {
			if r.Dropped || r.Status < Succeeded || m.Now < r.finalAt+m.keep || !m.free(t) {
				continue
			}
			r.Dropped = true
			delete(m.ByID, r.ID)
			changed = true
		}
	}
}

func (m *Model) free(t int) bool {
	r := m.Tasks[t]
	for _, d := range r.deps {
		if m.Tasks[d].Status < Succeeded {
			return false
		}
	}
	for _, o := range m.Tasks {
		if o.Dropped {
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
