package coordinator

import (
	"context"
	"log/slog"
)

// Task-life logs (WithLogger). Each line is one event of a task, logged
// with the event's time (the scheduler's clock) and these messages and
// attribute keys, which are stable: alerts and queries may rely on them.
//
//	level  message            attributes
//	Debug  "task started"     task, pool, attempt, run
//	Debug  "task succeeded"   task, pool, attempt, run
//	Debug  "task run done"    task, pool, attempt, run (a run of a recurring task; more follow)
//	Warn   "task retrying"    task, pool, attempt, run, error, wait
//	Error  "task failed"      task, pool, attempt, run, error
//	Info   "task cancelled"   task, pool, cause (error text: ErrCancelled or ErrClosed)
//	Info   "task skipped"     task, pool, cause (the upstream task to blame; "" if its own rule was not met)
//	Debug  "task joining"     task, pool, attempt, run (its attempt succeeded having spawned tasks; it waits for them)
//	Debug  "task spawned"     task, pool, parent (it joined the graph: its spawner's attempt succeeded)
//	Info   "task snoozed"     task, pool, attempt, run, wait (Snooze: it runs again then, no attempt used)
//	Info   "task reopened"    task, pool, cause (Rerun: who asked, RerunRequest.By)
//
// pool is left out for the default pool. attempt is the attempt the event
// concerns (for "task failed", the number of attempts the run made).
// Every line of a task spawned by another (Spawn) carries parent, the
// spawner's ID.
const (
	LogKeyTask    = "task"    // the task's ID (string)
	LogKeyPool    = "pool"    // the task's pool (string), absent for the default pool; a pool line's pool, always
	LogKeyAttempt = "attempt" // the attempt, 1-based within the run (an integer: slog.KindInt64)
	LogKeyRun     = "run"     // the run, 1-based (an integer: slog.KindInt64)
	LogKeyError   = "error"   // the attempt's error (error)
	LogKeyWait    = "wait"    // the backoff before the next attempt (time.Duration)
	LogKeyCause   = "cause"   // why the task was cancelled or skipped (string)
	LogKeyParent  = "parent"  // the task that spawned it (string); absent for a task submitted
)

// The messages of the task-life log lines.
const (
	LogMsgStarted   = "task started"
	LogMsgSucceeded = "task succeeded"
	LogMsgRunDone   = "task run done"
	LogMsgRetrying  = "task retrying"
	LogMsgFailed    = "task failed"
	LogMsgCancelled = "task cancelled"
	LogMsgSkipped   = "task skipped"
	LogMsgPaused    = "pool paused"  // Pause (attribute: pool)
	LogMsgResumed   = "pool resumed" // Resume (attribute: pool)
	LogMsgJoining   = "task joining"
	LogMsgSpawned   = "task spawned"
	LogMsgSnoozed   = "task snoozed"
	LogMsgReopened  = "task reopened"
)

// taskLog writes the task-life log lines of a scheduler given a logger
// with WithLogger. The coordinator records events only while a level the
// lines use is enabled (it calls the handler's Enabled for the four
// levels once per loop iteration, on its own goroutine: Enabled must be
// quick, as slog asks of every handler); the lines are formatted and
// written on a goroutine of their own, a subscriber, so that a slow Handle
// never holds up the scheduler. A Handle that panics loses its line only.
//
// Logging from the coordinator goroutine itself would be simpler, and
// would put every handler's I/O on the scheduler's critical path.
type taskLog struct {
	h   slog.Handler // immutable
	sub *subscriber  // immutable: delivers the events to write
	// enabled is what the handler enabled at the last check: bit k for
	// level slog.LevelDebug + 4k (Debug, Info, Warn, Error). Owned by the
	// coordinator goroutine.
	enabled uint8
	want    kindSet // the kinds of events the enabled levels log; owned by the coordinator goroutine
}

func newTaskLog(l *slog.Logger) *taskLog {
	tl := &taskLog{h: l.Handler()}
	tl.sub = newSubscriber(tl.write, l)
	tl.sub.name = "WithLogger's handler" // it logs the events
	return tl
}

