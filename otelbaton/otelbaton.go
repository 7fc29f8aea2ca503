package otelbaton

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/worker"
	"github.com/benbjohnson/clock"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/batonhq/baton/otelbaton"

// Version is the instrumentation scope's version.
const Version = "0.1.0"

// SpanName is the name of every attempt's span.
const SpanName = "baton.attempt"

// Attribute keys, on spans and metrics as the package doc says.
const (
	AttrTaskID  = attribute.Key("baton.task.id")         // spans only: the task's ID
	AttrAttempt = attribute.Key("baton.task.attempt")    // spans only: the attempt, 1-based within the run
	AttrRun     = attribute.Key("baton.task.run")        // spans only: the run, 1-based (worker.Job.Round)
	AttrPool    = attribute.Key("baton.pool")            // the pool ("" for the default pool)
	AttrOutcome = attribute.Key("baton.attempt.outcome") // how an attempt ended: one of the Outcome values
	AttrStatus  = attribute.Key("baton.task.status")     // a task's status: coordinator.Status.String()
)

// Outcome values of AttrOutcome.
const (
	OutcomeOK        = "ok"        // the attempt returned nil
	OutcomeError     = "error"     // it returned an error
	OutcomePanic     = "panic"     // it panicked
	OutcomeTimeout   = "timeout"   // its timeout passed (context cause worker.ErrTimeout)
	OutcomeCancelled = "cancelled" // Cancel or Shutdown ended it (cause coordinator.ErrCancelled or ErrClosed)
)

// DefaultLinkMemory is how many tasks' last spans are remembered for
// links, unless WithLinkMemory says otherwise.
const DefaultLinkMemory = 65536

// ErrInvalidOption is returned by New for an option it cannot honour.
var ErrInvalidOption = errors.New("otelbaton: invalid option")

// Option configures New.
type Option func(*config) error

type config struct {
	tp      trace.TracerProvider
	mp      metric.MeterProvider
	clk     clock.Clock
	links   int
	noTrace bool
	noMeter bool
	noTimes bool
}

// WithTracerProvider sets where spans go (default otel.GetTracerProvider()).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) error {
		if tp == nil {
			return fmt.Errorf("%w: WithTracerProvider(nil)", ErrInvalidOption)
		}
		c.tp = tp
		return nil
	}
}

// WithMeterProvider sets where metrics go (default otel.GetMeterProvider()).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) error {
		if mp == nil {
			return fmt.Errorf("%w: WithMeterProvider(nil)", ErrInvalidOption)
		}
		c.mp = mp
		return nil
	}
}

// WithClock sets the clock durations are measured with (default the
// real clock). Give it the scheduler's (coordinator.WithClock).
func WithClock(c clock.Clock) Option {
	return func(cfg *config) error {
		if c == nil {
			return fmt.Errorf("%w: WithClock(nil)", ErrInvalidOption)
		}
		cfg.clk = c
		return nil
	}
}

// WithLinkMemory sets how many tasks' last spans are remembered, for the
// links of their dependents' spans (default DefaultLinkMemory; a few
// hundred bytes each). A dependent that starts after its dependency was
// forgotten gets no link to it.
func WithLinkMemory(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: WithLinkMemory(%d): need at least 1", ErrInvalidOption, n)
		}
		c.links = n
		return nil
	}
}

// WithoutTracing turns spans off: metrics only.
func WithoutTracing() Option {
	return func(c *config) error { c.noTrace = true; return nil }
}

// WithoutDurations leaves out the two histograms, baton.attempt.duration
// and baton.attempt.queue.duration: no clock is read and no synchronous
// measurement is made per attempt, only atomic counts, which the
// asynchronous instruments read at collection (see BenchmarkCost for
// what the histograms cost).
func WithoutDurations() Option {
	return func(c *config) error { c.noTimes = true; return nil }
}

// WithoutMetrics turns metrics off: spans only.
func WithoutMetrics() Option {
	return func(c *config) error { c.noMeter = true; return nil }
}

