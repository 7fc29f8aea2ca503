package coordinator

// Keys (Task.Key): a limit on the attempts of one key handed out at once,
// across pools, and turns between keys within a priority level.
//
// Once a scheduler has keys (WithKeys, or a task with a Key), every task
// that becomes ready goes to its key's queue for its pool and level (a
// task without a key to the empty key's), and the pool's ready queue holds
// turns: one entry per key queue with ready tasks, which hands out up to
// the key's weight of tasks (the oldest first) and then goes to the back
// of its level. A key with 100,000 ready tasks therefore delays a key
// that becomes ready later by at most one turn per hand-out, not by its
// 100,000. A key at its limit has no turn: its tasks are not counted
// ready for dispatch (they are not better work waiting), and it gets its
// turn back, at the back of its best level in each pool where it has
// ready tasks, when an attempt of it ends; a worse level of the key gets
// its turn when it becomes the key's best there (a pool hands out its
// best level first, so until then that turn could not be taken), or when
// a task of the key becomes ready in it. So reaching the limit and coming
// back below it cost O(pools), not O(levels): one key at its limit with a
// task at each of 16,000 levels made every hand-out and every end walk
// them all.
// An attempt counts against its key from its hand-out (its start is then
// near, on an idle worker, or behind the attempts its lane runs) to the
// application of its end; so an item of a limited key is reported at once
// when it ends, and never fused behind its dependency.

import "github.com/batonhq/baton/internal/readyq"

// turnBit marks a ready-queue entry that is a key queue's turn: the low
// word holds the queue's index, the high word the turn's sequence (a
// task's entry holds its index, below 1<<31, and its rseq).
const turnBit = 1 << 31

// keyState is one key of the scheduler (the empty key is number 0).
type keyState struct {
	name    string
	limit   int32   // attempts handed out at once, all pools (0: no limit)
	weight  int32   // tasks per turn, at least 1
	out     int32   // attempts handed out whose ends are not yet applied
	refs    int32   // records with this key (not counted for the empty key, never forgotten)
	blocked bool    // out has reached limit: its queues have no turn
	queues  []int32 // its queues, by index in state.kqs

	// A limited key's (limit > 0) ready tasks by pool. epoch ends every
	// turn its queues hold at once when it reaches its limit (a queue's
	// turn is live only while its epoch is the key's).
	epoch uint32
	pools []keyPool // by pool index; nil until the key has a queue
}

// keyPool is a limited key's ready tasks in one pool.
type keyPool struct {
	live int32   // Ready tasks, over its queues there
	best []int32 // its queues there with ready tasks: a min-heap by level (indexes into state.kqs)
}

// keyQueue is a key's ready tasks of one pool and level, oldest first.
type keyQueue struct {
	key   int32
	pool  uint16
	prio  int32
	tasks readyq.Ring // entries as the ready queue's: rseq<<32 | task, in ready order (olderEntry); stale ones are skipped
	live  int32       // Ready tasks in it
	turn  uint32      // the sequence of its turn in the pool's ready queue (0: it has none)
	used  int32       // tasks handed out in the current turn
	epoch uint32      // a limited key's: the key's epoch when the queue got its turn (hasTurn)
	hpos  int32       // a limited key's: its place in keyPool.best while it has ready tasks, else -1
}

type kqKey struct {
	key  int32
	pool uint16
	prio int32
}

// keyTable is the state's keys; zero until a scheduler has keys.
type keyTable struct {
	keyed   bool             // tasks go through key queues
	keyOf   []int32          // per task (parallel to tasks once keyed): its key
	keys    []keyState       // by number; 0 is the empty key
	keyIDs  map[string]int32 // by name
	kqs     []keyQueue
	kqIndex map[kqKey]int32
	turnSeq uint32
	policy  KeyPolicy // WithKeys: limits and weights of the keys to come

	// The task popTurn handed out last and its queue's used count before
	// it: unpop puts the turn back as it was.
	popped     int32
	poppedUsed int32

	// Keys no record names any more are forgotten (retention dropped their
	// tasks): their numbers and queues are reused, so that keys that come
	// and go (a customer, a host) do not grow the table for ever.
	freeKeys []int32
	freeKQs  []int32
}

