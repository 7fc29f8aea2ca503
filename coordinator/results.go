package coordinator

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/batonhq/baton/internal/lane"
)

// Errors of SetResult, Result and Upstream.
var (
	// ErrNoAttempt: the context is not that of a running attempt (it was
	// not given to a task's function or a Worker's Do, or that call has
	// returned).
	ErrNoAttempt = errors.New("coordinator: not a running attempt's context")
	// ErrNotDependency: Result named a task that is not a direct
	// dependency of the running task.
	ErrNotDependency = errors.New("coordinator: not a direct dependency")
	// ErrNoResult: the dependency did not succeed, or its last successful
	// attempt set no result.
	ErrNoResult = errors.New("coordinator: no result")
	// ErrResultType: the dependency's result is of another type than the
	// one asked for.
	ErrResultType = errors.New("coordinator: result of another type")
)

// SetResult records v as the result of the attempt whose context is ctx
// (the context a task's function, or a custom Worker's Do, was called
// with, or one derived from it). If the attempt succeeds, v becomes the
// task's result: TaskInfo.Result reports it, and the task's direct
// dependents read it with Result. A later call replaces an earlier one. A
// failed attempt's result is dropped; a successful attempt that set none
// leaves the task without a result, even if an earlier run set one.
//
// On a durable scheduler (WithStore) a result is a []byte (or nil), the
// only kind a store keeps; another type is refused with an error wrapping
// ErrResultType.
//
// Results are kept as long as the task is: with WithRetention, they are
// forgotten with it. SetResult does not block and is safe for concurrent
// use; it returns ErrNoAttempt for any other context, and once the
// attempt's function has returned if that function used its context (a
// method call, as SetResult makes). A context kept past the return of a
// function that never used it breaks worker.Worker's rule: it may be
// reused for a later attempt, and a late SetResult on it is not refused.
func SetResult(ctx context.Context, v any) error {
	c, ok := lane.Of(ctx)
	if !ok {
		return ErrNoAttempt
	}
	if _, owner, ok := c.Attempt(); ok {
		if err := checkResult(ownerOf(owner), v); err != nil {
			return err
		}
	}
	if !c.SetResult(v) {
		return ErrNoAttempt
	}
	return nil
}

// Result returns the result of dep, a direct dependency of the task whose
// attempt runs with ctx, as a T. It errs with ErrNotDependency when dep is
// not a direct dependency of that task, ErrNoResult when dep did not
// succeed (a task run under a trigger rule may see such dependencies) or
// set no result, ErrResultType when the result is not a T (the message
// names both types), and ErrNoAttempt when ctx is not a running attempt's
// context. A nil result is the zero T when T can be nil (an interface,
// pointer, slice, map, channel or function), ErrResultType otherwise.
//
// Result asks the coordinator, so it blocks for a round trip to it; it is
// safe for concurrent use.
func Result[T any](ctx context.Context, dep string) (T, error) {
	var zero T
	v, err := resultOf(ctx, dep)
	if err != nil {
		return zero, err
	}
	if v == nil {
		switch reflect.TypeFor[T]().Kind() {
		case reflect.Interface, reflect.Pointer, reflect.Slice, reflect.Map, reflect.Chan, reflect.Func:
			return zero, nil
		}
		return zero, fmt.Errorf("%w: %s set nil, which is not of type %v", ErrResultType, dep, reflect.TypeFor[T]())
	}
	t, ok := v.(T)
	if !ok {
		return zero, fmt.Errorf("%w: %s holds a value of type %T, not %v", ErrResultType, dep, v, reflect.TypeFor[T]())
	}
	return t, nil
}

