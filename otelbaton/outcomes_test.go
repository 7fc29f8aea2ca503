package otelbaton_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/otelbaton"
	"github.com/batonhq/baton/worker"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// A panic, a timeout and a cancel are outcomes of their own, on the span
// and in baton.attempt.finished; a named pool is its own attribute.
func TestOutcomes(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	obs, err := otelbaton.New(otelbaton.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))),
		otelbaton.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		t.Fatal(err)
	}
	s, err := coordinator.New(coordinator.WithWorkers(3), coordinator.WithPool("io", 1, echoWorker{}),
		coordinator.WithMiddleware(obs.Middleware))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	running, runningNil := make(chan struct{}), make(chan struct{})
	err = s.Submit(
		coordinator.Task{ID: "boom", Run: func(context.Context) error { panic("boom") }},
		// runtime.Goexit (t.FailNow in a task) is recorded as a panic,
		// and the scheduler's recovery still sees a Goexit.
		coordinator.Task{ID: "exit", Run: func(context.Context) error { runtime.Goexit(); return nil }},
		coordinator.Task{ID: "late", Timeout: time.Millisecond, Run: func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		}},
		coordinator.Task{ID: "victim", Pool: "io", Run: func(ctx context.Context) error {
			close(running)
			<-ctx.Done()
			return ctx.Err()
		}},
		// These two return nil once their contexts end: the scheduler
		// records a timeout and a cancel, and so must the spans.
		coordinator.Task{ID: "lateNil", Timeout: time.Millisecond, Run: func(ctx context.Context) error {
			<-ctx.Done()
			return nil
		}},
		coordinator.Task{ID: "victimNil", Run: func(ctx context.Context) error {
			close(runningNil)
			<-ctx.Done()
			return nil
		}},
	)
	if err != nil {
		t.Fatal(err)
	}
	<-running
	<-runningNil
	s.Cancel("victim")
	s.Cancel("victimNil")
	if err := s.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := &rig{reader: reader}
	check(t, metrics(t, r), map[string]float64{
		"baton.attempt.finished{baton.attempt.outcome=panic,baton.pool=}":       2,
		"baton.attempt.finished{baton.attempt.outcome=timeout,baton.pool=}":     2,
		"baton.attempt.finished{baton.attempt.outcome=cancelled,baton.pool=io}": 1,
		"baton.attempt.finished{baton.attempt.outcome=cancelled,baton.pool=}":   1,
		"baton.attempt.finished{baton.attempt.outcome=ok,baton.pool=}":          0,
	})
	for id, want := range map[string]coordinator.Status{"lateNil": coordinator.Failed, "victimNil": coordinator.Cancelled} {
		if info, _ := s.Info(id); info.Status != want {
			t.Errorf("Info(%s) = %v; want %v", id, info.Status, want)
		}
	}
	// The panic is an exception event on the span; the scheduler still
	// reports it with the stack of the panicking function.
	var pe *worker.PanicError
	if info, _ := s.Info("boom"); !errors.As(info.Err, &pe) || !strings.Contains(string(pe.Stack), "TestOutcomes") {
		t.Errorf("Info(boom).Err = %v; want a *worker.PanicError with the task's stack", info.Err)
	}
	if info, _ := s.Info("exit"); !errors.Is(info.Err, worker.ErrGoexit) {
		t.Errorf("Info(exit).Err = %v; want worker.ErrGoexit", info.Err)
	}
	exception := false
	for _, sp := range spans.Ended() {
		for _, ev := range sp.Events() {
			for _, kv := range ev.Attributes {
				if ev.Name == "exception" && kv.Key == "exception.message" && strings.Contains(kv.Value.AsString(), "boom") {
					exception = true
				}
			}
		}
	}
	if !exception {
		t.Errorf("no exception event with the panic's value on any span")
	}
	got := map[string]string{}
	for _, sp := range spans.Ended() {
		for _, kv := range sp.Attributes() {
			if kv.Key == otelbaton.AttrOutcome {
				got[sp.Name()+" "+kv.Value.AsString()] = sp.Status().Description
				if sp.Status().Code != codes.Error {
					t.Errorf("%s: status %v; want Error", kv.Value.AsString(), sp.Status())
				}
			}
		}
	}
	for _, want := range []string{"baton.attempt panic", "baton.attempt timeout", "baton.attempt cancelled"} {
		if _, ok := got[want]; !ok {
			t.Errorf("no span %q among %v", want, got)
		}
	}
}

type echoWorker struct{}

func (echoWorker) Do(ctx context.Context, j worker.Job) error { return j.Run(ctx) }

func TestOptions(t *testing.T) {
	for name, opt := range map[string]otelbaton.Option{
		"WithTracerProvider(nil)": otelbaton.WithTracerProvider(nil),
		"WithMeterProvider(nil)":  otelbaton.WithMeterProvider(nil),
		"WithClock(nil)":          otelbaton.WithClock(nil),
		"WithLinkMemory(0)":       otelbaton.WithLinkMemory(0),
	} {
		if _, err := otelbaton.New(opt); !errors.Is(err, otelbaton.ErrInvalidOption) {
			t.Errorf("%s: New = %v; want ErrInvalidOption", name, err)
		}
	}
	obs, err := otelbaton.New(otelbaton.WithoutMetrics(), otelbaton.WithoutTracing())
	if err != nil {
		t.Fatal(err)
	}
	s, err := coordinator.New(coordinator.WithMiddleware(obs.Middleware))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	stop, err := obs.Observe(s)
	if err != nil || stop() != nil {
		t.Errorf("Observe without metrics = %v", err)
	}
	if err := s.Submit(coordinator.Task{ID: "a", Run: func(context.Context) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// WithoutDurations keeps the counts and leaves out the two histograms.
func TestWithoutDurations(t *testing.T) {
	r := newRig(t, 1, otelbaton.WithoutDurations(), otelbaton.WithoutTracing())
	inside, release := make(chan struct{}), make(chan struct{})
	knownGraph(t, r, inside, release)
	<-inside
	finish(t, r, release)
	got := metrics(t, r)
	check(t, got, map[string]float64{
		"baton.attempt.finished{baton.attempt.outcome=ok,baton.pool=}":    4,
		"baton.attempt.finished{baton.attempt.outcome=error,baton.pool=}": 2,
		"baton.task.finished{baton.pool=,baton.task.status=skipped}":      1,
	})
	for k := range got {
		if strings.Contains(k, ".duration") {
			t.Errorf("%s recorded WithoutDurations", k)
		}
	}
	for _, sp := range r.spans.Ended() {
		if sp.Name() == otelbaton.SpanName {
			t.Errorf("an attempt span WithoutTracing")
		}
	}
}

// One Observer for two schedulers: their series of the same pool add up.
func TestTwoSchedulersAddUp(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	obs, err := otelbaton.New(otelbaton.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		otelbaton.WithoutTracing())
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		s, err := coordinator.New(coordinator.WithMiddleware(obs.Middleware))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Shutdown(context.Background())
		stop, err := obs.Observe(s)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		if err := s.Submit(coordinator.Task{ID: "a", Run: func(context.Context) error { return nil }}); err != nil {
			t.Fatal(err)
		}
		if err := s.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	check(t, metrics(t, &rig{reader: reader}), map[string]float64{
		"baton.task.finished{baton.pool=,baton.task.status=succeeded}": 2,
		"baton.task.count{baton.pool=,baton.task.status=succeeded}":    2,
		"baton.attempt.finished{baton.attempt.outcome=ok,baton.pool=}": 2,
	})
}
