package otelbaton_test

import (
	"context"
	"testing"

	"github.com/batonhq/baton/otelbaton"
	"github.com/batonhq/baton/worker"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// BenchmarkDo: the middleware's own cost per attempt, called directly on
// one goroutine (no scheduler): what each setup adds to a worker.
func BenchmarkDo(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	never := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	always := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(discard{}))
	defer always.Shutdown(context.Background())
	for _, c := range []struct {
		name string
		opts []otelbaton.Option
	}{
		{"metrics", []otelbaton.Option{otelbaton.WithMeterProvider(mp), otelbaton.WithoutTracing()}},
		{"metrics-without-durations", []otelbaton.Option{otelbaton.WithMeterProvider(mp), otelbaton.WithoutTracing(), otelbaton.WithoutDurations()}},
		{"trace-never", []otelbaton.Option{otelbaton.WithTracerProvider(never), otelbaton.WithoutMetrics()}},
		{"trace-always", []otelbaton.Option{otelbaton.WithTracerProvider(always), otelbaton.WithoutMetrics()}},
	} {
		b.Run(c.name, func(b *testing.B) {
			obs, err := otelbaton.New(c.opts...)
			if err != nil {
				b.Fatal(err)
			}
			w := obs.Middleware("", worker.Func{})
			j := worker.Job{ID: "t", Run: func(context.Context) error { return nil }, Attempt: 1, Round: 1}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := w.Do(ctx, j); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
