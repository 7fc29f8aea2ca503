package browsertest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/dashboard"
	"github.com/batonhq/baton/worker"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var shots = flag.String("browsertest.shots", "", "write the screenshots to this directory (default: a temporary one, logged)")

// guard is a failure guard: every wait below waits for something the page
// shows, and only fails after this long.
const guard = 30 * time.Second

// chromium finds the browser; without one the tests skip, except in CI
// (CI=true), where .ci/run installs it and its absence is a failure.
func chromium(t testing.TB) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no Chromium: .ci/run installs Debian's chromium package")
	}
	t.Skip("no Chromium installed (apt-get install chromium)")
	return ""
}

// browser starts a headless Chromium with an empty profile and the flags
// this closed network needs (no background connections), and returns a
// tab's context; the cleanup closes the browser.
func browser(t testing.TB) context.Context {
	ctx, _ := browserDir(t)
	return ctx
}

// browserDir is browser, and also returns the browser's user-data-dir,
// which names its processes.
func browserDir(t testing.TB) (context.Context, string) {
	path := chromium(t)
	dir := t.TempDir()
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox, // as root
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(dir),
		chromedp.WindowSize(1280, 900),
	)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		_ = chromedp.Cancel(ctx)
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx, darkTheme(true)); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	return ctx, dir
}

// darkTheme makes the page see prefers-color-scheme: dark (or light).
func darkTheme(dark bool) chromedp.Action[chromedp.Void] {
	v := "light"
	if dark {
		v = "dark"
	}
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: v}},
		})
		return err
	})
}

// shotDir is where screenshots go.
func shotDir(t testing.TB) string {
	dir := *shots
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "baton-dashboard-shots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// screenshot saves the whole page as name.png.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	p := filepath.Join(shotDir(t), name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
}

// demo is a scheduler in a state worth looking at: a pipeline with a
// retried test, a failed lint and what it skipped, a cleanup, tasks
// running on two pools (released at the end), a delayed one, and a
// batch of finished work.
type demo struct {
	s    *coordinator.Scheduler
	d    *dashboard.Dashboard
	base string // the dashboard's URL, ending in /
}

