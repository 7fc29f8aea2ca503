// Package bench measures Baton against the mutex design (package
// mutexsched) on the same graphs, with the same task bodies, in one process.
//
// Graph builds the shapes; Design runs one graph on one scheduler design,
// either "run" (the graph is submitted behind a gate first, and the timed
// part starts when the gate opens) or "submit+run" (timed from the first
// Submit until Wait returns). The go test benchmarks in this package and
// the compare command (bench/cmd/compare) are both built on it.
package bench

import (
	"math/rand/v2"
	"time"
)

// Graph is a task graph in flat form: task i depends on Dep[Start[i]:Start[i+1]],
// all of which are lower than i.
type Graph struct {
	Name     string
	N        int
	Start    []int32
	Dep      []int32
	Delay    []time.Duration // nil, or a delay per task
	FailOnce []bool          // nil, or: the task's first attempt fails
}

func build(name string, n int, deps func(i int, add func(int32))) *Graph {
	g := &Graph{Name: name, N: n, Start: make([]int32, 1, n+1)}
	for i := range n {
		deps(i, func(d int32) { g.Dep = append(g.Dep, d) })
		g.Start = append(g.Start, int32(len(g.Dep)))
	}
	return g
}

// Deps returns task i's dependencies.
func (g *Graph) Deps(i int) []int32 { return g.Dep[g.Start[i]:g.Start[i+1]] }

// Chain: each task depends on the one before.
func Chain(n int) *Graph {
	return build("chain", n, func(i int, add func(int32)) {
		if i > 0 {
			add(int32(i - 1))
		}
	})
}

// Flat: independent tasks.
func Flat(n int) *Graph { return build("flat", n, func(int, func(int32)) {}) }

// Tree: a binary tree of the given depth; each task depends on its parent.
func Tree(depth int) *Graph {
	return build("tree", 1<<depth-1, func(i int, add func(int32)) {
		if i > 0 {
			add(int32((i - 1) / 2))
		}
	})
}

// Grid: a side x side wavefront; each cell depends on its left and upper
// neighbours.
func Grid(side int) *Graph {
	return build("grid", side*side, func(i int, add func(int32)) {
		if i%side > 0 {
			add(int32(i - 1))
		}
		if i >= side {
			add(int32(i - side))
		}
	})
}

// Random: each task has up to 4 distinct dependencies drawn from the
// previous 1,000.
func Random(n int, seed uint64) *Graph {
	r := rand.New(rand.NewPCG(seed, seed))
	return build("random", n, func(i int, add func(int32)) {
		if i == 0 {
			return
		}
		var picked [4]int32
		k := r.IntN(5)
		for j := 0; j < k; j++ {
			d := int32(i - 1 - r.IntN(min(i, 1000)))
			dup := false
			for _, p := range picked[:j] {
				dup = dup || p == d
			}
			if dup {
				continue
			}
			picked[j] = d
			add(d)
		}
	})
}

// Delayed: independent tasks with random delays up to max; a fraction fail
// their first attempt and retry after a backoff (the retry storm).
func Delayed(n int, max time.Duration, failFrac float64, seed uint64) *Graph {
	r := rand.New(rand.NewPCG(seed, seed+1))
	g := Flat(n)
	g.Name = "delayed"
	g.Delay = make([]time.Duration, n)
	g.FailOnce = make([]bool, n)
	for i := range n {
		g.Delay[i] = time.Duration(r.Int64N(int64(max)))
		g.FailOnce[i] = r.Float64() < failFrac
	}
	return g
}

// Shapes returns the benchmark shapes at about n tasks each.
func Shapes(n int) []*Graph {
	depth, side := 1, 1
	for 1<<depth-1 < n { // the smallest tree of at least n tasks: depth 20 for a million
		depth++
	}
	for (side+1)*(side+1) <= n {
		side++
	}
	return []*Graph{Chain(n), Flat(n), Tree(depth), Grid(side), Random(n, 1), Delayed(n, 50*time.Millisecond, 0.1, 2)}
}
