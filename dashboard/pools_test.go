package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/dashboard"
)

type poolJSON struct {
	Name, Label, LimitText string
	Paused                 bool
	RateLimit              float64
	RateBurst              int
}

type poolsJSON struct {
	Pools  []poolJSON
	Paused []string
}

func poolOf(t *testing.T, sc *scene, name string) poolJSON {
	t.Helper()
	v := getJSON[poolsJSON](t, sc, "/overview.json")
	for _, p := range v.Pools {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("overview.json has no pool %q", name)
	return poolJSON{}
}

// Pause and resume, as a form posts them: bad requests change nothing; a
// pause stops the pool, shows on both pages and is undone by resume.
func TestPauseResume(t *testing.T) {
	sc := newScene(t)
	for _, path := range []string{"/pools/pause", "/pools/resume"} {
		for _, c := range []struct {
			name   string
			form   url.Values
			header []string
			code   int
			want   string
		}{
			{"no pool", url.Values{}, nil, 400, "which pool"},
			{"two pools", url.Values{"pool": {"gpu", ""}}, nil, 400, "which pool"},
			{"unknown", url.Values{"pool": {"tpu"}}, nil, 404, "unknown pool &#34;tpu&#34;"},
			{"unknown as JSON", url.Values{"pool": {"tpu"}}, []string{"Accept", "application/json"}, 404, `{"error":"dashboard: unknown pool`},
			{"cross-site", url.Values{"pool": {"gpu"}}, []string{"Sec-Fetch-Site", "cross-site"}, 403, "cross-origin"},
			{"other origin", url.Values{"pool": {"gpu"}}, []string{"Origin", "https://evil.example"}, 403, "cross-origin"},
		} {
			w := sc.post(t, path, c.form, c.header...)
			if w.Code != c.code || !strings.Contains(w.Body.String(), c.want) {
				t.Errorf("%s: POST %s = %d %q; want %d with %q", c.name, path, w.Code, w.Body.String(), c.code, c.want)
			}
		}
		for _, method := range []string{http.MethodGet, http.MethodPut} {
			r := httptest.NewRequest(method, path+"?pool=gpu", nil)
			w := httptest.NewRecorder()
			sc.d.ServeHTTP(w, r)
			if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "POST" || !strings.Contains(w.Body.String(), "is a POST") {
				t.Errorf("%s %s = %d Allow %q %q; want 405, Allow: POST", method, path, w.Code, w.Header().Get("Allow"), w.Body.String())
			}
		}
	}
	if sc.s.Paused("gpu") || sc.s.Paused("") {
		t.Fatal("a pool is paused after refused requests")
	}
	_, body := sc.get(t, "/pools")
	for _, want := range []string{`<a href="/tasks?pool=gpu">gpu</a>`, `action="/pools/pause"`, `aria-label="Pause pool gpu"`, `aria-label="Pause pool default"`, ">running</span>", "Rate limit", ">none<"} {
		if !strings.Contains(body, want) {
			t.Errorf("pools page lacks %q", want)
		}
	}
	if _, body := sc.get(t, "/"); !strings.Contains(body, `id="paused-pools" class="paused-note" role="status" hidden`) {
		t.Errorf("overview: the paused-pools note is not hidden with no pool paused")
	}

	// A same-origin form post pauses and sends the browser back.
	w := sc.post(t, "/pools/pause", url.Values{"pool": {"gpu"}}, "Sec-Fetch-Site", "same-origin")
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/pools?done=pause&pool=gpu" {
		t.Fatalf("POST /pools/pause = %d Location %q; want 303 to the pools page", w.Code, w.Header().Get("Location"))
	}
	if !sc.s.Paused("gpu") || sc.s.Paused("") {
		t.Fatalf("Paused(gpu), Paused(default) = %v, %v; want true, false", sc.s.Paused("gpu"), sc.s.Paused(""))
	}
	// Nothing of it starts: a task submitted now stays ready.
	if err := sc.s.Submit(coordinator.Task{ID: "gpu/later", Pool: "gpu", Run: func(context.Context) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	if st := status(t, sc.s, "gpu/later"); st != coordinator.Ready {
		t.Fatalf("gpu/later is %v in a paused pool; want ready", st)
	}
	_, body = sc.get(t, "/pools?done=pause&pool=gpu")
	for _, want := range []string{"Pool gpu paused", `<tr data-pool="gpu" class="paused">`, `class="badge paused-badge">paused<`, `action="/pools/resume"`, `aria-label="Resume pool gpu"`, `aria-label="Pause pool default"`} {
		if !strings.Contains(body, want) {
			t.Errorf("pools page after the pause lacks %q", want)
		}
	}
	_, body = sc.get(t, "/")
	for _, want := range []string{`Paused pools: <span id="paused-list">gpu</span>`, `aria-label="Resume pool gpu"`, `name="from" value="overview"`} {
		if !strings.Contains(body, want) {
			t.Errorf("overview after the pause lacks %q", want)
		}
	}
	if p := poolOf(t, sc, "gpu"); !p.Paused {
		t.Errorf("overview.json: gpu = %+v; want paused", p)
	}
	if v := getJSON[poolsJSON](t, sc, "/overview.json"); len(v.Paused) != 1 || v.Paused[0] != "gpu" {
		t.Errorf("overview.json paused = %q; want [gpu]", v.Paused)
	}
	// Again: nothing to do, and no error.
	if w := sc.post(t, "/pools/pause", url.Values{"pool": {"gpu"}}); w.Code != http.StatusSeeOther || !sc.s.Paused("gpu") {
		t.Errorf("second pause = %d, paused %v; want 303, still paused", w.Code, sc.s.Paused("gpu"))
	}

	// Resume from the overview goes back to the overview; the task runs.
	w = sc.post(t, "/pools/resume", url.Values{"pool": {"gpu"}, "from": {"overview"}})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/?done=resume&pool=gpu" {
		t.Fatalf("POST /pools/resume = %d Location %q; want 303 to the overview", w.Code, w.Header().Get("Location"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	if err := sc.s.WaitTasks(ctx, "gpu/later"); err != nil {
		t.Fatalf("gpu/later after Resume: %v", err)
	}
	if _, body := sc.get(t, "/?done=resume&pool=gpu"); !strings.Contains(body, "Pool gpu resumed.") || strings.Contains(body, "Resume pool") {
		t.Errorf("overview after the resume: want the notice and no Resume button")
	}
	if p := poolOf(t, sc, "gpu"); p.Paused {
		t.Errorf("overview.json: gpu = %+v after Resume; want not paused", p)
	}
	// A "from" the dashboard does not know goes to the pools page.
	w = sc.post(t, "/pools/resume", url.Values{"pool": {"gpu"}, "from": {"https://evil.example/"}})
	if w.Header().Get("Location") != "/pools?done=resume&pool=gpu" {
		t.Errorf("resume from elsewhere: Location %q; want the pools page", w.Header().Get("Location"))
	}
}

// A JSON client gets JSON; the default pool is the empty name.
func TestPauseJSON(t *testing.T) {
	sc := newScene(t)
	for _, c := range []struct {
		path string
		want bool
	}{{"/pools/pause", true}, {"/pools/resume", false}} {
		w := sc.post(t, c.path, url.Values{"pool": {""}}, "Accept", "application/json")
		var got struct {
			Pool   string
			Paused bool
		}
		if err := json.Unmarshal(w.Body.Bytes(), &got); w.Code != http.StatusOK || err != nil || got.Pool != "" || got.Paused != c.want {
			t.Errorf("POST %s pool= as JSON = %d %s; want 200, paused %v", c.path, w.Code, w.Body.String(), c.want)
		}
		if sc.s.Paused("") != c.want {
			t.Errorf("after %s: Paused(default) = %v", c.path, !c.want)
		}
	}
}

// Read-only: the pages show no button, a post is refused and nothing
// changes.
func TestPauseReadOnly(t *testing.T) {
	sc := newScene(t, dashboard.WithReadOnly())
	if err := sc.s.Pause(""); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, pool string }{{"/pools/pause", "gpu"}, {"/pools/resume", ""}} {
		w := sc.post(t, c.path, url.Values{"pool": {c.pool}})
		if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), dashboard.ErrReadOnly.Error()) {
			t.Errorf("POST %s read-only = %d %q; want 403 ErrReadOnly", c.path, w.Code, w.Body.String())
		}
	}
	if sc.s.Paused("gpu") || !sc.s.Paused("") {
		t.Errorf("Paused(gpu), Paused(default) = %v, %v after refused requests; want false, true", sc.s.Paused("gpu"), sc.s.Paused(""))
	}
	for _, page := range []string{"/pools", "/"} {
		_, body := sc.get(t, page)
		if strings.Contains(body, "<form method=\"post\"") || strings.Contains(body, "Resume pool") || !strings.Contains(body, "paused-badge") {
			t.Errorf("read-only %s: want the paused badge and no form", page)
		}
	}
}

// Under a prefix the forms and the redirect stay under it.
func TestPausePrefix(t *testing.T) {
	sc := newScene(t, dashboard.WithPrefix("/admin/baton"))
	if _, body := sc.get(t, "/admin/baton/pools"); !strings.Contains(body, `action="/admin/baton/pools/pause"`) {
		t.Errorf("pools page under a prefix: want the form's action under it")
	}
	w := sc.post(t, "/admin/baton/pools/pause", url.Values{"pool": {"gpu"}})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/admin/baton/pools?done=pause&pool=gpu" || !sc.s.Paused("gpu") {
		t.Errorf("pause under the prefix = %d %q", w.Code, w.Header().Get("Location"))
	}
}

