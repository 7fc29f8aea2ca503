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
// Add and Cancel are O(1). Advance is O(1) per fired entry plus O(levels) per
// cascade per entry and O(levels) per visited bucket; it skips empty
// buckets with one 64-bit bitmap per level, so an idle stretch of any length
// costs nothing. Entries live in one flat slice reused through a free list:
// after warm-up, Add, Cancel and Advance do not allocate.
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
	maxLevels  = (63 + levelBits - 1) / levelBits // enough for any int64 tick
	noEntry    = -1
	noBucket   = -1
	defaultRes = time.Millisecond
)

// Handle names an entry for Cancel. The zero Handle names no entry.
type Handle struct {
	idx int32
	gen uint32
}

type entry[T any] struct {
	due    int64 // nanoseconds after origin
	value  T
	prev   int32
	next   int32 // next in bucket, or next free entry
	bucket int32 // level*wheelSize+pos, or noBucket when free
	gen    uint32
}

// Wheel is a hierarchical timing wheel of values of type T.
// The zero value is not usable; call New.
type Wheel[T any] struct {
	origin time.Time // immutable: tick 0 starts here
	tick   int64     // immutable: nanoseconds per tick
	now    int64     // the latest time passed to Advance, ns after origin
	cur    int64     // current tick; every entry's due tick is >= cur

	levels int      // levels in use (created lazily)
	occ    []uint64 // per level: bit p set when bucket p is not empty
	head   []int32  // per bucket: first entry
	tail   []int32  // per bucket: last entry
	low    []int64  // per bucket: lower bound of the entries' due times

	entries []entry[T]
	free    int32 // head of the free list
	n       int   // live entries
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
	w := &Wheel[T]{origin: start, tick: int64(resolution), free: noEntry}
	w.addLevel()
	return w
}

// Len reports the number of pending entries.
func (w *Wheel[T]) Len() int { return w.n }

func (w *Wheel[T]) addLevel() {
	w.levels++
	w.occ = append(w.occ, 0)
	for range wheelSize {
		w.head = append(w.head, noEntry)
		w.tail = append(w.tail, noEntry)
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
	i := w.free
	if i == noEntry {
		i = int32(len(w.entries))
		w.entries = append(w.entries, entry[T]{})
	} else {
		w.free = w.entries[i].next
	}
	e := &w.entries[i]
	e.due, e.value = d, value
	e.gen++
	if e.gen == 0 {
		e.gen = 1
	}
	w.place(i)
	w.n++
	return Handle{idx: i, gen: e.gen}, true
}

// place links entry i into the bucket its due tick belongs to, relative to
// the current tick.
func (w *Wheel[T]) place(i int32) {
	e := &w.entries[i]
	dt := e.due / w.tick
	if dt < w.cur {
		panic(fmt.Sprintf("timerwheel: entry due at tick %d placed behind current tick %d", dt, w.cur))
	}
	level := 0
	if x := uint64(dt ^ w.cur); x != 0 {
		level = (bits.Len64(x) - 1) / levelBits
	}
	for level >= w.levels {
		w.addLevel()
	}
	pos := int((dt >> (levelBits * level)) & levelMask)
	b := int32(level*wheelSize + pos)
	e.bucket, e.next, e.prev = b, noEntry, w.tail[b]
	if t := w.tail[b]; t != noEntry {
		w.entries[t].next = i
		if e.due < w.low[b] {
			w.low[b] = e.due
		}
	} else {
		w.head[b] = i
		w.low[b] = e.due
		w.occ[level] |= 1 << pos
	}
	w.tail[b] = i
}

// unlink removes entry i from its bucket without freeing it.
func (w *Wheel[T]) unlink(i int32) {
	e := &w.entries[i]
	b := e.bucket
	if e.prev != noEntry {
		w.entries[e.prev].next = e.next
	} else {
		w.head[b] = e.next
	}
	if e.next != noEntry {
		w.entries[e.next].prev = e.prev
	} else {
		w.tail[b] = e.prev
	}
	if w.head[b] == noEntry {
		level, pos := int(b)/wheelSize, int(b)%wheelSize
		w.occ[level] &^= 1 << pos
	}
	e.bucket = noBucket
}

func (w *Wheel[T]) release(i int32) {
	var zero T
	e := &w.entries[i]
	e.value = zero
	e.bucket = noBucket
	e.next = w.free
	w.free = i
	w.n--
}

// Cancel removes the entry h names. It returns false if that entry has
// already fired or been cancelled.
func (w *Wheel[T]) Cancel(h Handle) bool {
	if h.gen == 0 || int(h.idx) >= len(w.entries) {
		return false
	}
	e := &w.entries[h.idx]
	if e.gen != h.gen || e.bucket == noBucket {
		return false
	}
	w.unlink(h.idx)
	w.release(h.idx)
	return true
}

// nextBucket finds the earliest bucket that will fire or cascade, and the
// tick at which it does.
func (w *Wheel[T]) nextBucket() (b int32, at int64, ok bool) {
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
			return int32(level*wheelSize + pos), base + int64(pos)<<shift, true
		}
	}
	return 0, 0, false
}

