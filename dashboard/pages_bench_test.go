package dashboard

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/batonhq/baton/coordinator"
)

var pagesHeld = flag.Int("dashboard.held", 1_000_000, "BenchmarkPages: tasks held")

// BenchmarkPages: what the most expensive request of each page costs
// when a client repeats it, answered from a copy of -dashboard.held final
// tasks (a gate and its dependents, as TestHeldLoad holds), the overview
// built anew each time.
func BenchmarkPages(b *testing.B) {
	s, err := coordinator.New(coordinator.WithHistory(10, 100_000))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	var g coordinator.Graph
	g.Grow(*pagesHeld+1, *pagesHeld)
	g.Add(coordinator.Task{ID: "gate", Run: func(context.Context) error { return nil }})
	for i := range *pagesHeld {
		g.Add(coordinator.Task{ID: fmt.Sprint("held", i), Deps: []string{"gate"}, Run: func(context.Context) error { return nil }})
	}
	if err := s.SubmitGraph(context.Background(), &g); err != nil {
		b.Fatal(err)
	}
	if err := s.Wait(context.Background()); err != nil {
		b.Fatal(err)
	}
	d := New(s)
	defer d.Close()
	if err := d.CaughtUp(context.Background()); err != nil {
		b.Fatal(err)
	}
	for _, page := range []struct{ name, target string }{
		{"overview", "/"},
		{"tasks", "/tasks?sort=-attempts&id=held1&page=200"},
		{"tasks-sorted", "/tasks?sort=-attempts"},
		{"tasks-deep", "/tasks?sort=id&page=15000"},
		{"task", "/task?id=gate"},
		{"graph", "/graph.json?id=gate&depth=10"},
		{"pools", "/pools"},
	} {
		b.Run(page.name, func(b *testing.B) {
			b.ReportAllocs()
			// Once before timing: a query's first request makes what its
			// repeats read (BenchmarkLiveResult/build times that).
			d.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, page.target, nil))
			for b.Loop() {
				d.forgetOverview()
				rec := httptest.NewRecorder()
				d.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, page.target, nil))
				if rec.Code != http.StatusOK {
					b.Fatalf("GET %s = %d: %s", page.target, rec.Code, rec.Body)
				}
			}
		})
	}
}
