package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/worker"
)

type mwKey struct{}

// seen is what a test middleware saw of one attempt.
type seen struct {
	layer string
	pool  string
	job   worker.Job
	value any // the SubmitContext value the attempt's context carried
}

type seenLog struct {
	mu  sync.Mutex
	all []seen
}

func (l *seenLog) add(s seen) {
	l.mu.Lock()
	l.all = append(l.all, s)
	l.mu.Unlock()
}

func (l *seenLog) get() []seen {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.all)
}

type userKey struct{}

// tagging is a middleware that records each attempt and puts its layer
// name in the context the task sees (appending to what outer layers put).
func tagging(layer string, log *seenLog) coordinator.Middleware {
	return func(pool string, next worker.Worker) worker.Worker {
		return workerFunc(func(ctx context.Context, j worker.Job) error {
			log.add(seen{layer: layer, pool: pool, job: j, value: ctx.Value(userKey{})})
			outer, _ := ctx.Value(mwKey{}).([]string)
			return next.Do(context.WithValue(ctx, mwKey{}, append(slices.Clone(outer), layer)), j)
		})
	}
}

// echo is a custom worker that runs the job's function, as a pool's own
// worker would, and refuses jobs without one.
type echo struct{}

func (echo) Do(ctx context.Context, j worker.Job) error { return j.Run(ctx) }
func (echo) Validate(j worker.Job) error {
	if j.Run == nil {
		return errors.New("echo: no Run")
	}
	return nil
}

// Every pool's attempts, the default pool's included, go through every
// middleware, outermost first; the task's context carries what they put
// in it and SubmitContext's values, and Upstream and SetResult work
// through the derived context.
func TestMiddlewareWrapsEveryPool(t *testing.T) {
	var log seenLog
	s := newScheduler(t, coordinator.WithWorkers(1), coordinator.WithPool("io", 1, echo{}),
		coordinator.WithMiddleware(tagging("outer", &log)), coordinator.WithMiddleware(tagging("inner", &log)))
	var mu sync.Mutex
	layers := map[string][]string{}
	var upstream []coordinator.TaskInfo
	run := func(id string) func(context.Context) error {
		return func(ctx context.Context) error {
			mu.Lock()
			layers[id], _ = ctx.Value(mwKey{}).([]string)
			mu.Unlock()
			if id == "b" {
				var err error
				if upstream, err = coordinator.Upstream(ctx); err != nil {
					return err
				}
			}
			return coordinator.SetResult(ctx, id+"!")
		}
	}
	ctx := context.WithValue(context.Background(), userKey{}, "from submit")
	err := s.SubmitContext(ctx,
		coordinator.Task{ID: "a", Run: run("a")},
		coordinator.Task{ID: "b", Run: run("b"), Deps: []string{"a"}, Pool: "io"})
	if err != nil {
		t.Fatalf("Submit = %v", err)
	}
	if err := s.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if got := layers[id]; !slices.Equal(got, []string{"outer", "inner"}) {
			t.Errorf("task %s saw layers %v; want [outer inner]", id, got)
		}
		if info, _ := s.Info(id); info.Status != coordinator.Succeeded || info.Result != id+"!" {
			t.Errorf("Info(%s) = %v, result %v; want succeeded with %q", id, info.Status, info.Result, id+"!")
		}
	}
	if len(upstream) != 1 || upstream[0].ID != "a" || upstream[0].Status != coordinator.Succeeded {
		t.Errorf("Upstream through the middleware's context = %+v; want a succeeded", upstream)
	}
	var got []string
	for _, x := range log.get() {
		got = append(got, fmt.Sprintf("%s %s pool=%q attempt=%d run=%d value=%v", x.layer, x.job.ID, x.pool, x.job.Attempt, x.job.Round, x.value))
	}
	want := []string{
		`outer a pool="" attempt=1 run=1 value=from submit`,
		`inner a pool="" attempt=1 run=1 value=from submit`,
		`outer b pool="io" attempt=1 run=1 value=from submit`,
		`inner b pool="io" attempt=1 run=1 value=from submit`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("middleware saw\n%v\nwant\n%v", got, want)
	}
}

