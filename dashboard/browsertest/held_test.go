package browsertest

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/dashboard"
)

var (
	heldN     = flag.Int("browsertest.held", 0, "tasks held by the scheduler in TestHeldLoad (0: skip it); docs/dashboard.md gives the figures of 1000000")
	heldRun   = flag.Int("browsertest.heldrun", 300_000, "tasks TestHeldLoad runs and times, beside those held")
	heldWork  = flag.Duration("browsertest.heldwork", 20*time.Microsecond, "busy work per task TestHeldLoad runs")
	heldPause = flag.Duration("browsertest.heldpause", 100*time.Millisecond, "how long TestHeldLoad's client waits after each answer before it asks again")
	heldModes = flag.String("browsertest.heldmodes", "none,dashboard,overview,tasks,task,graph,pools", "the setups TestHeldLoad compares, none first")
)

// heldRequests is the most expensive request of each page, as a client
// repeats it: every one is answered from the dashboard's copy, or with a
// read of the coordinator bounded by what it returns.
var heldRequests = map[string]string{
	"overview": "/",
	"tasks":    "/tasks?sort=-attempts&id=held1&page=200", // a sort on no index, a filter, a deep page: one pass over the copy, reused
	"task":     "/task?id=gate",                           // a task with a million dependents: its neighbours, cut at 200
	"graph":    "/graph.json?id=gate&depth=10",            // the 2,000 nearest of a million
	"pools":    "/pools",                                  // every pool's counts and oldest wait, from the copy
}

// TestHeldLoad measures what a client repeating the most expensive
// request of each page costs a scheduler that holds -browsertest.held
// tasks (all final, beside a gate task they depend on) while it runs
// -browsertest.heldrun tasks of -browsertest.heldwork each: the time from
// Submit to Wait with no dashboard, with a dashboard and no client, and
// with a dashboard and a client repeating one page's request (waiting
// -browsertest.heldpause after each answer), every setup in turn in each
// round, in one process. A probe asks the coordinator for its Totals
// every millisecond meanwhile: the longest answer bounds how long any
// request held the coordinator. It logs the figures and asserts none:
// the machine is shared.
//
//	go test ./dashboard/browsertest -run TestHeldLoad -v -browsertest.held 1000000
func TestHeldLoad(t *testing.T) {
	if *heldN <= 0 {
		t.Skip("-browsertest.held not set")
	}
	type result struct {
		elapsed []time.Duration
		cpu     []time.Duration // the process's processor time from Submit to Wait (less noisy than elapsed on a shared machine)
		probe   []time.Duration // every probe's round trip
		reqs    int
		reqTime time.Duration
	}
	order := strings.Split(*heldModes, ",")
	results := map[string]*result{}
	for _, m := range order {
		results[m] = &result{}
	}
	fn := spin(*heldWork)
	s, err := coordinator.New(coordinator.WithHistory(10, 100_000))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	// The tasks held: a gate and a million tasks that depend on it, all
	// final, so that a neighbourhood of the gate is a million tasks.
	var g coordinator.Graph
	g.Grow(*heldN+1, *heldN)
	g.Add(coordinator.Task{ID: "gate", Run: spin(0)})
	for i := range *heldN {
		g.Add(coordinator.Task{ID: fmt.Sprint("held", i), Deps: []string{"gate"}, Run: spin(0)})
	}
	if err := s.SubmitGraph(context.Background(), &g); err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	for round := range *loadRounds {
		for _, mode := range order {
			var d *dashboard.Dashboard
			var srv *httptest.Server
			if mode != "none" {
				d = dashboard.New(s)
				srv = httptest.NewServer(d)
				// Until its copy holds every task.
				caughtUp(t, srv.URL, func(ov overviewCounts) bool { return ov.Loading == "" && ov.Counts.Total >= *heldN+1 })
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			r := results[mode]
			if target, ok := heldRequests[mode]; ok {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						start := time.Now()
						res, err := http.Get(srv.URL + target)
						if err != nil {
							t.Error(err)
							return
						}
						_, _ = io.Copy(io.Discard, res.Body)
						res.Body.Close()
						if res.StatusCode != http.StatusOK {
							t.Errorf("GET %s = %d", target, res.StatusCode)
							return
						}
						r.reqs++
						r.reqTime += time.Since(start)
						select {
						case <-stop:
							return
						case <-time.After(*heldPause):
						}
					}
				}()
			}
			var probes []time.Duration
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					start := time.Now()
					s.Totals()
					probes = append(probes, time.Since(start))
				}
			}()
			var run coordinator.Graph
			run.Grow(*heldRun, 0)
			for i := range *heldRun {
				run.Add(coordinator.Task{ID: fmt.Sprintf("r%d-%s-%d", round, mode, i), Run: fn})
			}
			// The setup before this one left its garbage (a dashboard's
			// copy of every task held): collected now, not during this
			// run, which would charge it to this setup.
			runtime.GC()
			start, cpu := time.Now(), selfCPU()
			if err := s.SubmitGraph(context.Background(), &run); err != nil {
				t.Fatal(err)
			}
			if err := s.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			elapsed, used := time.Since(start), selfCPU()-cpu
			close(stop)
			wg.Wait()
			r.elapsed = append(r.elapsed, elapsed)
			r.cpu = append(r.cpu, used)
			r.probe = append(r.probe, probes...)
			if d != nil {
				srv.CloseClientConnections()
				d.Close()
				srv.Close()
			}
			t.Logf("round %d %-9s %v, processor %v", round+1, mode, elapsed.Round(time.Millisecond), used)
		}
	}
	base, baseCPU := median(results["none"].elapsed), median(results["none"].cpu)
	t.Logf("%d tasks held, %d run of %v each, %d rounds, medians:", *heldN, *heldRun, *heldWork, *loadRounds)
	for _, mode := range order {
		r := results[mode]
		m := median(r.elapsed)
		slices.Sort(r.probe)
		c := median(r.cpu)
		line := fmt.Sprintf("%-9s %v, %+.1f%% against none; processor %v, %+.1f%%; a coordinator round trip: p99.9 %v, max %v", mode, m.Round(time.Millisecond),
			100*(m.Seconds()/base.Seconds()-1), c, 100*(c.Seconds()/baseCPU.Seconds()-1), r.probe[len(r.probe)*999/1000].Round(time.Microsecond), r.probe[len(r.probe)-1].Round(time.Microsecond))
		if r.reqs > 0 {
			line += fmt.Sprintf("; %s answered %d times, in %v on average", heldRequests[mode], r.reqs, (r.reqTime / time.Duration(r.reqs)).Round(time.Microsecond))
		}
		t.Log(line)
	}
}