// The pools page shows a pool's rate limit, as SetRateLimit left it.
func TestPoolRateLimit(t *testing.T) {
	sc := newScene(t)
	if err := sc.s.SetRateLimit("gpu", 2.5, 4); err != nil {
		t.Fatal(err)
	}
	if p := poolOf(t, sc, "gpu"); p.RateLimit != 2.5 || p.RateBurst != 4 || p.LimitText != "2.5/s, bursts of 4" {
		t.Errorf("overview.json: gpu = %+v; want 2.5/s, bursts of 4", p)
	}
	if _, body := sc.get(t, "/pools"); !strings.Contains(body, "<td>2.5/s, bursts of 4</td>") {
		t.Errorf("pools page lacks gpu's rate limit")
	}
}

// Once the scheduler is shut down its pools cannot be paused: 409.
func TestPauseAfterShutdown(t *testing.T) {
	s, err := coordinator.New()
	if err != nil {
		t.Fatal(err)
	}
	d := dashboard.New(s)
	defer d.Close()
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/pools/pause", strings.NewReader("pool="))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w := httptest.NewRecorder()
	d.ServeHTTP(w, r)
	if w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "shut down") || s.Paused("") {
		t.Errorf("POST /pools/pause after Shutdown = %d %q; want 409, nothing paused", w.Code, w.Body.String())
	}
}

