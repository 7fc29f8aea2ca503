// Package refmodel is a deliberately simple, sequential model of Baton's
// scheduling rules, used only by tests: the model-based property test runs
// the same random program on a Scheduler and on a Model and compares them
// after every step.
//
// The model covers one worker with batches of one (so its start order is
// exact), priorities, dependencies, skips with causes, retries and their
// waits, delays, recurring tasks at a fixed rate, cancellation of waiting
// and running tasks, and tasks that block until cancelled or until
// released. Task functions take no time; time moves only by Advance, and
// entries due at the same instant become ready in the order they were
// scheduled.
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
	Do        Behaviour
	Delay     time.Duration
	BaseDelay time.Duration // retry wait after the first failure, doubling
	Every     time.Duration
	Times     int
}

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

	unmet     int
	succ      []int
	cancelReq bool
	released  bool
	calls     int // calls of the function, over every run
	seq       int // when it became ready
	notBefore time.Duration
	planned   time.Duration
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
)

// Model is the reference scheduler.
type Model struct {
	Tasks   []*Record
	ByID    map[string]int
	Started []string // start order
	Now     time.Duration
	running int // index of the running task, or -1
	seq     int
	timers  []timer
	tseq    int
}

// New returns an empty model.
func New() *Model { return &Model{ByID: map[string]int{}, running: -1} }

// Submit adds a batch, or returns the error Baton must return.
func (m *Model) Submit(batch []Task) error {
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
	for i := range batch {
		r := m.Tasks[base+i]
		for _, d := range r.Deps {
			dr := m.Tasks[m.ByID[d]]
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
			m.skipDependents(t, r.Cause)
		}
	}
	for i := range batch {
		if r := m.Tasks[base+i]; r.Status == Pending && r.unmet == 0 {
			m.eligible(base + i)
		}
	}
	m.run()
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
		// set, before the worker picks by priority.
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
}

func (m *Model) root(r *Record) string {
	if r.Status == Skipped {
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
}

func (m *Model) skipDependents(from int, cause string) {
	work := []int{from}
	for len(work) > 0 {
		t := work[len(work)-1]
		work = work[:len(work)-1]
		for _, c := range m.Tasks[t].succ {
			if rc := m.Tasks[c]; rc.Status == Pending {
				rc.Cause = cause
				m.finish(rc, Skipped, "skipped")
				work = append(work, c)
			}
		}
	}
}

// run dispatches ready tasks to the one worker until it is busy with a
// blocking task or nothing is ready.
func (m *Model) run() {
	for m.running < 0 {
		best := -1
		for i, r := range m.Tasks {
			if r.Status != Ready {
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
		switch {
		case r.calls <= r.Do.Fails || r.Do.Panics:
			m.outcome(best, false)
		case r.Do.BlockCtx || (r.Do.BlockDeaf && !r.released):
			m.running = best
		default:
			m.outcome(best, true)
		}
	}
}

// outcome applies the end of t's running attempt.
func (m *Model) outcome(t int, ok bool) {
	r := m.Tasks[t]
	if m.running == t {
		m.running = -1
	}
	switch {
	case r.cancelReq:
		m.finish(r, Cancelled, "cancelled")
		m.skipDependents(t, r.ID)
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
			if rc := m.Tasks[c]; rc.Status == Pending {
				if rc.unmet--; rc.unmet == 0 {
					m.eligible(c)
				}
			}
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
		m.skipDependents(t, r.ID)
	}
}

// Cancel returns what Scheduler.Cancel must return.
func (m *Model) Cancel(id string) bool {
	t, ok := m.ByID[id]
	if !ok {
		return false
	}
	r := m.Tasks[t]
	switch r.Status {
	case Pending, Ready:
		m.timers = slices.DeleteFunc(m.timers, func(tm timer) bool { return tm.t == t })
		m.finish(r, Cancelled, "cancelled")
		m.skipDependents(t, r.ID)
		m.run()
		return true
	case Running:
		if r.cancelReq {
			return false
		}
		r.cancelReq = true
		if r.Do.BlockCtx {
			m.outcome(t, true)
			m.run()
		}
		return true
	}
	return false
}

// Release lets a task that ignores its context return nil.
func (m *Model) Release(id string) {
	t, ok := m.ByID[id]
	if !ok {
		return
	}
	r := m.Tasks[t]
	r.released = true
	if m.running == t && r.Do.BlockDeaf {
		m.outcome(t, true)
		m.run()
	}
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
		for _, d := range t.Deps {
			if j, ok := local[d]; ok {
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
