package coordinator

// fifo is a growable ring of task indexes.
type fifo struct {
	buf  []int32
	head int
	n    int
}

func (q *fifo) grow() {
	size := 2 * len(q.buf)
	if size < 16 {
		size = 16
	}
	buf := make([]int32, size)
	k := copy(buf, q.buf[q.head:])
	copy(buf[k:], q.buf[:q.head])
	q.buf, q.head = buf, 0
}

func (q *fifo) pushBack(x int32) {
	if q.n == len(q.buf) {
		q.grow()
	}
	q.buf[(q.head+q.n)%len(q.buf)] = x
	q.n++
}

func (q *fifo) popFront() int32 {
	x := q.buf[q.head]
	q.head++
	if q.head == len(q.buf) {
		q.head = 0
	}
	q.n--
	return x
}

// readyQueue holds the ready tasks of one pool: one FIFO per priority level
// (O(1) push and pop, exact order within a level) and a small min-heap of
// the levels that are not empty. Entries of tasks cancelled while queued
// stay until popped; the caller skips them. Owned by the coordinator
// goroutine, like all of state.
type readyQueue struct {
	levels   map[int]*fifo
	active   []int // min-heap of priorities whose fifo is not empty
	lastPrio int   // cache of the last level pushed to
	last     *fifo
}

func (r *readyQueue) level(prio int) *fifo {
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

func (r *readyQueue) push(prio int, x int32) {
	q := r.level(prio)
	if q.n == 0 {
		r.heapPush(prio)
	}
	q.pushBack(x)
}

// best reports the lowest priority level holding entries.
func (r *readyQueue) best() (prio int, q *fifo, ok bool) {
	if len(r.active) == 0 {
		return 0, nil, false
	}
	prio = r.active[0]
	return prio, r.level(prio), true
}

// levelEmptied must be called when the best level's fifo becomes empty.
func (r *readyQueue) levelEmptied() { r.heapPop() }

func (r *readyQueue) heapPush(p int) {
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

func (r *readyQueue) heapPop() {
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