// keyNumber returns the number of key name, adding it if new.
func (s *state) keyNumber(name string) int32 {
	kt := &s.keyTable
	if k, ok := kt.keyIDs[name]; ok {
		return k
	}
	if kt.keyIDs == nil {
		kt.keyIDs = map[string]int32{}
	}
	k := int32(len(kt.keys))
	if n := len(kt.freeKeys); n > 0 {
		k, kt.freeKeys = kt.freeKeys[n-1], kt.freeKeys[:n-1]
	}
	ks := keyState{name: name, weight: 1}
	if name != "" {
		ks.limit = int32(kt.policy.Limit)
		if l, ok := kt.policy.Limits[name]; ok {
			ks.limit = int32(l)
		}
	}
	if w, ok := kt.policy.Weights[name]; ok {
		ks.weight = int32(w)
	}
	if int(k) == len(kt.keys) {
		kt.keys = append(kt.keys, ks)
	} else {
		kt.keys[k] = ks
	}
	kt.keyIDs[name] = k
	return k
}

// keyTask numbers task t's key, name, and counts t against it.
func (s *state) keyTask(t int32, name string) {
	k := s.keyNumber(name)
	s.keyOf[t] = k
	if k != 0 {
		s.keys[k].refs++
	}
}

// unkey is called when record t is dropped: its key forgets it, and a key
// no record names and no attempt holds is forgotten.
func (s *state) unkey(t int32) {
	if !s.keyed {
		return
	}
	k := s.keyOf[t]
	s.keyOf[t] = 0
	if k == 0 {
		return
	}
	ks := &s.keys[k]
	if ks.refs--; ks.refs == 0 && ks.out == 0 {
		s.forgetKey(k)
	}
}

// forgetKey frees key k and its queues for reuse. Its queues hold no live
// task (no record names the key); entries of theirs left in the ready
// queues are stale (their turn sequences match no queue's turn again).
func (s *state) forgetKey(k int32) {
	ks := &s.keys[k]
	for _, qi := range ks.queues {
		q := &s.kqs[qi]
		delete(s.kqIndex, kqKey{q.key, q.pool, q.prio})
		*q = keyQueue{}
		s.freeKQs = append(s.freeKQs, qi)
	}
	delete(s.keyIDs, ks.name)
	s.keys[k] = keyState{}
	s.freeKeys = append(s.freeKeys, k)
}

// startKeys turns keys on: from now on every task that becomes ready goes
// through a key queue. Entries already in the ready queues stay there.
func (s *state) startKeys() {
	if s.keyed {
		return
	}
	s.keyed = true
	s.keyNumber("")
	if n := len(s.tasks); len(s.keyOf) < n {
		s.keyOf = append(s.keyOf, make([]int32, n-len(s.keyOf))...)
	}
	// What is ready already goes to the empty key's queues, in order.
	var entries []uint64
	for i := range s.pools {
		p := &s.pools[i]
		entries = entries[:0]
		for {
			e, _, ok := p.ready.Pop()
			if !ok {
				break
			}
			if t := int32(uint32(e)); s.hot[t].status == Ready && s.hot[t].rseq == uint32(e>>32) {
				entries = append(entries, e)
			}
		}
		p.readyLive = 0
		for _, e := range entries {
			s.pushKeyed(int32(uint32(e)), e, false)
		}
	}
}

// queueOf returns the index of t's key queue for its pool and level.
func (s *state) queueOf(t int32) int32 {
	h := &s.hot[t]
	kk := kqKey{s.keyOf[t], h.pool, h.prio}
	if q, ok := s.kqIndex[kk]; ok {
		return q
	}
	if s.kqIndex == nil {
		s.kqIndex = map[kqKey]int32{}
	}
	q := int32(len(s.kqs))
	if n := len(s.freeKQs); n > 0 {
		q, s.freeKQs = s.freeKQs[n-1], s.freeKQs[:n-1]
		s.kqs[q] = keyQueue{key: kk.key, pool: kk.pool, prio: kk.prio, hpos: -1}
	} else {
		s.kqs = append(s.kqs, keyQueue{key: kk.key, pool: kk.pool, prio: kk.prio, hpos: -1})
	}
	s.kqIndex[kk] = q
	s.keys[kk.key].queues = append(s.keys[kk.key].queues, q)
	return q
}

// pushKeyed queues ready task t (entry e) in its key queue, at the back or
// (taken back) at the front, and gives the queue a turn if it has none.
func (s *state) pushKeyed(t int32, e uint64, front bool) {
	qi := s.queueOf(t)
	q := &s.kqs[qi]
	if front {
		q.tasks.Insert(e, olderEntry) // back among the tasks it became ready with
	} else {
		q.tasks.PushBack(e)
	}
	q.live++
	k := &s.keys[q.key]
	if k.limit > 0 {
		s.limitedReady(k, qi, 1)
	}
	if k.blocked {
		return // no turn, not counted ready, until an attempt of the key ends
	}
	s.pools[q.pool].readyLive++
	if front {
		s.giveTurn(qi, true) // back where it was: the next turn of its level
	} else if !s.hasTurn(q) {
		q.used = 0
		s.giveTurn(qi, false)
	}
}

