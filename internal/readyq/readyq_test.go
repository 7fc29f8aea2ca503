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
	r := rand.New(rand.NewPCG(3, 4))
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
