package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/dashboard"
	"github.com/batonhq/baton/worker"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// guard is a failure guard only: no test waits for time to pass.
const guard = 10 * time.Second

// scene is a scheduler with a known graph, settled: every task is final
// but "block", which runs until it is cancelled, and "waiter", which waits
// for it.
//
//	fetch -> build                (succeeded; key acme)
//	flaky                         (succeeded at its second attempt)
//	lint -> docs                  (failed: "style: tabs"; docs skipped)
//	lint -> cleanup (AllDone)     (succeeded)
//	block -> waiter               (running; pending)
//	gpu/render                    (pool gpu, succeeded, with a result; key globex)
type scene struct {
	s *coordinator.Scheduler
	d *dashboard.Dashboard
}

func newScene(t *testing.T, opts ...dashboard.Option) *scene {
	t.Helper()
	s, err := coordinator.New(coordinator.WithWorkers(2), coordinator.WithPool("gpu", 1, worker.Func{}))
	if err != nil {
		t.Fatal(err)
	}
	var d *dashboard.Dashboard
	t.Cleanup(func() {
		if d != nil {
			d.Close()
		}
		if err := s.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	started := make(chan struct{})
	var tries atomic.Int32
	ok := func(context.Context) error { return nil }
	err = s.Submit(
		coordinator.Task{ID: "fetch", Key: "acme", Run: ok},
		coordinator.Task{ID: "build", Key: "acme", Run: ok, Deps: []string{"fetch"}},
		coordinator.Task{ID: "flaky", Retry: coordinator.RetryPolicy{MaxAttempts: 2}, Run: func(context.Context) error {
			if tries.Add(1) == 1 {
				return errors.New("connection reset")
			}
			return nil
		}},
		coordinator.Task{ID: "lint", Run: func(context.Context) error { return errors.New("style: tabs") }},
		coordinator.Task{ID: "docs", Run: ok, Deps: []string{"lint"}},
		coordinator.Task{ID: "cleanup", Run: ok, Deps: []string{"lint"}, When: coordinator.AllDone},
		coordinator.Task{ID: "block", Run: func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		}},
		coordinator.Task{ID: "waiter", Run: ok, Deps: []string{"block"}},
		coordinator.Task{ID: "gpu/render", Pool: "gpu", Key: "globex", Run: func(ctx context.Context) error {
			return coordinator.SetResult(ctx, "frame-0001.png")
		}},
	)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("block never started")
	}
	_ = s.WaitTasks(ctx, "fetch", "build", "flaky", "lint", "docs", "cleanup", "gpu/render")
	// The dashboard is made after the work: it tells what happened before
	// it from the scheduler's history.
	d = dashboard.New(s, opts...)
	if err := d.CaughtUp(ctx); err != nil {
		t.Fatal("the dashboard did not catch up")
	}
	return &scene{s: s, d: d}
}

// get serves a GET of target and returns the status and body.
func (sc *scene) get(t *testing.T, target string, header ...string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, target, nil)
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	sc.d.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

func (sc *scene) post(t *testing.T, target string, form url.Values, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, target, strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	sc.d.ServeHTTP(w, r)
	return w
}

func getJSON[T any](t *testing.T, sc *scene, target string) T {
	t.Helper()
	code, body := sc.get(t, target)
	if code != http.StatusOK {
		t.Fatalf("GET %s = %d %s; want 200", target, code, body)
	}
	var v T
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("GET %s: %v in %s", target, err, body)
	}
	return v
}

