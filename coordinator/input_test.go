package coordinator_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/worker"
)

// payloadWorker needs a Payload instead of a Run function.
type payloadWorker struct{}

func (payloadWorker) Do(ctx context.Context, j worker.Job) error { return nil }
func (payloadWorker) Validate(j worker.Job) error {
	if j.Payload == nil {
		return errors.New("gpu job needs a payload")
	}
	if j.Payload == "panic" {
		panic("validator bug")
	}
	return nil
}

func TestBadInput(t *testing.T) {
	s := newScheduler(t, coordinator.WithPool("gpu", 1, payloadWorker{}))
	if err := s.Submit(coordinator.Task{ID: "existing", Run: ok}); err != nil {
		t.Fatalf("Submit = %v", err)
	}
	task := func(mod func(*coordinator.Task)) coordinator.Task {
		tk := coordinator.Task{ID: "x", Run: ok}
		mod(&tk)
		return tk
	}
	tests := []struct {
		name  string
		batch []coordinator.Task
		want  error
	}{
		{"empty id", []coordinator.Task{task(func(t *coordinator.Task) { t.ID = "" })}, coordinator.ErrInvalidTask},
		{"nil run", []coordinator.Task{task(func(t *coordinator.Task) { t.Run = nil })}, worker.ErrNilRun},
		{"nil payload for gpu", []coordinator.Task{task(func(t *coordinator.Task) { t.Pool = "gpu" })}, coordinator.ErrInvalidTask},
		{"unknown pool", []coordinator.Task{task(func(t *coordinator.Task) { t.Pool = "tpu" })}, coordinator.ErrUnknownPool},
		{"negative delay", []coordinator.Task{task(func(t *coordinator.Task) { t.Delay = -1 })}, coordinator.ErrInvalidTask},
		{"negative every", []coordinator.Task{task(func(t *coordinator.Task) { t.Every = -1 })}, coordinator.ErrInvalidTask},
		{"negative timeout", []coordinator.Task{task(func(t *coordinator.Task) { t.Timeout = -1 })}, coordinator.ErrInvalidTask},
		{"negative times", []coordinator.Task{task(func(t *coordinator.Task) { t.Times = -1 })}, coordinator.ErrInvalidTask},
		{"times without every", []coordinator.Task{task(func(t *coordinator.Task) { t.Times = 3 })}, coordinator.ErrInvalidTask},
		{"missed without a series", []coordinator.Task{task(func(t *coordinator.Task) { t.Missed = coordinator.SkipMissed })}, coordinator.ErrInvalidTask},
		{"unknown missed", []coordinator.Task{task(func(t *coordinator.Task) { t.Every, t.Missed = time.Second, 9 })}, coordinator.ErrInvalidTask},
		{"every and cron", []coordinator.Task{task(func(t *coordinator.Task) { t.Every, t.Cron = time.Second, "@hourly" })}, coordinator.ErrInvalidTask},
		{"cron and schedule", []coordinator.Task{task(func(t *coordinator.Task) { t.Cron, t.Schedule = "@hourly", everyHour{} })}, coordinator.ErrInvalidTask},
		{"bad cron", []coordinator.Task{task(func(t *coordinator.Task) { t.Cron = "61 * * * *" })}, coordinator.ErrInvalidTask},
		{"cron with seconds", []coordinator.Task{task(func(t *coordinator.Task) { t.Cron = "0 0 * * * *" })}, coordinator.ErrInvalidTask},
		{"cron TZ=0 (panics in the parser)", []coordinator.Task{task(func(t *coordinator.Task) { t.Cron = "TZ=0" })}, coordinator.ErrInvalidTask},
		{"cron unknown zone", []coordinator.Task{task(func(t *coordinator.Task) { t.Cron = "CRON_TZ=Mars/Olympus 0 * * * *" })}, coordinator.ErrInvalidTask},
		{"cron zone without a schedule", []coordinator.Task{task(func(t *coordinator.Task) { t.Cron = "CRON_TZ=UTC" })}, coordinator.ErrInvalidTask},
		{"cron @every negative", []coordinator.Task{task(func(t *coordinator.Task) { t.Cron = "@every -5s" })}, coordinator.ErrInvalidTask},
		{"priority above 32 bits", []coordinator.Task{task(func(t *coordinator.Task) { t.Priority = math.MaxInt32 + 1 })}, coordinator.ErrInvalidTask},
		{"priority below 32 bits", []coordinator.Task{task(func(t *coordinator.Task) { t.Priority = math.MinInt32 - 1 })}, coordinator.ErrInvalidTask},
		{"validator panics", []coordinator.Task{task(func(t *coordinator.Task) { t.Pool, t.Payload = "gpu", "panic" })}, coordinator.ErrInvalidTask},
		{"cron that never starts", []coordinator.Task{task(func(t *coordinator.Task) { t.Cron = "0 0 30 2 *" })}, coordinator.ErrInvalidTask},
		{"nil schedule", []coordinator.Task{task(func(t *coordinator.Task) { t.Schedule = (*nilSchedule)(nil) })}, coordinator.ErrInvalidTask},
		{"unknown when", []coordinator.Task{task(func(t *coordinator.Task) { t.When = 5 })}, coordinator.ErrInvalidTask},
		{"negative attempts", []coordinator.Task{task(func(t *coordinator.Task) { t.Retry.MaxAttempts = -1 })}, coordinator.ErrInvalidTask},
		{"negative base delay", []coordinator.Task{task(func(t *coordinator.Task) { t.Retry.BaseDelay = -1 })}, coordinator.ErrInvalidTask},
		{"negative max delay", []coordinator.Task{task(func(t *coordinator.Task) { t.Retry.MaxDelay = -1 })}, coordinator.ErrInvalidTask},
		{"jitter above 1", []coordinator.Task{task(func(t *coordinator.Task) { t.Retry.Jitter = 1.5 })}, coordinator.ErrInvalidTask},
		{"jitter below 0", []coordinator.Task{task(func(t *coordinator.Task) { t.Retry.Jitter = -0.1 })}, coordinator.ErrInvalidTask},
		{"jitter NaN", []coordinator.Task{task(func(t *coordinator.Task) { t.Retry.Jitter = math.NaN() })}, coordinator.ErrInvalidTask},
		{"empty dependency", []coordinator.Task{task(func(t *coordinator.Task) { t.Deps = []string{""} })}, coordinator.ErrInvalidTask},
		{"duplicate in batch", []coordinator.Task{task(func(*coordinator.Task) {}), task(func(*coordinator.Task) {})}, coordinator.ErrDuplicateID},
		{"duplicate of earlier", []coordinator.Task{task(func(t *coordinator.Task) { t.ID = "existing" })}, coordinator.ErrDuplicateID},
		{"unknown dependency", []coordinator.Task{task(func(t *coordinator.Task) { t.Deps = []string{"ghost"} })}, coordinator.ErrUnknownDependency},
		{"self dependency", []coordinator.Task{task(func(t *coordinator.Task) { t.Deps = []string{"x"} })}, coordinator.ErrCycle},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// A valid task rides along: the batch must be rejected whole.
			batch := append([]coordinator.Task{{ID: "bystander", Run: ok}}, tc.batch...)
			err := s.Submit(batch...)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Submit(%s) = %v; want %v", tc.name, err, tc.want)
			}
			var te *coordinator.TaskError
			var ce *coordinator.CycleError
			if !errors.As(err, &te) && !errors.As(err, &ce) {
				t.Fatalf("Submit(%s) = %T; want a *TaskError or *CycleError", tc.name, err)
			}
			if _, found := s.Info("bystander"); found {
				t.Fatalf("Submit(%s) stored part of a rejected batch", tc.name)
			}
		})
	}
	// Nothing was lost: a valid batch still runs.
	if err := s.Submit(coordinator.Task{ID: "x", Run: ok, Deps: []string{"existing"}}); err != nil {
		t.Fatalf("Submit after rejections = %v", err)
	}
	if err := s.Wait(context.Background()); err != nil {
		t.Fatalf("Wait = %v", err)
	}
	if st := status(t, s, "x"); st != coordinator.Succeeded {
		t.Fatalf("status(x) = %v; want succeeded", st)
	}
}