// NextDue reports the earliest due time among pending entries (a lower
// bound: exact unless an entry of the earliest bucket was cancelled since
// that bucket was last scanned). ok is false when the wheel is empty.
func (w *Wheel[T]) NextDue() (due time.Time, ok bool) {
	b, _, ok := w.nextBucket()
	if !ok {
		return time.Time{}, false
	}
	return w.origin.Add(time.Duration(w.low[b])), true
}

// Advance moves the wheel's time to now and appends to dst, in bucket order,
// the values of entries due at or before now, removing them. It stops after
// max values when max > 0; the rest stay pending and NextDue reports a time
// not after now. A now earlier than a previous one is treated as that one.
func (w *Wheel[T]) Advance(now time.Time, dst []T, max int) []T {
	n := w.offset(now)
	if n < w.now {
		n = w.now
	}
	w.now = n
	nt := n / w.tick
	fired := 0
	for w.n > 0 {
		_, at, ok := w.nextBucket()
		if !ok || at > nt {
			break
		}
		w.cur = at
		// Cascade the higher levels whose bucket starts at this tick, from
		// the top down: each re-placed entry lands in a lower level.
		for level := w.levels - 1; level >= 1; level-- {
			shift := levelBits * level
			if w.cur&(1<<shift-1) != 0 {
				continue
			}
			cb := int32(level*wheelSize + int((w.cur>>shift)&levelMask))
			for i := w.head[cb]; i != noEntry; {
				next := w.entries[i].next
				w.unlink(i)
				w.place(i)
				i = next
			}
		}
		// Fire the level-0 bucket of this tick.
		b := int32(w.cur & levelMask)
		low := int64(-1)
		for i := w.head[b]; i != noEntry; {
			e := &w.entries[i]
			next := e.next
			if e.due <= n && (max <= 0 || fired < max) {
				dst = append(dst, e.value)
				fired++
				w.unlink(i)
				w.release(i)
			} else if low < 0 || e.due < low {
				low = e.due
			}
			i = next
		}
		if low >= 0 {
			w.low[b] = low // exact again: the whole bucket was scanned
			break          // the rest of this bucket is not due, or max was reached
		}
		if max > 0 && fired >= max {
			break
		}
	}
	if w.cur < nt && (max <= 0 || fired < max) {
		w.cur = nt
	}
	return dst
}

// verify checks the wheel's invariants and panics if one is broken.
// only for testing
func (w *Wheel[T]) verify() {
	count := 0
	for b := range w.head {
		level, pos := b/wheelSize, b%wheelSize
		occupied := w.occ[level]&(1<<pos) != 0
		if occupied != (w.head[b] != noEntry) {
			panic(fmt.Sprintf("timerwheel: bucket %d occupancy bit %v disagrees with its list", b, occupied))
		}
		prev := int32(noEntry)
		for i := w.head[b]; i != noEntry; i = w.entries[i].next {
			e := &w.entries[i]
			if e.bucket != int32(b) || e.prev != prev {
				panic(fmt.Sprintf("timerwheel: entry %d linked into bucket %d records bucket %d prev %d", i, b, e.bucket, e.prev))
			}
			if e.due < w.low[b] {
				panic(fmt.Sprintf("timerwheel: entry %d due %d below bucket %d low %d", i, e.due, b, w.low[b]))
			}
			if e.due/w.tick < w.cur {
				panic(fmt.Sprintf("timerwheel: entry %d due tick %d behind current tick %d", i, e.due/w.tick, w.cur))
			}
			prev = i
			count++
		}
		if w.tail[b] != prev {
			panic(fmt.Sprintf("timerwheel: bucket %d tail %d, last entry %d", b, w.tail[b], prev))
		}
	}
	if count != w.n {
		panic(fmt.Sprintf("timerwheel: %d linked entries, Len %d", count, w.n))
	}
}