// hasTurn reports whether queue q holds a live turn.
func (s *state) hasTurn(q *keyQueue) bool {
	return q.turn != 0 && q.epoch == s.keys[q.key].epoch
}

// limitedReady counts d ready tasks more (1) or fewer (-1) in queue qi of
// limited key k, and keeps k's queues with ready tasks in their heap.
func (s *state) limitedReady(k *keyState, qi int32, d int32) {
	q := &s.kqs[qi]
	if k.pools == nil {
		k.pools = make([]keyPool, len(s.pools))
	}
	kp := &k.pools[q.pool]
	kp.live += d
	switch {
	case q.live > 0 && q.hpos < 0:
		s.kqHeapPush(kp, qi)
	case q.live == 0 && q.hpos >= 0:
		s.kqHeapRemove(kp, q.hpos)
	}
}

// turnEnded is called when queue q's turn ended because it has no ready
// task left: a limited key's best queue with ready tasks in that pool
// gets a turn if it has none (see the top of this file).
func (s *state) turnEnded(q *keyQueue) {
	q.turn, q.used = 0, 0
	k := &s.keys[q.key]
	if k.limit == 0 || k.blocked || k.pools == nil {
		return
	}
	if kp := &k.pools[q.pool]; len(kp.best) > 0 {
		if b := kp.best[0]; !s.hasTurn(&s.kqs[b]) {
			s.kqs[b].used = 0
			s.giveTurn(b, false)
		}
	}
}

// giveTurn puts a turn of queue qi in its pool's ready queue, replacing
// any it had.
func (s *state) giveTurn(qi int32, front bool) {
	q := &s.kqs[qi]
	s.turnSeq++
	if s.turnSeq == 0 {
		s.turnSeq = 1
	}
	q.turn, q.epoch = s.turnSeq, s.keys[q.key].epoch
	e := uint64(q.turn)<<32 | turnBit | uint64(uint32(qi))
	p := &s.pools[q.pool]
	if front {
		p.ready.PushFront(int(q.prio), e)
	} else {
		p.ready.Push(int(q.prio), e)
	}
}

// liveTurn returns the queue of turn entry e if the turn is live, with
// its oldest live task.
func (s *state) liveTurn(e uint64) (*keyQueue, int32, bool) {
	qi := int32(uint32(e) &^ turnBit)
	q := &s.kqs[qi]
	if q.turn != uint32(e>>32) {
		return nil, 0, false
	}
	if q.epoch != s.keys[q.key].epoch {
		q.turn, q.used = 0, 0 // ended as its key reached its limit
		return nil, 0, false
	}
	for q.tasks.Len() > 0 {
		te := q.tasks.Front()
		t := int32(uint32(te))
		if s.hot[t].status == Ready && s.hot[t].rseq == uint32(te>>32) {
			return q, t, true
		}
		q.tasks.PopFront() // stale: no longer ready (cancelled, paused, or ready again since under a new rseq)
	}
	s.turnEnded(q) // nothing left
	return nil, 0, false
}

// turnHead is the task turn entry e would hand out next.
func (s *state) turnHead(e uint64) (int32, bool) {
	_, t, ok := s.liveTurn(e)
	return t, ok
}

// popTurn hands out the oldest task of the turn at the head of p's ready
// queue (entry e, popped), and puts the turn back: at the front while the
// key has tasks left of its weight for this turn, else at the back of the
// level.
func (s *state) popTurn(p *poolState, e uint64) (int32, bool) {
	q, t, ok := s.liveTurn(e)
	if !ok {
		return 0, false
	}
	qi := int32(uint32(e) &^ turnBit)
	s.popped, s.poppedUsed = t, q.used
	q.tasks.PopFront()
	q.live--
	if k := &s.keys[q.key]; k.limit > 0 {
		s.limitedReady(k, qi, -1)
	}
	p.readyLive--
	q.used++
	switch {
	case q.live == 0:
		s.turnEnded(q)
	case q.used < s.keys[q.key].weight:
		s.giveTurn(qi, true)
	default:
		q.used = 0
		s.giveTurn(qi, false)
	}
	return t, true
}