// Observer instruments schedulers: its Middleware wraps their pools and
// Observe watches them. One Observer may serve several schedulers; their
// metrics then add up. Safe for concurrent use.
type Observer struct {
	tracer trace.Tracer // immutable; nil without tracing
	clk    clock.Clock  // immutable
	links  *linkMemory  // immutable; nil without tracing
	meter  metric.Meter // immutable; nil without metrics

	finished  metric.Int64ObservableCounter // immutable
	retries   metric.Int64ObservableCounter // immutable
	duration  metric.Float64Histogram       // immutable; nil WithoutDurations
	queueWait metric.Float64Histogram       // immutable; nil WithoutDurations
	taskCount metric.Int64ObservableUpDownCounter
	busy      metric.Int64ObservableUpDownCounter
	paused    metric.Int64ObservableUpDownCounter

	mu     sync.Mutex
	counts []*counts // guarded by mu: one per pool name, for the asynchronous instruments

	watchMu sync.Mutex                    // guards the fields below; collections may overlap
	reg     metric.Registration           // the callback of Observe, registered once
	watched []*watched                    // the schedulers Observe watches
	retired map[string]coordinator.Totals // what schedulers no longer watched counted, by pool
	attrs   map[string]*poolAttrs         // attribute sets by pool name
}

// counts are what the workers of the pools of one name count, read at
// each collection: atomic adds are all an attempt pays for them.
type counts struct {
	name string
	// attempts that returned, by outcome, in stripes a cache line apart
	// chosen by the task ID's hash, so that the workers of a pool seldom
	// write the same line.
	stripes [8]struct {
		attempts [len(outcomeNames)]atomic.Int64
		_        [64 - 8*len(outcomeNames)%64]byte
	}
	pool    metric.ObserveOption // immutable
	outcome [len(outcomeNames)]metric.ObserveOption
}

// New returns an Observer. It returns an error wrapping ErrInvalidOption
// for a bad option, or the meter's error if an instrument cannot be made.
func New(opts ...Option) (*Observer, error) {
	c := &config{links: DefaultLinkMemory}
	for _, opt := range opts {
		if err := opt(c); err != nil {
			return nil, err
		}
	}
	if c.clk == nil {
		c.clk = clock.New()
	}
	o := &Observer{clk: c.clk}
	if !c.noTrace {
		if c.tp == nil {
			c.tp = otel.GetTracerProvider()
		}
		o.tracer = c.tp.Tracer(ScopeName, trace.WithInstrumentationVersion(Version))
		o.links = newLinkMemory(c.links)
	}
	if !c.noMeter {
		if c.mp == nil {
			c.mp = otel.GetMeterProvider()
		}
		if err := o.instruments(c.mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version)), !c.noTimes); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// Bucket boundaries of the duration histograms, in seconds: 100µs to
// about 5 minutes.
var durationBuckets = []float64{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300}

func (o *Observer) instruments(m metric.Meter, durations bool) error {
	o.meter = m
	var err error
	mk := func(e error) {
		if err == nil {
			err = e
		}
	}
	var e error
	o.finished, e = m.Int64ObservableCounter("baton.task.finished", metric.WithUnit("{task}"),
		metric.WithDescription("Tasks that reached a final status (succeeded, failed, cancelled, skipped)."))
	mk(e)
	o.retries, e = m.Int64ObservableCounter("baton.task.retries", metric.WithUnit("{retry}"),
		metric.WithDescription("Failed attempts that will be tried again."))
	mk(e)
	if durations {
		o.duration, e = m.Float64Histogram("baton.attempt.duration", metric.WithUnit("s"),
			metric.WithDescription("How long an attempt ran, by outcome."), metric.WithExplicitBucketBoundaries(durationBuckets...))
		mk(e)
		o.queueWait, e = m.Float64Histogram("baton.attempt.queue.duration", metric.WithUnit("s"),
			metric.WithDescription("How long an attempt waited from ready to started."), metric.WithExplicitBucketBoundaries(durationBuckets...))
		mk(e)
	}
	_, e = m.Int64ObservableCounter("baton.attempt.finished", metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts that returned, by outcome."),
		metric.WithInt64Callback(func(_ context.Context, obs metric.Int64Observer) error {
			o.mu.Lock()
			defer o.mu.Unlock()
			for _, c := range o.counts {
				for i := range outcomeNames {
					var n int64
					for k := range c.stripes {
						n += c.stripes[k].attempts[i].Load()
					}
					obs.Observe(n, c.outcome[i])
				}
			}
			return nil
		}))
	mk(e)
	o.taskCount, e = m.Int64ObservableUpDownCounter("baton.task.count", metric.WithUnit("{task}"),
		metric.WithDescription("Tasks the scheduler holds, by status."))
	mk(e)
	o.busy, e = m.Int64ObservableUpDownCounter("baton.worker.busy", metric.WithUnit("{worker}"),
		metric.WithDescription("Workers running an attempt (tasks Running)."))
	mk(e)
	o.paused, e = m.Int64ObservableUpDownCounter("baton.pool.paused", metric.WithUnit("{pool}"),
		metric.WithDescription("1 while the pool is paused (Scheduler.Pause), summed over the schedulers observed."))
	mk(e)
	if err != nil {
		return fmt.Errorf("otelbaton: creating instruments: %w", err)
	}
	return nil
}

