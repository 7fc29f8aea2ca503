package otelbaton_test

import (
	"context"
	"fmt"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/otelbaton"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Instrument a scheduler: the middleware for spans and per-attempt
// metrics, Observe for the rest. Here the spans go to an in-memory
// recorder and the metrics to a manual reader; a service would pass its
// own providers (or none: the global ones).
func Example() {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	obs, err := otelbaton.New(otelbaton.WithTracerProvider(tp), otelbaton.WithMeterProvider(mp))
	if err != nil {
		panic(err)
	}
	s, err := coordinator.New(coordinator.WithMiddleware(obs.Middleware))
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())
	stop, err := obs.Observe(s)
	if err != nil {
		panic(err)
	}
	defer stop()

	ctx, submit := tp.Tracer("example").Start(context.Background(), "deploy")
	s.SubmitContext(ctx, coordinator.Task{ID: "migrate", Run: func(context.Context) error { return nil }})
	submit.End()
	s.Wait(context.Background())

	for _, sp := range spans.Ended() {
		if sp.Name() == otelbaton.SpanName {
			fmt.Printf("%s, child of the submitter's span: %v\n", sp.Name(), sp.Parent().SpanID() == submit.SpanContext().SpanID())
		}
	}
	var rm metricdata.ResourceMetrics
	reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "baton.task.finished" {
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if status, _ := p.Attributes.Value(otelbaton.AttrStatus); status.AsString() == "succeeded" {
					fmt.Println("baton.task.finished{status=succeeded}:", p.Value)
				}
			}
		}
	}
	// Output:
	// baton.attempt, child of the submitter's span: true
	// baton.task.finished{status=succeeded}: 1
}
