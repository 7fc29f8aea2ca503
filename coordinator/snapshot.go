package coordinator

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"time"
)

// SnapshotFilter chooses the tasks of a Snapshot. The zero value takes
// every task the scheduler holds.
type SnapshotFilter struct {
	// Roots, if not empty, limits the snapshot to these tasks and, as
	// Ancestors and Descendants say, the tasks around them. An unknown
	// ID is an error (ErrUnknownTask).
	Roots []string
	// Ancestors adds every task the roots depend on, directly or not:
	// what they wait for.
	Ancestors bool
	// Descendants adds every task that depends on a root, directly or
	// not: what waits for them.
	Descendants bool
	// Children adds every task the roots' attempts spawned (Spawn,
	// SpawnGraph, Map), and the tasks those spawned in turn: the roots'
	// families. SnapshotTask.Parent says whose child each one is.
	Children bool
	// Depth, if positive, limits Ancestors and Descendants to the tasks
	// at most Depth dependency edges away from a root, and Children to
	// Depth generations: 1 takes the direct dependencies (or dependents,
	// or children), 2 theirs too, and so on. A neighbourhood costs what
	// it visits, however deep the graph is.
	Depth int
	// Statuses, if not empty, keeps only the tasks in one of these
	// statuses (applied after Roots, Ancestors and Descendants).
	Statuses []Status
	// Limit, if positive, keeps at most Limit tasks (the first in the
	// order of Snapshot.Tasks) and sets Snapshot.Truncated when it cut.
	// With Roots and no Statuses, the tasks kept are the nearest to the
	// roots (by edges, or generations, breadth first) and the walk stops
	// at Limit, so it costs what it keeps.
	Limit int
}

// Snapshot is a picture of the graph, or of part of it (SnapshotFilter),
// taken at one moment of the coordinator: every task in it is in the
// status it had at that moment. Render it with WriteDOT or WriteMermaid.
// A Snapshot is owned by the caller, who may change it.
type Snapshot struct {
	Tasks     []SnapshotTask // in the order the scheduler holds them (submission order, unless WithRetention reuses a forgotten task's place)
	Edges     []Edge         // between tasks of Tasks only, grouped by dependent in the order of Tasks, each dependent's in the order it listed them
	Truncated bool           // Limit cut the snapshot short
	At        time.Time      // the scheduler's clock when it was taken
}

// SnapshotTask is one task of a Snapshot.
type SnapshotTask struct {
	ID       string
	Status   Status
	Pool     string // "" for the default pool
	Key      string // its flow-control key (Task.Key); "" for none
	Priority int
	When     Trigger // its trigger rule (Task.When)
	Attempts int     // attempts made in the current (or last) run
	Runs     int     // runs finished successfully
	Cause    string  // for Skipped: the upstream task to blame, as TaskInfo.Cause
	Parent   string  // the task whose attempt spawned it (Spawn), as TaskInfo.Parent; the renderers draw it inside its parent's cluster
}

// Edge says that task To depends on task From: From must end (succeed,
// under the default rule) before To runs.
type Edge struct {
	From, To string
}

// Snapshot returns the tasks, dependencies and statuses the scheduler
// holds (tasks forgotten by WithRetention are not in it), limited by f.
// With Roots it costs what it visits (the roots and their ancestors or
// descendants) plus a bit per task held; without, it looks at every task.
// The coordinator does nothing else meanwhile. BenchmarkSnapshot, a
// million live tasks: every task 130ms; the first 1,000 (Limit) 0.2ms; a
// task and its few ancestors 0.07ms. Use Roots, Statuses and Limit for
// graphs too large to draw; the renderers cost more than the snapshot
// (WriteMermaid: 1.2s for a million tasks), but not the coordinator's
// time.
//
// Snapshot blocks for a round trip to the coordinator, and returns
// ctx.Err() if ctx ends before the coordinator takes the request. It
// returns an error wrapping ErrUnknownTask, naming it, for an unknown root.
// Safe for concurrent use; after Shutdown it answers from the final state.
func (s *Scheduler) Snapshot(ctx context.Context, f SnapshotFilter) (*Snapshot, error) {
	r, err := query(ctx, s, func(reply chan<- snapshotReply) request {
		return snapshotReq{f: &f, reply: reply}
	}, func(st *state) snapshotReply {
		snap, err := st.snapshot(&f, s.clk.Now())
		return snapshotReply{snap, err}
	})
	if err != nil {
		return nil, err
	}
	return r.snap, r.err
}

type snapshotReply struct {
	snap *Snapshot
	err  error
}

