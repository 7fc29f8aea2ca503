package coordinator

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
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
	tag     uint32 // set by the first Add: what its handles carry
	tasks   []Task
	hstart  []int32 // task i depends on handles[hstart[i]:hstart[i+1]]
	handles []int32
	bad     error // the first invalid Add, reported by SubmitGraph
}

// Handle names a task added to a Graph, for later Adds of the same graph.
// The zero Handle names no task.
type Handle struct {
	graph uint32 // the tag of the graph that returned it
	index int32
}

// graphTags numbers graphs, so that a handle of one is known in another.
var graphTags atomic.Uint32

// Add appends t, which depends on the tasks named by after (handles this
// graph returned before, since its last Reset) besides the IDs in t.Deps,
// and returns its handle. A handle of another graph, from before a Reset,
// or the zero Handle makes SubmitGraph fail with ErrInvalidTask. Add copies
// t; the caller may reuse it.
func (g *Graph) Add(t Task, after ...Handle) Handle {
	if len(g.hstart) == 0 {
		g.hstart = append(g.hstart, 0)
		g.tag = graphTags.Add(1)
	}
	i := int32(len(g.tasks))
	for _, a := range after {
		if a.graph != g.tag || a.index < 0 || a.index >= i {
			if g.bad == nil {
				g.bad = &TaskError{ID: t.ID, Err: ErrInvalidTask, Detail: "a handle that is not one of this graph's earlier tasks"}
			}
			continue
		}
		g.handles = append(g.handles, a.index)
	}
	g.tasks = append(g.tasks, t)
	g.hstart = append(g.hstart, int32(len(g.handles)))
	return Handle{graph: g.tag, index: i}
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
	g.tasks, g.hstart, g.handles, g.bad, g.tag = g.tasks[:0], g.hstart[:0], g.handles[:0], nil, 0
}

// ErrNilGraph: SubmitGraph or SubmitGraphBatch was given a nil *Graph
// (an empty graph is a Graph with no task, its zero value).
var ErrNilGraph = errors.New("coordinator: nil *Graph")

// SubmitGraph adds the tasks of g as one batch: accepted whole or rejected
// whole, with the same errors and the same context rules as
// SubmitContext. g is not retained; it may be Reset and reused once
// SubmitGraph returns. A nil g is ErrNilGraph; an empty one is accepted
// and adds nothing.
func (s *Scheduler) SubmitGraph(ctx context.Context, g *Graph) error {
	return s.submitGraph(ctx, g, nil)
}

// SubmitGraphBatch is SubmitGraph, and returns the accepted batch (see
// SubmitBatch).
func (s *Scheduler) SubmitGraphBatch(ctx context.Context, g *Graph) (*Batch, error) {
	b, reply := newBatch()
	if err := s.submitGraph(ctx, g, reply); err != nil {
		return nil, err
	}
	return b, nil
}

func (s *Scheduler) submitGraph(ctx context.Context, g *Graph, watch chan<- error) error {
	if s.closed.Load() {
		return s.closedErr()
	}
	if g == nil {
		return ErrNilGraph
	}
	if g.bad != nil {
		return g.bad
	}
	return s.submit(ctx, &submission{tasks: g.tasks, hstart: g.hstart, handles: g.handles, watch: watch})
}
