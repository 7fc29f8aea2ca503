package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/batonhq/baton/coordinator"
)

// A Graph's handles are dependencies like IDs: order, skips and errors
// are the same as through Submit.
func TestGraphHandles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(2))
		if err := s.Submit(coordinator.Task{ID: "old", Run: ok}); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		var mu sync.Mutex
		var order []string
		step := func(id string, err error) func(context.Context) error {
			return func(context.Context) error {
				mu.Lock()
				order = append(order, id)
				mu.Unlock()
				return err
			}
		}
		var g coordinator.Graph
		a := g.Add(coordinator.Task{ID: "a", Run: step("a", nil), Deps: []string{"old"}})
		b := g.Add(coordinator.Task{ID: "b", Run: step("b", nil)}, a)
		c := g.Add(coordinator.Task{ID: "c", Run: step("c", errors.New("no"))}, a)
		g.Add(coordinator.Task{ID: "d", Run: step("d", nil)}, b, c, b) // b twice: one edge
		g.Add(coordinator.Task{ID: "e", Run: step("e", nil), Deps: []string{"b"}}, a)
		if err := s.SubmitGraph(context.Background(), &g); err != nil {
			t.Fatalf("SubmitGraph = %v", err)
		}
		settle(t, s)
		for id, want := range map[string]coordinator.Status{"a": coordinator.Succeeded, "b": coordinator.Succeeded,
			"c": coordinator.Failed, "d": coordinator.Skipped, "e": coordinator.Succeeded} {
			if st := status(t, s, id); st != want {
				t.Fatalf("status(%s) = %v; want %v", id, st, want)
			}
		}
		if i, j, k := slices.Index(order, "a"), slices.Index(order, "b"), slices.Index(order, "e"); !(i < j && j < k) {
			t.Fatalf("order %v; want a before b before e", order)
		}
		// Reset keeps nothing of the first graph.
		g.Reset()
		g.Add(coordinator.Task{ID: "f", Run: ok}, g.Add(coordinator.Task{ID: "g0", Run: ok}))
		if err := s.SubmitGraph(context.Background(), &g); err != nil {
			t.Fatalf("SubmitGraph(after Reset) = %v", err)
		}
		settle(t, s)
		if st := status(t, s, "f"); st != coordinator.Succeeded {
			t.Fatalf("status(f) = %v; want succeeded", st)
		}
	})
}

// Bad handles and bad tasks are refused whole; a cycle can still be made
// through IDs, and is named.
func TestGraphBadInput(t *testing.T) {
	s := newScheduler(t)
	var g, other coordinator.Graph
	g.Add(coordinator.Task{ID: "a", Run: ok}, coordinator.Handle{}) // the zero handle
	if err := s.SubmitGraph(context.Background(), &g); !errors.Is(err, coordinator.ErrInvalidTask) {
		t.Fatalf("SubmitGraph(zero handle) = %v; want ErrInvalidTask", err)
	}
	g.Reset()
	foreign := other.Add(coordinator.Task{ID: "o", Run: ok})
	g.Add(coordinator.Task{ID: "a0", Run: ok})
	g.Add(coordinator.Task{ID: "a", Run: ok}, foreign) // in range here, but another graph's
	if err := s.SubmitGraph(context.Background(), &g); !errors.Is(err, coordinator.ErrInvalidTask) {
		t.Fatalf("SubmitGraph(another graph's handle) = %v; want ErrInvalidTask", err)
	}
	g.Reset()
	old := g.Add(coordinator.Task{ID: "b0", Run: ok})
	g.Reset()
	g.Add(coordinator.Task{ID: "b1", Run: ok})
	g.Add(coordinator.Task{ID: "b2", Run: ok}, old) // from before the Reset
	if err := s.SubmitGraph(context.Background(), &g); !errors.Is(err, coordinator.ErrInvalidTask) {
		t.Fatalf("SubmitGraph(a handle from before Reset) = %v; want ErrInvalidTask", err)
	}
	g.Reset()
	a := g.Add(coordinator.Task{ID: "a", Run: ok, Deps: []string{"b"}})
	g.Add(coordinator.Task{ID: "b", Run: ok}, a)
	var ce *coordinator.CycleError
	if err := s.SubmitGraph(context.Background(), &g); !errors.As(err, &ce) || !slices.Equal(ce.InCycle, []string{"a", "b"}) {
		t.Fatalf("SubmitGraph(cycle through an ID) = %v; want a *CycleError naming a and b", err)
	}
	g.Reset()
	g.Add(coordinator.Task{ID: "a", Run: ok})
	g.Add(coordinator.Task{ID: "x", Run: nil})
	if err := s.SubmitGraph(context.Background(), &g); !errors.Is(err, coordinator.ErrInvalidTask) {
		t.Fatalf("SubmitGraph(nil Run) = %v; want ErrInvalidTask", err)
	}
	if _, found := s.Info("a"); found {
		t.Fatalf("a rejected graph left a behind")
	}
}

func ExampleGraph() {
	s, err := coordinator.New(coordinator.WithWorkers(2))
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())

	// A 3-level fan-out and fan-in, dependencies by handle: no ID lookup.
	var g coordinator.Graph
	root := g.Add(coordinator.Task{ID: "root", Run: func(context.Context) error { return nil }})
	var leaves []coordinator.Handle
	for i := range 3 {
		leaves = append(leaves, g.Add(coordinator.Task{ID: fmt.Sprint("leaf", i), Run: func(context.Context) error { return nil }}, root))
	}
	g.Add(coordinator.Task{ID: "join", Run: func(context.Context) error { return nil }}, leaves...)
	if err := s.SubmitGraph(context.Background(), &g); err != nil {
		panic(err)
	}
	if err := s.Wait(context.Background()); err != nil {
		panic(err)
	}
	info, _ := s.Info("join")
	fmt.Println(g.Len(), "tasks; join:", info.Status)
	// Output: 5 tasks; join: succeeded
}
