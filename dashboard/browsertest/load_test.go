package browsertest

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/dashboard"
	"github.com/chromedp/chromedp"
)

var (
	loadN      = flag.Int("browsertest.load", 0, "tasks per run of TestLoad (0: skip it); docs/dashboard.md gives the figures of 1000000")
	loadWork   = flag.Duration("browsertest.work", 0, "busy work per task in TestLoad (0: empty tasks, the worst case)")
	loadRounds = flag.Int("browsertest.rounds", 3, "rounds of TestLoad; each runs every setup once, in turn")
	loadEvery  = flag.Duration("browsertest.interval", 0, "the dashboard's update interval in TestLoad (0: its default)")
	loadModes  = flag.String("browsertest.modes", "none,noop-sub,noop-lag,noop-kinds,subscribed,browser", "the setups TestLoad compares, none first")
	loadFail   = flag.Bool("browsertest.fail", false, "TestLoad's tasks fail (each returns an error, no retry)")
)

// spin keeps a core busy for d (an empty task when d is 0).
func spin(d time.Duration) func(context.Context) error {
	if d == 0 {
		return func(context.Context) error { return nil }
	}
	return func(context.Context) error {
		for start := time.Now(); time.Since(start) < d; {
		}
		return nil
	}
}

// TestLoad measures what an open dashboard costs a scheduler running
// -browsertest.load tasks (flat, on the default pool of GOMAXPROCS
// workers): the time from Submit to Wait without a dashboard, with one
// subscribed but no page open (and, for comparison, a Subscribe whose
// callback does nothing: prompt, lagged, and lagged and of the kinds the
// dashboard subscribes to), and with the overview open in Chromium and
// live; and, in the browser, how long each live update took to apply
// (layout included). It logs the figures and asserts none of them: the
// machine is shared. Run it a few times, not in CI:
//
//	go test ./dashboard/browsertest -run TestLoad -v -browsertest.load 1000000
func TestLoad(t *testing.T) {
	if *loadN <= 0 {
		t.Skip("-browsertest.load not set")
	}
	ctx, dir := browserDir(t)
	n := *loadN
	fn := spin(*loadWork)
	if *loadFail {
		work := fn
		fail := errors.New("planned failure")
		fn = func(ctx context.Context) error { _ = work(ctx); return fail }
	}
	type result struct {
		elapsed []time.Duration
		updates []float64 // ms, every update of every browser round
		lag     []time.Duration
		cpu     []time.Duration // Chromium's processor time during the run
	}
	results := map[string]*result{"none": {}, "noop-sub": {}, "noop-lag": {}, "noop-kinds": {}, "subscribed": {}, "browser": {}}
	order := strings.Split(*loadModes, ",")
	for round := range *loadRounds {
		for _, mode := range order {
			s, err := coordinator.New()
			if err != nil {
				t.Fatal(err)
			}
			var d *dashboard.Dashboard
			var srv *httptest.Server
			if mode == "noop-sub" {
				// The scheduler's own cost of events for a subscriber that
				// does nothing with them.
				s.Subscribe(func(coordinator.Event) {})
			}
			if mode == "noop-lag" {
				// The same, lagged as the dashboard's subscription used to be.
				s.Subscribe(func(coordinator.Event) {}, coordinator.MaxLag(125*time.Millisecond))
			}
			if mode == "noop-kinds" {
				// The same, of the kinds the dashboard subscribes to.
				s.Subscribe(func(coordinator.Event) {}, coordinator.MaxLag(125*time.Millisecond), coordinator.Kinds(coordinator.EventRetrying,
					coordinator.EventFailed, coordinator.EventCancelled, coordinator.EventSkipped, coordinator.EventPaused, coordinator.EventResumed))
			}
			if mode == "subscribed" || mode == "browser" {
				var opts []dashboard.Option
				if *loadEvery > 0 {
					opts = append(opts, dashboard.WithUpdateInterval(*loadEvery))
				}
				d = dashboard.New(s, opts...)
				srv = httptest.NewServer(d)
			}
			if mode == "browser" {
				err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"))
				if err == nil {
					err = until(ctx, `document.getElementById("live").textContent === "live" && window.batonUpdateCount > 0`)
				}
				if err == nil {
					_, err = chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](`window.batonUpdates.length = 0`))
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			var g coordinator.Graph
			g.Grow(n, 0)
			for i := range n {
				g.Add(coordinator.Task{ID: fmt.Sprint("t", i), Run: fn})
			}
			// The setup before this one left its garbage (a scheduler, and a
			// dashboard's copy, of n tasks): collected now, not during
			// this run, which would charge it to the next setup in turn.
			runtime.GC()
			cpu0 := chromiumCPU(dir)
			start := time.Now()
			if err := s.SubmitGraph(context.Background(), &g); err != nil {
				t.Fatal(err)
			}
			if err := s.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			elapsed := time.Since(start)
			r := results[mode]
			r.elapsed = append(r.elapsed, elapsed)
			r.cpu = append(r.cpu, chromiumCPU(dir)-cpu0)
			if d != nil {
				// How far behind the dashboard was when the last task ended:
				// until its copy counts every task final.
				caughtUp(t, srv.URL, func(ov overviewCounts) bool {
					if time.Since(start) > elapsed+guard {
						t.Fatalf("the dashboard counted %d tasks of %d", ov.Counts.Succeeded+ov.Counts.Failed, n)
					}
					return ov.Counts.Succeeded+ov.Counts.Failed >= n
				})
				r.lag = append(r.lag, time.Since(start)-elapsed)
			}
			if mode == "browser" {
				want := fmt.Sprintf(`+document.querySelector('[data-count="succeeded"]').textContent + +document.querySelector('[data-count="failed"]').textContent === %d`, n)
				if err := until(ctx, want); err != nil {
					t.Errorf("the page never showed %d succeeded: %v", n, err)
				}
				ups, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`window.batonUpdates`))
				if err != nil {
					t.Fatal(err)
				}
				r.updates = append(r.updates, ups...)
				if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
					t.Fatal(err)
				}
			}
			if d != nil {
				srv.CloseClientConnections()
				d.Close()
				srv.Close()
			}
			if err := s.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			t.Logf("round %d %-10s %v (%.0f tasks/s)", round+1, mode, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds())
		}
	}
	base := median(results["none"].elapsed)
	t.Logf("%d tasks, %v of work each, %d rounds, medians:", n, *loadWork, *loadRounds)
	for _, mode := range order {
		r := results[mode]
		m := median(r.elapsed)
		line := fmt.Sprintf("%-10s %v, %.0f tasks/s, %+.1f%% time against none", mode, m.Round(time.Millisecond),
			float64(n)/m.Seconds(), 100*(m.Seconds()/base.Seconds()-1))
		line += fmt.Sprintf("; Chromium used %v of processor time", median(r.cpu).Round(10*time.Millisecond))
		if len(r.lag) > 0 {
			line += fmt.Sprintf("; the rates counted every task %v after Wait", median(r.lag).Round(time.Millisecond))
		}
		t.Log(line)
	}
	if ups := results["browser"].updates; len(ups) > 0 {
		slices.Sort(ups)
		t.Logf("browser updates: %d, applied in median %.2f ms, p99 %.2f ms, max %.2f ms",
			len(ups), ups[len(ups)/2], ups[len(ups)*99/100], ups[len(ups)-1])
	}
}

// overviewCounts is what the load tests read of /overview.json.
type overviewCounts struct {
	Loading string
	Counts  struct{ Succeeded, Failed, Total int }
}

// caughtUp polls the dashboard at url until done says its overview is
// as wanted. A measurement's poll, not a test's synchronisation.
func caughtUp(t *testing.T, url string, done func(overviewCounts) bool) {
	t.Helper()
	for {
		var ov overviewCounts
		res, err := http.Get(url + "/overview.json")
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(res.Body).Decode(&ov)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if done(ov) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// median is the middle of ds.
func median(ds []time.Duration) time.Duration {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[len(ds)/2]
}
