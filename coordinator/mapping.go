package coordinator

import (
	"context"
	"fmt"
	"strconv"

	"github.com/batonhq/baton/internal/lane"
)

// Mapping over a result (Airflow's dynamic task mapping, expand): Map
// builds a task that, when it runs, reads its dependency's result, a
// slice, and spawns one task per element and one reducer after them
// (spawn.go); the reducer receives the elements' results in the input's
// order, and what it returns becomes the mapping task's result.

// Mapped is one element's outcome, as a map's reducer receives it.
type Mapped[R any] struct {
	Value R     // what the element's function returned; the zero R unless it succeeded
	Err   error // nil if it succeeded; else its last error (Failed), ErrCancelled or ErrClosed (Cancelled), or one wrapping ErrNoResult
}

// MapOption configures Map.
type MapOption func(*mapConfig)

type mapConfig struct {
	each, reduce Task
	err          error
}

// MapEach sets what every element task of a Map has besides its ID and
// function: Pool, Priority (0: the mapping task's, as Spawn's children),
// Retry, Timeout, Delay. An ID, Run, Func, Payload, Deps or a recurring
// schedule in t makes the mapping task fail with ErrInvalidTask.
func MapEach(t Task) MapOption { return func(c *mapConfig) { c.each = t; c.check("MapEach", t) } }

// MapReduce sets what the reducer of a Map has besides its ID, function
// and dependencies: When, Pool, Priority, Retry, Timeout. An ID, Run,
// Func, Payload, Deps or a recurring schedule in t makes the mapping task
// fail with ErrInvalidTask.
//
// Two rules make sense for a reducer. AllSucceeded, the default: any
// element that does not succeed skips it and fails the map. AllDone: it
// runs once every element is final and sees each one's error. NoneFailed
// and NoneFailedMinOneSuccess act as AllSucceeded here (an element has no
// dependencies, so it is never skipped by a rule: its failure or cancel
// skips the reducer). AnyFailed runs the reducer at the first failure,
// with other elements possibly still running (their Mapped.Err wraps
// ErrNoResult), and skips it by its rule if none fails, so that the map
// succeeds with no result.
func MapReduce(t Task) MapOption { return func(c *mapConfig) { c.reduce = t; c.check("MapReduce", t) } }

func (c *mapConfig) check(opt string, t Task) {
	if c.err == nil && (t.ID != "" || t.Run != nil || t.Func != "" || t.Payload != nil || len(t.Deps) > 0 ||
		t.Every != 0 || t.Cron != "" || t.Schedule != nil || t.Times != 0) {
		c.err = fmt.Errorf("%w: %s: a template sets ID, Run, Func, Payload, Deps or a schedule, which Map sets or refuses", ErrInvalidTask, opt)
	}
}

// Map returns a task with ID id that maps each over the result of its
// dependency over, a []E (read with Result[[]E]), and reduces the
// results with reduce. When it runs, it spawns (see Spawn) one task per
// element, "<id>/<i>" for element i, which calls each, and a reducer,
// "<id>/reduce", which depends on them all and calls reduce with one
// Mapped per element in the input's order; the task joins them, and its
// result, for its dependents' Result, is what reduce returned. An empty
// input spawns the reducer alone, which receives an empty slice.
//
// Under the default rule an element that fails (after its retries), is
// cancelled or times out skips the reducer and fails the map with a
// *JoinError; MapReduce(Task{When: AllDone}) runs the reducer anyway,
// each Mapped telling its element's end. Element
// results stay in memory, outside the coordinator: reading 100,000 of
// them costs the reducer one round trip to the coordinator when its rule
// lets failures through, none otherwise.
//
// The task returned may be changed before it is submitted (Priority,
// Pool, Retry, more Deps); its Run must be kept. It cannot recur: Submit
// and Spawn refuse it with Every, Cron or Schedule set (ErrInvalidTask),
// since a second run would spawn the same element IDs; a recurring task
// may instead spawn a Map whose ID names its run (fmt.Sprint("m", run)),
// which gives each run's elements IDs of their own. Its own errors: the
// dependency's Result errors (ErrNoResult, ErrResultType), Spawn's, and
// ErrInvalidTask for a template MapEach or MapReduce refuses. Map's
// closures cannot be stored: a durable scheduler refuses it (spawn Func
// tasks there, and read their results with Upstream). each and reduce
// run on worker goroutines, each element's at most once at a time; the
// reducer's results slice is its own.
func Map[E, R, T any](id, over string, each func(ctx context.Context, e E) (R, error),
	reduce func(ctx context.Context, results []Mapped[R]) (T, error), opts ...MapOption) Task {
	var cfg mapConfig
	for _, o := range opts {
		o(&cfg)
	}
	return Task{ID: id, Deps: []string{over}, mapped: true, Run: func(ctx context.Context) error {
		if cfg.err != nil {
			return cfg.err
		}
		in, err := Result[[]E](ctx, over)
		if err != nil {
			return err
		}
		return spawnMap(ctx, id, in, each, reduce, &cfg)
	}}
}

