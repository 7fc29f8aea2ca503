package coordinator_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newScheduler starts a scheduler that the test shuts down when it ends.
func newScheduler(t *testing.T, opts ...coordinator.Option) *coordinator.Scheduler {
	t.Helper()
	s, err := coordinator.New(opts...)
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	t.Cleanup(func() {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown = %v; want nil", err)
		}
	})
	return s
}

// recorder keeps every event a subscriber receives.
type recorder struct {
	mu     sync.Mutex
	events []coordinator.Event
}

func record(s *coordinator.Scheduler) *recorder {
	r := &recorder{}
	s.Subscribe(func(e coordinator.Event) {
		r.mu.Lock()
		r.events = append(r.events, e)
		r.mu.Unlock()
	})
	return r
}

func (r *recorder) all() []coordinator.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// lines renders events as "id kind" (plus the attempt for starts).
func (r *recorder) lines(kinds ...coordinator.EventKind) []string {
	var out []string
	for _, e := range r.all() {
		if len(kinds) > 0 && !slices.Contains(kinds, e.Kind) {
			continue
		}
		out = append(out, e.TaskID+" "+e.Kind.String())
	}
	return out
}

func (r *recorder) of(id string) []coordinator.Event {
	var out []coordinator.Event
	for _, e := range r.all() {
		if e.TaskID == id {
			out = append(out, e)
		}
	}
	return out
}

// settle waits for every task to be final and for the subscribers to have
// received every event. Inside a synctest bubble only.
func settle(t *testing.T, s *coordinator.Scheduler) {
	t.Helper()
	if err := s.Wait(context.Background()); err != nil {
		t.Fatalf("Wait = %v", err)
	}
	synctest.Wait()
}

func ok(context.Context) error { return nil }

func status(t *testing.T, s *coordinator.Scheduler, id string) coordinator.Status {
	t.Helper()
	info, found := s.Info(id)
	if !found {
		t.Fatalf("Info(%q): unknown", id)
	}
	return info.Status
}

// gate is a task body that blocks until release is called.
type gate struct{ c chan struct{} }

func newGate() *gate { return &gate{c: make(chan struct{})} }

func (g *gate) run(ctx context.Context) error {
	<-g.c
	return nil
}

func (g *gate) release() { close(g.c) }

// since returns how long after start each event of kind k happened.
func since(start time.Time, events []coordinator.Event, k coordinator.EventKind) []time.Duration {
	var out []time.Duration
	for _, e := range events {
		if e.Kind == k {
			out = append(out, e.At.Sub(start))
		}
	}
	return out
}
