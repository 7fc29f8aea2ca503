package replica

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/worker"
)

// What travels between a Client and the leader, as JSON: a request on
// baton.S.api.T, its reply, and the events on baton.S.events.

// Operations of a request.
const (
	opSubmit    = "submit"
	opCancel    = "cancel"
	opInfo      = "info"
	opWaitTasks = "waittasks"
	opWait      = "wait"
	opPause     = "pause"
	opResume    = "resume"
	opRerun     = "rerun"
	opHistory   = "history"
	opAbandon   = "abandon" // the caller of a WaitTasks or Wait gave up: no answer
)

type request struct {
	Op    string     `json:"op"`
	Tasks []wireTask `json:"tasks,omitempty"`
	IDs   []string   `json:"ids,omitempty"`
	Pool  string     `json:"pool,omitempty"` // opPause, opResume

	// opRerun: coordinator.RerunRequest's Downstream and By (IDs above).
	Downstream bool   `json:"downstream,omitempty"`
	By         string `json:"by,omitempty"`

	// opWaitTasks, opWait: how long the caller had left when it asked
	// (0: no deadline). A duration, not a time: the clocks of the two
	// machines need not agree.
	Timeout time.Duration `json:"timeout,omitempty"`
	// opAbandon: the reply subject of the request given up.
	Inbox string `json:"inbox,omitempty"`
	// A copy sent again (no answer came): how long after the first. A
	// duration, not a time, as Timeout.
	Age time.Duration `json:"age,omitempty"`
}

type reply struct {
	Err      *wireErr     `json:"err,omitempty"`
	OK       bool         `json:"ok,omitempty"`
	Known    bool         `json:"known,omitempty"`
	Info     *wireInfo    `json:"info,omitempty"`
	Reopened []string     `json:"reopened,omitempty"` // opRerun
	History  *wireHistory `json:"history,omitempty"`  // opHistory
}

// wireHistory is a coordinator.History.
type wireHistory struct {
	Attempts []wireAttempt `json:"attempts,omitempty"`
	Dropped  int           `json:"dropped,omitempty"`
}

type wireAttempt struct {
	Attempt     int          `json:"attempt"`
	Run         int          `json:"run"`
	Rerun       int          `json:"rerun,omitempty"`
	Pool        string       `json:"pool,omitempty"`
	Worker      string       `json:"worker,omitempty"`
	HandedOut   time.Time    `json:"handed_out"`
	Started     time.Time    `json:"started"`
	Ended       time.Time    `json:"ended"`
	Outcome     uint8        `json:"outcome"`
	Err         *wireTaskErr `json:"err,omitempty"`
	Logs        []wireLine   `json:"logs,omitempty"`
	LogsDropped int          `json:"logs_dropped,omitempty"`
}

type wireLine struct {
	Time    time.Time `json:"t"`
	Level   int       `json:"l"`
	Message string    `json:"m"`
	Attrs   string    `json:"a,omitempty"`
}

func historyToWire(h coordinator.History) *wireHistory {
	w := &wireHistory{Dropped: h.Dropped}
	for _, a := range h.Attempts {
		wa := wireAttempt{Attempt: a.Attempt, Run: a.Run, Rerun: a.Rerun, Pool: a.Pool, Worker: a.Worker,
			HandedOut: a.HandedOut, Started: a.Started, Ended: a.Ended, Outcome: uint8(a.Outcome),
			Err: taskErrToWire(a.Err), LogsDropped: a.LogsDropped}
		for _, l := range a.Logs {
			wa.Logs = append(wa.Logs, wireLine{Time: l.Time, Level: int(l.Level), Message: l.Message, Attrs: l.Attrs})
		}
		w.Attempts = append(w.Attempts, wa)
	}
	return w
}

func (w *wireHistory) history() coordinator.History {
	h := coordinator.History{Dropped: w.Dropped}
	for _, wa := range w.Attempts {
		a := coordinator.Attempt{Attempt: wa.Attempt, Run: wa.Run, Rerun: wa.Rerun, Pool: wa.Pool, Worker: wa.Worker,
			HandedOut: wa.HandedOut, Started: wa.Started, Ended: wa.Ended, Outcome: coordinator.Outcome(wa.Outcome),
			Err: wa.Err.err(), LogsDropped: wa.LogsDropped}
		for _, l := range wa.Logs {
			a.Logs = append(a.Logs, coordinator.LogLine{Time: l.Time, Level: slog.Level(l.Level), Message: l.Message, Attrs: l.Attrs})
		}
		h.Attempts = append(h.Attempts, a)
	}
	return h
}