// Middleware is a coordinator.Middleware: pass it to
// coordinator.WithMiddleware. Every attempt of the pool gets a span (see
// the package doc) and is counted and timed; then next runs it, with the
// span active in its context. Middleware itself does not block and is
// safe for concurrent use; the Worker it returns adds nothing to an
// attempt's blocking but, for a sampled span, a round trip to the
// coordinator (coordinator.Upstream) for the links.
func (o *Observer) Middleware(poolName string, next worker.Worker) worker.Worker {
	set := attribute.NewSet(AttrPool.String(poolName))
	p := &pool{o: o, next: next, name: poolName, timed: o.duration != nil,
		poolAttr: []metric.RecordOption{metric.WithAttributeSet(set)},
		start:    []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}}
	for i, name := range outcomeNames {
		p.outcomeAttr[i] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(AttrPool.String(poolName), AttrOutcome.String(name)))}
	}
	if o.meter != nil {
		o.mu.Lock()
		for _, c := range o.counts {
			if c.name == poolName {
				p.counts = c // one series per pool name, whatever the scheduler
				break
			}
		}
		if p.counts == nil {
			c := &counts{name: poolName, pool: metric.WithAttributeSet(set)}
			for i, name := range outcomeNames {
				c.outcome[i] = metric.WithAttributeSet(attribute.NewSet(AttrPool.String(poolName), AttrOutcome.String(name)))
			}
			p.counts = c
			o.counts = append(o.counts, c)
		}
		o.mu.Unlock()
	}
	return p
}

type outcome uint8

const (
	ok outcome = iota
	failed
	panicked
	timedOut
	cancelled
)

// seed hashes task IDs to a stripe of counts.
var seed = maphash.MakeSeed()

var outcomeNames = [...]string{ok: OutcomeOK, failed: OutcomeError, panicked: OutcomePanic, timedOut: OutcomeTimeout, cancelled: OutcomeCancelled}

// pool is the middleware's Worker for one pool. Immutable.
type pool struct {
	o      *Observer
	next   worker.Worker
	name   string
	counts *counts // nil without metrics; shared by the pools of one name
	timed  bool    // record the duration histograms
	// The measurement options, as slices made once: a variadic call
	// with a slice allocates nothing.
	poolAttr    []metric.RecordOption
	outcomeAttr [len(outcomeNames)][]metric.RecordOption
	start       []trace.SpanStartOption
}

