package browsertest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/dashboard"
	"github.com/chromedp/chromedp"
)

// widths are the two widths every page is looked at in: a desktop and a
// phone (390 px, an iPhone 12 to 15).
var widths = []struct {
	name string
	w, h int64
}{{"", 1280, 900}, {"-390", 390, 844}}

// pageWidth is the page's width as laid out: wider than the viewport
// means the page scrolls sideways.
const pageWidth = `Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)`

// Every page at both widths: nothing wider than the viewport (a wide
// table scrolls in its own box), long IDs and errors wrapped or clipped,
// a task page with a 20 kB error no taller than a few screens. The
// screenshots go to docs/dashboard with -browsertest.shots.
func TestEveryPageAtEveryWidth(t *testing.T) {
	ctx := browser(t)
	dm := newDemo(t)
	long := "import/" + strings.Repeat("customer-records-2026-12-05-", 8) + "part-0001"
	pages := []struct{ name, path, ready string }{
		{"overview", "", `window.batonUpdateCount > 0`},
		{"tasks", "tasks", `!!document.getElementById("tasks")`},
		{"tasks-filtered", "tasks?status=failed&status=skipped", `!!document.getElementById("tasks")`},
		{"task", "task?id=test", `!!document.getElementById("t-history")`},
		{"task-long-error", "task?id=" + url.QueryEscape(long), `!!document.getElementById("t-history")`},
		{"graph", "graph", `document.getElementById("graph").dataset.ready === "1"`},
		{"pools", "pools", `!!document.getElementById("pools-table")`},
	}
	for _, w := range widths {
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(w.w, w.h)); err != nil {
			t.Fatal(err)
		}
		for _, p := range pages {
			t.Run(p.name+w.name, func(t *testing.T) {
				if err := chromedp.Do(ctx, chromedp.Navigate(dm.base+p.path)); err != nil {
					t.Fatal(err)
				}
				if err := until(ctx, p.ready); err != nil {
					t.Fatalf("the page did not load: %v", err)
				}
				got, err := chromedp.Run(ctx, chromedp.Evaluate[int](pageWidth))
				if err != nil || int64(got) > w.w {
					t.Errorf("page width %d (%v); want at most %d", got, err, w.w)
				}
				if strings.HasPrefix(p.name, "tasks") {
					same, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelectorAll('#tasks thead th').length === document.querySelector('#tasks tbody tr').children.length`))
					if !same {
						t.Errorf("the tasks table's header and rows have different columns")
					}
				}
				if p.name == "task-long-error" {
					h, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollHeight`))
					if h > 4000 {
						t.Errorf("a task with a 20 kB error is %d px tall; want it clipped to a box", h)
					}
				}
				screenshot(t, ctx, p.name+w.name)
			})
		}
		// A bulk confirmation page, reached from the table.
		t.Run("bulk"+w.name, func(t *testing.T) {
			err := chromedp.Do(ctx, chromedp.Navigate(dm.base+"tasks?status=failed&status=skipped"), chromedp.WaitVisible(chromedp.CSS(`#bulk`)))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('#bulk input[name=all]').click(), document.querySelector('#bulk button[value=retry]').click(), true`)); err != nil {
				t.Fatal(err)
			}
			if err := until(ctx, `document.querySelector("h1").textContent.startsWith("Confirm")`); err != nil {
				t.Fatalf("no confirmation: %v", err)
			}
			got, _ := chromedp.Run(ctx, chromedp.Evaluate[int](pageWidth))
			if int64(got) > w.w {
				t.Errorf("confirmation page width %d; want at most %d", got, w.w)
			}
			screenshot(t, ctx, "bulk-confirm"+w.name)
		})
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)); err != nil {
		t.Fatal(err)
	}
}

// The operator's first look tells the truth: a dashboard made after the
// work shows the failures, the chart, the running attempts with how long
// they ran (never "0.0µs"), and each attempt's log lines; a favicon.
func TestRemembers(t *testing.T) {
	ctx := browser(t)
	dm := newDemo(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(dm.base)); err != nil {
		t.Fatal(err)
	}
	if err := until(ctx, `document.getElementById("failures").textContent.includes("exported func Serve") && document.getElementById("running").textContent.includes("long-job")`); err != nil {
		t.Fatalf("failures %q, running %q; want lint's error and long-job: %v", text(t, ctx, "#failures"), text(t, ctx, "#running"), err)
	}
	if got := text(t, ctx, "#running"); strings.Contains(got, "0.0µs") || strings.Contains(got, "unknown") {
		t.Errorf("running now = %q; want how long each ran", got)
	}
	bars, err := chromedp.Run(ctx, chromedp.Evaluate[int](`[...document.querySelectorAll("#bars rect.ok")].filter(r => +r.getAttribute("height") > 0).length`))
	if err != nil || bars == 0 {
		t.Errorf("the chart has no bar (%v); want the attempts that ended before the dashboard", err)
	}
	resp, err := http.Get(strings.TrimSuffix(dm.base, "admin/baton/") + "admin/baton/favicon.ico")
	if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), "svg") {
		t.Errorf("favicon: %v %v", resp, err)
	}
	if resp != nil {
		resp.Body.Close()
	}
	// The task page: times, retry policy, and the retried attempt's error.
	if err := chromedp.Do(ctx, chromedp.Navigate(dm.base+"task?id=test")); err != nil {
		t.Fatal(err)
	}
	if err := until(ctx, `document.getElementById("t-history").textContent.includes("flaky: connection reset by peer") && document.querySelector(".facts").textContent.includes("up to 3 attempts per run")`); err != nil {
		t.Errorf("task page: %q: %v", text(t, ctx, "main"), err)
	}
}

// Retry from a task's page, and in bulk from a filtered table with a
// confirmation that says how many tasks it touches.
func TestActsFromTheTable(t *testing.T) {
	ctx := browser(t)
	dm := newDemo(t)
	err := chromedp.Do(ctx, chromedp.Navigate(dm.base+"task?id=lint"), chromedp.WaitVisible(chromedp.CSS(`#rerun-form button[name=downstream]`)))
	if err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, "task-rerun")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#rerun-form button[name=downstream]`))); err != nil {
		t.Fatal(err)
	}
	if err := until(ctx, `!!document.querySelector(".flash") && document.querySelector(".flash").textContent.includes("re-opened")`); err != nil {
		t.Fatalf("re-run: %v", err)
	}
	if info, _ := dm.s.Info("lint"); info.Reruns != 1 {
		t.Errorf("lint: %d re-runs; want 1", info.Reruns)
	}
	// Bulk: select two rows of the failed and skipped table, re-run them.
	err = chromedp.Do(ctx, chromedp.Navigate(dm.base+"tasks?status=failed"), chromedp.WaitVisible(chromedp.CSS(`#bulk input[name=ids]`)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`[...document.querySelectorAll('#bulk input[name=ids]')].forEach(c => c.click()), document.querySelector('#bulk button[value=retry]').click(), true`)); err != nil {
		t.Fatal(err)
	}
	if err := until(ctx, `document.querySelector(".confirm") && /\d+ tasks/.test(document.querySelector(".confirm").textContent)`); err != nil {
		t.Fatalf("no confirmation: %v", err)
	}
	msg := text(t, ctx, ".confirm")
	screenshot(t, ctx, "bulk-confirm-selected")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`form button.danger`))); err != nil {
		t.Fatal(err)
	}
	if err := until(ctx, `location.pathname.endsWith("/tasks") && !!document.querySelector(".flash") && document.querySelector(".flash").textContent.includes("re-run")`); err != nil {
		t.Fatalf("after the bulk re-run (%q): %v", msg, err)
	}
}

