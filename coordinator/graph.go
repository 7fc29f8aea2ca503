package coordinator

import (
	"context"
	"fmt"
	"slices"
)

// Graph builds a batch of tasks whose dependencies on each other are given
// by Handle instead of by ID, like Taskflow's emplace and precede: a large
// graph then costs no ID lookup per dependency when it is submitted.
// Tasks may still name other dependencies in Task.Deps, by ID (tasks
// submitted before, or tasks of the same graph). Submit it with
// SubmitGraph. The zero value is an empty graph; a Graph is not safe for
// concurrent use.
//
//	var g coordinator.Graph
//	fetch := g.Add(coordinator.Task{ID: "fetch", Run: fetch})
//	build := g.Add(coordinator.Task{ID: "build", Run: build}, fetch)
//	g.Add(coordinator.Task{ID: "test", Run: test}, build)
//	err := s.SubmitGraph(ctx, &g)
type Graph struct {
	tasks   []Task
	hstart  []int32 // task i depends on handles[hstart[i]:hstart[i+1]]
	handles []int32
	bad     error // the first invalid Add, reported by SubmitGraph
}

// Handle names a task added to a Graph, for later Adds of the same graph.
type Handle int32

// Add appends t, which depends on the tasks named by after (handles this
// graph returned before) besides the IDs in t.Deps, and returns its
// handle. A handle from another graph, or not yet returned, makes
// SubmitGraph fail with ErrInvalidTask. Add copies t; the caller may reuse
// it.
func (g *Graph) Add(t Task, after ...Handle) Handle {
	if len(g.hstart) == 0 {
		g.hstart = append(g.hstart, 0)
	}
	h := Handle(len(g.tasks))
	for _, a := range after {
		if a < 0 || a >= h {
			if g.bad == nil {
				g.bad = &TaskError{ID: t.ID, Err: ErrInvalidTask, Detail: fmt.Sprintf("handle %d is not one of the tasks added before it", a)}
			}
			continue
		}
		g.handles = append(g.handles, int32(a))
	}
	g.tasks = append(g.tasks, t)
	g.hstart = append(g.hstart, int32(len(g.handles)))
	return h
}

// Grow makes room for n more tasks and deps more handles, so that adding
// a large graph does not copy it as it grows.
func (g *Graph) Grow(n, deps int) {
	g.tasks = slices.Grow(g.tasks, n)
	g.hstart = slices.Grow(g.hstart, n+1)
	g.handles = slices.Grow(g.handles, deps)
}

// Len reports the number of tasks added.
func (g *Graph) Len() int { return len(g.tasks) }

// Reset empties the graph, keeping its memory for the next one.
func (g *Graph) Reset() {
	clear(g.tasks)
	g.tasks, g.hstart, g.handles, g.bad = g.tasks[:0], g.hstart[:0], g.handles[:0], nil
}

// SubmitGraph adds the tasks of g as one batch: accepted whole or rejected
// whole, with the same errors and the same context rules as
// SubmitContext. g is not retained; it may be Reset and reused once
// SubmitGraph returns.
func (s *Scheduler) SubmitGraph(ctx context.Context, g *Graph) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if g.bad != nil {
		return g.bad
	}
	if len(g.tasks) == 0 {
		return nil
	}
	return s.submit(ctx, &batch{tasks: g.tasks, hstart: g.hstart, handles: g.handles})
}
