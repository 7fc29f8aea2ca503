package bench

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
)

// flowSetups are the flow controls BenchmarkFlowControl compares, each
// used so that it costs what it costs without holding anything back: none;
// a rate limit too high to bind (every attempt still takes a token, and a
// rate-limited pool hands each idle worker one attempt at a time); 1,000
// keys taking turns; the same keys with a limit of 2 attempts at once;
// one task in ten taking both workers (Slots 2); one key with a limit of
// 1, its tasks at one level, then each at a level of its own (a hand-out
// and an end cost O(log n) in its levels: they once cost O(n)).
var flowSetups = []struct {
	name string
	opts []coordinator.Option
	task func(i int, t *coordinator.Task)
}{
	{"none", nil, func(int, *coordinator.Task) {}},
	{"rate", []coordinator.Option{coordinator.WithRateLimit("", 1e9, 1_000_000)}, func(int, *coordinator.Task) {}},
	{"keys=1000", nil, func(i int, t *coordinator.Task) { t.Key = "k" + strconv.Itoa(i%1000) }},
	{"keys=1000,limit=2", []coordinator.Option{coordinator.WithKeys(coordinator.KeyPolicy{Limit: 2})},
		func(i int, t *coordinator.Task) { t.Key = "k" + strconv.Itoa(i%1000) }},
	{"slots", nil, func(i int, t *coordinator.Task) {
		if i%10 == 0 {
			t.Slots = 2
		}
	}},
	{"key,limit=1", []coordinator.Option{coordinator.WithKeys(coordinator.KeyPolicy{Limit: 1})},
		func(i int, t *coordinator.Task) { t.Key = "k" }},
	{"key,limit=1,levels", []coordinator.Option{coordinator.WithKeys(coordinator.KeyPolicy{Limit: 1})},
		func(i int, t *coordinator.Task) { t.Key, t.Priority = "k", i }},
}

