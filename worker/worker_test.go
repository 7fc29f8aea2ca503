package worker_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/batonhq/baton/worker"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFuncCallsRunAndRefusesNil(t *testing.T) {
	var f worker.Func
	if err := f.Validate(worker.Job{ID: "x"}); !errors.Is(err, worker.ErrNilRun) {
		t.Errorf("Validate(no Run) = %v; want ErrNilRun", err)
	}
	want := errors.New("boom")
	var got context.Context
	j := worker.Job{ID: "x", Run: func(ctx context.Context) error { got = ctx; return want }}
	if err := f.Validate(j); err != nil {
		t.Errorf("Validate(Run) = %v; want nil", err)
	}
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, 1)
	if err := f.Do(ctx, j); err != want {
		t.Errorf("Do = %v; want %v", err, want)
	}
	if got != ctx {
		t.Errorf("Run got another context than Do's")
	}
}

func TestPanicErrorUnwrapsErrorValues(t *testing.T) {
	e := &worker.PanicError{Value: io.EOF, Stack: []byte("goroutine 1 [running]:")}
	if !errors.Is(e, io.EOF) {
		t.Errorf("errors.Is(PanicError{io.EOF}, io.EOF) = false; want true")
	}
	if msg := e.Error(); !strings.Contains(msg, "EOF") || !strings.Contains(msg, "goroutine 1") {
		t.Errorf("Error() = %q; want the value and the stack", msg)
	}
	if (&worker.PanicError{Value: "text"}).Unwrap() != nil {
		t.Errorf("Unwrap of a non-error value = non-nil; want nil")
	}
}
