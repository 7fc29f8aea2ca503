package coordinator

import (
	"fmt"

	"github.com/batonhq/baton/internal/readyq"
)

// WithMaxBatch caps the attempts a worker's lane holds at n; 1 turns
// look-ahead and fusion off, so that one worker runs tasks in exactly the
// order a sequential model would. only for testing
func WithMaxBatch(n int) Option {
	return func(c *config) error {
		c.testMaxBatch = n
		return nil
	}
}

// WithQueueCheck makes the scheduler check its ready queues at the end of
// every coordinator iteration and tell report each violation found
// (queueViolation). only for testing: it costs a pass over every task.
func WithQueueCheck(report func(violation string)) Option {
	return func(c *config) error {
		c.testCheck = func(s *state) {
			if v := s.queueViolation(); v != "" {
				report(v)
			}
		}
		return nil
	}
}

// queueViolation returns what breaks the ready queues' invariants, or "":
// only Pending tasks wait in the delayed set; every Ready task has exactly one live entry (one that names its current
// rseq), the live counts (readyLive without keys, each key queue's live)
// count the live entries, and each level (without keys) and each key
// queue holds its task entries in the order they became ready
// (olderEntry), so that a task taken back and put back (requeue) finds
// its place.
func (s *state) queueViolation() string {
	live := make(map[int32]int)
	liveEntry := func(e uint64) (int32, bool) {
		t := int32(uint32(e))
		return t, s.hot[t].status == Ready && s.hot[t].rseq == uint32(e>>32)
	}
	inOrder := func(r *readyq.Ring, what string) (n int, v string) {
		for k := range r.Len() {
			e := r.At(k)
			if e&turnBit != 0 {
				continue // a key queue's turn: turns take their own order
			}
			if k > 0 && r.At(k-1)&turnBit == 0 && olderEntry(e, r.At(k-1)) {
				return n, fmt.Sprintf("%s: entry %d (task %q) is older than the one before it", what, k, s.key(int32(uint32(e))))
			}
			if t, ok := liveEntry(e); ok {
				live[t]++
				n++
			}
		}
		return n, ""
	}
	for pi := range s.pools {
		p := &s.pools[pi]
		n := 0
		var v string
		p.ready.EachLevel(func(prio int, r *readyq.Ring) {
			k, lv := inOrder(r, fmt.Sprintf("pool %d level %d", pi, prio))
			n += k
			if v == "" {
				v = lv
			}
		})
		if v != "" {
			return v
		}
		if !s.keyed && n != p.readyLive {
			return fmt.Sprintf("pool %d: readyLive %d, live entries %d", pi, p.readyLive, n)
		}
	}
	for qi := range s.kqs {
		q := &s.kqs[qi]
		n, v := inOrder(&q.tasks, fmt.Sprintf("key queue %d", qi))
		if v != "" {
			return v
		}
		if int32(n) != q.live {
			return fmt.Sprintf("key queue %d: live %d, live entries %d", qi, q.live, n)
		}
	}
	if s.retain && (len(s.finalized) > 0 || len(s.settledEnds) > 0) && !(s.closing && s.dur != nil) {
		// An iteration answers its watches (Batch.Wait, Wait) after settling
		// every end it applied: with WithRetention(0) a batch's tasks are
		// forgotten by then, and their IDs may be submitted again.
		return fmt.Sprintf("retention: %d final tasks and %d ends not settled at the end of an iteration", len(s.finalized), len(s.settledEnds))
	}
	for pi := range s.pools {
		p, idle := &s.pools[pi], 0
		for _, li := range p.lanes {
			if ls := &s.lanes[li]; !ls.open && ls.holder == 0 {
				idle++
			}
		}
		if idle != p.idle {
			return fmt.Sprintf("pool %d: idle %d, lanes closed and not held %d", pi, p.idle, idle)
		}
	}
	for t := range s.hot {
		if s.hot[t].status != dispatched {
			continue
		}
		ls, seq := s.locate(s.tasks[t].link)
		if int32(seq-ls.applied) < 0 || int32(ls.n-seq) <= 0 || ls.l.Task(seq) != int32(t) {
			return fmt.Sprintf("task %q is dispatched at lane %d item %d, which holds task %d (applied %d, n %d)",
				s.key(int32(t)), ls.l.ID, seq, ls.l.Task(seq), ls.applied, ls.n)
		}
	}
	for t := range s.hot {
		if c := live[int32(t)]; c > 1 || s.hot[t].status == Ready && c != 1 {
			return fmt.Sprintf("task %q (%v) has %d live ready entries", s.key(int32(t)), s.hot[t].status, c)
		}
		if x := s.tasks[t].x; x != nil && x.inWheel && s.hot[t].status != Pending {
			// fire would make it ready whatever it is now: a final task
			// would start again.
			return fmt.Sprintf("task %q (%v) is in the delayed set", s.key(int32(t)), s.hot[t].status)
		}
	}
	if s.keyed {
		return s.keyViolation()
	}
	return ""
}

// keyViolation returns what breaks the key queues' invariants, or "":
// each Ready task's live entry is in its own key queue (queueOf); a
// limited key's ready count in each pool is its queues' there, and its
// heap of queues with ready tasks holds exactly those, with their
// places; each pool's readyLive counts the live tasks of the keys not at
// their limit.
func (s *state) keyViolation() string {
	for qi := range s.kqs {
		q := &s.kqs[qi]
		for k := range q.tasks.Len() {
			e := q.tasks.At(k)
			t := int32(uint32(e))
			if s.hot[t].status == Ready && s.hot[t].rseq == uint32(e>>32) && s.queueOf(t) != int32(qi) {
				return fmt.Sprintf("task %q's live entry is in key queue %d, its queue is %d", s.key(t), qi, s.queueOf(t))
			}
		}
	}
	readyLive := make([]int, len(s.pools))
	for kn := range s.keys {
		k := &s.keys[kn]
		if k.name == "" && kn != 0 {
			continue // forgotten, free
		}
		byPool := make([]int32, len(s.pools))
		inHeap := map[int32]bool{}
		for _, qi := range k.queues {
			q := &s.kqs[qi]
			byPool[q.pool] += q.live
			if !k.blocked {
				readyLive[q.pool] += int(q.live)
			}
			if k.limit > 0 && (q.live > 0) != (q.hpos >= 0) {
				return fmt.Sprintf("key %q queue %d: live %d, place in its heap %d", k.name, qi, q.live, q.hpos)
			}
		}
		if k.limit == 0 {
			continue
		}
		for i := range k.pools {
			kp := &k.pools[i]
			if kp.live != byPool[i] {
				return fmt.Sprintf("key %q pool %d: live %d, its queues' %d", k.name, i, kp.live, byPool[i])
			}
			for pos, qi := range kp.best {
				if s.kqs[qi].hpos != int32(pos) || inHeap[qi] || s.kqs[qi].live == 0 {
					return fmt.Sprintf("key %q pool %d: heap place %d holds queue %d (its place %d, live %d)", k.name, i, pos, qi, s.kqs[qi].hpos, s.kqs[qi].live)
				}
				inHeap[qi] = true
			}
		}
	}
	for pi := range s.pools {
		if s.pools[pi].readyLive != readyLive[pi] {
			return fmt.Sprintf("pool %d: readyLive %d, its key queues' live tasks %d", pi, s.pools[pi].readyLive, readyLive[pi])
		}
	}
	return ""
}