// Every route answers, with what its page is about.
func TestRoutes(t *testing.T) {
	sc := newScene(t)
	cases := []struct {
		target string
		code   int
		want   []string
	}{
		{"/", 200, []string{"<h1>Overview</h1>", `data-count="failed">1<`, `data-count="running">1<`, "block", "style: tabs", "connection reset", "gpu"}},
		{"/tasks", 200, []string{"9 matching tasks", `href="/task?id=gpu%2frender"`, "style: tabs", `skipped because of <a href="/task?id=lint">lint</a>`}},
		{"/task?id=lint", 200, []string{"<h1>Task lint</h1>", "style: tabs", ">failed<", "docs", "cleanup"}},
		{"/task?id=gpu/render", 200, []string{"frame-0001.png", "gpu"}},
		{"/task?id=cleanup", 200, []string{"AllDone", "lint"}},
		{"/task?id=fetch", 200, []string{"<dt>Key</dt>", `href="/tasks?key=acme"`}},
		{"/task?id=block", 200, []string{"Cancel task", `action="/task/cancel"`}},
		{"/graph", 200, []string{"away from the 2 tasks running or failed", "dagre.min.js", "graph.js"}},
		{"/graph?id=build&depth=1", 200, []string{"at most 1 dependencies away from build", "2 tasks, 1 dependencies"}},
		{"/pools", 200, []string{"<h1>Pools</h1>", `data-pool="gpu"`, `data-pool=""`, `<a href="/tasks?pool=gpu">gpu</a>`, `<a href="/tasks?pool=">default</a>`}},
		{"/overview.json", 200, []string{`"failed":1`, `"name":"gpu"`}},
		{"/tasks.json", 200, []string{`"total":9`}},
		{"/task.json?id=flaky", 200, []string{`"status":"succeeded"`, `"outcome":"failed"`, "connection reset"}},
		{"/graph.json?id=lint", 200, []string{`"id":"docs"`, `"root":true`}},
		{"/static/dash.js", 200, []string{"EventSource"}},
		{"/static/graph.js", 200, []string{"dagre.layout"}},
		{"/static/dagre.min.js", 200, []string{"var dagre="}},
		{"/static/style.css", 200, []string{"prefers-color-scheme"}},
		{"/static/nope.js", 404, nil},
		{"/nope", 404, []string{"no such page"}},
	}
	for _, c := range cases {
		code, body := sc.get(t, c.target)
		if code != c.code {
			t.Errorf("GET %s = %d; want %d\n%s", c.target, code, c.code, body)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s: body lacks %q", c.target, w)
			}
		}
	}
}

// Pages carry headers that keep them to their own files.
func TestSecurityHeaders(t *testing.T) {
	sc := newScene(t)
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	w := httptest.NewRecorder()
	sc.d.ServeHTTP(w, r)
	csp := w.Header().Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'self'", "script-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy = %q; lacks %q", csp, want)
		}
	}
	if got := w.Header().Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("X-Content-Type-Options = %q", got)
	}
}

type tasksJSON struct {
	Rows []struct {
		ID, Status, Pool, Key, When, Err, Cause string
		Attempts                                int
	}
	Total int
	Exact bool
	Page  int
	Pages int
}

func ids(p tasksJSON) string {
	var out []string
	for _, r := range p.Rows {
		out = append(out, r.ID)
	}
	return strings.Join(out, " ")
}

// The tasks table filters, sorts and pages on the server.
func TestTasksFilters(t *testing.T) {
	sc := newScene(t)
	cases := []struct {
		query string
		want  string
		total int
	}{
		{"", "gpu/render waiter block cleanup docs lint flaky build fetch", 9},
		{"status=failed", "lint", 1},
		{"status=failed,skipped", "docs lint", 2},
		{"status=failed&status=running", "block lint", 2},
		{"status=pending", "waiter", 1},
		{"pool=gpu", "gpu/render", 1},
		{"pool=", "waiter block cleanup docs lint flaky build fetch", 8},
		{"sort=submitted&pool=", "fetch build flaky lint docs cleanup block waiter", 8},
		{"pool=*", "gpu/render waiter block cleanup docs lint flaky build fetch", 9},
		{"id=b", "block build", 2},
		{"id=B", "", 0},
		{"error=STYLE", "lint", 1},
		{"error=nothing-like-it", "", 0},
		{"sort=id", "block build cleanup docs fetch flaky gpu/render lint waiter", 9},
		{"sort=-id&size=3", "waiter lint gpu/render", 9},
		{"sort=id&size=2&page=2", "cleanup docs", 9},
		{"sort=status&id=b", "block build", 2},
		{"sort=-attempts&size=1", "flaky", 9},
		{"size=4&page=3", "fetch", 9},
		{"sort=submitted&size=4&page=3", "gpu/render", 9},
		{"size=4&page=9", "", 9},
		{"status=succeeded&pool=&sort=-id&id=f", "flaky fetch", 2},
		{"key=acme", "build fetch", 2},
		{"key=globex&pool=gpu", "gpu/render", 1},
		{"key=globex&pool=", "", 0},
		{"key=ACME", "", 0},
		{"key=acme&id=b", "build", 1},
		{"sort=-key&size=3", "gpu/render build fetch", 9},
		{"parent=nobody", "", 0},
	}
	for _, c := range cases {
		p := getJSON[tasksJSON](t, sc, "/tasks.json?"+c.query)
		if got := ids(p); got != c.want || p.Total != c.total {
			t.Errorf("tasks?%s = %q (total %d); want %q (total %d)", c.query, got, p.Total, c.want, c.total)
		}
	}
	p := getJSON[tasksJSON](t, sc, "/tasks.json?status=failed")
	if r := p.Rows[0]; r.Err != "style: tabs" || r.When != "AllSucceeded" || r.Attempts != 1 {
		t.Errorf("failed row = %+v; want lint's error, rule and attempts", r)
	}
	if p := getJSON[tasksJSON](t, sc, "/tasks.json?id=gpu"); p.Rows[0].Key != "globex" {
		t.Errorf("gpu/render row = %+v; want key globex", p.Rows[0])
	}
	p = getJSON[tasksJSON](t, sc, "/tasks.json?status=skipped")
	if r := p.Rows[0]; r.Cause != "lint" {
		t.Errorf("skipped row = %+v; want cause lint", r)
	}
	// The HTML table links each row, marks the sorted column and pages.
	_, body := sc.get(t, "/tasks?sort=-id&size=2&page=2")
	for _, want := range []string{`aria-sort="descending"`, `rel="prev"`, `rel="next"`, "Page 2 of 5", `href="/task?id=gpu%2frender"`, `href="/tasks?size=2&amp;sort=-id"`, `href="/tasks?size=2&amp;sort=id"`} {
		if !strings.Contains(body, want) {
			t.Errorf("tasks page lacks %q", want)
		}
	}
}