// Do runs one attempt inside its span and measurements. One deferred
// function records everything, so that a panic is recorded as one (the
// panic goes on to the scheduler, which reports the attempt failed).
func (p *pool) Do(ctx context.Context, j worker.Job) (err error) {
	o := p.o
	mctx := context.Background() // metrics read no span unless tracing (exemplars)
	var span trace.Span
	if o.tracer != nil {
		ctx, span = o.tracer.Start(ctx, SpanName, p.start...)
		if span.IsRecording() {
			span.SetAttributes(AttrTaskID.String(j.ID), AttrAttempt.Int(j.Attempt), AttrRun.Int(j.Round), AttrPool.String(p.name))
			o.link(ctx, span)
			mctx = ctx
		}
	}
	var start time.Time
	if p.timed {
		start = o.clk.Now()
		wait := 0.0
		if !j.Ready.IsZero() {
			wait = max(start.Sub(j.Ready).Seconds(), 0)
		}
		o.queueWait.Record(mctx, wait, p.poolAttr...)
	}
	panicking := true
	defer func() {
		oc := ok
		var pv any // the panic's value, recovered to be recorded and raised again
		switch {
		case panicking:
			oc = panicked
			if pv = recover(); pv == nil {
				pv = worker.ErrGoexit // runtime.Goexit, not a panic: let it go on
				break
			}
			defer panic(pv) // the scheduler's own recovery reports the attempt failed, with the stack
		case err != nil:
			oc = outcomeOf(ctx, err)
		case ctx.Err() != nil:
			// It returned nil after its context ended: the scheduler
			// records a timeout or a cancel, and so does the span.
			if c := outcomeOf(ctx, ctx.Err()); c == timedOut || c == cancelled {
				oc = c
			}
		}
		if p.counts != nil {
			p.counts.stripes[maphash.String(seed, j.ID)%uint64(len(p.counts.stripes))].attempts[oc].Add(1)
		}
		if p.timed {
			o.duration.Record(mctx, o.clk.Since(start).Seconds(), p.outcomeAttr[oc]...)
		}
		if span != nil {
			if span.IsRecording() {
				span.SetAttributes(AttrOutcome.String(outcomeNames[oc]))
				switch {
				case oc == panicked:
					span.RecordError(fmt.Errorf("panic: %v", pv), trace.WithStackTrace(true))
					span.SetStatus(codes.Error, "panic")
				case err == nil && oc != ok:
					span.RecordError(context.Cause(ctx))
					span.SetStatus(codes.Error, context.Cause(ctx).Error())
				case err != nil:
					span.RecordError(err)
					span.SetStatus(codes.Error, err.Error())
				}
				o.links.put(j.ID, span.SpanContext())
			}
			span.End()
		}
	}()
	err = p.next.Do(ctx, j)
	panicking = false
	return err
}

// outcomeOf classifies a failed attempt by its error and its context's
// cause.
func outcomeOf(ctx context.Context, err error) outcome {
	if pe := (*worker.PanicError)(nil); errors.As(err, &pe) {
		return panicked
	}
	if errors.Is(err, worker.ErrTimeout) {
		return timedOut
	}
	if ctx.Err() != nil {
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, worker.ErrTimeout):
			return timedOut
		case errors.Is(cause, coordinator.ErrCancelled), errors.Is(cause, coordinator.ErrClosed):
			return cancelled
		}
	}
	return failed
}

// link adds to span a link to the last span of each dependency of the
// attempt still remembered.
func (o *Observer) link(ctx context.Context, span trace.Span) {
	ups, err := coordinator.Upstream(ctx)
	if err != nil {
		return // not an attempt's context: a test calling Do directly
	}
	for _, u := range ups {
		if sc, ok := o.links.get(u.ID); ok {
			span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{AttrTaskID.String(u.ID)}})
		}
	}
}

// Observe watches s for what no attempt sees: tasks that end without
// running (skipped, cancelled), retries, how many tasks are in each
// status and how many workers run an attempt. Its instruments are
// asynchronous: at each collection it reads s.Totals (a round trip to the
// coordinator, whatever the number of tasks) and s.CountsByPool (which
// looks at every task: about 1ms per million tasks, on the coordinator);
// between collections it costs nothing. One Observer may watch several
// schedulers: their figures add up, and the counters (finished tasks,
// retries) keep what a scheduler counted after its watch stops, so that
// they never go down. stop ends the watch and returns the meter's error,
// if any; call it before or after s.Shutdown; it is idempotent. Without
// metrics (WithoutMetrics) Observe does nothing. Safe for concurrent use.
func (o *Observer) Observe(s *coordinator.Scheduler) (stop func() error, err error) {
	if o.meter == nil {
		return func() error { return nil }, nil
	}
	o.watchMu.Lock()
	defer o.watchMu.Unlock()
	if o.reg == nil {
		reg, err := o.meter.RegisterCallback(o.collect, o.finished, o.retries, o.taskCount, o.busy, o.paused)
		if err != nil {
			return nil, fmt.Errorf("otelbaton: registering the scheduler's instruments: %w", err)
		}
		o.reg = reg
	}
	w := &watched{s: s}
	o.watched = append(o.watched, w)
	var once sync.Once
	return func() error {
		once.Do(func() {
			// Under watchMu, as collect reads it: a collection between
			// this read and the retirement would export more than
			// retired keeps, and the counters would go down.
			o.watchMu.Lock()
			defer o.watchMu.Unlock()
			totals := s.Totals()
			o.watched = slices.DeleteFunc(o.watched, func(x *watched) bool { return x == w })
			if o.retired == nil {
				o.retired = map[string]coordinator.Totals{}
			}
			for name, t := range totals {
				r := o.retired[name]
				r.Succeeded += t.Succeeded
				r.Failed += t.Failed
				r.Cancelled += t.Cancelled
				r.Skipped += t.Skipped
				r.Retries += t.Retries
				o.retired[name] = r
			}
		})
		return nil
	}, nil
}

