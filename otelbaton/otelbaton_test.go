package otelbaton_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/otelbaton"
	"github.com/benbjohnson/clock"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// rig is a scheduler on a mock clock, instrumented with in-memory
// exporters.
type rig struct {
	clk    *clock.Mock
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	s      *coordinator.Scheduler
}

func newRig(t *testing.T, workers int, opts ...otelbaton.Option) *rig {
	t.Helper()
	r := &rig{clk: clock.NewMock(), spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	obs, err := otelbaton.New(append([]otelbaton.Option{otelbaton.WithTracerProvider(r.tp), otelbaton.WithMeterProvider(mp),
		otelbaton.WithClock(r.clk)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	r.s, err = coordinator.New(coordinator.WithClock(r.clk), coordinator.WithWorkers(workers),
		coordinator.WithMiddleware(obs.Middleware))
	if err != nil {
		t.Fatal(err)
	}
	stop, err := obs.Observe(r.s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("stop = %v", err)
		}
		if err := r.s.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown = %v", err)
		}
	})
	return r
}

// knownGraph runs, on one worker: slow (2s on the mock clock, first by
// priority, and held until release is closed), fetch -> build (which
// opens a span of its own), flaky (fails once, then succeeds), lint
// (fails) -> report (skipped), nightly (delayed, then cancelled). inside
// is closed while slow holds its worker.
func knownGraph(t *testing.T, r *rig, inside chan<- struct{}, release <-chan struct{}) {
	t.Helper()
	tracer := r.tp.Tracer("test")
	ctx, submit := tracer.Start(context.Background(), "submit")
	tries := 0
	err := r.s.SubmitContext(ctx,
		coordinator.Task{ID: "slow", Priority: -1, Run: func(context.Context) error {
			r.clk.Add(2 * time.Second)
			close(inside)
			<-release
			return nil
		}},
		coordinator.Task{ID: "fetch", Run: func(context.Context) error { return nil }},
		coordinator.Task{ID: "build", Deps: []string{"fetch"}, Run: func(ctx context.Context) error {
			_, span := tracer.Start(ctx, "compile")
			span.End()
			return nil
		}},
		coordinator.Task{ID: "flaky", Run: func(context.Context) error {
			if tries++; tries == 1 {
				return errors.New("connection reset")
			}
			return nil
		}, Retry: coordinator.RetryPolicy{MaxAttempts: 2}},
		coordinator.Task{ID: "lint", Run: func(context.Context) error { return errors.New("style") }},
		coordinator.Task{ID: "report", Deps: []string{"lint"}, Run: func(context.Context) error { return nil }},
		coordinator.Task{ID: "nightly", Delay: 24 * time.Hour, Run: func(context.Context) error { return nil }},
	)
	submit.End()
	if err != nil {
		t.Fatal(err)
	}
}

// finish releases slow, cancels nightly and waits for every task.
func finish(t *testing.T, r *rig, release chan struct{}) {
	t.Helper()
	close(release)
	if err := r.s.WaitTasks(context.Background(), "slow", "build", "flaky", "report"); err == nil {
		t.Fatal("WaitTasks = nil; want report listed as skipped")
	}
	if !r.s.Cancel("nightly") {
		t.Fatal("Cancel(nightly) = false")
	}
	if err := r.s.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// tree renders the recorded spans as an indented tree under their roots,
// siblings sorted by name, task and attempt, with each attempt's outcome
// and links.
func tree(spans []sdktrace.ReadOnlySpan) string {
	kids := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	var roots []sdktrace.ReadOnlySpan
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = s
	}
	for _, s := range spans {
		if _, ok := byID[s.Parent().SpanID()]; s.Parent().IsValid() && ok {
			kids[s.Parent().SpanID()] = append(kids[s.Parent().SpanID()], s)
		} else {
			roots = append(roots, s)
		}
	}
	var b strings.Builder
	sortSpans := func(list []sdktrace.ReadOnlySpan) {
		slices.SortFunc(list, func(x, y sdktrace.ReadOnlySpan) int { return strings.Compare(label(x, byID), label(y, byID)) })
	}
	var walk func(list []sdktrace.ReadOnlySpan, prefix string)
	walk = func(list []sdktrace.ReadOnlySpan, prefix string) {
		sortSpans(list)
		for i, s := range list {
			branch, next := "├── ", "│   "
			if i == len(list)-1 {
				branch, next = "└── ", "    "
			}
			b.WriteString(prefix + branch + label(s, byID) + "\n")
			walk(kids[s.SpanContext().SpanID()], prefix+next)
		}
	}
	sortSpans(roots)
	for _, root := range roots {
		b.WriteString(label(root, byID) + "\n")
		walk(kids[root.SpanContext().SpanID()], "")
	}
	return b.String()
}

func label(s sdktrace.ReadOnlySpan, byID map[trace.SpanID]sdktrace.ReadOnlySpan) string {
	attrs := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		attrs[kv.Key] = kv.Value
	}
	if s.Name() != otelbaton.SpanName {
		return s.Name()
	}
	l := fmt.Sprintf("%s task=%s attempt=%d run=%d outcome=%s", s.Name(), attrs[otelbaton.AttrTaskID].AsString(),
		attrs[otelbaton.AttrAttempt].AsInt64(), attrs[otelbaton.AttrRun].AsInt64(), attrs[otelbaton.AttrOutcome].AsString())
	if s.Status().Code == codes.Error {
		l += fmt.Sprintf(" error=%q", s.Status().Description)
	}
	for _, lk := range s.Links() {
		if to, ok := byID[lk.SpanContext.SpanID()]; ok {
			for _, kv := range to.Attributes() {
				if kv.Key == otelbaton.AttrTaskID {
					l += " link→" + kv.Value.AsString()
				}
			}
		}
	}
	return l
}