// snapshot builds a Snapshot under f.
func (s *state) snapshot(f *SnapshotFilter, now time.Time) (*Snapshot, error) {
	s.freeze(now)
	defer s.thaw()
	// picked: the candidates, a bit per task (nil: every task).
	var picked bitset
	cut := false
	if len(f.Roots) > 0 {
		var err error
		if picked, cut, err = s.around(f); err != nil {
			return nil, err
		}
	}
	snap := &Snapshot{At: now, Truncated: cut}
	in := newBitset(len(s.hot))
	var order []int32
	consider := func(t int32) bool {
		if hidden(s.hot[t].status) || (len(f.Statuses) > 0 && !slices.Contains(f.Statuses, s.status(t))) {
			return true
		}
		if f.Limit > 0 && len(order) == f.Limit {
			snap.Truncated = true
			return false
		}
		order = append(order, t)
		in.set(t)
		return true
	}
	if picked == nil {
		for t := range s.hot {
			if !consider(int32(t)) {
				break
			}
		}
	} else {
		picked.each(consider)
	}
	edges := 0
	for _, t := range order {
		for _, d := range s.edges(&s.tasks[t], s.tasks[t].deps) {
			if in.has(d) {
				edges++
			}
		}
	}
	snap.Tasks = make([]SnapshotTask, len(order))
	snap.Edges = make([]Edge, 0, edges)
	for i, t := range order {
		ti, _ := s.infoOf(t)
		snap.Tasks[i] = SnapshotTask{ID: ti.ID, Status: ti.Status, Pool: ti.Pool, Key: ti.Key, Priority: ti.Priority,
			When: ti.When, Attempts: ti.Attempts, Runs: ti.Runs, Cause: ti.Cause, Parent: ti.Parent}
		r := &s.tasks[t]
		for _, d := range s.edges(r, r.deps) {
			if in.has(d) {
				snap.Edges = append(snap.Edges, Edge{From: s.key(d), To: ti.ID})
			}
		}
	}
	return snap, nil
}

// around marks the roots of f and, as f asks, their ancestors,
// descendants and children.
func (s *state) around(f *SnapshotFilter) (picked bitset, cut bool, err error) {
	var roots []int32
	for _, id := range f.Roots {
		t, ok := s.findLive(id)
		if !ok || s.hot[t].status == dropped {
			return nil, false, fmt.Errorf("%w: %q", ErrUnknownTask, id)
		}
		roots = append(roots, t)
	}
	picked = newBitset(len(s.hot))
	if f.Limit > 0 && len(f.Statuses) == 0 {
		return picked, s.near(roots, f, picked), nil // cut by distance (near.go)
	}
	for _, t := range roots {
		picked.set(t)
	}
	// One walk per direction, each from the roots: an ancestor's other
	// dependents, or a descendant's other dependencies, are neither.
	if f.Ancestors {
		s.walk(roots, f.Depth, picked, func(t int32, visit func(int32)) {
			r := &s.tasks[t]
			for _, d := range s.edges(r, r.deps) {
				visit(d)
			}
		})
	}
	if f.Descendants {
		s.walk(roots, f.Depth, picked, func(t int32, visit func(int32)) {
			for k := range s.successors(t) {
				// A dependent forgotten by retention may have left its
				// place to an unrelated task: check it still names t.
				if containsTask(s.edges(&s.tasks[k], s.tasks[k].deps), t) {
					visit(k)
				}
			}
		})
	}
	if f.Children && s.fam != nil {
		s.walk(roots, f.Depth, picked, func(t int32, visit func(int32)) {
			if x := s.tasks[t].x; x != nil {
				for _, c := range x.children {
					// A child forgotten with its run (detachRun) may have
					// left its place to an unrelated task.
					if s.fam[c].parent == t {
						visit(c)
					}
				}
			}
		})
	}
	return picked, false, nil
}

// walk adds to picked every task next reaches from roots, transitively,
// with a worklist (a deep chain must not recurse). With depth > 0 it goes
// at most depth steps from the roots: breadth first, one level at a time,
// so that a task is reached by its shortest way.
func (s *state) walk(roots []int32, depth int, picked bitset, next func(t int32, visit func(int32))) {
	seen := newBitset(len(s.hot))
	level := slices.Clone(roots)
	for _, t := range roots {
		seen.set(t)
	}
	var found []int32
	visit := func(t int32) {
		if !seen.has(t) && !hidden(s.hot[t].status) {
			seen.set(t)
			picked.set(t)
			found = append(found, t)
		}
	}
	for d := 0; len(level) > 0 && (depth <= 0 || d < depth); d++ {
		for _, t := range level {
			next(t, visit)
		}
		level, found = found, level[:0]
	}
}

// bitset is a set of tasks, a bit each: 125kB for a million tasks, and
// its members come out in order.
type bitset []uint64

func newBitset(n int) bitset { return make(bitset, (n+63)/64) }

func (b bitset) set(t int32)      { b[t>>6] |= 1 << (t & 63) }
func (b bitset) has(t int32) bool { return b[t>>6]&(1<<(t&63)) != 0 }

// each calls f for every member in order until f returns false.
func (b bitset) each(f func(int32) bool) {
	for w, word := range b {
		for word != 0 {
			t := int32(w*64 + bits.TrailingZeros64(word))
			if !f(t) {
				return
			}
			word &= word - 1
		}
	}
}