// The tasks page filters by key, and says so in its form.
func TestTasksKeyFilterPage(t *testing.T) {
	sc := newScene(t)
	_, body := sc.get(t, "/tasks?key=acme")
	for _, want := range []string{`name="key" value="acme"`, "2 matching tasks", "<td>acme</td>", `href="/tasks?key=acme&amp;sort=key"`} {
		if !strings.Contains(body, want) {
			t.Errorf("tasks?key=acme lacks %q", want)
		}
	}
}

// A live page sees a pause and a resume: EventPaused and EventResumed
// wake its stream, whose overview then says so.
func TestLivePause(t *testing.T) {
	sc := newScene(t, dashboard.WithUpdateInterval(time.Millisecond))
	srv := httptest.NewServer(sc.d)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/events", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	events := bufio.NewScanner(res.Body)
	events.Buffer(nil, 1<<20)
	next := func() poolsJSON {
		for events.Scan() {
			if data, ok := strings.CutPrefix(events.Text(), "data: "); ok {
				var v poolsJSON
				if err := json.Unmarshal([]byte(data), &v); err != nil {
					t.Fatal(err)
				}
				return v
			}
		}
		t.Fatalf("stream ended: %v", events.Err())
		return poolsJSON{}
	}
	gpuPaused := func(v poolsJSON) bool {
		for _, p := range v.Pools {
			if p.Name == "gpu" {
				return p.Paused
			}
		}
		t.Fatalf("no pool gpu in %+v", v)
		return false
	}
	if v := next(); gpuPaused(v) || len(v.Paused) != 0 {
		t.Fatalf("first update: %+v; want nothing paused", v)
	}
	for _, c := range []struct {
		op   func(string) error
		want bool
	}{{sc.s.Pause, true}, {sc.s.Resume, false}} {
		if err := c.op("gpu"); err != nil {
			t.Fatal(err)
		}
		for {
			v := next()
			if gpuPaused(v) == c.want {
				if c.want && (len(v.Paused) != 1 || v.Paused[0] != "gpu") {
					t.Errorf("update after the pause: paused = %q; want [gpu]", v.Paused)
				}
				break
			}
		}
	}
}
