// Package otelbaton instruments a Baton scheduler with OpenTelemetry:
// a span per attempt and metrics of tasks, attempts and workers, through
// the OpenTelemetry API, so that any SDK and exporter (OTLP, Prometheus,
// stdout) sees them. It is a module of its own, so that the core module
// does not depend on OpenTelemetry.
//
// # Usage
//
//	obs, err := otelbaton.New() // the global TracerProvider and MeterProvider
//	if err != nil { ... }
//	s, err := coordinator.New(coordinator.WithMiddleware(obs.Middleware))
//	if err != nil { ... }
//	stop, err := obs.Observe(s) // finished tasks, retries, tasks by status
//	if err != nil { ... }
//	defer stop()
//
// Middleware alone gives the spans and the per-attempt metrics; Observe
// adds what no attempt sees (skips, cancels, retries, the tasks waiting).
// Give New the scheduler's clock (WithClock) when the scheduler has one
// of its own, so that durations are measured on the same clock as
// worker.Job.Ready.
//
// # Traces
//
// Every attempt is a span named "baton.attempt" (SpanKindInternal),
// active in the task's context, so that the task's own spans nest under
// it. Its parent is the span in the context given to
// coordinator.SubmitContext, if any: a trace shows the submitter's work
// and every attempt it caused. Attributes: AttrTaskID, AttrAttempt,
// AttrRun, AttrPool and, at the end, AttrOutcome; a failed attempt
// records its error (an exception event) and sets the status Error; a
// panic is an exception event with the panic's value and stack, and goes
// on to the scheduler; a function that returns nil after its context
// ended by a timeout or a cancel is recorded as the scheduler records it
// (outcome timeout or cancelled, with the context's cause). A
// sampled attempt links to the span of the last attempt of each of its
// dependencies (coordinator.Upstream), as long as otelbaton still
// remembers it: it keeps the span contexts of the last WithLinkMemory
// tasks to have run (default DefaultLinkMemory), forgetting the oldest.
// The memory is by task ID: an Observer shared by schedulers with the
// same IDs, or a task ID reused under retention, may link to the span of
// the other task of that name.
// Looking the dependencies up costs a round trip to the coordinator, and
// is done only for attempts that are sampled.
//
// # Metrics
//
// Instrument names and units follow OpenTelemetry's naming guidance;
// attributes are bounded (pool, status, outcome), never a task ID:
//
//	baton.task.finished         Counter        {task}     tasks that reached a final status: AttrPool, AttrStatus (Observe; asynchronous)
//	baton.task.retries          Counter        {retry}    failed attempts that were retried: AttrPool (Observe; asynchronous)
//	baton.task.count            UpDownCounter  {task}     tasks held, by status: AttrPool, AttrStatus (Observe; asynchronous)
//	baton.attempt.finished      Counter        {attempt}  attempts that returned: AttrPool, AttrOutcome (asynchronous)
//	baton.attempt.duration      Histogram      s          how long an attempt ran: AttrPool, AttrOutcome
//	baton.attempt.queue.duration Histogram     s          from ready to started (worker.Job.Ready): AttrPool
//	baton.worker.busy           UpDownCounter  {worker}   workers running an attempt (tasks Running): AttrPool (Observe; asynchronous)
//	baton.pool.paused           UpDownCounter  {pool}     1 while the pool is paused (Scheduler.Pause), summed over schedulers: AttrPool (Observe; asynchronous)
//
// The asynchronous instruments cost an attempt one atomic add (or
// nothing); they are read at collection. The two histograms cost each attempt two clock
// readings and two synchronous measurements, most of the metrics' cost
// (BenchmarkCost): WithoutDurations leaves them out. A Prometheus
// exporter shows the instruments as baton_task_finished_total,
// baton_attempt_duration_seconds and so on (see examples/prometheus).
package otelbaton
