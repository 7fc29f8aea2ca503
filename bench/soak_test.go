package bench

import (
	"context"
	"errors"
	"flag"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
)

var soakN = flag.Int("baton.soak", 1_000_000, "tasks pushed through BenchmarkSoak (the issue's figure is 10,000,000)")

// BenchmarkSoak pushes tasks through one long-lived scheduler with
// retention, in waves of 100,000: chains of four, a tenth of them failing
// once and retrying after 1ms, one in a hundred cancelled as soon as it is
// submitted, one in a thousand recurring three times. It logs the heap in
// use after every million tasks and reports the first and last figure:
// with retention they must stay flat.
//
//	go test ./bench/ -run '^$' -bench Soak -benchtime 1x -baton.soak=10000000
func BenchmarkSoak(b *testing.B) {
	const wave = 100_000
	for range b.N {
		s, err := coordinator.New(coordinator.WithWorkers(4), coordinator.WithRetention(0))
		if err != nil {
			b.Fatal(err)
		}
		var fails atomic.Int64
		var heapFirst, heapLast float64
		id := 0
		tasks := make([]coordinator.Task, wave)
		for done := 0; done < *soakN; done += wave {
			for i := range tasks {
				t := &tasks[i]
				*t = coordinator.Task{ID: "s" + strconv.Itoa(id), Run: func(context.Context) error { return nil }}
				if i%4 != 0 {
					t.Deps = []string{tasks[i-1].ID}
				}
				switch {
				case i%10 == 3:
					var tried atomic.Bool
					t.Run = func(context.Context) error {
						if !tried.Swap(true) {
							fails.Add(1)
							return errors.New("once")
						}
						return nil
					}
					t.Retry = coordinator.RetryPolicy{MaxAttempts: 2, BaseDelay: time.Millisecond}
				case i%1000 == 7:
					t.Deps, t.Every, t.Times = nil, time.Millisecond, 3
				}
				id++
			}
			if err := s.Submit(tasks...); err != nil {
				b.Fatal(err)
			}
			for i := 50; i < wave; i += 100 {
				s.Cancel(tasks[i].ID)
			}
			if err := s.Wait(context.Background()); err != nil {
				b.Fatal(err)
			}
			if (done+wave)%1_000_000 == 0 || done+wave >= *soakN {
				runtime.GC()
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				mb := float64(m.HeapAlloc) / (1 << 20)
				b.Logf("after %8d tasks: heap in use %6.1f MB", done+wave, mb)
				if heapFirst == 0 {
					heapFirst = mb
				}
				heapLast = mb
			}
		}
		if err := s.Shutdown(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(heapFirst, "MB-heap-first")
		b.ReportMetric(heapLast, "MB-heap-last")
		b.ReportMetric(float64(fails.Load()), "retried")
	}
}