// The pool's own Validator still refuses bad tasks under a middleware, and
// bad middleware is refused by New.
func TestMiddlewareValidationAndErrors(t *testing.T) {
	var log seenLog
	s := newScheduler(t, coordinator.WithWorkers(1), coordinator.WithPool("io", 1, echo{}),
		coordinator.WithMiddleware(tagging("m", &log)))
	if err := s.Submit(coordinator.Task{ID: "x", Pool: "io"}); err == nil {
		t.Errorf("Submit of a task echo refuses = nil; want its error")
	}
	if err := s.Submit(coordinator.Task{ID: "y"}); !errors.Is(err, worker.ErrNilRun) {
		t.Errorf("Submit without Run = %v; want ErrNilRun", err)
	}
	if _, err := coordinator.New(coordinator.WithMiddleware(nil)); !errors.Is(err, coordinator.ErrInvalidOption) {
		t.Errorf("WithMiddleware(nil) = %v; want ErrInvalidOption", err)
	}
	nilMW := func(string, worker.Worker) worker.Worker { return nil }
	if _, err := coordinator.New(coordinator.WithMiddleware(nilMW)); !errors.Is(err, coordinator.ErrInvalidOption) {
		t.Errorf("a middleware returning nil: New = %v; want ErrInvalidOption", err)
	}
}

// A panic in a middleware is a failed attempt with a *worker.PanicError.
func TestMiddlewarePanicIsAFailedAttempt(t *testing.T) {
	boom := func(pool string, next worker.Worker) worker.Worker {
		return workerFunc(func(ctx context.Context, j worker.Job) error { panic("boom") })
	}
	s := newScheduler(t, coordinator.WithWorkers(1), coordinator.WithMiddleware(boom))
	if err := s.Submit(coordinator.Task{ID: "a", Run: func(context.Context) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	info, _ := s.Info("a")
	var pe *worker.PanicError
	if info.Status != coordinator.Failed || !errors.As(info.Err, &pe) || pe.Value != "boom" {
		t.Errorf("Info = %v, %v; want failed with a PanicError(boom)", info.Status, info.Err)
	}
}

// Job.Ready is when the attempt became ready: after its delay, after its
// retry backoff, when its dependency succeeded.
func TestMiddlewareJobReady(t *testing.T) {
	var log seenLog
	r := newMockRig(t, coordinator.WithWorkers(1), coordinator.WithMaxBatch(1),
		coordinator.WithMiddleware(tagging("m", &log)))
	t0 := r.clk.Now()
	fails := 1
	err := r.s.Submit(
		coordinator.Task{ID: "late", Delay: 10 * time.Second, Run: func(context.Context) error {
			if fails > 0 {
				fails--
				return errors.New("once")
			}
			return nil
		}, Retry: coordinator.RetryPolicy{MaxAttempts: 2, BaseDelay: 3 * time.Second}},
		coordinator.Task{ID: "after", Deps: []string{"late"}, Run: func(context.Context) error { return nil }},
	)
	if err != nil {
		t.Fatal(err)
	}
	r.clk.Set(r.nextArmed(t))
	r.next(t, coordinator.EventRetrying)
	r.clk.Set(r.nextArmed(t))
	r.next(t, coordinator.EventSucceeded)
	r.next(t, coordinator.EventSucceeded)
	var got []string
	for _, x := range log.get() {
		got = append(got, fmt.Sprintf("%s#%d ready at +%v", x.job.ID, x.job.Attempt, x.job.Ready.Sub(t0)))
	}
	want := []string{"late#1 ready at +10s", "late#2 ready at +13s", "after#1 ready at +13s"}
	if !slices.Equal(got, want) {
		t.Errorf("got %v; want %v", got, want)
	}
}
