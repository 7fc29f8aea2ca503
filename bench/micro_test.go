package bench

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/readyq"
	"github.com/batonhq/baton/timerwheel"
)

// heap4 is the reference the timer wheel is measured against: a 4-ary
// min-heap keyed by due time, laid out as the Go runtime lays out its timers.
type heap4 struct{ items []heap4Item }

type heap4Item struct {
	due int64
	v   int32
}

func (h *heap4) push(due int64, v int32) {
	h.items = append(h.items, heap4Item{due, v})
	i := len(h.items) - 1
	for i > 0 {
		p := (i - 1) / 4
		if h.items[p].due <= h.items[i].due {
			break
		}
		h.items[p], h.items[i] = h.items[i], h.items[p]
		i = p
	}
}

func (h *heap4) pop() heap4Item {
	top := h.items[0]
	last := len(h.items) - 1
	h.items[0] = h.items[last]
	h.items = h.items[:last]
	i := 0
	for {
		m := i
		for c := 4*i + 1; c <= 4*i+4 && c < last; c++ {
			if h.items[c].due < h.items[m].due {
				m = c
			}
		}
		if m == i {
			break
		}
		h.items[i], h.items[m] = h.items[m], h.items[i]
		i = m
	}
	return top
}

var wheelRes = flag.Duration("baton.wheelres", time.Microsecond, "timer wheel resolution in BenchmarkDelayedSet")

var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// BenchmarkDelayedSet: one insert and, on average, one fire per op, at a
// steady n entries pending: the clock advances 1µs per op and due times are
// spread uniformly over the next n µs.
func BenchmarkDelayedSet(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000, 1_000_000} {
		spread := int64(n) * 1000
		b.Run(fmt.Sprintf("n=%d/wheel", n), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 1))
			w := timerwheel.New[int32](base, *wheelRes)
			for i := range n {
				w.Add(base.Add(time.Duration(1+r.Int64N(spread))), int32(i))
			}
			now := int64(0)
			var buf []int32
			b.ReportAllocs()
			for b.Loop() {
				now += 1000
				w.Add(base.Add(time.Duration(now+1+r.Int64N(spread))), 0)
				buf = w.Advance(base.Add(time.Duration(now)), buf[:0], 0)
			}
		})
		b.Run(fmt.Sprintf("n=%d/heap4", n), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 1))
			// Like the wheel, the heap takes and compares time.Time values
			// offsets, so both pay the same conversions.
			h := &heap4{}
			for i := range n {
				h.push(int64(base.Add(time.Duration(1+r.Int64N(spread))).Sub(base)), int32(i))
			}
			now := int64(0)
			b.ReportAllocs()
			for b.Loop() {
				now += 1000
				h.push(int64(base.Add(time.Duration(now+1+r.Int64N(spread))).Sub(base)), 0)
				limit := int64(base.Add(time.Duration(now)).Sub(base))
				for len(h.items) > 0 && h.items[0].due <= limit {
					h.pop()
				}
			}
		})
	}
}

// BenchmarkReadyQueue: push and pop at a steady 1,024 queued, 4 levels.
func BenchmarkReadyQueue(b *testing.B) {
	var q readyq.Queue
	for i := range 1024 {
		q.Push(i%4, uint64(i))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		q.Push(i%4, uint64(i))
		q.Pop()
		i++
	}
}

// BenchmarkHandoff: one value from one goroutine to another and back over
// unbuffered channels: the cost that batching amortises.
func BenchmarkHandoff(b *testing.B) {
	ping, pong := make(chan int), make(chan int)
	go func() {
		for v := range ping {
			pong <- v
		}
		close(pong)
	}()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		ping <- i
		<-pong
	}
	close(ping)
	<-pong
}

// BenchmarkDelayedSetBulk: insert n entries due over the next second, then
// advance in 1ms steps until all have fired, as the scheduler does when a
// burst of delayed tasks comes due. Reported per entry.
func BenchmarkDelayedSetBulk(b *testing.B) {
	for _, n := range []int{1_000, 100_000, 1_000_000} {
		dues := make([]int64, n)
		r := rand.New(rand.NewPCG(2, 2))
		for i := range dues {
			dues[i] = 1 + r.Int64N(int64(time.Second))
		}
		b.Run(fmt.Sprintf("n=%d/wheel", n), func(b *testing.B) {
			var buf []int32
			b.ReportAllocs()
			for b.Loop() {
				w := timerwheel.New[int32](base, *wheelRes)
				for i, d := range dues {
					w.Add(base.Add(time.Duration(d)), int32(i))
				}
				for now := time.Millisecond; w.Len() > 0; now += time.Millisecond {
					buf = w.Advance(base.Add(now), buf[:0], 0)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/entry")
		})
		b.Run(fmt.Sprintf("n=%d/heap4", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				h := &heap4{}
				for i, d := range dues {
					h.push(int64(base.Add(time.Duration(d)).Sub(base)), int32(i))
				}
				for now := time.Millisecond; len(h.items) > 0; now += time.Millisecond {
					limit := int64(base.Add(now).Sub(base))
					for len(h.items) > 0 && h.items[0].due <= limit {
						h.pop()
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/entry")
		})
	}
}