// wireTask is a coordinator.Task described by data alone: what a durable
// scheduler can store.
type wireTask struct {
	ID          string        `json:"id"`
	Func        string        `json:"func,omitempty"`
	Pool        string        `json:"pool,omitempty"`
	Deps        []string      `json:"deps,omitempty"`
	Priority    int           `json:"prio,omitempty"`
	MaxAttempts int           `json:"max_attempts,omitempty"`
	BaseDelay   time.Duration `json:"base_delay,omitempty"`
	MaxDelay    time.Duration `json:"max_delay,omitempty"`
	Jitter      float64       `json:"jitter,omitempty"`
	Delay       time.Duration `json:"delay,omitempty"`
	Timeout     time.Duration `json:"timeout,omitempty"`
	Every       time.Duration `json:"every,omitempty"`
	Cron        string        `json:"cron,omitempty"`
	Times       int           `json:"times,omitempty"`
	Missed      int           `json:"missed,omitempty"`
	When        int           `json:"when,omitempty"`
	Key         string        `json:"key,omitempty"`
	Slots       int           `json:"slots,omitempty"`
	Payload     []byte        `json:"payload,omitempty"`
	HasPayload  bool          `json:"has_payload,omitempty"`
}

// toWire describes t by data, or says why it cannot be (a
// *coordinator.TaskError wrapping coordinator.ErrNotDurable, as a durable
// scheduler's Submit would).
func toWire(t coordinator.Task) (wireTask, error) {
	bad := func(detail string) error {
		return &coordinator.TaskError{ID: t.ID, Err: coordinator.ErrNotDurable, Detail: detail + " (a task submitted to a replicated scheduler is described by data alone)"}
	}
	switch {
	case t.Run != nil:
		return wireTask{}, bad("a Run closure cannot travel: register it with coordinator.WithFunc on every replica and name it in Func")
	case t.Retry.RetryIf != nil:
		return wireTask{}, bad("Retry.RetryIf is a function")
	case t.Schedule != nil:
		return wireTask{}, bad("a Schedule is a Go value: use Cron or Every")
	}
	w := wireTask{ID: t.ID, Func: t.Func, Pool: t.Pool, Deps: t.Deps, Priority: t.Priority,
		MaxAttempts: t.Retry.MaxAttempts, BaseDelay: t.Retry.BaseDelay, MaxDelay: t.Retry.MaxDelay, Jitter: t.Retry.Jitter,
		Delay: t.Delay, Timeout: t.Timeout, Every: t.Every, Cron: t.Cron, Times: t.Times, Missed: int(t.Missed), When: int(t.When),
		Key: t.Key, Slots: t.Slots}
	switch p := t.Payload.(type) {
	case nil:
	case []byte:
		w.Payload, w.HasPayload = p, true
	default:
		return wireTask{}, bad(fmt.Sprintf("a Payload of type %T: the Payload is a []byte (for a remote pool, jetstream.Payload's Encode)", t.Payload))
	}
	return w, nil
}

func (w wireTask) task() coordinator.Task {
	t := coordinator.Task{ID: w.ID, Func: w.Func, Pool: w.Pool, Deps: w.Deps, Priority: w.Priority,
		Retry: coordinator.RetryPolicy{MaxAttempts: w.MaxAttempts, BaseDelay: w.BaseDelay, MaxDelay: w.MaxDelay, Jitter: w.Jitter},
		Delay: w.Delay, Timeout: w.Timeout, Every: w.Every, Cron: w.Cron, Times: w.Times,
		Missed: coordinator.Missed(w.Missed), When: coordinator.Trigger(w.When), Key: w.Key, Slots: w.Slots}
	if w.HasPayload {
		t.Payload = w.Payload
		if w.Payload == nil {
			t.Payload = []byte{}
		}
	}
	return t
}

// Codes of a wireErr.
const (
	codeNotLeader   = "not_leader"   // the replica asked does not lead (any more): ask the leader
	codeClosed      = "closed"       // coordinator.ErrClosed: the leader's scheduler is stopping, nothing was done
	codeFenced      = "fenced"       // the leader was fenced before its commit: nothing was done
	codeStoreFailed = "store_failed" // the commit failed otherwise: done or not
	codeLost        = "lost"         // a late copy of a Submit or Cancel whose answer, if it was done, is no longer kept: done or not
	codeTask        = "task"         // a *coordinator.TaskError
	codeCycle       = "cycle"        // a *coordinator.CycleError
	codeTasks       = "tasks"        // a *coordinator.TasksError
	codeUnknownTask = "unknown_task" // coordinator.ErrUnknownTask
	codeUnknownPool = "unknown_pool" // coordinator.ErrUnknownPool
	codeGaveUp      = "gave_up"      // a wait ended with its caller's time (or word): its ctx ends now
	codeTooLarge    = "too_large"    // the answer exceeds the server's max payload (ErrAnswerTooLarge)
	codeOther       = "other"
)

