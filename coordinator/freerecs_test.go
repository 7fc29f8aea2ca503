package coordinator

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// freeRecs hands back the lowest free records in order, whatever order
// they were freed in, and forgets what was taken.
func TestFreeRecsLowestFirst(t *testing.T) {
	seed := rand.Uint64() // a new one each run
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	var f freeRecs
	free := map[int32]bool{}
	for round := range 200 {
		for range rng.IntN(300) {
			r := int32(rng.IntN(5000))
			if !free[r] {
				free[r] = true
				f.add(r)
			}
		}
		var want []int32
		for r := range free {
			want = append(want, r)
		}
		slices.Sort(want)
		k := rng.IntN(len(want) + 1)
		got := make([]int32, k)
		f.lowest(got)
		if !slices.Equal(got, want[:k]) {
			t.Fatalf("round %d: lowest(%d) = %v; want %v", round, k, got, want[:k])
		}
		f.take(got)
		for _, r := range got {
			delete(free, r)
		}
		if f.n != len(free) {
			t.Fatalf("round %d: %d free; want %d", round, f.n, len(free))
		}
	}
}