// Bad input is a clear 4xx that names what is wrong.
func TestBadInput(t *testing.T) {
	sc := newScene(t)
	cases := []struct {
		target string
		code   int
		want   string
	}{
		{"/tasks?status=bogus", 400, "status"},
		{"/tasks.json?status=bogus", 400, `"error":"dashboard: bad query parameter status=\"bogus\"`},
		{"/tasks?pool=nope", 400, "no such pool"},
		{"/tasks?sort=color", 400, "sort"},
		{"/tasks?page=0", 400, "page"},
		{"/tasks?page=x", 400, "page"},
		{"/tasks?size=100000", 400, "size"},
		{"/task", 400, "which task"},
		{"/task?id=a&id=b", 400, "which task"},
		{"/task?id=unknown", 404, "unknown task"},
		{"/task.json?id=unknown", 404, `"error"`},
		{"/graph?id=unknown", 404, "unknown"},
		{"/graph?depth=0", 400, "depth"},
		{"/graph?depth=11", 400, "depth"},
		{"/graph.json?status=nope", 400, "status"},
	}
	for _, c := range cases {
		code, body := sc.get(t, c.target)
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("GET %s = %d %q; want %d with %q", c.target, code, body, c.code, c.want)
		}
	}
	// A JSON client gets JSON errors from HTML routes too.
	code, body := sc.get(t, "/tasks?status=bogus", "Accept", "application/json")
	if code != 400 || !strings.HasPrefix(body, `{"error":`) {
		t.Errorf("GET /tasks?status=bogus as JSON = %d %s", code, body)
	}
}

func status(t *testing.T, s *coordinator.Scheduler, id string) coordinator.Status {
	t.Helper()
	info, ok := s.Info(id)
	if !ok {
		t.Fatalf("Info(%q): unknown", id)
	}
	return info.Status
}