// BenchmarkFlowControl: what each flow control costs the run phase of a
// flat graph behind a gate on two workers (-baton.n empty tasks; a
// twentieth as many of 20µs of busy work each), from the opening of the
// gate to Wait returning. Each op runs the graph once with every setup in
// turn, so that they share the machine's noise; each reports its
// ns/attempt, its allocations per attempt, and each setup but none its
// cost in percent of none's time.
func BenchmarkFlowControl(b *testing.B) {
	for _, work := range []time.Duration{0, 20 * time.Microsecond} {
		n := *benchN
		if work > 0 {
			n = max(1, n/20)
		}
		b.Run(fmt.Sprintf("work=%v", work), func(b *testing.B) {
			total := make([]time.Duration, len(flowSetups))
			mallocs := make([]uint64, len(flowSetups))
			for range b.N {
				for i, st := range flowSetups {
					elapsed, m := runFlow(b, n, work, st.opts, st.task)
					total[i] += elapsed
					mallocs[i] += m
				}
			}
			for i, st := range flowSetups {
				b.ReportMetric(float64(total[i].Nanoseconds())/float64(b.N)/float64(n), st.name+"-ns/attempt")
				b.ReportMetric(float64(mallocs[i])/float64(b.N)/float64(n), st.name+"-allocs/attempt")
				if i > 0 {
					b.ReportMetric(100*(total[i].Seconds()/total[0].Seconds()-1), st.name+"-%")
				}
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// runFlow runs one graph on a scheduler with opts, its tasks shaped by
// task, and returns its run phase's elapsed time and allocations.
func runFlow(b *testing.B, n int, work time.Duration, opts []coordinator.Option, task func(int, *coordinator.Task)) (time.Duration, uint64) {
	b.StopTimer()
	defer b.StartTimer()
	run := func(context.Context) error { return nil }
	if work > 0 {
		run = func(context.Context) error {
			for start := time.Now(); time.Since(start) < work; {
			}
			return nil
		}
	}
	s, err := coordinator.New(append([]coordinator.Option{coordinator.WithWorkers(2)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	open := make(chan struct{})
	tasks := make([]coordinator.Task, 0, n+1)
	tasks = append(tasks, coordinator.Task{ID: "gate", Run: func(context.Context) error { <-open; return nil }})
	for i := range n {
		t := coordinator.Task{ID: strconv.Itoa(i), Run: run, Deps: []string{"gate"}}
		task(i, &t)
		tasks = append(tasks, t)
	}
	if err := s.Submit(tasks...); err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.StartTimer()
	start := time.Now()
	close(open)
	if err := s.Wait(context.Background()); err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	runtime.ReadMemStats(&after)
	return elapsed, after.Mallocs - before.Mallocs
}

var rateT = flag.Duration("baton.rateT", 10*time.Second, "how long BenchmarkRateAccuracy keeps each rate limit busy")

// BenchmarkRateAccuracy: how many starts a rate limit of R a second
// allows over T (-baton.rateT, 10 s) with work waiting all along, as a
// share of R·T (the README promises at least R·T − 1 and at most R·T + B).
// A wake that comes late (the timer, the coordinator, the worker's claim)
// must not lose the time that passed: with burst 1 each late start once
// pushed every later one back (867 a second at 3,000 a second). Empty
// tasks on 4 workers; a start is the function's call.
func BenchmarkRateAccuracy(b *testing.B) {
	for _, c := range []struct {
		perSecond float64
		burst     int
	}{{300, 1}, {3000, 1}, {3000, 8}} {
		b.Run(fmt.Sprintf("rate=%v/burst=%d", c.perSecond, c.burst), func(b *testing.B) {
			var share float64
			for range b.N {
				s, err := coordinator.New(coordinator.WithWorkers(4), coordinator.WithRateLimit("", c.perSecond, c.burst))
				if err != nil {
					b.Fatal(err)
				}
				var started atomic.Int64
				n := int(c.perSecond*rateT.Seconds()*1.5) + 100
				tasks := make([]coordinator.Task, n)
				for i := range tasks {
					tasks[i] = coordinator.Task{ID: strconv.Itoa(i), Run: func(context.Context) error { started.Add(1); return nil }}
				}
				if err := s.Submit(tasks...); err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				<-time.NewTimer(*rateT).C // the measuring interval
				got := started.Load()
				elapsed := time.Since(start)
				share += float64(got) / (c.perSecond * elapsed.Seconds())
				for i := range tasks {
					s.Cancel(tasks[i].ID)
				}
				if err := s.Shutdown(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(100*share/float64(b.N), "%-of-R·T")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// historySetups are what BenchmarkHistory compares: the attempt history
// off, and on with its default bounds (coordinator.WithHistory).
var historySetups = []struct {
	name string
	opts []coordinator.Option
}{
	{"off", []coordinator.Option{coordinator.WithHistory(0, 0)}},
	{"default", nil},
	{"off-again", []coordinator.Option{coordinator.WithHistory(0, 0)}}, // the order's bias: it should match off
}

// BenchmarkHistory: what remembering every attempt costs the run phase of
// a flat graph behind a gate on two workers (-baton.n empty tasks, each
// setup in turn in every op so that they share the machine's noise); each
// reports its ns/attempt and allocations, and each setup after the first
// the median over the ops of its time in percent of off's in the same op
// (a median: one op disturbed by the shared machine moves a sum).
func BenchmarkHistory(b *testing.B) {
	n := *benchN
	total := make([]time.Duration, len(historySetups))
	mallocs := make([]uint64, len(historySetups))
	ratios := make([][]float64, len(historySetups))
	for range b.N {
		times := make([]time.Duration, len(historySetups))
		for i, st := range historySetups {
			elapsed, m := runFlow(b, n, 0, st.opts, func(int, *coordinator.Task) {})
			times[i] = elapsed
			total[i] += elapsed
			mallocs[i] += m
		}
		for i := range times {
			ratios[i] = append(ratios[i], times[i].Seconds()/times[0].Seconds())
		}
	}
	for i, st := range historySetups {
		b.ReportMetric(float64(total[i].Nanoseconds())/float64(b.N)/float64(n), st.name+"-ns/attempt")
		b.ReportMetric(float64(mallocs[i])/float64(b.N)/float64(n), st.name+"-allocs/attempt")
		if i > 0 {
			slices.Sort(ratios[i])
			b.ReportMetric(100*(ratios[i][len(ratios[i])/2]-1), st.name+"-median-%")
		}
	}
	b.ReportMetric(0, "ns/op")
}