func TestCycleError(t *testing.T) {
	s := newScheduler(t)
	err := s.Submit(
		coordinator.Task{ID: "a", Run: ok, Deps: []string{"c"}},
		coordinator.Task{ID: "b", Run: ok, Deps: []string{"a"}},
		coordinator.Task{ID: "c", Run: ok, Deps: []string{"b"}},
		coordinator.Task{ID: "d", Run: ok, Deps: []string{"c"}},
		coordinator.Task{ID: "e", Run: ok},
		coordinator.Task{ID: "self", Run: ok, Deps: []string{"self", "e"}},
		// x sits between two cycles without being on one.
		coordinator.Task{ID: "x", Run: ok, Deps: []string{"a"}},
		coordinator.Task{ID: "p", Run: ok, Deps: []string{"q", "x"}},
		coordinator.Task{ID: "q", Run: ok, Deps: []string{"p"}},
	)
	var ce *coordinator.CycleError
	if !errors.As(err, &ce) || !errors.Is(err, coordinator.ErrCycle) {
		t.Fatalf("Submit = %v; want a *CycleError", err)
	}
	if want := []string{"a", "b", "c", "p", "q", "self"}; !slices.Equal(ce.InCycle, want) {
		t.Fatalf("InCycle = %v; want %v", ce.InCycle, want)
	}
	if want := []string{"d", "x"}; !slices.Equal(ce.Behind, want) {
		t.Fatalf("Behind = %v; want %v", ce.Behind, want)
	}
	if _, found := s.Info("e"); found {
		t.Fatalf("a task of the rejected batch was stored")
	}
}

