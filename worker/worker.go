// Package worker is what a custom worker type needs: the Worker interface
// a pool's goroutines call for every attempt, Validator to refuse bad
// tasks at Submit, Func (the default worker, which calls the task's own
// function), and the errors an attempt can end with (PanicError, with
// ErrGoexit for a runtime.Goexit, and ErrTimeout). Package workertest
// checks a Worker against what the scheduler relies on.
//
// A worker never decides what runs next: the coordinator owns all
// scheduling state. A task's failure, timeout or panic is an outcome the
// pool reports to the coordinator; it is never an error of the worker
// goroutine itself.
package worker

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Job is what a Worker is asked to run: one attempt of one task.
type Job struct {
	ID      string                          // the task's ID
	Run     func(ctx context.Context) error // the task's function; may be nil for custom workers
	Payload any                             // the task's Payload, for custom workers
	Attempt int                             // 1 for the first attempt of a run, 2 for its first retry, ...
	Round   int                             // 1-based run number (recurring tasks run several times)

	// Ready is when the coordinator made this attempt ready to start (its
	// dependencies met, its delay or retry backoff over), on the
	// scheduler's clock, so that Ready to the attempt's start is its
	// queue wait. The scheduler sets it only for pools wrapped by
	// coordinator.WithMiddleware; it is zero otherwise, and for an attempt
	// that became ready inside its worker, right behind the dependency it
	// was queued after (no queue wait).
	Ready time.Time
}

// Worker runs attempts. Implementations must be safe for concurrent use:
// every goroutine of a pool calls Do on the same Worker. Package
// workertest checks an implementation against what the scheduler relies on.
//
// Do blocks until the attempt ends and returns its error (nil for success).
// It must return soon after ctx ends: ctx ends when the task is cancelled,
// when its timeout passes (ctx.Deadline reports it) and when the scheduler
// shuts down. A Do still running a grace period after its timeout is
// abandoned: its result is discarded and the pool goes on without it. A
// panic in Do is recovered by the pool and reported as a failed attempt
// with a *PanicError; it never crashes the process.
//
// ctx carries the values of the context the task was submitted with, and
// what package coordinator's SetResult, Result and Upstream need. It
// belongs to the attempt: a Do that never called one of its methods must
// not keep it after returning, because such a context is reused for a
// later attempt.
type Worker interface {
	Do(ctx context.Context, j Job) error
}

// Validator is implemented by a Worker that can reject a job before it is
// ever scheduled. Submit calls Validate on every task bound for the pool
// (with Attempt and Round zero) and rejects the whole batch on an error.
type Validator interface {
	Validate(j Job) error
}

// ErrNilRun is returned by Func.Validate for a job without a function.
var ErrNilRun = errors.New("worker: task has no Run function")

// ErrTimeout is the error of an attempt that did not end before its timeout.
// The attempt's context is cancelled with it as the cause. The attempt's
// own error is a *TimeoutError, for which errors.Is(err, ErrTimeout) and
// errors.Is(err, context.DeadlineExceeded) hold.
var ErrTimeout = errors.New("worker: attempt timed out")

// TimeoutError is the error of an attempt whose timeout passed before its
// function returned. It keeps both: the timeout (errors.Is(err,
// ErrTimeout) and errors.Is(err, context.DeadlineExceeded) hold) and what
// the function returned once its context had ended (Err, which errors.Is
// and errors.As see through: a "query users: ..." error is not lost), or
// nil if it had not returned a grace period later and was abandoned.
type TimeoutError struct {
	After time.Duration // the attempt's timeout
	Err   error         // the function's error, returned after the timeout; nil if none or abandoned
}

func (e *TimeoutError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("worker: attempt timed out after %v", e.After)
	}
	return fmt.Sprintf("worker: attempt timed out after %v: %v", e.After, e.Err)
}

// Is reports ErrTimeout and context.DeadlineExceeded as matches.
func (e *TimeoutError) Is(target error) bool {
	return target == ErrTimeout || target == context.DeadlineExceeded
}

// Unwrap returns the function's error.
func (e *TimeoutError) Unwrap() error { return e.Err }

// ErrGoexit is the panic value (PanicError.Value) of an attempt whose
// function, or Worker, called runtime.Goexit: testing.T's FailNow, Fatal
// and SkipNow do, from a task of a test. The attempt failed like one that
// panicked, with the stack it was called from; the pool goes on with
// another goroutine.
var ErrGoexit = errors.New("worker: attempt called runtime.Goexit")

// Func is the default worker: it calls the job's Run function.
type Func struct{}

// Do calls j.Run(ctx).
func (Func) Do(ctx context.Context, j Job) error { return j.Run(ctx) }

// Validate rejects a job whose Run is nil.
func (Func) Validate(j Job) error {
	if j.Run == nil {
		return ErrNilRun
	}
	return nil
}

// PanicError is the error of an attempt that panicked. It carries the
// panic value and the stack of the panicking goroutine.
type PanicError struct {
	Value any    // what was passed to panic
	Stack []byte // the goroutine's stack at the recovery point
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("worker: task panicked: %v\n\n%s", e.Value, e.Stack)
}

// Unwrap returns the panic value if it is an error, so errors.Is and
// errors.As see through the panic.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// Resumer is implemented by a Worker whose attempts run outside the
// scheduler's process and outlive it, as remote workers' do: an attempt
// that was running when that process died may still be running
// elsewhere, or have ended there with an outcome that is on its way. A
// durable scheduler (coordinator.WithStore) that restores such an attempt
// hands it to Do again as the same attempt (the same ID, Round and
// Attempt) instead of counting it as interrupted
// (coordinator.ErrInterrupted) and retrying it; Do must then pick the
// attempt up where it is (wait for it, or return the outcome it left)
// and run it again only if it can no longer end by itself. The scheduler
// asks once, at New, of the Worker given to coordinator.WithPool (not of
// a middleware's wrapper); ResumesAttempts must not block.
type Resumer interface {
	ResumesAttempts() bool
}