// Upstream returns how each direct dependency of the task whose attempt
// runs with ctx ended, in the order the task listed them (Graph handles
// first, then Deps; each dependency once): for a task run under a trigger rule, what it is
// reacting to. A dependency still running (AnyFailed starts a task before
// every dependency is final) is reported as it stands. It returns
// ErrNoAttempt when ctx is not a running attempt's context.
//
// Upstream asks the coordinator, so it blocks for a round trip to it; it
// is safe for concurrent use.
func Upstream(ctx context.Context) ([]TaskInfo, error) {
	s, c, task, err := attemptOf(ctx)
	if err != nil {
		return nil, err
	}
	r, err := s.ask(c, task, func(reply chan<- depsReply) request {
		return depsReq{task: task, ctx: c, all: true, reply: reply}
	}, func(st *state) depsReply { return st.deps(task, "", true) })
	if err != nil {
		return nil, err
	}
	return r.infos, r.err
}

func attemptOf(ctx context.Context) (*Scheduler, *lane.Context, int32, error) {
	c, ok := lane.Of(ctx)
	if !ok {
		return nil, nil, 0, ErrNoAttempt
	}
	task, owner, ok := c.Attempt()
	s, _ := owner.(*Scheduler)
	if !ok || s == nil {
		return nil, nil, 0, ErrNoAttempt
	}
	return s, c, task, nil
}

// runsWith reports whether task t's attempt runs with context c now. A
// request of a goroutine the function left behind (attemptOf said it
// ran, and then it returned) may come after the task ended, was
// forgotten, and its record went to another task: it is refused, not
// answered for that task.
func (s *state) runsWith(t int32, c *lane.Context) bool {
	if int(t) >= len(s.hot) || s.hot[t].status != dispatched || s.tasks[t].link == noTask {
		return false
	}
	ls, seq := s.locate(s.tasks[t].link)
	return ls.l.Ctx(seq) == c
}

func resultOf(ctx context.Context, dep string) (any, error) {
	s, c, task, err := attemptOf(ctx)
	if err != nil {
		return nil, err
	}
	r, err := s.ask(c, task, func(reply chan<- depsReply) request {
		return depsReq{task: task, ctx: c, dep: dep, reply: reply}
	}, func(st *state) depsReply { return st.deps(task, dep, false) })
	if err != nil {
		return nil, err
	}
	return r.result, r.err
}

// ask sends a request to the coordinator, or, once its loop has ended,
// answers from the final state with local, for task t's attempt running
// with c (runsWith: ErrNoAttempt otherwise).
func (s *Scheduler) ask(c *lane.Context, t int32, req func(chan<- depsReply) request, local func(*state) depsReply) (depsReply, error) {
	return query(context.Background(), s, req, func(st *state) depsReply {
		if !st.runsWith(t, c) {
			return depsReply{err: ErrNoAttempt}
		}
		return local(st)
	})
}

type depsReply struct {
	result any
	infos  []TaskInfo
	errs   []error
	err    error
}

// deps answers Result (dep) and Upstream (all) for task t, which is
// running: its record and its dependencies' are held until it is final.
func (s *state) deps(t int32, dep string, all bool) depsReply {
	r := &s.tasks[t]
	list := s.edges(r, r.deps)
	if all {
		infos := make([]TaskInfo, 0, len(list))
		for _, d := range list {
			ti, _ := s.infoOf(d)
			infos = append(infos, ti)
		}
		return depsReply{infos: infos}
	}
	d, ok := s.find(dep)
	if !ok || !containsTask(list, d) {
		return depsReply{err: fmt.Errorf("%w: %q is not a direct dependency of %q", ErrNotDependency, dep, s.key(t))}
	}
	if st := s.status(d); st != Succeeded {
		return depsReply{err: fmt.Errorf("%w: %s is %v", ErrNoResult, dep, st)}
	}
	x := s.tasks[d].x
	if x == nil || !x.hasResult {
		return depsReply{err: fmt.Errorf("%w: %s set none", ErrNoResult, dep)}
	}
	return depsReply{result: x.result}
}

func containsTask(list []int32, t int32) bool {
	for _, d := range list {
		if d == t {
			return true
		}
	}
	return false
}