func TestCancel(t *testing.T) {
	sc := newScene(t)
	// Bad requests change nothing.
	for _, c := range []struct {
		name   string
		form   url.Values
		header []string
		code   int
		want   string
	}{
		{"no id", url.Values{}, nil, 400, "which task"},
		{"two ids", url.Values{"id": {"block", "waiter"}}, nil, 400, "which task"},
		{"unknown", url.Values{"id": {"nope"}}, nil, 404, "unknown task"},
		{"final", url.Values{"id": {"lint"}}, nil, 409, "nothing to cancel"},
		{"cross-site", url.Values{"id": {"block"}}, []string{"Sec-Fetch-Site", "cross-site"}, 403, "cross-origin"},
		{"other origin", url.Values{"id": {"block"}}, []string{"Origin", "https://evil.example"}, 403, "cross-origin"},
	} {
		w := sc.post(t, "/task/cancel", c.form, c.header...)
		if w.Code != c.code || !strings.Contains(w.Body.String(), c.want) {
			t.Errorf("%s: POST /task/cancel = %d %q; want %d with %q", c.name, w.Code, w.Body.String(), c.code, c.want)
		}
	}
	if st := status(t, sc.s, "block"); st != coordinator.Running {
		t.Fatalf("block is %v after refused cancels; want running", st)
	}
	if code, _ := sc.get(t, "/task/cancel?id=block"); code != http.StatusMethodNotAllowed && code != http.StatusNotFound {
		t.Errorf("GET /task/cancel = %d; want 405 or 404", code)
	}
	// A same-origin form post cancels and sends the browser back to the task.
	w := sc.post(t, "/task/cancel", url.Values{"id": {"block"}}, "Sec-Fetch-Site", "same-origin")
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/task?done=cancel&id=block" {
		t.Fatalf("POST /task/cancel = %d Location %q; want 303 to the task", w.Code, w.Header().Get("Location"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	var te *coordinator.TasksError
	if err := sc.s.WaitTasks(ctx, "block", "waiter"); !errors.As(err, &te) {
		t.Fatalf("WaitTasks = %v; want block cancelled, waiter skipped", err)
	}
	if st := status(t, sc.s, "block"); st != coordinator.Cancelled {
		t.Fatalf("block is %v; want cancelled", st)
	}
	if st := status(t, sc.s, "waiter"); st != coordinator.Skipped {
		t.Fatalf("waiter is %v; want skipped", st)
	}
	_, body := sc.get(t, "/task?id=block&done=cancel")
	if !strings.Contains(body, "Cancel asked") || strings.Contains(body, "Cancel task") {
		t.Errorf("task page after cancel: want the notice and no button")
	}
	// Again: nothing to cancel. As JSON, a JSON answer.
	w = sc.post(t, "/task/cancel", url.Values{"id": {"block"}}, "Accept", "application/json")
	if w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), `"error"`) {
		t.Errorf("second cancel = %d %s; want 409 JSON", w.Code, w.Body.String())
	}
}

func TestCancelJSON(t *testing.T) {
	sc := newScene(t)
	w := sc.post(t, "/task/cancel", url.Values{"id": {"waiter"}}, "Accept", "application/json")
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"status":"cancelled"`) {
		t.Fatalf("POST /task/cancel as JSON = %d %s; want 200, cancelled", w.Code, w.Body.String())
	}
}

func TestReadOnly(t *testing.T) {
	sc := newScene(t, dashboard.WithReadOnly())
	w := sc.post(t, "/task/cancel", url.Values{"id": {"block"}})
	if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), dashboard.ErrReadOnly.Error()) {
		t.Errorf("POST /task/cancel read-only = %d %q; want 403 ErrReadOnly", w.Code, w.Body.String())
	}
	if st := status(t, sc.s, "block"); st != coordinator.Running {
		t.Errorf("block is %v; want still running", st)
	}
	_, body := sc.get(t, "/task?id=block")
	if strings.Contains(body, "Cancel task") || !strings.Contains(body, "read-only") {
		t.Errorf("read-only task page: want no Cancel button and a read-only badge")
	}
	if v := getJSON[map[string]any](t, sc, "/task.json?id=block"); v["canCancel"] != false {
		t.Errorf("task.json canCancel = %v; want false", v["canCancel"])
	}
}

func TestPrefix(t *testing.T) {
	sc := newScene(t, dashboard.WithPrefix("/admin/baton/"))
	code, body := sc.get(t, "/admin/baton/")
	if code != 200 || !strings.Contains(body, `href="/admin/baton/tasks"`) || !strings.Contains(body, `src="/admin/baton/static/dash.js?v=`) {
		t.Errorf("GET /admin/baton/ = %d; want links under the prefix", code)
	}
	if code, _ := sc.get(t, "/admin/baton/tasks?status=failed"); code != 200 {
		t.Errorf("GET /admin/baton/tasks = %d", code)
	}
	r := httptest.NewRequest(http.MethodGet, "/admin/baton", nil)
	w := httptest.NewRecorder()
	sc.d.ServeHTTP(w, r)
	if w.Code != http.StatusMovedPermanently || w.Header().Get("Location") != "/admin/baton/" {
		t.Errorf("GET /admin/baton = %d %q; want a redirect to /admin/baton/", w.Code, w.Header().Get("Location"))
	}
	if code, _ := sc.get(t, "/tasks"); code != 404 {
		t.Errorf("GET /tasks outside the prefix = %d; want 404", code)
	}
	wr := sc.post(t, "/admin/baton/task/cancel", url.Values{"id": {"block"}})
	if wr.Code != http.StatusSeeOther || wr.Header().Get("Location") != "/admin/baton/task?done=cancel&id=block" {
		t.Errorf("cancel under the prefix = %d %q", wr.Code, wr.Header().Get("Location"))
	}
}

