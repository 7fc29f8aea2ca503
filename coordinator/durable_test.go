package coordinator_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/worker"
)

// Named functions work on any scheduler: Func calls the function
// registered with WithFunc, with the task's Payload.
func TestWithFuncInMemory(t *testing.T) {
	got := make(chan string, 1)
	s := newScheduler(t, coordinator.WithFunc("echo", func(ctx context.Context, p []byte) error {
		got <- string(p)
		return coordinator.SetResult(ctx, 42) // not durable: any result
	}))
	if err := s.Submit(coordinator.Task{ID: "e", Func: "echo", Payload: []byte("hi")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p := <-got; p != "hi" {
		t.Errorf("payload = %q", p)
	}
	if ti, _ := s.Info("e"); ti.Status != coordinator.Succeeded || ti.Result != 42 {
		t.Errorf("e = %v, result %v", ti.Status, ti.Result)
	}
	for _, task := range []coordinator.Task{
		{ID: "unknown", Func: "nope"},
		{ID: "both", Func: "echo", Run: func(context.Context) error { return nil }},
		{ID: "payload", Func: "echo", Payload: "not bytes"},
	} {
		if err := s.Submit(task); !errors.Is(err, coordinator.ErrInvalidTask) {
			t.Errorf("Submit(%s) = %v; want ErrInvalidTask", task.ID, err)
		}
	}
}

// Without WithFunc, a task naming a function is refused with its name.
func TestFuncWithoutRegistration(t *testing.T) {
	s := newScheduler(t)
	err := s.Submit(coordinator.Task{ID: "t", Func: "resize"})
	var te *coordinator.TaskError
	if !errors.As(err, &te) || !errors.Is(err, coordinator.ErrInvalidTask) || te.ID != "t" {
		t.Errorf("Submit = %v; want a *TaskError wrapping ErrInvalidTask", err)
	}
}

func TestDurableOptionsInvalid(t *testing.T) {
	f := func(context.Context, []byte) error { return nil }
	for name, opts := range map[string][]coordinator.Option{
		"nil store":  {coordinator.WithStore(nil)},
		"empty name": {coordinator.WithFunc("", f)},
		"nil func":   {coordinator.WithFunc("f", nil)},
		"twice":      {coordinator.WithFunc("f", f), coordinator.WithFunc("f", f)},
	} {
		if _, err := coordinator.New(opts...); !errors.Is(err, coordinator.ErrInvalidOption) {
			t.Errorf("%s: New = %v; want ErrInvalidOption", name, err)
		}
	}
}

// Submit copies []byte payloads: the caller may reuse its buffer as soon
// as Submit returns, for a Func task and for a custom worker alike.
func TestSubmitCopiesBytePayloads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		got := make(chan string, 2)
		pool := workerFunc(func(_ context.Context, j worker.Job) error {
			got <- "pool " + string(j.Payload.([]byte))
			return nil
		})
		s := newScheduler(t, coordinator.WithPool("p", 1, pool),
			coordinator.WithFunc("f", func(_ context.Context, p []byte) error { got <- "func " + string(p); return nil }))
		buf := []byte("original")
		tasks := []coordinator.Task{
			{ID: "func", Func: "f", Payload: buf, Delay: time.Second},
			{ID: "pool", Pool: "p", Payload: buf, Delay: time.Second},
		}
		if err := s.Submit(tasks...); err != nil {
			t.Fatal(err)
		}
		copy(buf, "MUTATED!")
		if tasks[0].Payload.([]byte)[0] != 'M' {
			t.Fatal("Submit changed the caller's tasks")
		}
		settle(t, s)
		close(got)
		for msg := range got {
			if want := "original"; msg[len(msg)-len(want):] != want {
				t.Errorf("the attempt saw %q; want the payload as submitted", msg)
			}
		}
	})
}
