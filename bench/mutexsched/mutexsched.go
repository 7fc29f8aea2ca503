// Package mutexsched is the baseline Baton is measured against: the classic
// scheduler design, written the way it usually is. All state sits behind one
// sync.Mutex and a sync.Cond; a worker locks, pops the ready queue, unlocks,
// runs the task, locks again to record the outcome, decrements its
// children's unmet counts, pushes the released ones and Broadcasts after
// every change. Failed attempts with attempts left go to a delayed heap.
//
// The ready queue is pluggable so that the comparison can separate the
// design from the data structure: NewHeap uses a binary heap of (priority,
// seq, id), as such schedulers usually do; NewFIFO uses Baton's own ready
// queue (package readyq).
//
// It exists for benchmarks: it takes time from time.Now and has none of
// Baton's validation, events or cancellation.
package mutexsched

import (
	"sync"
	"time"

	"github.com/batonhq/baton/internal/readyq"
)

// Spec is one task. Deps name earlier tasks by index.
type Spec struct {
	Run         func() error
	Deps        []int32
	Priority    int
	MaxAttempts int           // 0 means 1
	BaseDelay   time.Duration // doubled per failure
	Delay       time.Duration // not started before submission + Delay
}

type task struct {
	run      func() error
	prio     int
	unmet    int32
	succ     []int32
	attempts int
	max      int
	base     time.Duration
	done     bool
}

type queue interface {
	push(prio int, seq uint64, id int32)
	pop() (int32, bool)
	len() int
}

// Scheduler is the mutex design.
type Scheduler struct {
	mu      sync.Mutex
	cond    *sync.Cond
	tasks   []task    // guarded by mu
	ready   queue     // guarded by mu
	delayed delayHeap // guarded by mu
	seq     uint64    // guarded by mu
	open    int       // guarded by mu: tasks not finished
	paused  bool      // guarded by mu
	closed  bool      // guarded by mu
	timer   *time.Timer
	wg      sync.WaitGroup
}

// NewHeap starts a scheduler with a binary-heap ready queue and n workers.
func NewHeap(workers int) *Scheduler { return start(workers, &binHeap{}) }

// NewFIFO starts a scheduler with Baton's ready queue and n workers.
func NewFIFO(workers int) *Scheduler { return start(workers, &fifoQueue{}) }

func start(workers int, q queue) *Scheduler {
	s := &Scheduler{ready: q}
	s.cond = sync.NewCond(&s.mu)
	s.wg.Add(workers)
	for range workers {
		go s.work()
	}
	return s
}

// Pause stops workers from taking tasks until Resume.
func (s *Scheduler) Pause() {
	s.mu.Lock()
	s.paused = true
	s.mu.Unlock()
}

// Resume lets workers take tasks again.
func (s *Scheduler) Resume() {
	s.mu.Lock()
	s.paused = false
	s.cond.Broadcast()
	s.mu.Unlock()
}

// Submit adds tasks; their Deps index the tasks submitted before, this batch
// included, counting from 0 for the first task ever submitted.
func (s *Scheduler) Submit(specs []Spec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	base := int32(len(s.tasks))
	for i, sp := range specs {
		max := sp.MaxAttempts
		if max == 0 {
			max = 1
		}
		s.tasks = append(s.tasks, task{run: sp.Run, prio: sp.Priority, max: max, base: sp.BaseDelay})
		id := base + int32(i)
		for _, d := range sp.Deps {
			if !s.tasks[d].done {
				s.tasks[d].succ = append(s.tasks[d].succ, id)
				s.tasks[id].unmet++
			}
		}
		s.open++
		if s.tasks[id].unmet == 0 {
			if sp.Delay > 0 {
				s.delay(id, now.Add(sp.Delay))
			} else {
				s.push(id)
			}
		}
	}
	s.cond.Broadcast()
}

func (s *Scheduler) push(id int32) {
	s.seq++
	s.ready.push(s.tasks[id].prio, s.seq, id)
}

func (s *Scheduler) delay(id int32, due time.Time) {
	s.delayed.push(delayed{due: due, id: id})
	if s.delayed.items[0].id == id {
		d := time.Until(due)
		if s.timer == nil {
			s.timer = time.AfterFunc(d, func() {
				s.mu.Lock()
				s.cond.Broadcast()
				s.mu.Unlock()
			})
		} else {
			s.timer.Reset(d)
		}
	}
}

