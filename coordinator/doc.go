// Package coordinator is Baton's public API: a Scheduler that runs a graph
// of tasks on pools of workers.
//
// A task starts only after every task it depends on has succeeded. Ready
// tasks start by Priority (lower first; ties in the order they became
// ready) on the workers of their pool. A failed attempt is retried after a
// capped, jittered exponential backoff without holding a worker. Tasks can
// be delayed, recurring and cancelled; a task that fails or is cancelled
// skips everything downstream of it. Callers Subscribe to events and Wait
// until the graph settles.
//
// # Design
//
// One coordinator goroutine owns all scheduling state (unmet-dependency
// counts, the ready queues, the delayed set in a timerwheel.Wheel) and no
// mutex guards it. Submit, Cancel, Info, Subscribe and Wait are messages to
// it; worker goroutines run the attempts the coordinator hands them (see
// Dispatch) and report how far they got; one timer goroutine wakes the
// coordinator when the earliest delayed entry comes due. The coordinator,
// timer and workers belong to one errgroup; Shutdown waits for them, for
// the subscribers' goroutines and for attempts abandoned at a timeout.
// All time comes from the clock given to WithClock.
//
// # Usage
//
//	s, err := coordinator.New(coordinator.WithWorkers(4))
//	if err != nil { ... }
//	defer s.Shutdown(ctx)
//	err = s.Submit(
//		coordinator.Task{ID: "fetch", Run: fetch},
//		coordinator.Task{ID: "build", Run: build, Deps: []string{"fetch"},
//			Retry: coordinator.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Second}},
//	)
//	if err != nil { ... }
//	err = s.Wait(ctx)
//
// The caller's duties:
//
//  1. Call Shutdown once done; until then the scheduler's goroutines run.
//  2. Make Run honour its context: it ends on Cancel, on Timeout and on
//     Shutdown. A Run still running WithAbandonAfter past its Timeout is
//     abandoned; one that ignores it at Shutdown delays Shutdown. Do not
//     keep the context after Run returns unless Run called one of its
//     methods: an untouched context is reused for a later attempt.
//  3. Keep subscriber callbacks short or unsubscribe them: events queue for
//     a slow subscriber without bound.
//  4. Tasks may call Submit, Cancel, Info and Subscribe; Wait and
//     Shutdown would wait for the task itself: called from a task, they
//     return ErrFromTask at once (Shutdown begins the shutdown first).
//     Subscriber callbacks may call every method, Wait and Shutdown
//     included.
//
// # Dispatch
//
// Handing work between goroutines costs far more than running an empty
// task, so the coordinator hands each worker many attempts at once: every
// worker owns a lane, a ring of attempts the coordinator appends to and the
// worker runs in order. A lane holds about 50µs of work at the pool's
// measured cost per attempt (at least two, so that a worker never waits
// for the coordinator between two attempts, and at most 512). A fill
// takes one priority level, so where every task has its own priority a
// lane of a pool of several workers may hold one attempt at a time, and
// its worker then waits for the coordinator between attempts (about 2.5µs
// per empty task against 0.1µs at one level, measured on 2 workers); a
// pool of one worker takes levels in order. That size is
// an estimate, and nothing relies on it: every attempt handed out carries a
// claim that exactly one side wins. The worker claims an attempt just
// before it calls the function; until then the coordinator may take it
// back, and does:
//
//   - Cancel of a task handed out but not claimed ends it at once.
//   - A worker with nothing to do takes about half of the unclaimed work of
//     the busiest lane of its pool, the oldest first, in its order (the
//     next busiest lane, if all of that waits
//     for the attempt its worker runs), so no worker idles while work handed
//     out to another waits to start, whatever the durations. A worker that
//     runs nothing keeps its next item: it is about to claim it.
//   - A ready task of a better priority waits at most for the attempts
//     already running and revokeDelay (200µs); then worse work handed out
//     and not claimed is taken back and the better task goes first.
//   - With several priority levels in a pool, handed-out work is not left
//     behind an attempt that has run for revokeDelay while another worker
//     of the pool holds worse work: it is taken back; and a worker about to
//     be given more work first takes back, from the other lanes, what is
//     better than the best ready task. When tasks of one level are ready
//     for several idle workers, each gets its share of the best level.
//
// A successor whose only unmet dependency is in a lane may be fused behind
// it: the worker runs it only if that dependency succeeded, so a chain
// costs no round trip per link. Fusion never reorders the ready queue:
// nothing is fused while a ready task of the same or a better priority
// waits, and nothing worse than the lane's work is fused into it. A task
// fused behind a dependency that has not succeeded is Pending; it cancels
// at once, and what waits on it is skipped. A durable scheduler (WithStore)
// fuses nothing and commits before it hands work out: a task's function is
// called only once the ends that released it are committed, so a crash
// never makes a dependency run again after its dependent (the roots of a
// batch its caller journals itself may go out before the commit that
// stores them: SubmitJournaled).
//
// What the states and events mean, precisely:
//
//   - Ready: queued for its pool, or handed to a worker that has not
//     claimed it yet.
//   - Running: a worker claimed the attempt; its function has been called
//     and has not returned, or is about to be called. An attempt whose
//     function returned and whose outcome the coordinator has not applied
//     yet is Running until then; Info applies every finished attempt
//     before it answers.
//   - EventStarted: a worker claimed the attempt. Its At is when the
//     coordinator learned of the claim: at once for the first attempt of a
//     worker that had nothing to do, with its worker's next report
//     otherwise (about a lane's worth of work later at most, unless the
//     attempt before it on the same worker runs long), and never before the
//     events of the dependencies it waited for, nor before the ends of the
//     attempts its worker ran before it: the events never show more
//     attempts of a pool running than it has workers. While every
//     subscriber accepts a lag (MaxLag), starts and ends are learnt from
//     the reports the workers send anyway and from a look at every lane
//     each lag: at most the lag after the claim or the end.
//
// Workers report a failure, and any attempt of a task with retries, a
// delay, a series or a timeout, as soon as it ends, so that retry waits and
// series keep their times; a success that releases work an idle worker
// could take is reported at once too, and so is one that may release a
// task better than work handed out since. Other successes are reported in
// groups, at most about half a lane later; a worker that goes idle makes
// the coordinator look at every lane for successes not yet reported.
//
// What is measured (TestRandomGraphsKeepWorkersBusy, random graphs of
// tasks from 1ms to 100ms on one or two pools, 100 runs of 14,400 starts;
// and an adversarial review's simulation, 200 random graphs of 300 tasks
// over two pools with up to three levels): no worker was ever idle while
// a task of its pool was ready; a task started while a better one had
// been ready for more than 250µs twice in 60,000 starts, both within
// 320µs (the better task handed out behind an attempt that started just
// before it was ready: it waits for that attempt to run revokeDelay, is
// given back, and worse work handed to a busy worker is taken back for
// it). Ties across workers start in the order they were handed out, not
// always in the order they became ready (a tie handed to a free worker
// may start before one handed earlier to a busy worker).
//
// # Observing
//
// WithLogger writes the life of every task as structured log lines (keys
// and messages are the LogKey and LogMsg constants), from a goroutine of
// its own, and costs nothing while the handler's levels are disabled.
// WithMiddleware wraps every attempt of every pool, so that a span, a
// logger or a timer is active in the attempt's context; the nested module
// github.com/batonhq/baton/otelbaton plugs OpenTelemetry traces and
// metrics in that way. Snapshot returns the graph (tasks, edges, statuses,
// filtered to a task and its ancestors, for instance), which WriteDOT and
// WriteMermaid draw; Counts, CountsByPool and Totals give the figures a
// dashboard polls.
package coordinator