// Sentinels a TaskError may wrap, by name.
var taskSentinels = map[string]error{
	"invalid_task": coordinator.ErrInvalidTask, "duplicate_id": coordinator.ErrDuplicateID,
	"unknown_dependency": coordinator.ErrUnknownDependency, "unknown_pool": coordinator.ErrUnknownPool,
	"not_durable": coordinator.ErrNotDurable, "unknown_task": coordinator.ErrUnknownTask,
	"not_rerunnable": coordinator.ErrNotRerunnable,
}

type wireErr struct {
	Code     string     `json:"code"`
	Msg      string     `json:"msg"`
	Task     string     `json:"task,omitempty"`
	Sentinel string     `json:"sentinel,omitempty"`
	Detail   string     `json:"detail,omitempty"`
	InCycle  []string   `json:"in_cycle,omitempty"`
	Behind   []string   `json:"behind,omitempty"`
	Tasks    []wireInfo `json:"tasks,omitempty"`
}

// errToWire describes an error of the leader's scheduler.
func errToWire(err error) *wireErr {
	if err == nil {
		return nil
	}
	w := &wireErr{Code: codeOther, Msg: err.Error()}
	var te *coordinator.TaskError
	var ce *coordinator.CycleError
	var tse *coordinator.TasksError
	switch {
	case errors.Is(err, ErrFenced):
		w.Code = codeFenced
	case errors.Is(err, coordinator.ErrStoreFailed):
		w.Code = codeStoreFailed
	case errors.Is(err, coordinator.ErrClosed):
		w.Code = codeClosed
	case errors.As(err, &ce):
		w.Code, w.InCycle, w.Behind = codeCycle, ce.InCycle, ce.Behind
	case errors.As(err, &te):
		w.Code, w.Task, w.Detail, w.Msg = codeTask, te.ID, te.Detail, te.Err.Error()
		for name, s := range taskSentinels {
			if errors.Is(te.Err, s) {
				w.Sentinel = name
			}
		}
	case errors.As(err, &tse):
		w.Code = codeTasks
		for _, ti := range tse.Tasks {
			w.Tasks = append(w.Tasks, infoToWire(ti))
		}
	case errors.Is(err, coordinator.ErrUnknownTask):
		w.Code = codeUnknownTask
	case errors.Is(err, coordinator.ErrUnknownPool):
		w.Code = codeUnknownPool
	}
	return w
}

// remoteError is an error of the leader's scheduler, read back.
type remoteError struct{ msg string }

func (e *remoteError) Error() string { return e.msg }

// err rebuilds the error w describes: the coordinator's error types and
// sentinels, so that errors.Is and errors.As work as on a local
// scheduler.
func (w *wireErr) err() error {
	switch w.Code {
	case codeTask:
		te := &coordinator.TaskError{ID: w.Task, Detail: w.Detail, Err: taskSentinels[w.Sentinel]}
		if te.Err == nil {
			te.Err = &remoteError{w.Msg} // a pool Validator's error: its text
		}
		return te
	case codeCycle:
		return &coordinator.CycleError{InCycle: w.InCycle, Behind: w.Behind}
	case codeTasks:
		te := &coordinator.TasksError{}
		for _, wi := range w.Tasks {
			te.Tasks = append(te.Tasks, wi.info())
		}
		return te
	case codeUnknownTask:
		return fmt.Errorf("%w: %s", coordinator.ErrUnknownTask, trimPrefix(w.Msg, coordinator.ErrUnknownTask))
	case codeUnknownPool:
		return fmt.Errorf("%w: %s", coordinator.ErrUnknownPool, trimPrefix(w.Msg, coordinator.ErrUnknownPool))
	case codeTooLarge:
		return fmt.Errorf("%w: %s", ErrAnswerTooLarge, w.Msg)
	case codeClosed:
		return coordinator.ErrClosed
	case codeFenced:
		return fmt.Errorf("%w: %w", ErrFenced, &remoteError{w.Msg})
	case codeStoreFailed:
		return fmt.Errorf("%w: %w", coordinator.ErrStoreFailed, &remoteError{w.Msg})
	}
	return &remoteError{w.Msg}
}

// trimPrefix drops the sentinel's text that err() puts back.
func trimPrefix(msg string, sentinel error) string {
	p := sentinel.Error() + ": "
	if len(msg) >= len(p) && msg[:len(p)] == p {
		return msg[len(p):]
	}
	return msg
}

// Kinds of a task's error, in a wireInfo or a wireEvent.
const (
	errNone        = ""
	errCancelled   = "cancelled"
	errClosed      = "closed"
	errInterrupted = "interrupted"
	errTimeout     = "timeout"
	errText        = "text"
)

type wireTaskErr struct {
	Kind  string        `json:"kind"`
	Msg   string        `json:"msg,omitempty"`
	After time.Duration `json:"after,omitempty"` // errTimeout: the timeout
	Inner string        `json:"inner,omitempty"` // errTimeout: the function's own error
}

