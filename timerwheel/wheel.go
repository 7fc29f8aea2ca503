// Package timerwheel is the delayed set of the scheduler: a hierarchical
// timing wheel (Varghese and Lauck; Kafka's TimingWheel) that keeps exact due
// times.
//
// # Layout
//
// Time is cut into ticks (1 ms by default). Level 0 has 64 buckets of one
// tick each; every level above has 64 buckets, each as wide as the whole
// level below it. Levels are created only when an entry needs them:
//
//	level  bucket width   level span     (tick = 1 ms)
//	0      1 ms           64 ms
//	1      64 ms          4.1 s
//	2      4.1 s          4.4 min
//	3      4.4 min        4.7 h
//	4      4.7 h          12.4 days
//	5      12.4 days      2.2 years
//
// An entry goes into the lowest level whose bucket holds only its own due
// tick's neighbourhood: the level of the highest 6-bit group in which its due
// tick differs from the current tick. When the current tick reaches a bucket
// of a higher level, that bucket is cascaded: its entries are placed again,
// into lower levels, in a loop (no recursion). Each entry is cascaded at most
// once per level.
//
// # Exact due times
//
// Buckets group entries, but an entry keeps its due time to the nanosecond.
// Advance fires an entry only when now has reached its due time, never a tick
// early, and NextDue reports the earliest due time (a lower bound that is
// exact unless entries were cancelled since the bucket was last scanned), so
// a driver armed on NextDue fires an entry due at t when the clock reaches t,
// not a tick later. Waking early is harmless: Advance fires nothing early and
// NextDue is then exact.
//
// # Costs
//
// Add and Cancel are O(1). Advance is O(1) per fired entry plus O(1) per
// cascade per entry (at most one cascade per level) and O(levels) per
// visited bucket; it skips empty buckets with one 64-bit bitmap per level,
// so an idle stretch of any length costs nothing. A bucket is a slice of
// (due, entry) pairs, so cascading and firing read memory in order; values
// live in one flat slice reused through a free list. After warm-up, Add,
// Cancel and Advance do not allocate.
//
// Cancel is lazy, as in the Go runtime's timers: it frees the entry at once
// and leaves a dead pair in its bucket, dropped when the bucket is next
// visited; when dead pairs outnumber a quarter of the live entries, the
// wheel compacts every bucket, so memory follows the live entries.
//
// Within the tick that now falls in, entries fire in due order: the first
// Advance into a tick scans its bucket once; a second one inside the same
// tick moves what is left into a small heap, so that a clock advancing in
// small steps does not rescan the bucket each time.
//
// A Wheel is not safe for concurrent use: one goroutine (in Baton, the
// coordinator) owns it and passes the time in.
package timerwheel

import (
	"fmt"
	"math/bits"
	"time"
)

const (
	levelBits  = 6
	wheelSize  = 1 << levelBits // buckets per level
	levelMask  = wheelSize - 1
	defaultRes = time.Millisecond
	noTick     = -1
)

// Handle names an entry for Cancel. The zero Handle names no entry.
type Handle struct {
	idx int32
	gen uint32
}

// slot is one pending entry as a bucket (or the heap) holds it. It is dead
// when its entry has been cancelled or fired: gen no longer matches.
type slot struct {
	due int64  // nanoseconds after origin
	seq uint64 // order of Add: breaks ties between equal due times
	idx int32
	gen uint32
}

type entry[T any] struct {
	value T
	gen   uint32 // bumped on every Add that takes the entry
	live  bool
}

// Wheel is a hierarchical timing wheel of values of type T.
// The zero value is not usable; call New.
type Wheel[T any] struct {
	origin time.Time // immutable: tick 0 starts here
	tick   int64     // immutable: nanoseconds per tick
	now    int64     // the latest time passed to Advance, ns after origin
	cur    int64     // current tick; every pending entry's due tick is >= cur

	levels  int      // levels in use (created lazily)
	occ     []uint64 // per level: bit p set when bucket p holds slots (live or dead)
	buckets [][]slot // per bucket
	low     []int64  // per bucket: lower bound of its live slots' due times

	heap     []slot // min-heap by due: the rest of tick heapTick, once scanned
	heapTick int64
	scanned  int64 // the tick whose bucket Advance has scanned once without emptying it

	entries []entry[T]
	free    []int32 // entries not live
	n       int     // live entries
	dead    int     // dead slots still held by buckets and the heap
	seq     uint64  // Adds so far
}

