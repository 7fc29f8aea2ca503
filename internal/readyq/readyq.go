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

import "sort"

// Ring is a growable FIFO of values, with O(1) push at either end and
// pop at the front, and an ordered insert. The zero value is empty; it is
// not safe for concurrent use.
type Ring struct {
	buf  []uint64
	head int
	n    int
}

// Len returns the number of values in r.
func (r *Ring) Len() int { return r.n }

func (r *Ring) grow() {
	size := max(2*len(r.buf), 4)
	buf := make([]uint64, size)
	k := copy(buf, r.buf[r.head:r.head+min(r.n, len(r.buf)-r.head)])
	copy(buf[k:], r.buf[:r.n-k])
	r.buf, r.head = buf, 0
}

// at returns the i-th value from the front (i < Len).
func (r *Ring) at(i int) *uint64 {
	j := r.head + i
	if j >= len(r.buf) {
		j -= len(r.buf)
	}
	return &r.buf[j]
}

// PushBack adds x behind every value.
func (r *Ring) PushBack(x uint64) {
	if r.n == len(r.buf) {
		r.grow()
	}
	i := r.head + r.n
	if i >= len(r.buf) {
		i -= len(r.buf)
	}
	r.buf[i] = x
	r.n++
}

// PushFront adds x ahead of every value.
func (r *Ring) PushFront(x uint64) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.head--
	if r.head < 0 {
		r.head += len(r.buf)
	}
	r.buf[r.head] = x
	r.n++
}

// Insert adds x before the first value v with less(x, v), behind every
// other: r's values must be in ascending order under less (as Insert and
// PushBack of ascending values keep them). At either end it costs what a
// push does; elsewhere a binary search, and it moves the values between
// x's place and the nearer end.
func (r *Ring) Insert(x uint64, less func(a, b uint64) bool) {
	switch {
	case r.n == 0 || less(x, r.buf[r.head]):
		r.PushFront(x) // the common case: a value taken from the front given back
		return
	case !less(x, *r.at(r.n - 1)):
		r.PushBack(x)
		return
	}
	i := sort.Search(r.n, func(k int) bool { return less(x, *r.at(k)) })
	if i <= r.n-i {
		r.PushFront(x) // old value k is now at k+1
		for k := range i {
			*r.at(k) = *r.at(k + 1)
		}
	} else {
		r.PushBack(x)
		for k := r.n - 1; k > i; k-- {
			*r.at(k) = *r.at(k - 1)
		}
	}
	*r.at(i) = x
}

// At returns the i-th value from the front; i must be below Len.
func (r *Ring) At(i int) uint64 { return *r.at(i) }

// Front returns the value at the front; r must not be empty.
func (r *Ring) Front() uint64 { return r.buf[r.head] }

// PopFront removes and returns the value at the front; r must not be
// empty.
func (r *Ring) PopFront() uint64 {
	x := r.buf[r.head]
	r.buf[r.head] = 0
	r.head++
	if r.head == len(r.buf) {
		r.head = 0
	}
	r.n--
	return x
}

// Queue holds uint64 values by priority.
type Queue struct {
	levels   map[int]*Ring
	active   []int // min-heap of priorities whose fifo is not empty
	lastPrio int   // the level last pushed to, cached: most pushes hit it
	last     *Ring
	n        int
}

// Len reports the number of values queued.
func (r *Queue) Len() int { return r.n }

func (r *Queue) level(prio int) *Ring {
	if r.last != nil && r.lastPrio == prio {
		return r.last
	}
	if r.levels == nil {
		r.levels = make(map[int]*Ring)
	}
	q := r.levels[prio]
	if q == nil {
		q = &Ring{}
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
	q.PushBack(x)
	r.n++
}

// PushFront adds x ahead of every value of the same priority: a value
// taken out and given back keeps its place when given back in reverse.
func (r *Queue) PushFront(prio int, x uint64) {
	q := r.level(prio)
	if q.n == 0 {
		r.heapPush(prio)
	}
	q.PushFront(x)
	r.n++
}

// Insert adds x to level prio at its place in the order less gives
// (Ring.Insert): the level's values must be in ascending order under
// less, as Push of ascending values and Insert keep them. A value taken
// out and given back with Insert finds its place among the values taken
// out before or after it, whatever the order they come back in.
func (r *Queue) Insert(prio int, x uint64, less func(a, b uint64) bool) {
	q := r.level(prio)
	if q.n == 0 {
		r.heapPush(prio)
	}
	q.Insert(x, less)
	r.n++
}

// EachLevel calls f with each level that holds values, in no order. f
// must not change the queue.
func (r *Queue) EachLevel(f func(prio int, level *Ring)) {
	for prio, q := range r.levels {
		if q.n > 0 {
			f(prio, q)
		}
	}
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
	x = q.PopFront()
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