// The handler wraps in the user's middleware like any other.
func TestMiddleware(t *testing.T) {
	sc := newScene(t)
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); !ok || u != "ops" || p != "secret" {
				w.Header().Set("WWW-Authenticate", `Basic realm="baton"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	srv := httptest.NewServer(auth(sc.d))
	defer srv.Close()
	res, err := http.Get(srv.URL + "/tasks")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("without credentials: %d; want 401", res.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/tasks", nil)
	req.SetBasicAuth("ops", "secret")
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), "9 matching tasks") {
		t.Errorf("with credentials: %d; want the tasks page", res.StatusCode)
	}
}

// An empty scheduler's overview has empty lists, not nulls, for the
// page's script.
func TestOverviewJSONEmpty(t *testing.T) {
	_, d := bareDashboard(t)
	w := httptest.NewRecorder()
	d.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/overview.json", nil))
	for _, want := range []string{`"running":[]`, `"failures":[]`} {
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("overview.json lacks %s: %s", want, w.Body.String())
		}
	}
}

// A spawner's page lists the children its attempts spawned, with their
// statuses, and each child's page names its parent; a task that spawned
// nothing has no such section.
func TestTaskShowsSpawnedChildren(t *testing.T) {
	s, err := coordinator.New(coordinator.WithWorkers(2))
	if err != nil {
		t.Fatal(err)
	}
	d := dashboard.New(s)
	sc := &scene{s: s, d: d}
	t.Cleanup(func() {
		d.Close()
		if err := s.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	ok := func(context.Context) error { return nil }
	err = s.Submit(
		coordinator.Task{ID: "list", Run: func(ctx context.Context) error {
			return coordinator.Spawn(ctx,
				coordinator.Task{ID: "list/a", Run: ok},
				coordinator.Task{ID: "list/b", Run: func(context.Context) error { return errors.New("disk full") }},
				coordinator.Task{ID: "list/c", Run: ok, Deps: []string{"list/b"}},
			)
		}},
		coordinator.Task{ID: "merge", Deps: []string{"list"}, Run: ok},
	)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	_ = s.WaitTasks(ctx, "list", "merge")
	if ctx.Err() != nil || d.CaughtUp(ctx) != nil {
		t.Fatal("the graph did not settle")
	}
	v := getJSON[struct {
		ChildCount int `json:"childCount"`
		Children   []struct {
			ID, Status, Cause string
		} `json:"children"`
		ChildMore bool `json:"childMore"`
	}](t, sc, "/task.json?id=list")
	got := fmt.Sprint(v.ChildCount, v.Children, v.ChildMore)
	if want := "3 [{list/c skipped list/b} {list/b failed } {list/a succeeded }] false"; got != want {
		t.Errorf("task.json?id=list children = %s; want %s", got, want)
	}
	_, body := sc.get(t, "/task?id=list")
	for _, want := range []string{"Spawned children", `href="/task?id=list%2fb"`, ">failed<", "3 task(s) its attempts spawned"} {
		if !strings.Contains(body, want) {
			t.Errorf("task page of list lacks %q", want)
		}
	}
	_, body = sc.get(t, "/task?id=list/c")
	if !strings.Contains(body, "Spawned by") || !strings.Contains(body, `href="/task?id=list">list</a>`) {
		t.Errorf("task page of list/c does not name its parent")
	}
	if _, body = sc.get(t, "/task?id=merge"); !strings.Contains(body, `id="t-children-box" hidden`) || strings.Contains(body, "Spawned by") {
		t.Errorf("task page of merge shows a family it does not have")
	}
}

// A negative option value is a mistake in the program: New panics naming
// the option; zero keeps the default.
func TestNegativeOptionsPanic(t *testing.T) {
	s, err := coordinator.New()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	for name, opt := range map[string]dashboard.Option{
		"WithUpdateInterval": dashboard.WithUpdateInterval(-time.Second),
		"WithGraphLimit":     dashboard.WithGraphLimit(-1),
		"WithWriteTimeout":   dashboard.WithWriteTimeout(-1),
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "dashboard: "+name) {
					t.Errorf("New with a negative %s: recovered %v; want a panic naming it", name, r)
				}
			}()
			dashboard.New(s, opt).Close()
		}()
	}
	d := dashboard.New(s, dashboard.WithUpdateInterval(0), dashboard.WithGraphLimit(0), dashboard.WithWriteTimeout(0), dashboard.WithClock(nil))
	d.Close()
}