// Wait blocks until every submitted task has finished.
func (s *Scheduler) Wait() {
	s.mu.Lock()
	for s.open > 0 {
		s.cond.Wait()
	}
	s.mu.Unlock()
}

// Close stops the workers and waits for them.
func (s *Scheduler) Close() {
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	if s.timer != nil {
		s.timer.Stop()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *Scheduler) work() {
	defer s.wg.Done()
	s.mu.Lock()
	for {
		if s.closed {
			s.mu.Unlock()
			return
		}
		if len(s.delayed.items) > 0 {
			now := time.Now()
			for len(s.delayed.items) > 0 && !s.delayed.items[0].due.After(now) {
				s.push(s.delayed.pop().id)
			}
			if len(s.delayed.items) > 0 {
				s.timer.Reset(s.delayed.items[0].due.Sub(now))
			}
		}
		if s.paused || s.ready.len() == 0 {
			s.cond.Wait()
			continue
		}
		id, _ := s.ready.pop()
		t := &s.tasks[id]
		t.attempts++
		run := t.run
		s.mu.Unlock()

		err := run()

		s.mu.Lock()
		t = &s.tasks[id]
		switch {
		case err == nil:
			t.done = true
			s.open--
			for _, c := range t.succ {
				if s.tasks[c].unmet--; s.tasks[c].unmet == 0 {
					s.push(c)
				}
			}
		case t.attempts < t.max:
			s.delay(id, time.Now().Add(t.base<<(t.attempts-1)))
		default: // failed: this baseline does not model skipping
			t.done = true
			s.open--
		}
		s.cond.Broadcast()
	}
}

// binHeap is a binary min-heap of (priority, seq, id).
type binHeap struct{ items []heapItem }

type heapItem struct {
	prio int
	seq  uint64
	id   int32
}

func (h *binHeap) less(i, j int) bool {
	a, b := &h.items[i], &h.items[j]
	return a.prio < b.prio || (a.prio == b.prio && a.seq < b.seq)
}

func (h *binHeap) len() int { return len(h.items) }

func (h *binHeap) push(prio int, seq uint64, id int32) {
	h.items = append(h.items, heapItem{prio, seq, id})
	i := len(h.items) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h.items[i], h.items[p] = h.items[p], h.items[i]
		i = p
	}
}

func (h *binHeap) pop() (int32, bool) {
	if len(h.items) == 0 {
		return 0, false
	}
	top := h.items[0].id
	last := len(h.items) - 1
	h.items[0] = h.items[last]
	h.items = h.items[:last]
	i := 0
	for {
		l, m := 2*i+1, i
		if l < last && h.less(l, m) {
			m = l
		}
		if l+1 < last && h.less(l+1, m) {
			m = l + 1
		}
		if m == i {
			break
		}
		h.items[i], h.items[m] = h.items[m], h.items[i]
		i = m
	}
	return top, true
}

// fifoQueue adapts Baton's ready queue.
type fifoQueue struct{ q readyq.Queue }

func (f *fifoQueue) push(prio int, _ uint64, id int32) { f.q.Push(prio, uint64(id)) }
func (f *fifoQueue) len() int                          { return f.q.Len() }
func (f *fifoQueue) pop() (int32, bool) {
	id, _, ok := f.q.Pop()
	return int32(id), ok
}

type delayed struct {
	due time.Time
	id  int32
}

// delayHeap is a binary min-heap by due time.
type delayHeap struct{ items []delayed }

func (h *delayHeap) push(d delayed) {
	h.items = append(h.items, d)
	i := len(h.items) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.items[i].due.Before(h.items[p].due) {
			break
		}
		h.items[i], h.items[p] = h.items[p], h.items[i]
		i = p
	}
}

func (h *delayHeap) pop() delayed {
	top := h.items[0]
	last := len(h.items) - 1
	h.items[0] = h.items[last]
	h.items = h.items[:last]
	i := 0
	for {
		l, m := 2*i+1, i
		if l < last && h.items[l].due.Before(h.items[m].due) {
			m = l
		}
		if l+1 < last && h.items[l+1].due.Before(h.items[m].due) {
			m = l + 1
		}
		if m == i {
			break
		}
		h.items[i], h.items[m] = h.items[m], h.items[i]
		i = m
	}
	return top
}
