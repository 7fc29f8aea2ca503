// Package readyq is the scheduler's ready queue: one FIFO per priority
// level, with O(1) push, push-front and pop and exact order within a level,
// and a small min-heap over the levels that hold entries. Lower priority
// numbers come out first. Entries are opaque uint64 values (in Baton, a
// task index and the sequence of its becoming ready, so that an entry left
// behind by a cancelled task is recognised and skipped).
//
// A Queue is not safe for concurrent use: in Baton the coordinator
// goroutine owns it. The zero value is an empty queue.
package readyq

// fifo is a growable ring of values.
type fifo struct {
	buf  []uint64
	head int
	n    int
}

func (q *fifo) grow() {
	size := max(2*len(q.buf), 16)
	buf := make([]uint64, size)
	k := copy(buf, q.buf[q.head:q.head+min(q.n, len(q.buf)-q.head)])
	copy(buf[k:], q.buf[:q.n-k])
	q.buf, q.head = buf, 0
}

func (q *fifo) pushBack(x uint64) {
	if q.n == len(q.buf) {
		q.grow()
	}
	i := q.head + q.n
	if i >= len(q.buf) {
		i -= len(q.buf)
	}
	q.buf[i] = x
	q.n++
}

func (q *fifo) pushFront(x uint64) {
	if q.n == len(q.buf) {
		q.grow()
	}
	q.head--
	if q.head < 0 {
		q.head += len(q.buf)
	}
	q.buf[q.head] = x
	q.n++
}

func (q *fifo) popFront() uint64 {
	x := q.buf[q.head]
	q.buf[q.head] = 0
	q.head++
	if q.head == len(q.buf) {
		q.head = 0
	}
	q.n--
	return x
}

// Queue holds uint64 values by priority.
type Queue struct {
	levels   map[int]*fifo
	active   []int // min-heap of priorities whose fifo is not empty
	lastPrio int   // the level last pushed to, cached: most pushes hit it
	last     *fifo
	n        int
}

// Len reports the number of values queued.
func (r *Queue) Len() int { return r.n }

func (r *Queue) level(prio int) *fifo {
	if r.last != nil && r.lastPrio == prio {
		return r.last
	}
	if r.levels == nil {
		r.levels = make(map[int]*fifo)
	}
	q := r.levels[prio]
	if q == nil {
		q = &fifo{}
		r.levels[prio] = q
	}
	r.lastPrio, r.last = prio, q
	return q
}

// Push adds x behind every value of the same priority.
func (r *Queue) Push(prio int, x uint64) {
	q := r.level(prio)
	if q.n == 0 {
		r.heapPush(prio)
	}
	q.pushBack(x)
	r.n++
}

// PushFront adds x ahead of every value of the same priority: a value
// taken out and given back keeps its place when given back in reverse.
func (r *Queue) PushFront(prio int, x uint64) {
	q := r.level(prio)
	if q.n == 0 {
		r.heapPush(prio)
	}
	q.pushFront(x)
	r.n++
}

// Peek returns the value Pop would return, without removing it.
func (r *Queue) Peek() (x uint64, prio int, ok bool) {
	if len(r.active) == 0 {
		return 0, 0, false
	}
	prio = r.active[0]
	q := r.level(prio)
	return q.buf[q.head], prio, true
}

// HeadLen returns the number of values at the lowest priority level.
func (r *Queue) HeadLen() int {
	if len(r.active) == 0 {
		return 0
	}
	return r.level(r.active[0]).n
}

// Pop removes the oldest value of the lowest priority level.
func (r *Queue) Pop() (x uint64, prio int, ok bool) {
	if len(r.active) == 0 {
		return 0, 0, false
	}
	prio = r.active[0]
	q := r.level(prio)
	x = q.popFront()
	r.n--
	if q.n == 0 {
		r.heapPop()
		if len(q.buf) > 1024 {
			q.buf, q.head = nil, 0 // give back what a burst grew
		}
	}
	return x, prio, true
}

func (r *Queue) heapPush(p int) {
	h := append(r.active, p)
	i := len(h) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if h[parent] <= h[i] {
			break
		}
		h[parent], h[i] = h[i], h[parent]
		i = parent
	}
	r.active = h
}

func (r *Queue) heapPop() {
	h := r.active
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	i := 0
	for {
		l, m := 2*i+1, i
		if l < len(h) && h[l] < h[m] {
			m = l
		}
		if l+1 < len(h) && h[l+1] < h[m] {
			m = l + 1
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	r.active = h
}
