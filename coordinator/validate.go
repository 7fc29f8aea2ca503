package coordinator

import (
	"errors"
	"fmt"
	"math"
	"runtime/debug"

	"github.com/batonhq/baton/worker"
)

// poolFacts is what validateTask needs of a task's pool, looked up once
// for a run of tasks of the same pool (most batches have one): two map
// lookups and two type assertions were an eighth of a plain task's check.
type poolFacts struct {
	name      string
	known     bool // name is a pool of the scheduler
	looked    bool // the fields hold name's facts
	size      int
	plain     bool             // its worker is worker.Func: a task needs Run
	validator worker.Validator // nil: none, or worker.Func's (plain checks what it would, without a deferred recover a task)
}

// of returns the facts of pool, looking them up if f holds another's.
func (f *poolFacts) of(pool string, pools map[string]worker.Worker, sizes map[string]int) *poolFacts {
	if f.looked && f.name == pool {
		return f
	}
	w, ok := pools[pool]
	*f = poolFacts{name: pool, known: ok, looked: true, size: sizes[pool]}
	if ok {
		if _, f.plain = w.(worker.Func); !f.plain {
			f.validator, _ = w.(worker.Validator)
		}
	}
	return f
}

// validateTask checks what can be checked without the scheduler's state.
// It runs on the caller's goroutine, so a pool's Validator (user code)
// never runs on the coordinator's. handles says whether the task has
// dependencies by Graph handle; pool is the pool it runs in (its own,
// or its spawner's), whose facts p holds. It returns the task's parsed
// Cron, or its Schedule.
func validateTask(t *Task, handles bool, pool *poolFacts) (Schedule, error) {
	bad := func(format string, args ...any) error {
		return &TaskError{ID: t.ID, Err: ErrInvalidTask, Detail: fmt.Sprintf(format, args...)}
	}
	p := &t.Retry
	switch {
	case t.ID == "":
		return nil, bad("empty ID")
	case t.Delay < 0:
		return nil, bad("negative Delay %v", t.Delay)
	case t.Every < 0:
		return nil, bad("negative Every %v", t.Every)
	case t.Timeout < 0:
		return nil, bad("negative Timeout %v", t.Timeout)
	case t.Times < 0:
		return nil, bad("negative Times %d", t.Times)
	case p.MaxAttempts < 0:
		return nil, bad("negative Retry.MaxAttempts %d", p.MaxAttempts)
	case p.BaseDelay < 0:
		return nil, bad("negative Retry.BaseDelay %v", p.BaseDelay)
	case p.MaxDelay < 0:
		return nil, bad("negative Retry.MaxDelay %v", p.MaxDelay)
	case !(p.Jitter >= 0 && p.Jitter <= 1): // also rejects NaN
		return nil, bad("Retry.Jitter %v outside [0, 1]", p.Jitter)
	case t.Priority < math.MinInt32 || t.Priority > math.MaxInt32:
		return nil, bad("Priority %d outside [%d, %d]", t.Priority, math.MinInt32, math.MaxInt32)
	case t.When < AllSucceeded || t.When > NoneFailedMinOneSuccess:
		return nil, bad("unknown When %d", int(t.When))
	case (t.When == AnyFailed || t.When == NoneFailedMinOneSuccess) && len(t.Deps) == 0 && !handles:
		return nil, bad("When %v without dependencies: it could never run", t.When)
	case t.Missed < MissedDefault || t.Missed > SkipMissed:
		return nil, bad("unknown Missed %d", int(t.Missed))
	}
	sched, err := scheduleOf(t)
	if err != nil {
		return nil, bad("%v", err)
	}
	if t.mapped && (t.Every > 0 || sched != nil) {
		return nil, bad("a Map task cannot recur (Every, Cron or Schedule): its elements' IDs would repeat; " +
			"make a recurring task that spawns a Map with an ID of its run")
	}
	for _, d := range t.Deps {
		if d == "" {
			return nil, bad("empty dependency ID")
		}
	}
	if !pool.known {
		return nil, &TaskError{ID: t.ID, Err: ErrUnknownPool, Detail: quoteID(pool.name)}
	}
	if t.Slots < 0 {
		return nil, bad("negative Slots %d", t.Slots)
	}
	if t.Slots > pool.size {
		return nil, bad("Slots %d: its pool %s has %d workers", t.Slots, quoteID(pool.name), pool.size)
	}
	if pool.plain && t.Run == nil {
		return nil, &TaskError{ID: t.ID, Err: fmt.Errorf("%w: %w", ErrInvalidTask, worker.ErrNilRun),
			Detail: "set Run, or Func to the name of a function registered with WithFunc"}
	}
	if v := pool.validator; v != nil {
		if err := safeValidate(v, worker.Job{ID: t.ID, Run: t.Run, Payload: t.Payload}); err != nil {
			return nil, &TaskError{ID: t.ID, Err: fmt.Errorf("%w: %w", ErrInvalidTask, err)}
		}
	}
	return sched, nil
}

// scheduleOf checks what makes a task recurring and returns its Cron,
// parsed, or its Schedule.
func scheduleOf(t *Task) (Schedule, error) {
	kinds := 0
	for _, set := range []bool{t.Every > 0, t.Cron != "", t.Schedule != nil} {
		if set {
			kinds++
		}
	}
	switch {
	case kinds > 1:
		return nil, errors.New("at most one of Every, Cron and Schedule")
	case kinds == 0 && t.Times > 0:
		return nil, errors.New("a run count (Times) needs Every, Cron or Schedule")
	case kinds == 0 && t.Missed != MissedDefault:
		return nil, errors.New("a missed-run policy (Missed) needs Every, Cron or Schedule")
	case t.Cron != "":
		return parseCron(t.Cron)
	case t.Schedule != nil && isNil(t.Schedule):
		return nil, fmt.Errorf("a nil %T as Schedule", t.Schedule)
	}
	return t.Schedule, nil
}

// safeValidate calls a pool's Validator; a panic in it refuses the task
// with a *worker.PanicError instead of crashing the caller.
func safeValidate(v worker.Validator, j worker.Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &worker.PanicError{Value: p, Stack: debug.Stack()}
		}
	}()
	return v.Validate(j)
}