// unpop puts back t, popped from its pool's ready queue just now and not
// handed out (no token yet, too few idle workers, or the next level): at
// the head of its level, as requeue does, and with keys its turn as it
// was, at the front of its level with the tasks it had handed out, so
// that a task looked at is not counted as one of its key's turn.
func (s *state) unpop(t int32) {
	s.requeue(t)
	if s.keyed && s.popped == t {
		s.kqs[s.queueOf(t)].used = s.poppedUsed
	}
}

// unqueueKeyed takes Ready task t out of its key queue's count (its entry
// is left behind, skipped when met).
func (s *state) unqueueKeyed(t int32) {
	qi := s.queueOf(t)
	q := &s.kqs[qi]
	q.live--
	k := &s.keys[q.key]
	if k.limit > 0 {
		s.limitedReady(k, qi, -1)
	}
	if !k.blocked {
		s.pools[q.pool].readyLive--
	}
	if q.live == 0 && q.turn != 0 {
		// Its last ready task left: its turn ends here, not when a
		// hand-out meets it, so that a task that comes to the queue
		// later gets a turn behind those given meanwhile, not this old
		// one's place.
		s.turnEnded(q)
	}
}

// keyOut counts an attempt of t handed out against its key.
func (s *state) keyOut(t int32) {
	k := &s.keys[s.keyOf[t]]
	k.out++
	if k.limit > 0 && k.out >= k.limit && !k.blocked {
		k.blocked = true
		k.epoch++ // every turn of its queues ends: their entries are dead now
		for i := range k.pools {
			s.pools[i].readyLive -= int(k.pools[i].live)
		}
	}
}

// keyBack counts an attempt of t whose end was applied, or that was taken
// back, off its key; a key below its limit again gets its turns back.
func (s *state) keyBack(t int32) {
	s.keyBackKey(s.keyOf[t]) // t is live: its record names the key, which unkey forgets only later
}

// keyBackKey counts an attempt of key kn off it (keyBack).
func (s *state) keyBackKey(kn int32) {
	k := &s.keys[kn]
	k.out--
	if k.blocked && k.out < k.limit {
		k.blocked = false
		for i := range k.pools {
			if kp := &k.pools[i]; kp.live > 0 {
				s.pools[i].readyLive += int(kp.live)
				b := kp.best[0] // its best level there: the others get theirs when they are best (turnEnded)
				s.kqs[b].used = 0
				s.giveTurn(b, false)
			}
		}
	}
}

// kqHeapPush adds queue qi to kp's heap.
func (s *state) kqHeapPush(kp *keyPool, qi int32) {
	kp.best = append(kp.best, qi)
	s.kqs[qi].hpos = int32(len(kp.best) - 1)
	s.kqHeapUp(kp, len(kp.best)-1)
}

// kqHeapRemove takes the queue at place i out of kp's heap.
func (s *state) kqHeapRemove(kp *keyPool, i int32) {
	h := kp.best
	s.kqs[h[i]].hpos = -1
	last := int32(len(h) - 1)
	kp.best = h[:last]
	if i == last {
		return
	}
	h[i] = h[last]
	s.kqs[h[i]].hpos = i
	s.kqHeapDown(kp, int(i))
	s.kqHeapUp(kp, int(i))
}

func (s *state) kqHeapUp(kp *keyPool, i int) {
	h := kp.best
	for i > 0 {
		p := (i - 1) / 2
		if s.kqs[h[p]].prio <= s.kqs[h[i]].prio {
			break
		}
		h[p], h[i] = h[i], h[p]
		s.kqs[h[p]].hpos, s.kqs[h[i]].hpos = int32(p), int32(i)
		i = p
	}
}

func (s *state) kqHeapDown(kp *keyPool, i int) {
	h := kp.best
	for {
		l, m := 2*i+1, i
		if l < len(h) && s.kqs[h[l]].prio < s.kqs[h[m]].prio {
			m = l
		}
		if l+1 < len(h) && s.kqs[h[l+1]].prio < s.kqs[h[m]].prio {
			m = l + 1
		}
		if m == i {
			return
		}
		h[m], h[i] = h[i], h[m]
		s.kqs[h[m]].hpos, s.kqs[h[i]].hpos = int32(m), int32(i)
		i = m
	}
}

// keyLimited reports whether t's key has a limit: its attempts are then
// reported at once when they end, and it is never fused.
func (s *state) keyLimited(t int32) bool {
	return s.keyed && s.keys[s.keyOf[t]].limit > 0
}