// wantTree is the trace of knownGraph, as docs/observability.md shows it.
const wantTree = `submit
├── baton.attempt task=build attempt=1 run=1 outcome=ok link→fetch
│   └── compile
├── baton.attempt task=fetch attempt=1 run=1 outcome=ok
├── baton.attempt task=flaky attempt=1 run=1 outcome=error error="connection reset"
├── baton.attempt task=flaky attempt=2 run=1 outcome=ok
├── baton.attempt task=lint attempt=1 run=1 outcome=error error="style"
└── baton.attempt task=slow attempt=1 run=1 outcome=ok
`

// Every attempt is a span under the submitter's span; the task's own span
// nests under its attempt's; build links to fetch; failures carry their
// error; skipped and cancelled tasks have no span.
func TestTraces(t *testing.T) {
	r := newRig(t, 1)
	inside, release := make(chan struct{}), make(chan struct{})
	knownGraph(t, r, inside, release)
	<-inside
	finish(t, r, release)
	spans := r.spans.Ended()
	got := tree(spans)
	t.Logf("trace:\n%s", got)
	if got != wantTree {
		t.Errorf("trace:\n%s\nwant:\n%s", got, wantTree)
	}
	for _, s := range spans {
		if s.InstrumentationScope().Name == otelbaton.ScopeName && s.SpanKind() != trace.SpanKindInternal {
			t.Errorf("%s: kind %v; want internal", s.Name(), s.SpanKind())
		}
		if label(s, nil) == "baton.attempt task=lint attempt=1 run=1 outcome=error error=\"style\"" {
			if ev := s.Events(); len(ev) != 1 || ev[0].Name != "exception" {
				t.Errorf("lint's span events = %v; want the recorded error", ev)
			}
		}
	}
	readme, err := os.ReadFile("../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), wantTree) {
		t.Errorf("docs/observability.md does not show the trace tree this test prints: update it")
	}
}

// metrics collects and indexes every data point by "name{attr=value,...}".
func metrics(t *testing.T, r *rig) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	key := func(name string, set attribute.Set) string {
		var parts []string
		for _, kv := range set.ToSlice() {
			parts = append(parts, string(kv.Key)+"="+kv.Value.String())
		}
		return name + "{" + strings.Join(parts, ",") + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otelbaton.ScopeName {
			continue
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)+".count"] = float64(p.Count)
					out[key(m.Name, p.Attributes)+".sum"] = p.Sum
				}
			default:
				t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out
}

func check(t *testing.T, got map[string]float64, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present: %v); want %v", k, g, ok, v)
		}
	}
}

// Every metric's value, while slow holds the worker and after the known
// graph has run.
func TestMetrics(t *testing.T) {
	r := newRig(t, 1)
	inside, release := make(chan struct{}), make(chan struct{})
	knownGraph(t, r, inside, release)
	<-inside
	check(t, metrics(t, r), map[string]float64{
		"baton.worker.busy{baton.pool=}":                            1,
		"baton.task.count{baton.pool=,baton.task.status=running}":   1,
		"baton.task.count{baton.pool=,baton.task.status=pending}":   3, // build, report, nightly
		"baton.task.count{baton.pool=,baton.task.status=ready}":     3, // fetch, flaky, lint
		"baton.task.count{baton.pool=,baton.task.status=skipped}":   0,
		"baton.attempt.queue.duration{baton.pool=}.count":           1,
		"baton.attempt.queue.duration{baton.pool=}.sum":             0,
		"baton.task.count{baton.pool=,baton.task.status=succeeded}": 0,
	})
	finish(t, r, release)
	got := metrics(t, r)
	check(t, got, map[string]float64{
		"baton.task.finished{baton.pool=,baton.task.status=succeeded}": 4, // slow, fetch, build, flaky
		"baton.task.finished{baton.pool=,baton.task.status=failed}":    1, // lint
		"baton.task.finished{baton.pool=,baton.task.status=skipped}":   1, // report
		"baton.task.finished{baton.pool=,baton.task.status=cancelled}": 1, // nightly
		"baton.task.retries{baton.pool=}":                              1, // flaky
		// slow ran 2s on the mock clock; nothing else took time.
		"baton.attempt.finished{baton.attempt.outcome=ok,baton.pool=}":          4,
		"baton.attempt.finished{baton.attempt.outcome=error,baton.pool=}":       2,
		"baton.attempt.duration{baton.attempt.outcome=ok,baton.pool=}.count":    4,
		"baton.attempt.duration{baton.attempt.outcome=ok,baton.pool=}.sum":      2,
		"baton.attempt.duration{baton.attempt.outcome=error,baton.pool=}.count": 2,
		"baton.attempt.duration{baton.attempt.outcome=error,baton.pool=}.sum":   0,
		// fetch, flaky and lint were ready at 0 and started after slow's
		// 2s; build, flaky's retry and slow waited nothing.
		"baton.attempt.queue.duration{baton.pool=}.count":           6,
		"baton.attempt.queue.duration{baton.pool=}.sum":             6,
		"baton.worker.busy{baton.pool=}":                            0,
		"baton.task.count{baton.pool=,baton.task.status=succeeded}": 4,
		"baton.task.count{baton.pool=,baton.task.status=failed}":    1,
		"baton.task.count{baton.pool=,baton.task.status=skipped}":   1,
		"baton.task.count{baton.pool=,baton.task.status=cancelled}": 1,
		"baton.task.count{baton.pool=,baton.task.status=running}":   0,
		"baton.task.count{baton.pool=,baton.task.status=pending}":   0,
	})
	if t.Failed() {
		t.Logf("collected: %v", got)
	}
}