// watched is one scheduler an Observer watches.
type watched struct {
	s *coordinator.Scheduler // immutable
}

// collect observes the totals and counts of every watched scheduler,
// plus the totals of those no longer watched.
func (o *Observer) collect(_ context.Context, obs metric.Observer) error {
	o.watchMu.Lock()
	defer o.watchMu.Unlock()
	totals := make(map[string]coordinator.Totals, len(o.retired))
	for name, t := range o.retired {
		totals[name] = t
	}
	counts := map[string]coordinator.Counts{}
	paused := map[string]int64{} // by pool: the schedulers that paused it
	for _, w := range o.watched {
		for name, t := range w.s.Totals() {
			r := totals[name]
			r.Succeeded += t.Succeeded
			r.Failed += t.Failed
			r.Cancelled += t.Cancelled
			r.Skipped += t.Skipped
			r.Retries += t.Retries
			totals[name] = r
		}
		for name, c := range w.s.CountsByPool() {
			r := counts[name]
			r.Pending, r.Ready, r.Running = r.Pending+c.Pending, r.Ready+c.Ready, r.Running+c.Running
			r.Succeeded, r.Failed = r.Succeeded+c.Succeeded, r.Failed+c.Failed
			r.Cancelled, r.Skipped = r.Cancelled+c.Cancelled, r.Skipped+c.Skipped
			if c.Paused {
				paused[name]++
			}
			counts[name] = r
		}
	}
	for name, t := range totals {
		a := o.poolAttrs(name)
		for st := coordinator.Succeeded; st <= coordinator.Skipped; st++ {
			obs.ObserveInt64(o.finished, int64(t.Of(st)), a.status[st])
		}
		obs.ObserveInt64(o.retries, int64(t.Retries), a.pool)
	}
	for name, c := range counts {
		a := o.poolAttrs(name)
		for st := coordinator.Pending; st <= coordinator.Skipped; st++ {
			obs.ObserveInt64(o.taskCount, int64(c.Of(st)), a.status[st])
		}
		obs.ObserveInt64(o.busy, int64(c.Running), a.pool)
		obs.ObserveInt64(o.paused, paused[name], a.pool)
	}
	return nil
}

// poolAttrs returns the attribute sets of a pool's asynchronous
// measurements, made once. Called with watchMu held.
func (o *Observer) poolAttrs(name string) *poolAttrs {
	a := o.attrs[name]
	if a == nil {
		if o.attrs == nil {
			o.attrs = map[string]*poolAttrs{}
		}
		a = newPoolAttrs(name)
		o.attrs[name] = a
	}
	return a
}

// poolAttrs are the attribute sets of one pool's asynchronous
// measurements, made once.
type poolAttrs struct {
	pool   metric.ObserveOption
	status [coordinator.Skipped + 1]metric.ObserveOption
}

func newPoolAttrs(pool string) *poolAttrs {
	a := &poolAttrs{pool: metric.WithAttributeSet(attribute.NewSet(AttrPool.String(pool)))}
	for st := coordinator.Pending; st <= coordinator.Skipped; st++ {
		a.status[st] = metric.WithAttributeSet(attribute.NewSet(AttrPool.String(pool), AttrStatus.String(st.String())))
	}
	return a
}
