package otelbaton_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/otelbaton"
	"github.com/batonhq/baton/worker"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

var costN = flag.Int("otelbaton.n", 100_000, "tasks per graph in BenchmarkCost")

// discard is a span exporter that drops every span.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// setup is one way of observing a scheduler: the options to give New,
// and what to do with the scheduler once it runs (Observe) and at the
// end.
type setup struct {
	name string
	make func() (opts []coordinator.Option, attach func(*coordinator.Scheduler) func())
}

var setups = []setup{
	{"none", func() ([]coordinator.Option, func(*coordinator.Scheduler) func()) { return nil, nil }},
	{"disabled-logger", func() ([]coordinator.Option, func(*coordinator.Scheduler) func()) {
		return []coordinator.Option{coordinator.WithLogger(slog.New(slog.DiscardHandler))}, nil
	}},
	{"pass-through-middleware", func() ([]coordinator.Option, func(*coordinator.Scheduler) func()) {
		mw := func(_ string, next worker.Worker) worker.Worker { return next }
		return []coordinator.Option{coordinator.WithMiddleware(mw)}, nil
	}},
	{"metrics", func() ([]coordinator.Option, func(*coordinator.Scheduler) func()) {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		obs, err := otelbaton.New(otelbaton.WithMeterProvider(mp), otelbaton.WithoutTracing())
		if err != nil {
			panic(err)
		}
		return []coordinator.Option{coordinator.WithMiddleware(obs.Middleware)}, func(s *coordinator.Scheduler) func() {
			stop, err := obs.Observe(s)
			if err != nil {
				panic(err)
			}
			return func() { stop() }
		}
	}},
	{"metrics-without-durations", func() ([]coordinator.Option, func(*coordinator.Scheduler) func()) {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		obs, err := otelbaton.New(otelbaton.WithMeterProvider(mp), otelbaton.WithoutTracing(), otelbaton.WithoutDurations())
		if err != nil {
			panic(err)
		}
		return []coordinator.Option{coordinator.WithMiddleware(obs.Middleware)}, func(s *coordinator.Scheduler) func() {
			stop, err := obs.Observe(s)
			if err != nil {
				panic(err)
			}
			return func() { stop() }
		}
	}},
	{"trace-never", func() ([]coordinator.Option, func(*coordinator.Scheduler) func()) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()), sdktrace.WithBatcher(discard{}))
		obs, err := otelbaton.New(otelbaton.WithTracerProvider(tp), otelbaton.WithoutMetrics())
		if err != nil {
			panic(err)
		}
		return []coordinator.Option{coordinator.WithMiddleware(obs.Middleware)}, func(*coordinator.Scheduler) func() {
			return func() { tp.Shutdown(context.Background()) }
		}
	}},
	{"trace-always", func() ([]coordinator.Option, func(*coordinator.Scheduler) func()) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(discard{}))
		obs, err := otelbaton.New(otelbaton.WithTracerProvider(tp), otelbaton.WithoutMetrics())
		if err != nil {
			panic(err)
		}
		return []coordinator.Option{coordinator.WithMiddleware(obs.Middleware)}, func(*coordinator.Scheduler) func() {
			return func() { tp.Shutdown(context.Background()) }
		}
	}},
}

// BenchmarkCost: the run phase of a graph of -otelbaton.n empty tasks
// behind a gate (flat: independent tasks; chain: each waits for the one
// before), timed from the opening of the gate to Wait returning, under
// each setup, in one process. ns/attempt is the figure to compare; its
// difference from "none" is what the setup costs per attempt.
func BenchmarkCost(b *testing.B) {
	for _, shape := range []string{"flat", "chain"} {
		for _, w := range []int{2} {
			for _, st := range setups {
				b.Run(fmt.Sprintf("%s/w=%d/%s", shape, w, st.name), func(b *testing.B) {
					runCost(b, shape, w, st)
				})
			}
		}
	}
}

func runCost(b *testing.B, shape string, workers int, st setup) {
	n := *costN
	ids := make([]string, n)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	run := func(context.Context) error { return nil }
	var total time.Duration
	var mallocs uint64
	var before, after runtime.MemStats
	for range b.N {
		b.StopTimer()
		opts, attach := st.make()
		s, err := coordinator.New(append([]coordinator.Option{coordinator.WithWorkers(workers)}, opts...)...)
		if err != nil {
			b.Fatal(err)
		}
		detach := func() {}
		if attach != nil {
			detach = attach(s)
		}
		open := make(chan struct{})
		tasks := make([]coordinator.Task, 0, n+1)
		tasks = append(tasks, coordinator.Task{ID: "gate", Run: func(context.Context) error { <-open; return nil }})
		for i := range n {
			dep := "gate"
			if shape == "chain" && i > 0 {
				dep = ids[i-1]
			}
			tasks = append(tasks, coordinator.Task{ID: ids[i], Run: run, Deps: []string{dep}})
		}
		if err := s.Submit(tasks...); err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		start := time.Now()
		close(open)
		if err := s.Wait(context.Background()); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		b.StopTimer()
		runtime.ReadMemStats(&after)
		mallocs += after.Mallocs - before.Mallocs
		if info, _ := s.Info(ids[n-1]); info.Status != coordinator.Succeeded {
			b.Fatalf("last task %v", info.Status)
		}
		s.Shutdown(context.Background())
		detach()
		b.StartTimer()
	}
	attempts := float64(b.N) * float64(n)
	b.ReportMetric(float64(total.Nanoseconds())/attempts, "ns/attempt")
	b.ReportMetric(float64(mallocs)/attempts, "allocs/attempt")
	b.ReportMetric(0, "ns/op")
}
