package coordinator

import "slices"

// findCycle returns a *CycleError if the dependencies inside the batch form
// a cycle. Task i of the batch depends on the tasks whose places in the
// batch are places[depStart[i]:depStart[i+1]] (-1 for a task submitted
// before). Dependencies on earlier tasks cannot: those never depend on the
// batch. It peels the batch in topological order (Kahn); whatever cannot be
// peeled waits on a cycle, and Tarjan's strongly connected components,
// computed without recursion, tell the tasks on a cycle from those behind
// one.
func findCycle(tasks []Task, depStart, places []int32) error {
	n := len(tasks)
	// Successor lists inside the batch, as flat arrays.
	indeg := make([]int32, n)
	start := make([]int32, n+1)
	for i := range n {
		for _, j := range places[depStart[i]:depStart[i+1]] {
			if j >= 0 {
				start[j+1]++
				indeg[i]++
			}
		}
	}
	for i := range n {
		start[i+1] += start[i]
	}
	succ := make([]int32, start[n])
	fill := slices.Clone(start[:n])
	for i := range n {
		for _, j := range places[depStart[i]:depStart[i+1]] {
			if j >= 0 {
				succ[fill[j]] = int32(i)
				fill[j]++
			}
		}
	}
	queue := make([]int32, 0, n)
	for i := range n {
		if indeg[i] == 0 {
			queue = append(queue, int32(i))
		}
	}
	for k := 0; k < len(queue); k++ {
		for _, c := range succ[start[queue[k]]:start[queue[k]+1]] {
			if indeg[c]--; indeg[c] == 0 {
				queue = append(queue, c)
			}
		}
	}
	if len(queue) == n {
		return nil
	}
	left := func(i int32) bool { return indeg[i] > 0 }

	// Iterative Tarjan over the tasks left.
	const unvisited = -1
	index := make([]int32, n)
	low := make([]int32, n)
	onStack := make([]bool, n)
	for i := range index {
		index[i] = unvisited
	}
	var stack []int32
	type frame struct{ v, next int32 }
	var calls []frame
	next := int32(0)
	inCycle := make([]bool, n)
	for root := range int32(n) {
		if !left(root) || index[root] != unvisited {
			continue
		}
		calls = append(calls, frame{v: root, next: start[root]})
		index[root], low[root] = next, next
		next++
		stack = append(stack, root)
		onStack[root] = true
		for len(calls) > 0 {
			f := &calls[len(calls)-1]
			v := f.v
			if f.next < start[v+1] {
				w := succ[f.next]
				f.next++
				if !left(w) {
					continue
				}
				if index[w] == unvisited {
					index[w], low[w] = next, next
					next++
					stack = append(stack, w)
					onStack[w] = true
					calls = append(calls, frame{v: w, next: start[w]})
				} else if onStack[w] {
					low[v] = min(low[v], index[w])
				}
				continue
			}
			calls = calls[:len(calls)-1]
			if len(calls) > 0 {
				p := calls[len(calls)-1].v
				low[p] = min(low[p], low[v])
			}
			if low[v] != index[v] {
				continue
			}
			// v roots a component: pop it.
			k := len(stack) - 1
			for stack[k] != v {
				k--
			}
			comp := stack[k:]
			selfLoop := slices.Contains(succ[start[v]:start[v+1]], v)
			if len(comp) > 1 || selfLoop {
				for _, w := range comp {
					inCycle[w] = true
				}
			}
			for _, w := range comp {
				onStack[w] = false
			}
			stack = stack[:k]
		}
	}
	e := &CycleError{}
	for i := range int32(n) {
		switch {
		case inCycle[i]:
			e.InCycle = append(e.InCycle, tasks[i].ID)
		case left(i):
			e.Behind = append(e.Behind, tasks[i].ID)
		}
	}
	slices.Sort(e.InCycle)
	slices.Sort(e.Behind)
	return e
}
