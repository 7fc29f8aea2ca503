package lane

import (
	"context"
	"errors"
	"slices"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Each detached attempt has its own key: a late return of one attempt
// never removes another attempt of the same task, or one that reused its
// context.
func TestDetachedKeysAreUnique(t *testing.T) {
	var d Detached
	a := d.add("task")
	b := d.add("task")
	c := d.add("other")
	d.done(a)
	if got := d.Running(); !slices.Equal(got, []string{"other", "task"}) {
		t.Fatalf("Running() = %v after one of task's two attempts returned; want [other task]", got)
	}
	d.done(b)
	d.done(c)
	if got := d.Running(); len(got) != 0 || d.Len() != 0 {
		t.Fatalf("Running() = %v, Len %d after all returned; want none", got, d.Len())
	}
	d.Wait()
}

// The attempt context: Err and Cause before and after it ends, for it and
// for a child derived from it, including the deadline case.
func TestContextEnds(t *testing.T) {
	boom := errors.New("boom")
	for _, expire := range []bool{false, true} {
		c := NewContext()
		if c.Err() != nil || c.Ended() {
			t.Fatalf("a new Context ended")
		}
		child, stop := context.WithCancel(c)
		defer stop()
		if expire {
			c.Expire(boom)
		} else {
			c.Cancel(boom)
		}
		<-c.Done()
		<-child.Done()
		want := context.Canceled
		if expire {
			want = context.DeadlineExceeded
		}
		if !errors.Is(c.Err(), want) || !errors.Is(child.Err(), want) {
			t.Fatalf("expire=%v: Err = %v, child Err = %v; want %v", expire, c.Err(), child.Err(), want)
		}
		if !errors.Is(context.Cause(c), boom) || !errors.Is(context.Cause(child), boom) {
			t.Fatalf("expire=%v: Cause = %v, child Cause = %v; want boom", expire, context.Cause(c), context.Cause(child))
		}
		if c.Cancel(errors.New("again")) {
			t.Fatalf("a second end succeeded")
		}
		if c.Reset() {
			t.Fatalf("Reset of a context whose methods were called = true; want false")
		}
	}
	c := NewContext()
	c.Cancel(boom)
	if !c.Reset() || c.Ended() {
		t.Fatalf("Reset of an untouched context failed")
	}
}

// A foreign Value lookup answers from the caller's values without building
// the cancel context; context.Cause and children still see the cause.
func TestContextValueBuildsNothing(t *testing.T) {
	type key struct{}
	if causeKey == nil {
		t.Fatal("causeKey not learned from context.Cause")
	}
	c := NewContext()
	c.SetValues(context.WithValue(context.Background(), key{}, "v"))
	if got := c.Value(key{}); got != "v" {
		t.Errorf("Value(key) = %v; want v", got)
	}
	if got := c.Value("other"); got != nil {
		t.Errorf("Value(other) = %v; want nil", got)
	}
	if c.real.Load() != nil {
		t.Errorf("a foreign Value lookup built the cancel context")
	}
	child, stop := context.WithCancel(context.WithValue(c, key{}, "w"))
	defer stop()
	cause := errors.New("why")
	c.Cancel(cause)
	<-child.Done()
	if got := context.Cause(child); got != cause {
		t.Errorf("Cause(child) = %v; want %v", got, cause)
	}
	if got := context.Cause(c); got != cause {
		t.Errorf("Cause(c) = %v; want %v", got, cause)
	}
	bare := NewContext()
	if got := bare.Value(key{}); got != nil {
		t.Errorf("Value without values = %v; want nil", got)
	}
}