// spawnMap spawns the elements and the reducer of a Map over in.
func spawnMap[E, R, T any](ctx context.Context, id string, in []E, each func(context.Context, E) (R, error),
	reduce func(context.Context, []Mapped[R]) (T, error), cfg *mapConfig) error {
	n := len(in)
	vals := make([]R, n) // element i's result, written by its successful attempt
	// An attempt that may be abandoned (a timeout) or run by a custom
	// Worker writes through its context (Keep), so that a late write
	// cannot race the reducer; one run by the default pool returns
	// before its outcome is reported.
	guard := cfg.each.Timeout > 0 || cfg.each.Pool != ""
	var g Graph
	g.Grow(n+1, n)
	hs := make([]Handle, n)
	prefix := id + "/"
	for i, e := range in {
		t := cfg.each
		t.ID = prefix + strconv.Itoa(i)
		t.Run = func(ctx context.Context) error {
			r, err := each(ctx, e)
			if err != nil {
				return err
			}
			if !guard {
				vals[i] = r
				return nil
			}
			if c, ok := lane.Of(ctx); !ok || !c.Keep(func() { vals[i] = r }) {
				return ErrNoAttempt
			}
			return nil
		}
		hs[i] = g.Add(t)
	}
	red := cfg.reduce
	red.ID = prefix + "reduce"
	red.Run = func(ctx context.Context) error {
		out := make([]Mapped[R], n)
		if red.When != AllSucceeded { // elements may have ended otherwise
			errs, err := depErrs(ctx)
			if err != nil {
				return err
			}
			for i := range out {
				out[i].Err = errs[i]
			}
		}
		for i := range out {
			if out[i].Err == nil {
				out[i].Value = vals[i]
			}
		}
		v, err := reduce(ctx, out)
		if err != nil {
			return err
		}
		return SetResult(ctx, v)
	}
	g.Add(red, hs...)
	if g.bad != nil {
		return g.bad
	}
	return spawn(ctx, &submission{tasks: g.tasks, hstart: g.hstart, handles: g.handles}, int32(n))
}

// depErrs returns how each direct dependency of the task whose attempt
// runs with ctx ended, in order: nil for a success.
func depErrs(ctx context.Context) ([]error, error) {
	s, c, task, err := attemptOf(ctx)
	if err != nil {
		return nil, err
	}
	r, err := s.ask(c, task, func(reply chan<- depsReply) request {
		return depsReq{task: task, ctx: c, errs: true, reply: reply}
	}, func(st *state) depsReply { return st.depErrs(task) })
	if err != nil {
		return nil, err
	}
	return r.errs, r.err
}

// depErrs answers depErrs for task t, which is running.
func (s *state) depErrs(t int32) depsReply {
	r := &s.tasks[t]
	list := s.edges(r, r.deps)
	errs := make([]error, len(list))
	for i, d := range list {
		switch st := s.status(d); st {
		case Succeeded:
		case Failed, Cancelled:
			errs[i] = s.errOf(d)
		default:
			errs[i] = fmt.Errorf("%w: %s is %v", ErrNoResult, quoteID(s.key(d)), st)
		}
	}
	return depsReply{errs: errs}
}
