package bench

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	benchN       = flag.Int("baton.n", 100_000, "tasks per graph in BenchmarkGraphs (the targets are stated for 1,000,000)")
	benchWorkers = []int{1, 2, 4, 16, 64}
)

// Every design runs every shape to completion, so the comparison is like
// for like. This is a test, not a timing.
func TestDesignsRunEveryShape(t *testing.T) {
	for _, g := range Shapes(2000) {
		for _, d := range Designs {
			for _, gated := range []bool{true, false} {
				if _, err := d.Measure(g, 4, Body{}, gated); err != nil {
					t.Fatalf("%s/%s gated=%v: %v", g.Name, d.Name, gated, err)
				}
			}
		}
	}
}

// BenchmarkGraphs: phase/shape/workers/design, empty tasks. One op is one
// whole graph; ns/task, allocs/task and B/task are per task of the graph.
// "run" times from the opening of the gate; "submit+run" from the first
// Submit to Wait returning.
func BenchmarkGraphs(b *testing.B) {
	for _, phase := range []string{"run", "submit+run"} {
		for _, g := range Shapes(*benchN) {
			for _, w := range benchWorkers {
				for _, d := range Designs {
					b.Run(fmt.Sprintf("%s/%s/w=%d/%s", phase, g.Name, w, d.Name), func(b *testing.B) {
						measure(b, d, g, w, Body{}, phase == "run")
					})
				}
			}
		}
	}
}

// BenchmarkBodies: tasks that spin 1us and 100us, fewer of them.
func BenchmarkBodies(b *testing.B) {
	for _, body := range Bodies[1:] {
		n := 20_000
		if body.Spin >= 100*time.Microsecond {
			n = 2_000
		}
		for _, g := range []*Graph{Flat(n), Grid(isqrt(n))} {
			for _, w := range []int{1, 2, 4} {
				for _, d := range Designs {
					b.Run(fmt.Sprintf("%s/%s/w=%d/%s", body.Name, g.Name, w, d.Name), func(b *testing.B) {
						measure(b, d, g, w, body, true)
					})
				}
			}
		}
	}
}

func isqrt(n int) int {
	s := 1
	for (s+1)*(s+1) <= n {
		s++
	}
	return s
}

func measure(b *testing.B, d Design, g *Graph, workers int, body Body, gated bool) {
	var total time.Duration
	var mallocs, bytes uint64
	var before, after runtime.MemStats
	for range b.N {
		b.StopTimer()
		run, stop := d.prepare(g, workers, body, gated)
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		start := time.Now()
		err := run()
		total += time.Since(start)
		b.StopTimer()
		runtime.ReadMemStats(&after)
		stop()
		if err != nil {
			b.Fatal(err)
		}
		mallocs += after.Mallocs - before.Mallocs
		bytes += after.TotalAlloc - before.TotalAlloc
		b.StartTimer()
	}
	tasks := float64(b.N) * float64(g.N)
	b.ReportMetric(float64(total.Nanoseconds())/tasks, "ns/task")
	b.ReportMetric(float64(mallocs)/tasks, "allocs/task")
	b.ReportMetric(float64(bytes)/tasks, "B/task")
}

// BenchmarkRetainedMemory: heap the scheduler holds per submitted task
// after the graph has run, IDs and edges included. All tasks share one
// function, so that what is measured is the scheduler's, not the
// caller's closures (one closure per task would add its own size).
func BenchmarkRetainedMemory(b *testing.B) {
	run := func(context.Context) error { return nil }
	for _, g := range []*Graph{Flat(*benchN), Random(*benchN, 1)} {
		b.Run(g.Name, func(b *testing.B) {
			var perTask float64
			for range b.N {
				b.StopTimer()
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				tasks := make([]coordinator.Task, g.N)
				for i := range tasks {
					tasks[i] = coordinator.Task{ID: strconv.Itoa(i), Run: run}
					for _, d := range g.Deps(i) {
						tasks[i].Deps = append(tasks[i].Deps, tasks[d].ID)
					}
				}
				s, err := coordinator.New(coordinator.WithWorkers(2))
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Submit(tasks...); err != nil {
					b.Fatal(err)
				}
				if err := s.Wait(context.Background()); err != nil {
					b.Fatal(err)
				}
				ids := make([]string, 0, 2)
				ids = append(ids, tasks[0].ID, tasks[g.N-1].ID)
				tasks = nil // the caller's slice goes; the IDs stay, held by the scheduler
				runtime.GC()
				runtime.ReadMemStats(&after)
				perTask = float64(after.HeapAlloc-before.HeapAlloc) / float64(g.N)
				for _, id := range ids {
					if info, _ := s.Info(id); info.Status != coordinator.Succeeded {
						b.Fatalf("task %s: %v", id, info.Status)
					}
				}
				s.Shutdown(context.Background())
				b.StartTimer()
			}
			b.ReportMetric(perTask, "B/task-retained")
		})
	}
}