// The graph at scale: a neighbourhood of 2,000 tasks (a spawned family of
// 1,500, a fan-out of 400, a chain) is drawn as groups, laid out off the
// page's thread (no long task blocks it), readable (not fitted to a few
// percent), a group opens on a click, and the default tab centres on
// what runs and what failed.
func TestGraphAtScale(t *testing.T) {
	ctx := browser(t)
	s, err := coordinator.New(coordinator.WithWorkers(2))
	if err != nil {
		t.Fatal(err)
	}
	ok := func(context.Context) error { return nil }
	release := make(chan struct{})
	tasks := []coordinator.Task{{ID: "root", Run: func(ctx context.Context) error {
		var kids []coordinator.Task
		for i := range 1500 {
			kids = append(kids, coordinator.Task{ID: fmt.Sprintf("root/part-%04d", i), Run: ok})
		}
		return coordinator.Spawn(ctx, kids...)
	}}}
	for i := range 400 {
		tasks = append(tasks, coordinator.Task{ID: fmt.Sprintf("fan-%03d", i), Deps: []string{"root"}, Run: ok})
	}
	prev := "root"
	for i := range 60 {
		id := fmt.Sprintf("chain-%02d", i)
		tasks = append(tasks, coordinator.Task{ID: id, Deps: []string{prev}, Run: ok})
		prev = id
	}
	tasks = append(tasks, coordinator.Task{ID: "broken", Deps: []string{"chain-59"}, Run: func(context.Context) error { return errors.New("disk full") }},
		coordinator.Task{ID: "waits", Run: func(context.Context) error { <-release; return nil }})
	if err := s.Submit(tasks...); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	_ = s.WaitTasks(wctx, "broken")
	d := dashboard.New(s)
	srv := httptest.NewServer(d)
	t.Cleanup(func() {
		close(release)
		srv.CloseClientConnections()
		d.Close()
		srv.Close()
		_ = s.Shutdown(context.Background())
	})
	const longTasks = `window.__long = 0; new PerformanceObserver(l => l.getEntries().forEach(e => window.__long = Math.max(window.__long, e.duration))).observe({type: "longtask", buffered: true}); true`
	for _, w := range widths {
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(w.w, w.h)); err != nil {
			t.Fatal(err)
		}
		t.Run("neighbourhood"+w.name, func(t *testing.T) {
			start := time.Now()
			if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/graph?id=root&depth=10")); err != nil {
				t.Fatal(err)
			}
			if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](longTasks)); err != nil {
				t.Fatal(err)
			}
			if err := until(ctx, `document.getElementById("graph").dataset.ready === "1"`); err != nil {
				t.Fatalf("not drawn: %v", err)
			}
			t.Logf("2,000-task neighbourhood drawn in %v", time.Since(start).Round(time.Millisecond))
			n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`+document.getElementById("graph").dataset.nodes`))
			groups, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#graph a[data-group]").length`))
			if n > 150 || groups < 2 {
				t.Errorf("drawn: %d nodes, %d groups; want the family and the fan-out as groups", n, groups)
			}
			if got := text(t, ctx, "#graph-summary"); !strings.Contains(got, "2000 tasks") && !strings.Contains(got, "1963 tasks") {
				t.Logf("summary: %s", got)
			}
			long, _ := chromedp.Run(ctx, chromedp.Evaluate[float64](`window.__long`))
			if long > 300 {
				t.Errorf("the page was blocked %.0f ms at once; want the layout off its thread", long)
			}
			// Readable: a task's box is drawn at least at 40% of its size.
			h, _ := chromedp.Run(ctx, chromedp.Evaluate[float64](`document.querySelector('#graph a[data-id="root"] rect').getBoundingClientRect().height`))
			if h < 44*0.4 {
				t.Errorf("a task's box is %.0f px tall on screen; want a readable scale", h)
			}
			screenshot(t, ctx, "graph-scale"+w.name)
			// A click opens a group, and the root stays where it was.
			before, _ := chromedp.Run(ctx, chromedp.Evaluate[float64](`document.querySelector('#graph a[data-id="root"] rect').getBoundingClientRect().x`))
			if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('#graph a[data-group^="s:fan-"]').dispatchEvent(new MouseEvent("click", {bubbles: true})), true`)); err != nil {
				t.Fatal(err)
			}
			if err := until(ctx, `document.querySelectorAll('#graph a[data-id^="fan-"]').length === 400`); err != nil {
				t.Fatalf("the fan-out group did not open: %v", err)
			}
			after, _ := chromedp.Run(ctx, chromedp.Evaluate[float64](`document.querySelector('#graph a[data-id="root"] rect').getBoundingClientRect().x`))
			if d := after - before; d > 2 || d < -2 {
				t.Errorf("the root moved %.0f px when a group opened; want it kept in place", d)
			}
			got, _ := chromedp.Run(ctx, chromedp.Evaluate[int](pageWidth))
			if int64(got) > w.w {
				t.Errorf("page width %d; want at most %d", got, w.w)
			}
		})
		t.Run("default tab"+w.name, func(t *testing.T) {
			if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/graph")); err != nil {
				t.Fatal(err)
			}
			if err := until(ctx, `document.getElementById("graph").dataset.ready === "1"`); err != nil {
				t.Fatalf("not drawn: %v", err)
			}
			ids, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll("#graph a[data-id]")].map(a => a.dataset.id).join(" ")`))
			if !strings.Contains(ids, "broken") || !strings.Contains(ids, "waits") || !strings.Contains(ids, "chain-59") {
				t.Errorf("default graph = %q; want what runs (waits), what failed (broken) and its neighbours", ids)
			}
			screenshot(t, ctx, "graph-default"+w.name)
		})
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)); err != nil {
		t.Fatal(err)
	}
}
