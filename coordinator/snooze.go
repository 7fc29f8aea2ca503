package coordinator

import (
	"errors"
	"fmt"
	"time"

	"github.com/batonhq/baton/worker"
)

// Snooze and retry-after: an attempt may say when the task should run
// again. Snooze asks to run again later without a failure (River's
// snooze: no attempt is used, the policy's count is untouched); RetryAfter
// is a failure whose wait the task chooses (a service's Retry-After), in
// place of the policy's backoff. Both are errors the function returns,
// recognised by the coordinator as it applies the attempt's end.

// ErrSnoozed is what errors.Is finds in a *SnoozeError.
var ErrSnoozed = errors.New("coordinator: snoozed")

// SnoozeError is what Snooze returns: the task asks to run again After.
type SnoozeError struct{ After time.Duration }

func (e *SnoozeError) Error() string { return fmt.Sprintf("coordinator: snoozed for %v", e.After) }

// Is makes errors.Is(err, ErrSnoozed) true.
func (e *SnoozeError) Is(target error) bool { return target == ErrSnoozed }

// Snooze returns the error a task's function (or a custom Worker's Do)
// returns to run again after d without counting a failure: the attempt
// ends OutcomeSnoozed (History), the task is Pending until then (an
// EventSnoozed, Event.Wait d) and its next attempt has the same number,
// its retry policy untouched. A d below 0 counts as 0; the policy's
// MaxDelay, if set, caps it. A task may snooze any number of times: it is
// up to the task to stop. A recurring task's run snoozes as any attempt
// (the series' later starts are not moved). A function that panics with
// it, or returns it after its Timeout, fails. Snooze does not block.
func Snooze(d time.Duration) error { return &SnoozeError{After: max(d, 0)} }

// RetryAfterError is what RetryAfter returns: a failure, Err, whose retry
// waits After.
type RetryAfterError struct {
	Err   error
	After time.Duration
}

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("%v (retry after %v)", e.Err, e.After)
}

// Unwrap returns the failure.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter returns err (a failure) with the wait before the retry that
// the task chooses (a service's Retry-After header), in place of the
// backoff of its RetryPolicy: the attempt fails as any other, counts,
// and is retried only if the policy allows (attempts left, RetryIf); then
// after d, capped by the policy's MaxDelay if set (a d below 0 counts as
// 0). EventRetrying's Wait says the wait applied (capped); the history
// keeps the attempt's error as returned, which says the wait asked for
// ("... (retry after 1h0m0s)"). A nil err is a
// failure too (its error says "retry after"). A function that panics with
// it, or returns it after its Timeout, chooses no wait: its retry waits
// the policy's backoff. RetryAfter does not block.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		err = errors.New("retry after")
	}
	return &RetryAfterError{Err: err, After: max(d, 0)}
}

// snoozeOf reports the wait an attempt's error asks for with Snooze.
func snoozeOf(err error) (time.Duration, bool) {
	var se *SnoozeError
	if err == nil || !errors.As(err, &se) || unchosen(err) {
		return 0, false
	}
	return max(se.After, 0), true // a SnoozeError made by hand may say less than 0
}

// unchosen reports whether err, an attempt's error, is a timeout or a
// panic: a failure, whatever error it wraps (a function that said Snooze
// or RetryAfter after its timeout, or panicked with such an error, chose
// nothing). What counts is which the chain meets first, from the top
// down: a timeout or panic above the Snooze or RetryAfter (a middleware
// or a Worker may wrap a panic's error), or the Snooze or RetryAfter
// above one (a function may return RetryAfter of an error that names
// another task's panic or timeout: WaitTasks's *TasksError).
func unchosen(err error) bool {
	switch e := err.(type) {
	case nil:
		return false
	case *worker.TimeoutError, *worker.PanicError:
		return true
	case *SnoozeError, *RetryAfterError:
		return false
	case interface{ Unwrap() error }:
		return unchosen(e.Unwrap())
	case interface{ Unwrap() []error }:
		for _, w := range e.Unwrap() {
			if w == nil {
				continue
			}
			var se *SnoozeError
			var ra *RetryAfterError
			if errors.As(w, &se) || errors.As(w, &ra) {
				return unchosen(w) // the first branch that holds the wait decides
			}
		}
	}
	return false
}

// capWait caps a wait the task chose by its policy's MaxDelay.
func capWait(p *RetryPolicy, d time.Duration) time.Duration {
	if p.MaxDelay > 0 && d > p.MaxDelay {
		return p.MaxDelay
	}
	return d
}

// snoozed applies a snooze of t's attempt: it runs again after d, the
// attempt not counted.
func (s *state) snoozed(t int32, d time.Duration, now time.Time) {
	r := &s.tasks[t]
	h := &s.hot[t]
	x := s.extra(t)
	d = capWait(&x.retry, d)
	h.status = Pending
	if e := s.emit(EventSnoozed, t, now); e != nil { // the attempt that snoozed, before it is given back
		e.Wait = d
	}
	r.attempts--
	s.schedule(t, addSat(now, d), now)
}

// retryWait is the wait before t's next attempt after a failure with err:
// the one the task chose (RetryAfter), or its policy's backoff.
func (s *state) retryWait(x *extra, attempts int, err error) time.Duration {
	var ra *RetryAfterError
	if errors.As(err, &ra) && !unchosen(err) {
		return capWait(&x.retry, max(ra.After, 0)) // one made by hand may say less than 0
	}
	return x.retry.wait(attempts, s.rng)
}
