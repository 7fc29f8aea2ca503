package readyq

import (
	"math/rand/v2"
	"slices"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The queue must agree with a stable sort by priority, through growth and
// interleaved pushes and pops.
func TestAgainstStableSort(t *testing.T) {
	seed := rand.Uint64() // a new one each run
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 4))
	var q Queue
	type entry struct {
		prio int
		x    uint64
	}
	var model []entry
	next := uint64(0)
	for step := range 20000 {
		switch r.IntN(5) {
		case 0, 1:
			p := r.IntN(5) - 2
			q.Push(p, next)
			model = append(model, entry{p, next})
			next++
		case 2:
			p := r.IntN(5) - 2
			q.PushFront(p, next)
			first := slices.IndexFunc(model, func(e entry) bool { return e.prio == p })
			if first < 0 {
				first = len(model)
			}
			model = slices.Insert(model, first, entry{p, next})
			next++
		default:
			if px, pp, pok := q.Peek(); pok {
				if x, p, _ := q.Pop(); x != px || p != pp {
					t.Fatalf("step %d: Peek = %d (p%d) but Pop = %d (p%d)", step, px, pp, x, p)
				}
				q.PushFront(pp, px)
			}
			x, p, ok := q.Pop()
			if ok != (len(model) > 0) {
				t.Fatalf("step %d: Pop ok = %v with %d queued", step, ok, len(model))
			}
			if !ok {
				continue
			}
			low := slices.MinFunc(model, func(a, b entry) int { return a.prio - b.prio }).prio
			best := slices.IndexFunc(model, func(e entry) bool { return e.prio == low })
			if want := model[best]; x != want.x || p != want.prio {
				t.Fatalf("step %d: Pop = %d (p%d); want %d (p%d)", step, x, p, want.x, want.prio)
			}
			model = slices.Delete(model, best, best+1)
		}
		if q.Len() != len(model) {
			t.Fatalf("step %d: Len = %d; want %d", step, q.Len(), len(model))
		}
	}
}

func BenchmarkPushPop(b *testing.B) {
	for _, levels := range []int{1, 8} {
		b.Run(map[int]string{1: "levels=1", 8: "levels=8"}[levels], func(b *testing.B) {
			var q Queue
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				q.Push(i%levels, uint64(i))
				if q.Len() > 1024 {
					q.Pop()
				}
				i++
			}
		})
	}
}

// Insert keeps a ring in order whatever the order values come back in,
// through growth, wraparound and pops: the ring agrees with a sorted
// slice.
func TestRingInsertKeepsOrder(t *testing.T) {
	seed := rand.Uint64() // a new one each run
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 6))
	less := func(a, b uint64) bool { return a < b }
	for round := range 200 {
		var ring Ring
		var model []uint64
		next := uint64(1000) // values pushed at the back; taken ones come back below it
		var taken []uint64
		for step := range 300 {
			switch op := r.IntN(6); {
			case op <= 1:
				ring.PushBack(next)
				model = append(model, next)
				next++
			case op == 2 && len(taken) > 0:
				i := r.IntN(len(taken))
				x := taken[i]
				taken = slices.Delete(taken, i, i+1)
				ring.Insert(x, less)
				j, _ := slices.BinarySearch(model, x)
				model = slices.Insert(model, j, x)
			case op == 3 && len(model) > 0:
				if got := ring.PopFront(); got != model[0] {
					t.Fatalf("round %d step %d: PopFront = %d; want %d", round, step, got, model[0])
				}
				taken = append(taken, model[0])
				model = model[1:]
			case op == 4:
				ring.Insert(next, less) // newest: at the back
				model = append(model, next)
				next++
			}
			if ring.Len() != len(model) {
				t.Fatalf("round %d step %d: Len = %d; want %d", round, step, ring.Len(), len(model))
			}
			for k, want := range model {
				if got := *ring.at(k); got != want {
					t.Fatalf("round %d step %d: ring[%d] = %d; want %d (model %v)", round, step, k, got, want, model)
				}
			}
		}
	}
}

// Queue.Insert puts a value back at its place in its level, and a level
// that was empty joins the levels Pop takes from.
func TestQueueInsert(t *testing.T) {
	less := func(a, b uint64) bool { return a < b }
	var q Queue
	for x := uint64(10); x < 14; x++ {
		q.Push(1, x)
	}
	q.Insert(1, 12, less) // a duplicate key goes behind its equal
	q.Insert(0, 7, less)
	q.Insert(1, 3, less)
	var got []uint64
	for {
		x, _, ok := q.Pop()
		if !ok {
			break
		}
		got = append(got, x)
	}
	if want := []uint64{7, 3, 10, 11, 12, 12, 13}; !slices.Equal(got, want) {
		t.Errorf("Pop order = %v; want %v", got, want)
	}
}