// BenchmarkSubmit: Submit alone, a whole graph in one batch through the
// string API, on a fresh scheduler; ns/task is per task of the graph.
func BenchmarkSubmit(b *testing.B) {
	for _, g := range Shapes(*benchN)[:5] {
		b.Run(g.Name, func(b *testing.B) {
			var total time.Duration
			for range b.N {
				b.StopTimer()
				tasks := stringTasks(g)
				s, err := coordinator.New(coordinator.WithWorkers(2))
				if err != nil {
					b.Fatal(err)
				}
				gate := make(chan struct{})
				gt := coordinator.Task{ID: "gate", Run: func(context.Context) error { <-gate; return nil }}
				if err := s.Submit(gt); err != nil {
					b.Fatal(err)
				}
				for i := range tasks {
					if len(tasks[i].Deps) == 0 {
						tasks[i].Deps = []string{"gate"}
					}
				}
				runtime.GC()
				b.StartTimer()
				start := time.Now()
				if err := s.Submit(tasks...); err != nil {
					b.Fatal(err)
				}
				total += time.Since(start)
				b.StopTimer()
				close(gate)
				s.Shutdown(context.Background())
				b.StartTimer()
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N*g.N), "ns/task")
		})
	}
}

// stringTasks is g as Tasks with string IDs, sharing one function.
func stringTasks(g *Graph) []coordinator.Task {
	run := func(context.Context) error { return nil }
	ids := make([]string, g.N)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	deps := make([]string, len(g.Dep))
	for i, d := range g.Dep {
		deps[i] = ids[d]
	}
	tasks := make([]coordinator.Task, g.N)
	for i := range tasks {
		tasks[i] = coordinator.Task{ID: ids[i], Run: run, Deps: deps[g.Start[i]:g.Start[i+1]:g.Start[i+1]]}
	}
	return tasks
}

// BenchmarkSubmitGraph: Submit alone, a whole graph through SubmitGraph
// (dependencies inside the graph by handle, no ID lookup for them).
func BenchmarkSubmitGraph(b *testing.B) {
	for _, g := range Shapes(*benchN)[:5] {
		b.Run(g.Name, func(b *testing.B) {
			var total time.Duration
			for range b.N {
				b.StopTimer()
				graph := handleGraph(g)
				s, err := coordinator.New(coordinator.WithWorkers(2))
				if err != nil {
					b.Fatal(err)
				}
				runtime.GC()
				b.StartTimer()
				start := time.Now()
				if err := s.SubmitGraph(context.Background(), graph); err != nil {
					b.Fatal(err)
				}
				total += time.Since(start)
				b.StopTimer()
				s.Shutdown(context.Background())
				b.StartTimer()
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N*g.N), "ns/task")
		})
	}
}

// handleGraph is g as a coordinator.Graph: string IDs, dependencies by
// handle, one function shared.
func handleGraph(g *Graph) *coordinator.Graph {
	run := func(context.Context) error { return nil }
	var graph coordinator.Graph
	graph.Grow(g.N, len(g.Dep))
	handles := make([]coordinator.Handle, g.N)
	hs := make([]coordinator.Handle, 0, 4)
	for i := range g.N {
		hs = hs[:0]
		for _, d := range g.Deps(i) {
			hs = append(hs, handles[d])
		}
		handles[i] = graph.Add(coordinator.Task{ID: strconv.Itoa(i), Run: run}, hs...)
	}
	return &graph
}

// BenchmarkSmallGraphs: from Submit to Wait of one graph of 100, 1,000
// or 100,000 tasks, against the naive design (a goroutine per task);
// ns/task is per task of the graph. Two settings:
//
//   - first: the first graph of a scheduler just made (Submit, then
//     Wait), as a build tool or a test runs one graph: the scheduler's
//     arrays and lanes grow while it runs.
//   - service: the next graph of a long-lived scheduler with retention
//     on (WithRetention(0)), submitted with SubmitBatch and waited with
//     Batch.Wait, as a service runs graph after graph: each run reuses
//     the records, IDs and lanes the last one freed, and the collections
//     its garbage causes are counted.
func BenchmarkSmallGraphs(b *testing.B) {
	for _, n := range []int{100, 1000, 100_000} {
		for _, g := range Shapes(n)[:5] {
			for _, d := range []Design{Designs[0], Naive} {
				b.Run(fmt.Sprintf("n=%d/%s/first/%s", n, g.Name, d.Name), func(b *testing.B) {
					measure(b, d, g, 2, Body{}, false)
				})
			}
			for _, d := range []Design{Service, Naive} {
				b.Run(fmt.Sprintf("n=%d/%s/service/%s", n, g.Name, d.Name), func(b *testing.B) {
					measureService(b, d, g, 2)
				})
			}
		}
	}
}

// measureService runs g on d again and again, on one scheduler made
// before the timer starts.
func measureService(b *testing.B, d Design, g *Graph, workers int) {
	run, stop := d.prepare(g, workers, Body{}, false)
	defer stop()
	if err := run(); err != nil { // the first run grows what the others reuse
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := run(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(g.N), "ns/task")
}

// BenchmarkCounts: Counts and CountsByPool on a scheduler holding
// -baton.n tasks (a random graph behind a gate: most are pending, some
// ready, some handed out), one call per op.
func BenchmarkCounts(b *testing.B) {
	g := Random(*benchN, 1)
	tasks := stringTasks(g)
	s, err := coordinator.New(coordinator.WithWorkers(2))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	gate := make(chan struct{})
	defer close(gate)
	if err := s.Submit(coordinator.Task{ID: "gate", Run: func(context.Context) error { <-gate; return nil }}); err != nil {
		b.Fatal(err)
	}
	for i := range tasks {
		if len(tasks[i].Deps) == 0 {
			tasks[i].Deps = []string{"gate"}
		}
	}
	if err := s.Submit(tasks...); err != nil {
		b.Fatal(err)
	}
	b.Run("all", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if c := s.Counts(); c.Total() != *benchN+1 {
				b.Fatalf("Counts total %d", c.Total())
			}
		}
	})
	b.Run("by-pool", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s.CountsByPool()
		}
	})
}