func TestNewOptions(t *testing.T) {
	for _, o := range []coordinator.Option{
		coordinator.WithWorkers(0),
		coordinator.WithClock(nil),
		coordinator.WithPool("", 1, worker.Func{}),
		coordinator.WithPool("p", 0, worker.Func{}),
		coordinator.WithPool("p", 1, nil),
		coordinator.WithRandSource(nil),
		coordinator.WithWorkers(math.MaxInt),
		coordinator.WithPool("p", math.MaxInt, worker.Func{}),
		nil,
	} {
		if s, err := coordinator.New(o); !errors.Is(err, coordinator.ErrInvalidOption) || s != nil {
			t.Fatalf("New(bad option) = %v, %v; want nil, ErrInvalidOption", s, err)
		}
	}
	if _, err := coordinator.New(coordinator.WithPool("p", 1, worker.Func{}), coordinator.WithPool("p", 2, worker.Func{})); !errors.Is(err, coordinator.ErrInvalidOption) {
		t.Fatalf("New(pool twice) = %v; want ErrInvalidOption", err)
	}
	// Each pool within the limit, all of them past it.
	if _, err := coordinator.New(coordinator.WithWorkers(coordinator.MaxWorkers), coordinator.WithPool("p", 1, worker.Func{})); !errors.Is(err, coordinator.ErrInvalidOption) {
		t.Fatalf("New(more than MaxWorkers in all) = %v; want ErrInvalidOption", err)
	}
}

func TestRetryPolicyDelay(t *testing.T) {
	p := coordinator.RetryPolicy{BaseDelay: time.Second, MaxDelay: 10 * time.Second}
	for failures, want := range []time.Duration{0, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second} {
		if got := p.Delay(failures); got != want {
			t.Fatalf("Delay(%d) = %v; want %v", failures, got, want)
		}
	}
	uncapped := coordinator.RetryPolicy{BaseDelay: time.Second}
	if got := uncapped.Delay(1000); got <= 0 {
		t.Fatalf("uncapped Delay(1000) = %v; want a large positive wait, no overflow", got)
	}
}

func TestStrings(t *testing.T) {
	if got := coordinator.Skipped.String(); got != "skipped" {
		t.Fatalf("Skipped.String() = %q", got)
	}
	if got := coordinator.EventRecurred.String(); got != "recurred" {
		t.Fatalf("EventRecurred.String() = %q", got)
	}
	if !coordinator.Failed.Final() || coordinator.Running.Final() {
		t.Fatalf("Final(): Failed must be final, Running not")
	}
	err := &coordinator.TaskError{ID: "b", Err: coordinator.ErrUnknownDependency, Detail: `"zz"`}
	if got, want := err.Error(), `coordinator: task "b": unknown dependency: "zz"`; got != want {
		t.Fatalf("Error() = %q; want %q", got, want)
	}
}

type everyHour struct{}

func (everyHour) Next(t time.Time) time.Time { return t.Truncate(time.Hour).Add(time.Hour) }

type nilSchedule struct{ d time.Duration }

func (n *nilSchedule) Next(t time.Time) time.Time { return t.Add(n.d) }