func newDemo(t *testing.T) *demo {
	s, err := coordinator.New(coordinator.WithWorkers(4), coordinator.WithPool("gpu", 2, worker.Func{}))
	if err != nil {
		t.Fatal(err)
	}
	var d *dashboard.Dashboard
	var srv *httptest.Server
	t.Cleanup(func() {
		if srv != nil {
			srv.CloseClientConnections()
			d.Close()
			srv.Close()
		}
		if err := s.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	ok := func(context.Context) error { return nil }
	hold := func(ctx context.Context) error { <-ctx.Done(); return context.Cause(ctx) }
	var tries atomic.Int32
	var started atomic.Int32
	allStarted := make(chan struct{})
	holdCounted := func(ctx context.Context) error {
		if started.Add(1) == 4 {
			close(allStarted)
		}
		return hold(ctx)
	}
	tasks := []coordinator.Task{
		{ID: "checkout", Run: ok},
		{ID: "build-linux", Deps: []string{"checkout"}, Run: ok},
		{ID: "build-mac", Deps: []string{"checkout"}, Run: ok},
		{ID: "build-windows", Deps: []string{"checkout"}, Run: ok},
		{ID: "test", Deps: []string{"build-linux", "build-mac", "build-windows"},
			Retry: coordinator.RetryPolicy{MaxAttempts: 3},
			Run: func(context.Context) error {
				if tries.Add(1) == 1 {
					return errors.New("flaky: connection reset by peer")
				}
				return nil
			}},
		{ID: "package", Deps: []string{"test"}, Run: func(ctx context.Context) error {
			return coordinator.SetResult(ctx, "dist/app-1.4.2.tar.gz")
		}},
		{ID: "deploy", Deps: []string{"package"}, Pool: "gpu", Run: holdCounted},
		{ID: "smoke-test", Deps: []string{"deploy"}, Run: ok},
		{ID: "lint", Deps: []string{"checkout"}, Run: func(context.Context) error {
			return errors.New("lint: handlers.go:42: exported func Serve should have a comment")
		}},
		{ID: "docs", Deps: []string{"lint"}, Run: ok},
		{ID: "cleanup", Deps: []string{"lint", "test"}, When: coordinator.AllDone, Run: ok},
		{ID: "alert", Deps: []string{"lint", "test"}, When: coordinator.AnyFailed, Run: ok},
		{ID: "long-job", Run: holdCounted},
		{ID: "train-model", Pool: "gpu", Run: holdCounted},
		{ID: "index-shard-1", Run: holdCounted},
		{ID: "nightly-report", Delay: time.Hour, Run: ok},
		{ID: "import/" + strings.Repeat("customer-records-2026-12-05-", 8) + "part-0001", Run: func(context.Context) error {
			return errors.New("import failed: " + strings.Repeat("row 17: column \"amount\": value out of range; ", 400))
		}},
	}
	for i := range 40 {
		tasks = append(tasks, coordinator.Task{ID: fmt.Sprintf("batch-%03d", i), Priority: i % 3, Run: ok})
	}
	if err := s.Submit(tasks...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	select {
	case <-allStarted:
	case <-ctx.Done():
		t.Fatal("the running tasks did not start")
	}
	var settled []string
	for _, task := range tasks {
		if !strings.HasPrefix(task.ID, "batch-") && task.ID != "smoke-test" && task.ID != "nightly-report" && task.ID != "deploy" &&
			task.ID != "long-job" && task.ID != "train-model" && task.ID != "index-shard-1" {
			settled = append(settled, task.ID)
		}
	}
	_ = s.WaitTasks(ctx, settled...)
	if ctx.Err() != nil {
		t.Fatal("the demo did not settle")
	}
	// The dashboard starts after the work: it shows what happened before
	// it from the scheduler's history.
	d = dashboard.New(s, dashboard.WithPrefix("/admin/baton"), dashboard.WithUpdateInterval(100*time.Millisecond))
	srv = httptest.NewServer(d)
	return &demo{s: s, d: d, base: srv.URL + "/admin/baton/"}
}

// until waits for a JavaScript condition to hold on the page. A poll that
// a navigation interrupts (a click on a link, a form sent) starts again
// on the new page.
func until(ctx context.Context, cond string) error {
	deadline := time.Now().Add(guard)
	for {
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(time.Until(deadline))))
		if err == nil || !strings.Contains(err.Error(), "(-32000)") || time.Now().After(deadline) {
			return err
		}
	}
}

func text(t *testing.T, ctx context.Context, css string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(css)))
	if err != nil {
		t.Fatalf("text of %s: %v", css, err)
	}
	return s
}

// everyControlLabelled is true when each visible form control has a name
// a screen reader can say.
const everyControlLabelled = `[...document.querySelectorAll('input:not([type=hidden]),select,button')].every(e => (e.labels && e.labels.length) || e.getAttribute('aria-label') || e.textContent.trim())`