// baton.pool.paused follows Pause and Resume.
func TestPausedMetric(t *testing.T) {
	r := newRig(t, 1)
	check(t, metrics(t, r), map[string]float64{"baton.pool.paused{baton.pool=}": 0})
	if err := r.s.Pause(""); err != nil {
		t.Fatal(err)
	}
	check(t, metrics(t, r), map[string]float64{"baton.pool.paused{baton.pool=}": 1})
	if err := r.s.Resume(""); err != nil {
		t.Fatal(err)
	}
	check(t, metrics(t, r), map[string]float64{"baton.pool.paused{baton.pool=}": 0})
}

// One Observer on two schedulers adds their figures up, and its counters
// keep what a scheduler counted after its watch stops: they never go down.
func TestCountersSurviveAStoppedWatch(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs, err := otelbaton.New(otelbaton.WithMeterProvider(mp), otelbaton.WithoutTracing())
	if err != nil {
		t.Fatal(err)
	}
	run := func(n int) (*coordinator.Scheduler, func() error) {
		s, err := coordinator.New(coordinator.WithMiddleware(obs.Middleware))
		if err != nil {
			t.Fatal(err)
		}
		stop, err := obs.Observe(s)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if err := s.Submit(coordinator.Task{ID: fmt.Sprint(i), Run: func(context.Context) error { return nil }}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		return s, stop
	}
	a, stopA := run(3)
	b, stopB := run(5)
	r := &rig{reader: reader}
	const finished = "baton.task.finished{baton.pool=,baton.task.status=succeeded}"
	check(t, metrics(t, r), map[string]float64{finished: 8})
	for _, step := range []func() error{stopA, stopA, func() error { return a.Shutdown(context.Background()) }, stopB,
		func() error { return b.Shutdown(context.Background()) }} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
		check(t, metrics(t, r), map[string]float64{finished: 8})
	}
}

// A watch stopped while its scheduler still runs, with collections going
// on beside it: the counter never goes down (it did by thousands when
// stop read the totals before it took the collections' lock).
func TestCounterNeverDownWhenAWatchStopsMidRun(t *testing.T) {
	const finished = "baton.task.finished{baton.pool=,baton.task.status=succeeded}"
	for trial := range 5 {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		obs, err := otelbaton.New(otelbaton.WithMeterProvider(mp), otelbaton.WithoutTracing())
		if err != nil {
			t.Fatal(err)
		}
		s, err := coordinator.New(coordinator.WithWorkers(2))
		if err != nil {
			t.Fatal(err)
		}
		stop, err := obs.Observe(s)
		if err != nil {
			t.Fatal(err)
		}
		var g coordinator.Graph
		for i := range 20000 {
			g.Add(coordinator.Task{ID: fmt.Sprint(i), Run: func(context.Context) error { return nil }})
		}
		if err := s.SubmitGraph(context.Background(), &g); err != nil {
			t.Fatal(err)
		}
		r := &rig{reader: reader}
		var most atomic.Int64
		done := make(chan struct{})
		collected := make(chan struct{})
		go func() {
			defer close(collected)
			for {
				select {
				case <-done:
					return
				default:
				}
				v := int64(metrics(t, r)[finished])
				for m := most.Load(); v > m && !most.CompareAndSwap(m, v); m = most.Load() {
				}
			}
		}()
		for most.Load() < 2000 { // some have finished, most have not
			runtime.Gosched()
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		close(done)
		<-collected
		if after := int64(metrics(t, r)[finished]); after < most.Load() {
			t.Errorf("trial %d: %s went down from %d to %d when the watch stopped", trial, finished, most.Load(), after)
		}
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}
