package coordinator_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/worker"
)

var conserveSeeds = flag.Int("baton.conserve", 8, "seeds per configuration of TestRandomGraphsKeepWorkersBusy")

// span is when one task's function ran, on the fake clock.
type span struct{ start, end time.Time }

type spans struct {
	mu sync.Mutex
	m  map[string]span
}

func (sp *spans) body(id string, d time.Duration) func(context.Context) error {
	return func(context.Context) error {
		start := time.Now()
		time.Sleep(d)
		sp.mu.Lock()
		sp.m[id] = span{start, time.Now()}
		sp.mu.Unlock()
		return nil
	}
}

type node struct {
	id   string
	d    time.Duration
	deps []int
	prio int
	pool string
}

// randomGraph: n tasks of uneven durations (1ms to 100ms), up to three
// dependencies each, many of them recent (chains), over the given pools and
// priority levels.
func randomGraph(rng *rand.Rand, n, prios int, pools []string) []node {
	durs := []time.Duration{time.Millisecond, time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond, 20 * time.Millisecond, 100 * time.Millisecond}
	g := make([]node, n)
	for i := range g {
		g[i] = node{id: fmt.Sprint("t", i), d: durs[rng.IntN(len(durs))], prio: rng.IntN(prios), pool: pools[rng.IntN(len(pools))]}
		for range rng.IntN(4) {
			if i == 0 {
				break
			}
			d := rng.IntN(i)
			if i > 10 && rng.IntN(2) == 0 {
				d = i - 1 - rng.IntN(5)
			}
			if !slices.Contains(g[i].deps, d) {
				g[i].deps = append(g[i].deps, d)
			}
		}
	}
	return g
}

// idleWhileReady finds the moments when a worker of a pool was idle while
// a task of that pool was ready (every dependency's function had returned)
// and not started, and counts the starts of a task while a better one of
// its pool had been ready for more than slack.
func idleWhileReady(g []node, ran map[string]span, submitted time.Time, sizes map[string]int, slack time.Duration) (idle []string, inversions int) {
	ready := make([]time.Time, len(g))
	var points []time.Time
	for i, n := range g {
		ready[i] = submitted
		for _, d := range n.deps {
			ready[i] = later(ready[i], ran[g[d].id].end)
		}
		points = append(points, ready[i], ran[n.id].start, ran[n.id].end)
	}
	slices.SortFunc(points, func(a, b time.Time) int { return a.Compare(b) })
	for k := 0; k+1 < len(points); k++ {
		if !points[k+1].After(points[k]) {
			continue
		}
		mid := points[k].Add(points[k+1].Sub(points[k]) / 2)
		busy, waiting := map[string]int{}, map[string]string{}
		for i, n := range g {
			r := ran[n.id]
			if !r.start.After(mid) && r.end.After(mid) {
				busy[n.pool]++
			}
			if !ready[i].After(mid) && r.start.After(mid) {
				waiting[n.pool] = n.id
			}
		}
		for pool, id := range waiting {
			if busy[pool] < sizes[pool] {
				idle = append(idle, fmt.Sprintf("[%v, %v] pool %q: %d of %d workers busy while %s was ready",
					points[k].Sub(submitted), points[k+1].Sub(submitted), pool, busy[pool], sizes[pool], id))
			}
		}
	}
	for _, a := range g {
		for j, b := range g {
			if b.pool == a.pool && b.prio < a.prio && ready[j].Add(slack).Before(ran[a.id].start) && ran[b.id].start.After(ran[a.id].start) {
				inversions++
				break
			}
		}
	}
	return idle, inversions
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Random graphs of uneven tasks, on one or two pools, with one or three
// priority levels, with and without a warm-up that makes lanes large: no
// worker is ever idle while a task of its pool is ready (its dependencies'
// functions have all returned), whatever the durations. Priorities: a task
// rarely starts while a better one has been ready for more than 200µs (a
// better task handed out may wait for the attempt running ahead of it
// while another worker starts worse work it was handed before): at most 1%
// of the starts, measured at 0.02% when written.
func TestRandomGraphsKeepWorkersBusy(t *testing.T) {
	configs := []struct {
		name  string
		pools []string
		sizes map[string]int
		prios int
	}{
		{"2 workers", []string{""}, map[string]int{"": 2}, 1},
		{"3 workers", []string{""}, map[string]int{"": 3}, 1},
		{"4 workers", []string{""}, map[string]int{"": 4}, 1},
		{"2 workers, 3 levels", []string{""}, map[string]int{"": 2}, 3},
		{"3 workers, 3 levels", []string{""}, map[string]int{"": 3}, 3},
		{"pools of 3 and 1, 2 levels", []string{"", "b"}, map[string]int{"": 3, "b": 1}, 2},
	}
	starts, inversions := 0, 0
	for _, c := range configs {
		for _, warm := range []bool{false, true} {
			for seed := range *conserveSeeds {
				name := fmt.Sprintf("%s/warm=%v/seed=%d", c.name, warm, seed)
				synctest.Test(t, func(t *testing.T) {
					opts := []coordinator.Option{coordinator.WithWorkers(c.sizes[""])}
					if n := c.sizes["b"]; n > 0 {
						opts = append(opts, coordinator.WithPool("b", n, worker.Func{}))
					}
					s := newScheduler(t, opts...)
					if warm {
						for _, pool := range c.pools {
							warmUp(t, s, "warm"+pool, 2000, pool)
						}
					}
					g := randomGraph(rand.New(rand.NewPCG(uint64(seed), 7)), 150, c.prios, c.pools)
					ran := &spans{m: map[string]span{}}
					tasks := make([]coordinator.Task, len(g))
					for i, n := range g {
						var deps []string
						for _, d := range n.deps {
							deps = append(deps, g[d].id)
						}
						tasks[i] = coordinator.Task{ID: n.id, Run: ran.body(n.id, n.d), Deps: deps, Priority: n.prio, Pool: n.pool}
						if n.pool != "" {
							tasks[i].Payload = "job"
						}
					}
					submitted := time.Now()
					if err := s.Submit(tasks...); err != nil {
						t.Fatalf("%s: Submit = %v", name, err)
					}
					settle(t, s)
					idle, inv := idleWhileReady(g, ran.m, submitted, c.sizes, 200*time.Microsecond)
					if len(idle) > 0 {
						t.Errorf("%s: %d idle stretches, the first: %v", name, len(idle), idle[0])
					}
					starts += len(g)
					inversions += inv
				})
			}
		}
	}
	t.Logf("%d of %d starts came while a better task had been ready for more than 200µs", inversions, starts)
	if inversions*100 > starts {
		t.Errorf("%d of %d starts came while a better task had been ready for more than 200µs; want at most 1%%", inversions, starts)
	}
}
