package bench

import (
	"context"
	"strconv"
	"testing"

	"github.com/batonhq/baton/coordinator"
)

// BenchmarkMap: 100,000 elements mapped by coordinator.Map (spawned when
// the list's result is known, reduced in order), against the same fan-out
// submitted up front as one graph (list -> 100,000 tasks -> reduce). One
// op is one whole graph, from Submit to Wait; ns/elem is per element.
// The target: map within 1.2x of up front.
func BenchmarkMap(b *testing.B) {
	const n = 100_000
	in := make([]int, n)
	for i := range in {
		in[i] = i
	}
	list := func(ctx context.Context) error { return coordinator.SetResult(ctx, in) }
	for _, shape := range []string{"map", "upfront"} {
		b.Run(shape+"/n=100000", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s, err := coordinator.New(coordinator.WithWorkers(2))
				if err != nil {
					b.Fatal(err)
				}
				var sum int
				if shape == "map" {
					err = s.Submit(coordinator.Task{ID: "list", Run: list},
						coordinator.Map("m", "list", func(_ context.Context, x int) (int, error) { return x, nil },
							func(_ context.Context, rs []coordinator.Mapped[int]) (int, error) {
								for _, r := range rs {
									sum += r.Value
								}
								return sum, nil
							}))
				} else {
					var g coordinator.Graph
					g.Grow(n+2, 2*n)
					vals := make([]int, n)
					h := g.Add(coordinator.Task{ID: "list", Run: list})
					hs := make([]coordinator.Handle, n)
					for i := range n {
						hs[i] = g.Add(coordinator.Task{ID: "m/" + strconv.Itoa(i), Run: func(context.Context) error { vals[i] = in[i]; return nil }}, h)
					}
					g.Add(coordinator.Task{ID: "m/reduce", Run: func(context.Context) error {
						for _, v := range vals {
							sum += v
						}
						return nil
					}}, hs...)
					err = s.SubmitGraph(context.Background(), &g)
				}
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Wait(context.Background()); err != nil {
					b.Fatal(err)
				}
				if err := s.Shutdown(context.Background()); err != nil {
					b.Fatal(err)
				}
				if sum != n*(n-1)/2 {
					b.Fatalf("sum %d", sum)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/elem")
		})
	}
}
