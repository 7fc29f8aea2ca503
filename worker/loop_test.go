package worker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/worker"
	"github.com/benbjohnson/clock"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// runBatch runs b through one Loop and returns it when the loop sends it back.
func runBatch(t *testing.T, w worker.Worker, b *worker.Batch) (*worker.Batch, *worker.Detached) {
	t.Helper()
	in, out := make(chan *worker.Batch), make(chan *worker.Batch)
	var detached worker.Detached
	l := &worker.Loop{Worker: w, Clock: clock.New(), In: in, Out: out, Detached: &detached}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- l.Run(ctx) }()
	in <- b
	got := <-out
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Loop.Run = %v; want nil", err)
	}
	return got, &detached
}

func item(id string, run func(context.Context) error, timeout time.Duration) worker.Item {
	return worker.Item{Job: worker.Job{ID: id, Run: run, Attempt: 1, Round: 1}, Ctx: worker.NewContext(), Timeout: timeout}
}

func TestLoopOutcomes(t *testing.T) {
	boom := errors.New("boom")
	var order []string
	rec := func(id string, err error) func(context.Context) error {
		return func(context.Context) error { order = append(order, id); return err }
	}
	b := &worker.Batch{Items: []worker.Item{
		item("ok", rec("ok", nil), 0),
		item("fails", rec("fails", boom), 0),
		item("cancelled", rec("cancelled", nil), 0),
		item("panics", func(context.Context) error { panic(boom) }, 0),
	}}
	b.Items[2].Ctx.Cancel(errors.New("cancelled before its turn"))
	got, _ := runBatch(t, worker.Func{}, b)
	if want := "ok,fails"; strings.Join(order, ",") != want {
		t.Fatalf("ran %v; want %s (in order, the cancelled item skipped)", order, want)
	}
	if it := got.Items[0]; it.Outcome != worker.Ran || it.Err != nil || !it.Ctx.Sealed() {
		t.Fatalf("ok: %v, %v, sealed %v; want Ran, nil, sealed", it.Outcome, it.Err, it.Ctx.Sealed())
	}
	if it := got.Items[1]; it.Outcome != worker.Ran || !errors.Is(it.Err, boom) {
		t.Fatalf("fails: %v, %v; want Ran, boom", it.Outcome, it.Err)
	}
	if it := got.Items[2]; it.Outcome != worker.NotStarted {
		t.Fatalf("cancelled: %v; want NotStarted", it.Outcome)
	}
	var pe *worker.PanicError
	if it := got.Items[3]; !errors.As(it.Err, &pe) || !errors.Is(it.Err, boom) || !strings.Contains(string(pe.Stack), "loop_test.go") {
		t.Fatalf("panics: %v; want a *PanicError wrapping boom with the stack", it.Err)
	}
}

func TestLoopTimeoutAbandons(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		sawCause := make(chan error, 1)
		stubborn := func(ctx context.Context) error {
			<-ctx.Done()
			sawCause <- context.Cause(ctx)
			<-release // ignores its context past the timeout
			return nil
		}
		quick := func(ctx context.Context) error { return nil }
		b := &worker.Batch{Items: []worker.Item{item("stubborn", stubborn, time.Second), item("quick", quick, time.Second)}}
		start := time.Now()
		got, detached := runBatch(t, worker.Func{}, b)
		if it := got.Items[0]; it.Outcome != worker.TimedOut || !errors.Is(it.Err, worker.ErrTimeout) {
			t.Fatalf("stubborn: %v, %v; want TimedOut, ErrTimeout", it.Outcome, it.Err)
		}
		if it := got.Items[1]; it.Outcome != worker.Ran || it.Err != nil {
			t.Fatalf("quick: %v, %v; want Ran, nil (the slot was freed at the timeout)", it.Outcome, it.Err)
		}
		if got := time.Since(start); got != time.Second {
			t.Fatalf("batch took %v; want exactly the 1s timeout", got)
		}
		if cause := <-sawCause; !errors.Is(cause, worker.ErrTimeout) {
			t.Fatalf("context.Cause = %v; want ErrTimeout", cause)
		}
		if got := detached.Running(); len(got) != 1 || got[0] != "stubborn" {
			t.Fatalf("Detached.Running() = %v; want [stubborn]", got)
		}
		close(release)
		detached.Wait()
		if got := detached.Running(); len(got) != 0 {
			t.Fatalf("Detached.Running() after it returned = %v; want none", got)
		}
	})
}

func TestFuncValidate(t *testing.T) {
	if err := (worker.Func{}).Validate(worker.Job{ID: "x"}); !errors.Is(err, worker.ErrNilRun) {
		t.Fatalf("Validate(nil Run) = %v; want ErrNilRun", err)
	}
	if err := (worker.Func{}).Validate(worker.Job{ID: "x", Run: func(context.Context) error { return nil }}); err != nil {
		t.Fatalf("Validate(Run) = %v; want nil", err)
	}
}