// New returns an empty wheel whose time starts at start. A resolution of 0
// means 1 ms; resolution only groups entries and never delays one.
// New panics if resolution is negative.
func New[T any](start time.Time, resolution time.Duration) *Wheel[T] {
	if resolution < 0 {
		panic("timerwheel: negative resolution")
	}
	if resolution == 0 {
		resolution = defaultRes
	}
	w := &Wheel[T]{origin: start, tick: int64(resolution), heapTick: noTick, scanned: noTick}
	w.addLevel()
	return w
}

// Len reports the number of pending entries.
func (w *Wheel[T]) Len() int { return w.n }

func (w *Wheel[T]) addLevel() {
	w.levels++
	w.occ = append(w.occ, 0)
	for range wheelSize {
		w.buckets = append(w.buckets, nil)
		w.low = append(w.low, 0)
	}
}

// offset converts t into nanoseconds after origin, clamped at 0.
func (w *Wheel[T]) offset(t time.Time) int64 {
	d := int64(t.Sub(w.origin))
	if d < 0 {
		return 0
	}
	return d
}

// Add schedules value to fire at due. It returns false, and stores nothing,
// when due is not after the latest time given to Advance: the entry is
// already due and the caller should act on it now.
func (w *Wheel[T]) Add(due time.Time, value T) (Handle, bool) {
	d := w.offset(due)
	if d <= w.now {
		return Handle{}, false
	}
	var i int32
	if k := len(w.free); k > 0 {
		i, w.free = w.free[k-1], w.free[:k-1]
	} else {
		i = int32(len(w.entries))
		w.entries = append(w.entries, entry[T]{})
	}
	e := &w.entries[i]
	e.value, e.live = value, true
	e.gen++
	if e.gen == 0 {
		e.gen = 1
	}
	w.seq++
	w.place(slot{due: d, seq: w.seq, idx: i, gen: e.gen})
	w.n++
	return Handle{idx: i, gen: e.gen}, true
}

func (w *Wheel[T]) alive(sl slot) bool {
	e := &w.entries[sl.idx]
	return e.live && e.gen == sl.gen
}

// place puts a live slot into the bucket its due tick belongs to, relative
// to the current tick, or into the heap if it belongs to the heap's tick.
func (w *Wheel[T]) place(sl slot) {
	dt := sl.due / w.tick
	if dt < w.cur {
		panic(fmt.Sprintf("timerwheel: entry due at tick %d placed behind current tick %d", dt, w.cur))
	}
	if dt == w.heapTick {
		w.heapPush(sl)
		return
	}
	level := 0
	if x := uint64(dt ^ w.cur); x != 0 {
		level = (bits.Len64(x) - 1) / levelBits
	}
	for level >= w.levels {
		w.addLevel()
	}
	pos := int((dt >> (levelBits * level)) & levelMask)
	b := level*wheelSize + pos
	if len(w.buckets[b]) == 0 || sl.due < w.low[b] {
		w.low[b] = sl.due
	}
	w.buckets[b] = append(w.buckets[b], sl)
	w.occ[level] |= 1 << pos
}

// release frees a live entry.
func (w *Wheel[T]) release(i int32) {
	var zero T
	e := &w.entries[i]
	e.value, e.live = zero, false
	w.free = append(w.free, i)
	w.n--
}

// Cancel removes the entry h names. It returns false if that entry has
// already fired or been cancelled.
func (w *Wheel[T]) Cancel(h Handle) bool {
	if h.gen == 0 || int(h.idx) >= len(w.entries) {
		return false
	}
	e := &w.entries[h.idx]
	if e.gen != h.gen || !e.live {
		return false
	}
	w.release(h.idx)
	w.dead++
	if w.dead > 1024 && w.dead > w.n/4 {
		w.compact()
	}
	return true
}

// compact drops every dead slot.
func (w *Wheel[T]) compact() {
	for b, bucket := range w.buckets {
		if len(bucket) == 0 {
			continue
		}
		kept := w.keepLive(bucket)
		if cap(kept) > 1024 && len(kept) < cap(kept)/4 {
			kept = append([]slot(nil), kept...) // give back what mass cancellation freed
		}
		w.setBucket(b, kept)
	}
	h := w.keepLive(w.heap)
	w.heap = h[:0]
	for _, sl := range h {
		w.heapPush(sl)
	}
	w.dead = 0
}

