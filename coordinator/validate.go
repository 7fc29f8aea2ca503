package coordinator

import (
	"fmt"

	"github.com/batonhq/baton/worker"
)

// validateTask checks what can be checked without the scheduler's state.
// It runs on the caller's goroutine, so a pool's Validator (user code)
// never runs on the coordinator's. handles says whether the task has
// dependencies by Graph handle.
func validateTask(t *Task, handles bool, pools map[string]worker.Worker) error {
	bad := func(format string, args ...any) error {
		return &TaskError{ID: t.ID, Err: ErrInvalidTask, Detail: fmt.Sprintf(format, args...)}
	}
	p := &t.Retry
	switch {
	case t.ID == "":
		return bad("empty ID")
	case t.Delay < 0:
		return bad("negative Delay %v", t.Delay)
	case t.Every < 0:
		return bad("negative Every %v", t.Every)
	case t.Timeout < 0:
		return bad("negative Timeout %v", t.Timeout)
	case t.Times < 0:
		return bad("negative Times %d", t.Times)
	case t.Every > 0 && t.Times < 1:
		return bad("Every needs Times >= 1")
	case t.Every == 0 && t.Times > 0:
		return bad("Times needs Every > 0")
	case p.MaxAttempts < 0:
		return bad("negative Retry.MaxAttempts %d", p.MaxAttempts)
	case p.BaseDelay < 0:
		return bad("negative Retry.BaseDelay %v", p.BaseDelay)
	case p.MaxDelay < 0:
		return bad("negative Retry.MaxDelay %v", p.MaxDelay)
	case !(p.Jitter >= 0 && p.Jitter <= 1): // also rejects NaN
		return bad("Retry.Jitter %v outside [0, 1]", p.Jitter)
	case t.When < AllSucceeded || t.When > NoneFailed:
		return bad("unknown When %d", int(t.When))
	case t.When == AnyFailed && len(t.Deps) == 0 && !handles:
		return bad("When AnyFailed without dependencies: it could never run")
	}
	for _, d := range t.Deps {
		if d == "" {
			return bad("empty dependency ID")
		}
	}
	w, ok := pools[t.Pool]
	if !ok {
		return &TaskError{ID: t.ID, Err: ErrUnknownPool, Detail: fmt.Sprintf("%q", t.Pool)}
	}
	if v, ok := w.(worker.Validator); ok {
		if err := v.Validate(worker.Job{ID: t.ID, Run: t.Run, Payload: t.Payload}); err != nil {
			return &TaskError{ID: t.ID, Err: fmt.Errorf("%w: %w", ErrInvalidTask, err)}
		}
	}
	return nil
}
