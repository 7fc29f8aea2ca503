package bench

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
)

// observeSetups are the ways of listening to a scheduler that
// BenchmarkObserve compares: nobody; a subscriber whose callback does
// nothing, told every event at once; the same with coordinator.MaxLag;
// one told failures only (coordinator.Kinds), and one told the ends that
// are not successes with MaxLag (what the dashboard subscribes to).
var observeSetups = []struct {
	name      string
	subscribe func(*coordinator.Scheduler) (unsubscribe func())
}{
	{"none", func(*coordinator.Scheduler) func() { return func() {} }},
	{"prompt", func(s *coordinator.Scheduler) func() { return s.Subscribe(func(coordinator.Event) {}) }},
	{"lag=50ms", func(s *coordinator.Scheduler) func() {
		return s.Subscribe(func(coordinator.Event) {}, coordinator.MaxLag(50*time.Millisecond))
	}},
	{"failures", func(s *coordinator.Scheduler) func() {
		return s.Subscribe(func(coordinator.Event) {}, coordinator.Kinds(coordinator.EventFailed, coordinator.EventRetrying))
	}},
	{"ends-lag=50ms", func(s *coordinator.Scheduler) func() {
		return s.Subscribe(func(coordinator.Event) {}, coordinator.MaxLag(50*time.Millisecond),
			coordinator.Kinds(coordinator.EventFailed, coordinator.EventRetrying, coordinator.EventCancelled, coordinator.EventSkipped))
	}},
}

// BenchmarkObserve: what a subscriber costs the run phase of a flat graph
// behind a gate on two workers (-baton.n empty tasks; a twentieth as many
// of 20µs of busy work each), timed from the opening of the gate to Wait
// returning. Each op runs the graph once with every setup in turn, so
// that the setups interleave in one process and share the machine's
// noise; each reports its ns/attempt, and each setup but none its cost in
// percent of none's time, and the processor time of the whole process
// per attempt (cpu-ns/attempt: workers, coordinator, subscriber, GC),
// which other load on the machine disturbs less than the elapsed time.
func BenchmarkObserve(b *testing.B) {
	for _, work := range []time.Duration{0, 20 * time.Microsecond} {
		n := *benchN
		if work > 0 {
			n = max(1, n/20)
		}
		b.Run(fmt.Sprintf("work=%v", work), func(b *testing.B) {
			total := make([]time.Duration, len(observeSetups))
			cpu := make([]time.Duration, len(observeSetups))
			for range b.N {
				for i, st := range observeSetups {
					elapsed, used := runObserved(b, n, work, st.subscribe)
					total[i] += elapsed
					cpu[i] += used
				}
			}
			for i, st := range observeSetups {
				b.ReportMetric(float64(total[i].Nanoseconds())/float64(b.N)/float64(n), st.name+"-ns/attempt")
				b.ReportMetric(float64(cpu[i].Nanoseconds())/float64(b.N)/float64(n), st.name+"-cpu-ns/attempt")
				if i > 0 {
					b.ReportMetric(100*(total[i].Seconds()/total[0].Seconds()-1), st.name+"-%")
				}
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// runObserved runs one graph with the listener subscribe attaches, and
// returns its run phase's elapsed and processor time.
func runObserved(b *testing.B, n int, work time.Duration, subscribe func(*coordinator.Scheduler) func()) (elapsed, cpu time.Duration) {
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
	s, err := coordinator.New(coordinator.WithWorkers(2))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	unsubscribe := subscribe(s)
	defer unsubscribe()
	open := make(chan struct{})
	tasks := make([]coordinator.Task, 0, n+1)
	tasks = append(tasks, coordinator.Task{ID: "gate", Run: func(context.Context) error { <-open; return nil }})
	for i := range n {
		tasks = append(tasks, coordinator.Task{ID: strconv.Itoa(i), Run: run, Deps: []string{"gate"}})
	}
	if err := s.Submit(tasks...); err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	b.StartTimer()
	start, cpu0 := time.Now(), cpuTime()
	close(open)
	if err := s.Wait(context.Background()); err != nil {
		b.Fatal(err)
	}
	elapsed, cpu = time.Since(start), cpuTime()-cpu0
	b.StopTimer()
	return elapsed, cpu
}