// check asks the handler which levels it enables now.
func (tl *taskLog) check() {
	var m uint8
	ctx := context.Background()
	for k := range 4 {
		if tl.h.Enabled(ctx, slog.LevelDebug+slog.Level(4*k)) {
			m |= 1 << k
		}
	}
	if m != tl.enabled {
		tl.enabled, tl.want = m, 0
		for k := range kindNames {
			if l := eventLevel(EventKind(k)); m&(1<<((l-slog.LevelDebug)/4)) != 0 {
				tl.want |= 1 << k
			}
		}
	}
}

func eventLevel(k EventKind) slog.Level {
	switch k {
	case EventRetrying:
		return slog.LevelWarn
	case EventFailed:
		return slog.LevelError
	case EventCancelled, EventSkipped, EventPaused, EventResumed, EventSnoozed, EventReopened:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}

var eventMsg = [...]string{
	EventStarted:   LogMsgStarted,
	EventSucceeded: LogMsgSucceeded,
	EventFailed:    LogMsgFailed,
	EventRetrying:  LogMsgRetrying,
	EventCancelled: LogMsgCancelled,
	EventSkipped:   LogMsgSkipped,
	EventRecurred:  LogMsgRunDone,
	EventPaused:    LogMsgPaused,
	EventResumed:   LogMsgResumed,
	EventJoining:   LogMsgJoining,
	EventSpawned:   LogMsgSpawned,
	EventSnoozed:   LogMsgSnoozed,
	EventReopened:  LogMsgReopened,
}

// write logs one event, on the subscriber's goroutine.
func (tl *taskLog) write(e Event) {
	level := eventLevel(e.Kind)
	ctx := context.Background()
	if int(e.Kind) >= len(eventMsg) || !tl.h.Enabled(ctx, level) {
		return
	}
	r := slog.NewRecord(e.At, level, eventMsg[e.Kind], 0)
	if e.Kind == EventPaused || e.Kind == EventResumed {
		r.AddAttrs(slog.String(LogKeyPool, e.Pool))
		tl.handle(ctx, r)
		return
	}
	r.AddAttrs(slog.String(LogKeyTask, e.TaskID))
	if e.Pool != "" {
		r.AddAttrs(slog.String(LogKeyPool, e.Pool))
	}
	if e.Parent != "" {
		r.AddAttrs(slog.String(LogKeyParent, e.Parent))
	}
	switch e.Kind {
	case EventSpawned:
	case EventCancelled:
		cause := ""
		if e.Err != nil {
			cause = e.Err.Error()
		}
		r.AddAttrs(slog.String(LogKeyCause, cause))
	case EventSkipped, EventReopened:
		r.AddAttrs(slog.String(LogKeyCause, e.Cause))
	default:
		r.AddAttrs(slog.Int(LogKeyAttempt, e.Attempt), slog.Int(LogKeyRun, e.Run))
	}
	switch e.Kind {
	case EventRetrying:
		r.AddAttrs(slog.Any(LogKeyError, e.Err), slog.Duration(LogKeyWait, e.Wait))
	case EventSnoozed:
		r.AddAttrs(slog.Duration(LogKeyWait, e.Wait))
	case EventFailed:
		r.AddAttrs(slog.Any(LogKeyError, e.Err))
	}
	tl.handle(ctx, r)
}

// handle passes r to the handler. Its error has nowhere better to go
// (slog.Logger drops it too); its panic loses this line, not the log.
func (tl *taskLog) handle(ctx context.Context, r slog.Record) {
	defer func() { _ = recover() }()
	_ = tl.h.Handle(ctx, r)
}

// logTasks hands this iteration's events to the task log, if a level it
// uses is enabled, and decides whether the coordinator records events in
// the next iteration. It runs after publish, on the coordinator goroutine.
func (l *loop) logTasks(events []Event) {
	tl := l.tl
	if tl == nil {
		return
	}
	if len(events) > 0 && tl.want&kindsOf(events) != 0 {
		tl.sub.publish(events)
	}
	tl.check()
	l.observed()
}