// keepLive filters s in place, keeping live slots.
func (w *Wheel[T]) keepLive(s []slot) []slot {
	kept := s[:0]
	for _, sl := range s {
		if w.alive(sl) {
			kept = append(kept, sl)
		}
	}
	clear(s[len(kept):])
	return kept
}

// setBucket stores a bucket's new contents, with an exact low and its
// occupancy bit.
func (w *Wheel[T]) setBucket(b int, s []slot) {
	w.buckets[b] = s
	level, pos := b/wheelSize, b%wheelSize
	if len(s) == 0 {
		w.occ[level] &^= 1 << pos
		return
	}
	low := s[0].due
	for _, sl := range s[1:] {
		low = min(low, sl.due)
	}
	w.low[b] = low
	w.occ[level] |= 1 << pos
}

// nextBucket finds the earliest bucket that will fire or cascade, and the
// tick at which it does.
func (w *Wheel[T]) nextBucket() (b int, at int64, ok bool) {
	for level := 0; level < w.levels; level++ {
		shift := levelBits * level
		curPos := int((w.cur >> shift) & levelMask)
		var mask uint64
		if level == 0 {
			mask = ^uint64(0) << curPos
		} else if curPos < wheelSize-1 {
			mask = ^uint64(0) << (curPos + 1)
		}
		if m := w.occ[level] & mask; m != 0 {
			pos := bits.TrailingZeros64(m)
			var base int64
			if up := shift + levelBits; up < 63 {
				base = w.cur >> up << up
			}
			return level*wheelSize + pos, base + int64(pos)<<shift, true
		}
	}
	return 0, 0, false
}

// NextDue reports the earliest due time among pending entries (a lower
// bound: exact unless entries of the earliest bucket were cancelled since
// it was last visited). ok is false when the wheel is empty.
func (w *Wheel[T]) NextDue() (due time.Time, ok bool) {
	if w.n == 0 {
		return time.Time{}, false
	}
	for len(w.heap) > 0 {
		if top := w.heap[0]; w.alive(top) {
			return w.origin.Add(time.Duration(top.due)), true
		}
		w.heapPop()
		w.dead--
	}
	b, _, ok := w.nextBucket()
	if !ok {
		return time.Time{}, false
	}
	return w.origin.Add(time.Duration(w.low[b])), true
}

// Advance moves the wheel's time to now and appends to dst the values of
// entries due at or before now, removing them: bucket by bucket, and in due
// order once the current tick is in the heap. It stops after max values
// when max > 0; the rest stay pending and NextDue reports a time not after
// now. A now earlier than a previous one is treated as that one.
func (w *Wheel[T]) Advance(now time.Time, dst []T, max int) []T {
	n := w.offset(now)
	if n < w.now {
		n = w.now
	}
	w.now = n
	nt := n / w.tick
	room := max
	if room <= 0 {
		room = int(^uint(0) >> 1)
	}
	// The heap first: it holds the rest of an earlier part of the current tick.
	dst = w.fireHeap(n, dst, &room)
	if len(w.heap) > 0 {
		return dst // the rest of the current tick is not due, or max was reached
	}
	w.heapTick = noTick
	for room > 0 {
		_, at, ok := w.nextBucket()
		if !ok || at > nt {
			break
		}
		w.cur = at
		// Cascade the higher levels whose bucket starts at this tick, from
		// the top down: each re-placed slot lands in a lower level.
		for level := w.levels - 1; level >= 1; level-- {
			shift := levelBits * level
			if w.cur&(1<<shift-1) != 0 {
				continue
			}
			w.move(level*wheelSize+int((w.cur>>shift)&levelMask), false)
		}
		b := int(w.cur & levelMask)
		if w.cur == nt && w.scanned == nt {
			// Second visit inside this tick: order the rest by due time.
			w.heapTick = nt
			w.move(b, true)
			dst = w.fireHeap(n, dst, &room)
			break
		}
		bucket := w.buckets[b]
		// Fire what is due; keep, in order, what is not (only possible in
		// the tick now falls in) or what max leaves.
		kept := bucket[:0]
		for _, sl := range bucket {
			switch {
			case !w.alive(sl):
				w.dead--
			case sl.due <= n && room > 0:
				dst = append(dst, w.entries[sl.idx].value)
				w.release(sl.idx)
				room--
			default:
				kept = append(kept, sl)
			}
		}
		clear(bucket[len(kept):])
		w.setBucket(b, kept)
		if len(kept) > 0 {
			if w.cur == nt {
				w.scanned = nt
			}
			break
		}
	}
	if w.cur < nt && room > 0 {
		w.cur = nt
	}
	return dst
}

