package pgstore

import (
	"slices"
	"strconv"

	"github.com/batonhq/baton/coordinator"
)

// checkBatch checks what SubmitTx can check of a batch before it asks
// the database: every task described by data alone (ErrNotDurable), an
// ID, no ID twice. It returns the tasks as they travel, and the
// dependencies outside the batch. The cycles come after the database's
// checks (findCycle), as in Submit, which names an unknown dependency
// before a cycle.
func checkBatch(tasks []coordinator.Task) ([]wireTask, []string, error) {
	// In Submit's order: each task's own checks, then the IDs.
	ws := make([]wireTask, len(tasks))
	for i, t := range tasks {
		if t.ID == "" {
			return nil, nil, &coordinator.TaskError{ID: t.ID, Err: coordinator.ErrInvalidTask, Detail: "empty ID"}
		}
		if slices.Contains(t.Deps, "") {
			return nil, nil, &coordinator.TaskError{ID: t.ID, Err: coordinator.ErrInvalidTask, Detail: "empty dependency ID"}
		}
		w, err := toWire(t)
		if err != nil {
			return nil, nil, err
		}
		ws[i] = w
	}
	index := make(map[string]int, len(tasks))
	for i, t := range tasks {
		if _, dup := index[t.ID]; dup {
			return nil, nil, &coordinator.TaskError{ID: t.ID, Err: coordinator.ErrDuplicateID, Detail: "twice in the batch"}
		}
		index[t.ID] = i
	}
	var outside []string
	seen := map[string]bool{}
	for _, t := range tasks {
		for _, d := range t.Deps {
			if _, in := index[d]; !in && !seen[d] {
				seen[d] = true
				outside = append(outside, d)
			}
		}
	}
	return ws, outside, nil
}

// findCycle returns a *coordinator.CycleError naming the batch's tasks on
// a cycle of dependencies (Tarjan's strongly connected components) and
// those that wait on one, or nil. The batch's IDs are distinct.
func findCycle(tasks []coordinator.Task) error {
	index := make(map[string]int, len(tasks))
	for i, t := range tasks {
		index[t.ID] = i
	}
	n := len(tasks)
	idx, low := make([]int, n), make([]int, n)
	on := make([]bool, n)
	for i := range idx {
		idx[i] = -1
	}
	var stack []int
	next := 0
	inCycle := make([]bool, n)
	// An explicit stack of (node, next edge) frames: a long chain must not
	// overflow the goroutine's stack.
	type frame struct{ v, e int }
	for root := range tasks {
		if idx[root] >= 0 {
			continue
		}
		frames := []frame{{root, 0}}
		idx[root], low[root] = next, next
		next++
		stack = append(stack, root)
		on[root] = true
		for len(frames) > 0 {
			f := &frames[len(frames)-1]
			deps := tasks[f.v].Deps
			if f.e < len(deps) {
				w, in := index[deps[f.e]]
				f.e++
				if !in {
					continue
				}
				if w == f.v {
					inCycle[w] = true
				}
				if idx[w] < 0 {
					idx[w], low[w] = next, next
					next++
					stack = append(stack, w)
					on[w] = true
					frames = append(frames, frame{w, 0})
				} else if on[w] {
					low[f.v] = min(low[f.v], idx[w])
				}
				continue
			}
			v := f.v
			frames = frames[:len(frames)-1]
			if len(frames) > 0 {
				p := frames[len(frames)-1].v
				low[p] = min(low[p], low[v])
			}
			if low[v] == idx[v] {
				var comp []int
				for {
					w := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					on[w] = false
					comp = append(comp, w)
					if w == v {
						break
					}
				}
				if len(comp) > 1 {
					for _, w := range comp {
						inCycle[w] = true
					}
				}
			}
		}
	}
	if !slices.Contains(inCycle, true) {
		return nil
	}
	// Behind: tasks on no cycle that depend, directly or not, on one.
	behind := make([]int8, n) // 0 unknown, 1 behind, 2 not
	var waits func(v int) bool
	waits = func(v int) bool {
		if behind[v] != 0 {
			return behind[v] == 1
		}
		behind[v] = 2
		for _, d := range tasks[v].Deps {
			if w, in := index[d]; in && (inCycle[w] || waits(w)) {
				behind[v] = 1
				return true
			}
		}
		return false
	}
	e := &coordinator.CycleError{}
	for i, t := range tasks {
		switch {
		case inCycle[i]:
			e.InCycle = append(e.InCycle, t.ID)
		case waits(i):
			e.Behind = append(e.Behind, t.ID)
		}
	}
	slices.Sort(e.InCycle)
	slices.Sort(e.Behind)
	return e
}

// unknownDep is Submit's error for a dependency the store does not know.
func unknownDep(tasks []coordinator.Task, dep string) error {
	for _, t := range tasks {
		if slices.Contains(t.Deps, dep) {
			return &coordinator.TaskError{ID: t.ID, Err: coordinator.ErrUnknownDependency, Detail: strconv.Quote(dep)}
		}
	}
	return &coordinator.TaskError{Err: coordinator.ErrUnknownDependency, Detail: strconv.Quote(dep)}
}
