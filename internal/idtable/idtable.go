// Package idtable maps task IDs to record indexes for the coordinator: an
// open-addressing hash table with linear probing and backward-shift
// deletion whose slots hold only a 32-bit hash and the index (8 bytes),
// not the string: the strings live in the records, and the table asks for
// one (Keys) only when a hash matches. Insert finds a duplicate and
// inserts in the same probe, so a new ID costs one walk, not a lookup and
// then a store.
//
// A Table is not safe for concurrent use: in Baton the coordinator
// goroutine owns it. The zero value is an empty table.
package idtable

import "hash/maphash"

// Keys returns the ID stored at an index.
type Keys func(idx int32) string

// seed is random per process, so that IDs chosen to collide cannot be
// chosen in advance.
var seed = maphash.MakeSeed()

// Table maps strings to int32 indexes (0 and up).
type Table struct {
	slots  []uint64 // hash<<32 | idx+1; 0: empty
	n      int
	recent [recentSize]uint64 // direct-mapped by hash: entries inserted lately, same encoding
}

// recentSize is the number of entries the recent cache holds: lookups of
// IDs inserted lately (a dependency usually names a task submitted just
// before it) are answered from it, in cache, instead of from the table,
// a cache miss each once it is large.
const recentSize = 1 << 12

// Len reports the number of entries.
func (t *Table) Len() int { return t.n }

// Hash returns the hash Insert, Find and Delete use for s. It only reads:
// a table nobody writes to may be read from many goroutines.
func (t *Table) Hash(s string) uint32 { return uint32(maphash.String(seed, s)) }

// Reserve grows the table so that extra more entries fit without growing
// again.
func (t *Table) Reserve(extra int) {
	need := t.n + extra
	size := len(t.slots)
	if size == 0 {
		size = 16
	}
	for need*8 > size*5 { // keep the load at or below 5/8
		size *= 2
	}
	if size != len(t.slots) {
		t.rehash(size)
	}
}

func (t *Table) rehash(size int) {
	old := t.slots
	t.slots = make([]uint64, size)
	m := uint32(size - 1)
	for _, s := range old {
		if s == 0 {
			continue
		}
		for i := uint32(s>>32) & m; ; i = (i + 1) & m {
			if t.slots[i] == 0 {
				t.slots[i] = s
				break
			}
		}
	}
}

// Insert stores idx under s (hash h = Hash(s)) and reports true, unless s
// is present: then it returns the index already stored and false.
func (t *Table) Insert(s string, h uint32, idx int32, keys Keys) (int32, bool) {
	if (t.n+1)*8 > len(t.slots)*5 {
		t.Reserve(1)
	}
	m := uint32(len(t.slots) - 1)
	for i := h & m; ; i = (i + 1) & m {
		e := t.slots[i]
		if e == 0 {
			e = uint64(h)<<32 | uint64(uint32(idx)+1)
			t.slots[i] = e
			t.recent[h%recentSize] = e
			t.n++
			return idx, true
		}
		if uint32(e>>32) == h {
			if j := int32(uint32(e) - 1); keys(j) == s {
				return j, false
			}
		}
	}
}

// Find returns the index stored under s.
func (t *Table) Find(s string, h uint32, keys Keys) (int32, bool) {
	if t.n == 0 {
		return 0, false
	}
	if e := t.recent[h%recentSize]; e != 0 && uint32(e>>32) == h {
		if j := int32(uint32(e) - 1); keys(j) == s {
			return j, true
		}
	}
	m := uint32(len(t.slots) - 1)
	for i := h & m; ; i = (i + 1) & m {
		e := t.slots[i]
		if e == 0 {
			return 0, false
		}
		if uint32(e>>32) == h {
			if j := int32(uint32(e) - 1); keys(j) == s {
				return j, true
			}
		}
	}
}

// Touch reads the slot where a key of hash h would start its probe, and
// returns it: a caller walking many keys touches a few ahead, so that the
// cache misses of their probes overlap instead of adding up.
func (t *Table) Touch(h uint32) uint64 {
	if len(t.slots) == 0 {
		return 0
	}
	return t.slots[h&uint32(len(t.slots)-1)]
}

// Delete removes the entry for idx stored under hash h, if present, and
// reports whether it was.
func (t *Table) Delete(h uint32, idx int32) bool {
	if t.n == 0 {
		return false
	}
	m := uint32(len(t.slots) - 1)
	want := uint64(h)<<32 | uint64(uint32(idx)+1)
	i := h & m
	for {
		e := t.slots[i]
		if e == 0 {
			return false
		}
		if e == want {
			break
		}
		i = (i + 1) & m
	}
	if t.recent[h%recentSize] == want {
		t.recent[h%recentSize] = 0
	}
	// Backward shift: pull later entries of the run into the hole when
	// their home position allows it, so no tombstone is left.
	for j := (i + 1) & m; ; j = (j + 1) & m {
		e := t.slots[j]
		if e == 0 {
			break
		}
		home := uint32(e>>32) & m
		// e may move to i if i lies cyclically in [home, j).
		if (j-home)&m >= (j-i)&m {
			t.slots[i] = e
			i = j
		}
	}
	t.slots[i] = 0
	t.n--
	return true
}