func taskErrToWire(err error) *wireTaskErr {
	var te *worker.TimeoutError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, coordinator.ErrCancelled):
		return &wireTaskErr{Kind: errCancelled}
	case errors.Is(err, coordinator.ErrClosed):
		return &wireTaskErr{Kind: errClosed}
	case errors.Is(err, coordinator.ErrInterrupted):
		return &wireTaskErr{Kind: errInterrupted}
	case errors.As(err, &te):
		w := &wireTaskErr{Kind: errTimeout, After: te.After}
		if te.Err != nil {
			w.Inner = te.Err.Error()
		}
		return w
	}
	return &wireTaskErr{Kind: errText, Msg: err.Error()}
}

func (w *wireTaskErr) err() error {
	if w == nil {
		return nil
	}
	switch w.Kind {
	case errCancelled:
		return coordinator.ErrCancelled
	case errClosed:
		return coordinator.ErrClosed
	case errInterrupted:
		return coordinator.ErrInterrupted
	case errTimeout:
		te := &worker.TimeoutError{After: w.After}
		if w.Inner != "" {
			te.Err = &remoteError{w.Inner}
		}
		return te
	}
	return &remoteError{w.Msg}
}

type wireInfo struct {
	ID        string       `json:"id"`
	Status    uint8        `json:"status"`
	Pool      string       `json:"pool,omitempty"`
	Priority  int          `json:"prio,omitempty"`
	Key       string       `json:"key,omitempty"`
	Slots     int          `json:"slots,omitempty"`
	When      int          `json:"when,omitempty"`
	Attempts  int          `json:"attempts,omitempty"`
	Runs      int          `json:"runs,omitempty"`
	Err       *wireTaskErr `json:"err,omitempty"`
	Cause     string       `json:"cause,omitempty"`
	Result    []byte       `json:"result,omitempty"`
	HasResult bool         `json:"has_result,omitempty"`
	Parent    string       `json:"parent,omitempty"`
	Children  int          `json:"children,omitempty"`
	Joining   bool         `json:"joining,omitempty"`
	Reruns    int          `json:"reruns,omitempty"`
}

func infoToWire(ti coordinator.TaskInfo) wireInfo {
	w := wireInfo{ID: ti.ID, Status: uint8(ti.Status), Pool: ti.Pool, Priority: ti.Priority, Key: ti.Key, Slots: ti.Slots, When: int(ti.When), Attempts: ti.Attempts,
		Runs: ti.Runs, Err: taskErrToWire(ti.Err), Cause: ti.Cause, Parent: ti.Parent, Children: ti.Children, Joining: ti.Joining, Reruns: ti.Reruns}
	if b, ok := ti.Result.([]byte); ok {
		w.Result, w.HasResult = b, true
	}
	return w
}

func (w wireInfo) info() coordinator.TaskInfo {
	ti := coordinator.TaskInfo{ID: w.ID, Status: coordinator.Status(w.Status), Pool: w.Pool, Priority: w.Priority,
		Key: w.Key, Slots: w.Slots, When: coordinator.Trigger(w.When), Parent: w.Parent, Children: w.Children, Joining: w.Joining, Attempts: w.Attempts, Runs: w.Runs, Err: w.Err.err(), Cause: w.Cause, Reruns: w.Reruns}
	if w.HasResult {
		ti.Result = w.Result
		if w.Result == nil {
			ti.Result = []byte{}
		}
	}
	return ti
}

type wireEvent struct {
	Kind    uint8         `json:"kind"`
	TaskID  string        `json:"task"`
	Pool    string        `json:"pool,omitempty"`
	Attempt int           `json:"attempt,omitempty"`
	Run     int           `json:"run,omitempty"`
	Err     *wireTaskErr  `json:"err,omitempty"`
	Wait    time.Duration `json:"wait,omitempty"`
	Cause   string        `json:"cause,omitempty"`
	Parent  string        `json:"parent,omitempty"`
	At      time.Time     `json:"at"`
	Term    uint64        `json:"term"`
}

func eventToWire(ev coordinator.Event, term uint64) wireEvent {
	return wireEvent{Kind: uint8(ev.Kind), TaskID: ev.TaskID, Pool: ev.Pool, Attempt: ev.Attempt, Run: ev.Run,
		Err: taskErrToWire(ev.Err), Wait: ev.Wait, Cause: ev.Cause, Parent: ev.Parent, At: ev.At, Term: term}
}

func (w wireEvent) event() coordinator.Event {
	return coordinator.Event{Kind: coordinator.EventKind(w.Kind), TaskID: w.TaskID, Pool: w.Pool, Attempt: w.Attempt,
		Run: w.Run, Err: w.Err.err(), Wait: w.Wait, Cause: w.Cause, Parent: w.Parent, At: w.At}
}