// move empties bucket b, placing its live slots again (a cascade) or, with
// toHeap, into the heap of the current tick.
func (w *Wheel[T]) move(b int, toHeap bool) {
	bucket := w.buckets[b]
	if len(bucket) == 0 {
		return
	}
	w.setBucket(b, bucket[:0])
	// Dead slots move along instead of being checked here: checking reads
	// the entry, a cache miss per slot, and firing checks them anyway.
	for _, sl := range bucket {
		if toHeap {
			w.heapPush(sl)
		} else {
			w.place(sl)
		}
	}
	clear(bucket)
}

// fireHeap fires the heap's entries due by n, while room lasts.
func (w *Wheel[T]) fireHeap(n int64, dst []T, room *int) []T {
	for len(w.heap) > 0 && *room > 0 && w.heap[0].due <= n {
		if sl := w.heapPop(); w.alive(sl) {
			dst = append(dst, w.entries[sl.idx].value)
			w.release(sl.idx)
			*room--
		} else {
			w.dead--
		}
	}
	return dst
}

// before orders slots by due time, then by the order they were added.
func before(a, b slot) bool { return a.due < b.due || (a.due == b.due && a.seq < b.seq) }

func (w *Wheel[T]) heapPush(sl slot) {
	h := append(w.heap, sl)
	j := len(h) - 1
	for j > 0 {
		p := (j - 1) / 4
		if !before(h[j], h[p]) {
			break
		}
		h[p], h[j] = h[j], h[p]
		j = p
	}
	w.heap = h
}

func (w *Wheel[T]) heapPop() slot {
	h := w.heap
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	j := 0
	for {
		m := j
		for c := 4*j + 1; c <= 4*j+4 && c < last; c++ {
			if before(h[c], h[m]) {
				m = c
			}
		}
		if m == j {
			break
		}
		h[j], h[m] = h[m], h[j]
		j = m
	}
	w.heap = h
	return top
}

// verify checks the wheel's invariants and panics if one is broken.
// only for testing
func (w *Wheel[T]) verify() {
	live, dead := 0, 0
	count := func(sl slot) bool {
		if w.alive(sl) {
			live++
			return true
		}
		dead++
		return false
	}
	for b, bucket := range w.buckets {
		level, pos := b/wheelSize, b%wheelSize
		if occupied := w.occ[level]&(1<<pos) != 0; occupied != (len(bucket) > 0) {
			panic(fmt.Sprintf("timerwheel: bucket %d occupancy bit %v with %d slots", b, occupied, len(bucket)))
		}
		for _, sl := range bucket {
			if !count(sl) {
				continue
			}
			if sl.due < w.low[b] {
				panic(fmt.Sprintf("timerwheel: slot due %d below bucket %d low %d", sl.due, b, w.low[b]))
			}
			if sl.due/w.tick < w.cur {
				panic(fmt.Sprintf("timerwheel: slot due tick %d behind current tick %d", sl.due/w.tick, w.cur))
			}
		}
	}
	for j, sl := range w.heap {
		if count(sl) && sl.due/w.tick != w.heapTick {
			panic(fmt.Sprintf("timerwheel: heap slot due tick %d, heap tick %d", sl.due/w.tick, w.heapTick))
		}
		if j > 0 && before(sl, w.heap[(j-1)/4]) {
			panic(fmt.Sprintf("timerwheel: heap order broken at %d", j))
		}
	}
	if live != w.n || dead != w.dead {
		panic(fmt.Sprintf("timerwheel: %d live and %d dead slots; Len %d, dead count %d", live, dead, w.n, w.dead))
	}
}
