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
// it; workers (package worker) receive batches of attempts over a channel
// and send them back with their outcomes; one timer goroutine wakes the
// coordinator when the earliest delayed entry comes due. Every goroutine
// belongs to one errgroup and Shutdown waits for all of them. All time comes
// from the clock given to WithClock.
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
//     Shutdown. A Run that ignores it past a Timeout is abandoned; one that
//     ignores it at Shutdown delays Shutdown.
//  3. Keep subscriber callbacks short or unsubscribe them: events queue for
//     a slow subscriber without bound.
//  4. Tasks and subscriber callbacks may call Submit, Cancel, Info and
//     Subscribe; a task must not call Wait or Shutdown, which would wait for
//     that task itself.
//
// # Dispatch
//
// Handing work between goroutines costs far more than running an empty
// task, so the coordinator sends batches: a batch holds tasks of a single
// priority level of one pool, sized from the ready backlog over the idle
// workers and capped so that its measured work (a moving average per pool,
// read on the scheduler's clock once per batch) stays within about 50µs
// (and 1024 tasks). A
// ready task of a better priority therefore never waits behind more than
// that much work of a batch already handed out, and a pool whose tasks are
// slower than that gets batches of one: with one worker its order is exact.
// EventStarted is sent when an attempt is handed to a worker; within a
// batch, the attempt begins once the ones before it in the batch are done.
//
// A successor whose only unmet dependency is in the batch being cut may be
// fused into it, behind that dependency: the worker runs it only if the
// dependency succeeds, so a chain costs one hand-off per batch rather than
// one per link. A fused attempt is reported Started when its batch comes
// back, just before its outcome, and only if it ran; one that did not run
// waits again (or is skipped) exactly as if it had never been fused.
package coordinator