func TestBrowser(t *testing.T) {
	ctx := browser(t)
	dm := newDemo(t)

	t.Run("overview", func(t *testing.T) {
		if err := chromedp.Do(ctx, chromedp.Navigate(dm.base)); err != nil {
			t.Fatal(err)
		}
		if err := until(ctx, `document.getElementById("live").textContent === "live" && window.batonUpdateCount > 0`); err != nil {
			t.Fatalf("the live stream did not start: %v", err)
		}
		if err := until(ctx, `document.querySelector('[data-count="failed"]').textContent === "2"`); err != nil {
			t.Errorf("failed tile = %q; want 2", text(t, ctx, `[data-count="failed"]`))
		}
		// The events reach the dashboard on the subscription's goroutine,
		// after the tasks are final: the page shows them at once or live.
		if err := until(ctx, `document.getElementById("running").textContent.includes("long-job") && document.getElementById("running").textContent.includes("train-model")`); err != nil {
			t.Errorf("running now = %q; want long-job and train-model", text(t, ctx, "#running"))
		}
		if err := until(ctx, `document.getElementById("failures").textContent.includes("exported func Serve")`); err != nil {
			t.Errorf("recent failures = %q; want lint's error", text(t, ctx, "#failures"))
		}
		screenshot(t, ctx, "overview")
		// Live: a task submitted now shows up without a reload.
		if err := dm.s.Submit(coordinator.Task{ID: "late", Run: func(context.Context) error { return nil }}); err != nil {
			t.Fatal(err)
		}
		if err := until(ctx, `document.querySelector('[data-count="total"]').textContent === "58"`); err != nil {
			t.Errorf("the total did not reach 58 live: %v", err)
		}
	})

	t.Run("tasks filter", func(t *testing.T) {
		err := chromedp.Do(ctx,
			chromedp.Navigate(dm.base+"tasks"),
			chromedp.WaitVisible(chromedp.CSS("#tasks")),
		)
		if err != nil {
			t.Fatal(err)
		}
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](everyControlLabelled))
		if err != nil || !ok {
			t.Errorf("a form control of the tasks page has no label (%v)", err)
		}
		screenshot(t, ctx, "tasks")
		err = chromedp.Do(ctx,
			chromedp.Click(chromedp.CSS(`input[name=status][value=failed]`)),
			chromedp.Click(chromedp.CSS(`input[name=status][value=skipped]`)),
			chromedp.Click(chromedp.CSS(`form.filters button[type=submit]`)),
		)
		if err != nil {
			t.Fatal(err)
		}
		if err := until(ctx, `location.search.includes("status=failed") && document.querySelector("#tasks tbody").textContent.includes("lint")`); err != nil {
			t.Fatalf("filtering by status: %v", err)
		}
		got := text(t, ctx, "#tasks tbody")
		if !strings.Contains(got, "lint") || !strings.Contains(got, "docs") || strings.Contains(got, "checkout") {
			t.Errorf("failed and skipped tasks = %q; want lint and docs only", got)
		}
		if !strings.Contains(got, "exported func Serve") {
			t.Errorf("the failed row lacks its error: %q", got)
		}
		screenshot(t, ctx, "tasks-filtered")
		// By ID prefix, from a fresh form (typing, as a person does).
		err = chromedp.Do(ctx,
			chromedp.Navigate(dm.base+"tasks"),
			chromedp.SendKeys(chromedp.CSS(`input[name=id]`), "build-"),
			chromedp.Submit(chromedp.CSS(`input[name=id]`)),
		)
		if err != nil {
			t.Fatal(err)
		}
		if err := until(ctx, `location.search.includes("id=build-")`); err != nil {
			t.Fatal(err)
		}
		if got := text(t, ctx, "#tasks-summary"); !strings.HasPrefix(got, "3 matching tasks") {
			t.Errorf("summary = %q; want 3 matching tasks", got)
		}
	})

	t.Run("task page", func(t *testing.T) {
		err := chromedp.Do(ctx,
			chromedp.Navigate(dm.base+"tasks?id=test&sort=id"),
			chromedp.Click(chromedp.CSS(`#tasks tbody a[href$="id=test"]`)),
		)
		if err != nil {
			t.Fatal(err)
		}
		if err := until(ctx, `document.querySelector("h1").textContent === "Task test"`); err != nil {
			t.Fatalf("opening the task from the table: %v", err)
		}
		if err := until(ctx, `document.getElementById("t-history").textContent.includes("flaky: connection reset by peer")`); err != nil {
			t.Errorf("attempts = %q; want the retried attempt and its error", text(t, ctx, "#t-history"))
		}
		screenshot(t, ctx, "task")
	})

	t.Run("cancel live", func(t *testing.T) {
		err := chromedp.Do(ctx,
			chromedp.Navigate(dm.base+"task?id=long-job"),
			chromedp.WaitVisible(chromedp.CSS("#cancel-form button")),
		)
		if err != nil {
			t.Fatal(err)
		}
		if err := until(ctx, `document.getElementById("live").textContent === "live"`); err != nil {
			t.Fatal(err)
		}
		if got := text(t, ctx, "#t-status"); got != "running" {
			t.Fatalf("status = %q; want running", got)
		}
		loc, _ := chromedp.Run(ctx, chromedp.Location())
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#cancel-form button"))); err != nil {
			t.Fatal(err)
		}
		if err := until(ctx, `document.getElementById("t-status").textContent === "cancelled"`); err != nil {
			t.Fatalf("the status did not change to cancelled live: %v", err)
		}
		if after, _ := chromedp.Run(ctx, chromedp.Location()); after != loc {
			t.Errorf("the page navigated (%s to %s); want a live change", loc, after)
		}
		if err := until(ctx, `!document.getElementById("cancel-form")`); err != nil {
			t.Errorf("the Cancel button stayed: %v", err)
		}
		if info, _ := dm.s.Info("long-job"); info.Status != coordinator.Cancelled {
			t.Errorf("long-job is %v; want cancelled", info.Status)
		}
		screenshot(t, ctx, "task-cancelled")
	})

	t.Run("spawned children live", func(t *testing.T) {
		running, release := make(chan struct{}), make(chan struct{})
		ok := func(context.Context) error { return nil }
		err := dm.s.Submit(coordinator.Task{ID: "fan-out", Run: func(ctx context.Context) error {
			return coordinator.Spawn(ctx,
				coordinator.Task{ID: "fan-out/shard-1", Run: ok},
				coordinator.Task{ID: "fan-out/shard-2", Run: func(context.Context) error {
					close(running)
					<-release
					return nil
				}},
			)
		}})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-running:
		case <-time.After(guard):
			t.Fatal("fan-out/shard-2 never started")
		}
		if err := chromedp.Do(ctx, chromedp.Navigate(dm.base+"task?id=fan-out")); err != nil {
			t.Fatal(err)
		}
		if err := until(ctx, `document.getElementById("live").textContent === "live"`); err != nil {
			t.Fatal(err)
		}
		const row = `[...document.querySelectorAll("#t-children tr")].find(r => r.textContent.includes("fan-out/shard-2"))`
		if err := until(ctx, `(r => !!r && r.textContent.includes("running"))(`+row+`) && !document.getElementById("t-joining").hidden`); err != nil {
			t.Fatalf("children = %q; want shard-2 running: %v", text(t, ctx, "#t-children"), err)
		}
		screenshot(t, ctx, "task-children")
		close(release)
		if err := until(ctx, `(r => !!r && r.textContent.includes("succeeded"))(`+row+`) && document.getElementById("t-status").textContent === "succeeded" && document.getElementById("t-joining").hidden`); err != nil {
			t.Fatalf("children = %q, status %q; want shard-2 and fan-out succeeded, live: %v", text(t, ctx, "#t-children"), text(t, ctx, "#t-status"), err)
		}
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#t-children a[href$="shard-2"]`))); err != nil {
			t.Fatal(err)
		}
		if err := until(ctx, `document.querySelector("h1").textContent === "Task fan-out/shard-2" && document.querySelector(".facts").textContent.includes("Spawned by")`); err != nil {
			t.Errorf("the child's page does not name its parent: %v", err)
		}
	})

	t.Run("graph", func(t *testing.T) {
		err := chromedp.Do(ctx, chromedp.Navigate(dm.base+"graph?id=test&depth=3"))
		if err != nil {
			t.Fatal(err)
		}
		if err := until(ctx, `document.getElementById("graph").dataset.ready === "1"`); err != nil {
			t.Fatalf("the graph was not drawn: %v", err)
		}
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#graph a[data-id]").length`))
		if err != nil || n < 10 {
			t.Errorf("graph nodes = %d (%v); want the neighbourhood of test", n, err)
		}
		// Left to right: checkout is left of test, test left of package.
		ltr, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => {
			const x = id => document.querySelector('#graph a[data-id="' + id + '"]').getBoundingClientRect().x;
			return x("checkout") < x("test") && x("test") < x("package");
		})()`))
		if err != nil || !ltr {
			t.Errorf("the graph is not laid out left to right (%v)", err)
		}
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](everyControlLabelled))
		if err != nil || !ok {
			t.Errorf("a form control of the graph page has no label (%v)", err)
		}
		screenshot(t, ctx, "graph")
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#graph a[data-id="package"] rect`))); err != nil {
			t.Fatal(err)
		}
		if err := until(ctx, `document.querySelector("h1") && document.querySelector("h1").textContent === "Task package"`); err != nil {
			t.Fatalf("clicking a node did not open its task: %v", err)
		}
		if got := text(t, ctx, "pre.result"); got != "dist/app-1.4.2.tar.gz" {
			t.Errorf("result = %q", got)
		}
	})

	t.Run("pools", func(t *testing.T) {
		err := chromedp.Do(ctx, chromedp.Navigate(dm.base+"pools"), chromedp.WaitVisible(chromedp.CSS("#pools-table")))
		if err != nil {
			t.Fatal(err)
		}
		if err := until(ctx, `document.getElementById("live").textContent === "live"`); err != nil {
			t.Fatal(err)
		}
		cells, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#pools tr[data-pool="gpu"] > *')].map(c => c.textContent.trim())`))
		if err != nil || len(cells) < 5 || cells[0] != "gpu" || cells[1] != "2" || cells[2] != "running" || cells[3] != "none" || cells[4] != "100%" {
			t.Errorf("gpu row = %q (%v); want gpu, 2 workers, running, no rate limit, 100%% busy", cells, err)
		}
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](everyControlLabelled))
		if err != nil || !ok {
			t.Errorf("a form control of the pools page has no label (%v)", err)
		}
		screenshot(t, ctx, "pools")
	})

	t.Run("pause and resume", func(t *testing.T) {
		const row = `#pools tr[data-pool="gpu"]`
		err := chromedp.Do(ctx, chromedp.Navigate(dm.base+"pools"), chromedp.WaitVisible(chromedp.CSS(row+" button")))
		if err != nil {
			t.Fatal(err)
		}
		if err := until(ctx, `document.getElementById("live").textContent === "live"`); err != nil {
			t.Fatal(err)
		}
		// With the script: the button posts in the background and the row
		// changes with the live stream, the page stays.
		loc, _ := chromedp.Run(ctx, chromedp.Location())
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(row+` button[aria-label="Pause pool gpu"]`))); err != nil {
			t.Fatal(err)
		}
		if err := until(ctx, `(r => !!(r && r.querySelector(".paused-badge") && r.querySelector('button[aria-label="Resume pool gpu"]')))(document.querySelector('`+row+`'))`); err != nil {
			t.Fatalf("the gpu row did not show paused live: %v (%q)", err, text(t, ctx, row))
		}
		if after, _ := chromedp.Run(ctx, chromedp.Location()); after != loc {
			t.Errorf("the page navigated (%s to %s); want a live change", loc, after)
		}
		if !dm.s.Paused("gpu") || dm.s.Paused("") {
			t.Errorf("Paused(gpu), Paused(default) = %v, %v; want true, false", dm.s.Paused("gpu"), dm.s.Paused(""))
		}
		if got := text(t, ctx, "#notice"); got != "Paused pool gpu." {
			t.Errorf("notice = %q", got)
		}
		screenshot(t, ctx, "pools-paused")
		// The overview names the paused pools.
		if err := chromedp.Do(ctx, chromedp.Navigate(dm.base)); err != nil {
			t.Fatal(err)
		}
		if err := until(ctx, `!document.getElementById("paused-pools").hidden && document.getElementById("paused-list").textContent === "gpu"`); err != nil {
			t.Errorf("the overview does not name the paused pool: %v", err)
		}
		screenshot(t, ctx, "overview-paused")
		// Without the script's help (form.submit() sends no submit event):
		// a plain form post, and back to the overview with a notice.
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('`+row+` form').submit(), true`)); err != nil {
			t.Fatal(err)
		}
		if err := until(ctx, `location.search.includes("done=resume") && document.querySelector(".flash") && document.querySelector(".flash").textContent.includes("Pool gpu resumed")`); err != nil {
			t.Fatalf("the plain form post did not come back resumed: %v", err)
		}
		if err := until(ctx, `document.getElementById("paused-pools").hidden && !!document.querySelector('`+row+` button[aria-label="Pause pool gpu"]')`); err != nil {
			t.Errorf("the overview still shows gpu paused: %v", err)
		}
		if dm.s.Paused("gpu") {
			t.Error("gpu is still paused")
		}
	})

	t.Run("light theme", func(t *testing.T) {
		err := chromedp.Do(ctx, darkTheme(false), chromedp.Navigate(dm.base), chromedp.WaitVisible(chromedp.CSS("#counts")))
		if err != nil {
			t.Fatal(err)
		}
		bg, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.documentElement).backgroundColor`))
		if err != nil || bg != "rgb(247, 248, 250)" {
			t.Errorf("light background = %q (%v)", bg, err)
		}
		screenshot(t, ctx, "overview-light")
		if err := chromedp.Do(ctx, darkTheme(true)); err != nil {
			t.Fatal(err)
		}
	})
}
