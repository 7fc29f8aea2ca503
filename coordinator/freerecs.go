package coordinator

import "math/bits"

// freeRecs is the set of records retention dropped, for submit to reuse,
// lowest index first: a batch then gets its records in index order, as a
// batch of new records does, and a task's record lies near its
// dependencies' (one cache miss per edge less on a large graph than with
// records handed back in the order their tasks ended).
type freeRecs struct {
	bits []uint64 // bit t: record t is free
	n    int      // records free
	low  int      // no word before bits[low] has a bit set
}

func (f *freeRecs) add(t int32) {
	w := int(t >> 6)
	if w >= len(f.bits) {
		f.bits = append(f.bits, make([]uint64, w+1-len(f.bits))...)
	}
	f.bits[w] |= 1 << (t & 63)
	f.n++
	f.low = min(f.low, w)
}

// lowest fills idx with the len(idx) lowest free records, in order,
// leaving them free (take removes them). len(idx) is at most f.n.
func (f *freeRecs) lowest(idx []int32) {
	i := 0
	for w := f.low; i < len(idx); w++ {
		for b := f.bits[w]; b != 0 && i < len(idx); b &= b - 1 {
			idx[i] = int32(w<<6 | bits.TrailingZeros64(b))
			i++
		}
	}
}

// take removes records that lowest returned.
func (f *freeRecs) take(idx []int32) {
	for _, t := range idx {
		f.bits[t>>6] &^= 1 << (t & 63)
	}
	f.n -= len(idx)
	for f.low < len(f.bits) && f.bits[f.low] == 0 {
		f.low++
	}
}
