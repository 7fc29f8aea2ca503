package worker_test

import (
	"context"
	"errors"
	"testing"

	"github.com/batonhq/baton/worker"
)

func TestContextCancelBeforeLook(t *testing.T) {
	c := worker.NewContext()
	boom := errors.New("boom")
	if c.Err() != nil || c.Cancelled() {
		t.Fatalf("new Context: Err = %v, Cancelled = %v; want nil, false", c.Err(), c.Cancelled())
	}
	if !c.Cancel(boom) || c.Cancel(errors.New("again")) {
		t.Fatalf("Cancel: want true once, then false")
	}
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("Err = %v; want context.Canceled", c.Err())
	}
	select {
	case <-c.Done():
	default:
		t.Fatalf("Done not closed after Cancel")
	}
	if got := context.Cause(c); !errors.Is(got, boom) {
		t.Fatalf("context.Cause = %v; want the cause given to Cancel", got)
	}
	if c.Seal() {
		t.Fatalf("Seal after Cancel = true; want false")
	}
}

func TestContextCancelAfterLook(t *testing.T) {
	c := worker.NewContext()
	child, stop := context.WithCancel(c)
	defer stop()
	done := c.Done()
	boom := errors.New("boom")
	c.Cancel(boom)
	<-done
	<-child.Done()
	if got := context.Cause(child); !errors.Is(got, boom) {
		t.Fatalf("context.Cause(child) = %v; want boom", got)
	}
	if c.Recycle() {
		t.Fatalf("Recycle after the function looked = true; want false")
	}
}

func TestContextSealAndRecycle(t *testing.T) {
	c := worker.NewContext()
	if !c.Seal() || !c.Sealed() {
		t.Fatalf("Seal = false; want true")
	}
	if c.Cancel(errors.New("late")) {
		t.Fatalf("Cancel after Seal = true; want false")
	}
	if !c.Recycle() {
		t.Fatalf("Recycle of an untouched Context = false; want true")
	}
	if c.Sealed() || c.Cancelled() || c.Err() != nil {
		t.Fatalf("recycled Context is not fresh")
	}
	if n := testing.AllocsPerRun(100, func() {
		c.Seal()
		c.Recycle()
	}); n != 0 {
		t.Fatalf("Seal+Recycle allocates %v times; want 0", n)
	}
}
