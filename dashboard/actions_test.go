package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/dashboard"
)

// Re-run from a task's page: a failed task runs again (with its
// downstream if asked), EventReopened says the dashboard asked; a task
// that succeeded is a 409, an unknown one a 404, read-only a 403.
func TestRerun(t *testing.T) {
	sc := newScene(t)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	w := sc.post(t, "/task/rerun", url.Values{"id": {"lint"}, "downstream": {"1"}})
	if w.Code != http.StatusSeeOther || !strings.Contains(w.Header().Get("Location"), "done=rerun") {
		t.Fatalf("POST /task/rerun = %d %s; want 303 to the task", w.Code, w.Header().Get("Location"))
	}
	_ = sc.s.WaitTasks(ctx, "lint", "docs")
	if info, _ := sc.s.Info("lint"); info.Reruns != 1 {
		t.Errorf("lint after the re-run: %+v; want 1 re-run", info)
	}
	for _, c := range []struct {
		form url.Values
		code int
		want string
	}{
		{url.Values{"id": {"fetch"}}, http.StatusConflict, "only a failed, cancelled or skipped task"},
		{url.Values{"id": {"<script>nope"}}, http.StatusNotFound, "unknown task"},
		{url.Values{}, http.StatusBadRequest, "which task"},
	} {
		w := sc.post(t, "/task/rerun", c.form)
		if w.Code != c.code || !strings.Contains(w.Body.String(), c.want) || strings.Contains(w.Body.String(), "<script>") {
			t.Errorf("POST /task/rerun %v = %d %q; want %d naming %q, escaped", c.form, w.Code, w.Body.String()[:min(200, w.Body.Len())], c.code, c.want)
		}
	}
	ro := newScene(t, dashboard.WithReadOnly())
	if w := ro.post(t, "/task/rerun", url.Values{"id": {"lint"}}); w.Code != http.StatusForbidden {
		t.Errorf("read-only POST /task/rerun = %d; want 403", w.Code)
	}
	if _, body := ro.get(t, "/task?id=lint"); strings.Contains(body, "task/rerun") {
		t.Errorf("read-only task page has a re-run button")
	}
}

// A bulk action asks first, saying how many tasks it touches; confirmed,
// it acts on every task matching the filter that it applies to.
func TestBulk(t *testing.T) {
	sc := newScene(t)
	q := url.Values{"status": {"failed", "skipped"}}.Encode()
	w := sc.post(t, "/tasks/bulk", url.Values{"action": {"retry"}, "all": {"1"}, "q": {q}})
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "<strong>2 tasks</strong>") || !strings.Contains(w.Body.String(), `name="confirm" value="yes"`) {
		t.Fatalf("bulk without confirm = %d\n%s; want a page saying 2 tasks", w.Code, w.Body.String())
	}
	if info, _ := sc.s.Info("lint"); info.Reruns != 0 {
		t.Fatalf("lint re-run before the confirmation")
	}
	set := regexp.MustCompile(`name="set" value="([0-9a-f]+)"`).FindStringSubmatch(w.Body.String())
	if !strings.Contains(w.Body.String(), `name="count" value="2"`) || set == nil {
		t.Fatalf("bulk without confirm: %s; want the count and set confirmed in the form", w.Body.String())
	}
	w = sc.post(t, "/tasks/bulk", url.Values{"action": {"retry"}, "all": {"1"}, "q": {q}, "confirm": {"yes"}, "count": {"2"}, "set": {set[1]}})
	if w.Code != http.StatusSeeOther || !strings.Contains(w.Header().Get("Location"), "n=2") {
		t.Fatalf("bulk confirmed = %d %s; want 303 with n=2", w.Code, w.Header().Get("Location"))
	}
	if info, _ := sc.s.Info("lint"); info.Reruns != 1 {
		t.Errorf("lint after the bulk re-run: %d re-runs; want 1", info.Reruns)
	}
	// Selected rows: cancel; a final one is left alone and said so.
	w = sc.post(t, "/tasks/bulk", url.Values{"action": {"cancel"}, "ids": {"waiter", "fetch"}})
	if !strings.Contains(w.Body.String(), "<strong>1 tasks</strong>") || !strings.Contains(w.Body.String(), "1 of those chosen are left alone") {
		t.Errorf("bulk cancel of waiter and fetch: %s; want 1 task, 1 left alone", w.Body.String())
	}
	if code, body := sc.get(t, "/tasks?done=cancel&n=1&refused=0"); code != 200 || !strings.Contains(body, "1 tasks cancelled") {
		t.Errorf("tasks page after a bulk cancel: %d; want its notice", code)
	}
	for _, bad := range []url.Values{{"action": {"explode"}, "ids": {"x"}}, {"action": {"cancel"}}} {
		if w := sc.post(t, "/tasks/bulk", bad); w.Code != http.StatusBadRequest {
			t.Errorf("bulk %v = %d; want 400", bad, w.Code)
		}
	}
	ro := newScene(t, dashboard.WithReadOnly())
	if w := ro.post(t, "/tasks/bulk", url.Values{"action": {"cancel"}, "ids": {"waiter"}}); w.Code != http.StatusForbidden {
		t.Errorf("read-only bulk = %d; want 403", w.Code)
	}
}

// "All matching" acts only on the tasks confirmed (their count and a
// digest of their IDs): when the tasks matching changed since, nothing is
// done and the new count is asked for (409), in HTML and JSON, and a
// confirmation without a count or set is asked again too. Rows named twice count and act once. The confirmation's
// Back link keeps the table's filter.
func TestBulkActsOnWhatWasConfirmed(t *testing.T) {
	sc := newScene(t)
	q := url.Values{"status": {"failed", "skipped"}, "pool": {""}}.Encode()
	var asked struct{ Set string }
	w := sc.post(t, "/tasks/bulk", url.Values{"action": {"retry"}, "all": {"1"}, "q": {q}}, "Accept", "application/json")
	if err := json.Unmarshal(w.Body.Bytes(), &asked); err != nil || asked.Set == "" {
		t.Fatalf("bulk without confirm, JSON: %s; want the set to confirm", w.Body.String())
	}
	for _, c := range []struct {
		form url.Values
		json bool
	}{
		{url.Values{"count": {"3"}, "set": {asked.Set}}, false},
		{url.Values{"count": {"1"}, "set": {asked.Set}}, true},
		{url.Values{"count": {"2"}, "set": {"1234abcd"}}, false}, // as many, others
		{url.Values{"count": {"2"}}, true},
		{url.Values{}, false},
		{url.Values{"count": {"-7"}}, true},
	} {
		form := url.Values{"action": {"retry"}, "all": {"1"}, "q": {q}, "confirm": {"yes"}}
		maps.Copy(form, c.form)
		var w *httptest.ResponseRecorder
		if c.json {
			w = sc.post(t, "/tasks/bulk", form, "Accept", "application/json")
		} else {
			w = sc.post(t, "/tasks/bulk", form)
		}
		if w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "2") {
			t.Errorf("bulk confirmed with %v (json %v) = %d %s; want 409 asking again for 2 tasks", c.form, c.json, w.Code, w.Body.String())
		}
		if info, _ := sc.s.Info("lint"); info.Reruns != 0 {
			t.Fatalf("lint re-run by a confirmation of another count (%v)", c.form)
		}
	}
	w = sc.post(t, "/tasks/bulk", url.Values{"action": {"retry"}, "all": {"1"}, "q": {q}})
	if !strings.Contains(w.Body.String(), `href="/tasks?pool=&amp;status=failed&amp;status=skipped"`) {
		t.Errorf("confirmation's Back link: %s; want the filter kept", w.Body.String())
	}
	w = sc.post(t, "/tasks/bulk", url.Values{"action": {"cancel"}, "ids": {"waiter", "waiter", "waiter"}, "confirm": {"yes"}}, "Accept", "application/json")
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"done":1`) || !strings.Contains(w.Body.String(), `"refused":0`) {
		t.Errorf("bulk cancel of one row named three times = %d %s; want done 1, refused 0", w.Code, w.Body.String())
	}
}

// A notice never echoes text from the query: an unknown pool is not
// named.
func TestNoticeEchoesNothing(t *testing.T) {
	sc := newScene(t)
	_, body := sc.get(t, "/pools?done=pause&pool="+url.QueryEscape("Your account is locked: call 555"))
	if strings.Contains(body, "555") {
		t.Errorf("pools page echoes the query's text")
	}
	_, body = sc.get(t, "/tasks?done=retry&n=oops")
	if strings.Contains(body, "oops") {
		t.Errorf("tasks page echoes the query's text")
	}
}

// XSS payloads in an ID, an error, a log line and the By of a re-run
// come out escaped on every page.
func TestEscapesNewFields(t *testing.T) {
	const x = `<img src=x onerror=alert(1)>`
	s, err := coordinator.New(coordinator.WithWorkers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	if err := s.Submit(coordinator.Task{ID: "bad" + x, Run: func(ctx context.Context) error {
		coordinator.Logger(ctx).Info("line " + x)
		return errors.New("error " + x)
	}}, coordinator.Task{ID: "kid" + x, Deps: []string{"bad" + x}, Run: ok}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	_ = s.Wait(ctx)
	d := dashboard.New(s)
	defer d.Close()
	if err := d.CaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/task/rerun", strings.NewReader(url.Values{"id": {"bad" + x}}.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.SetBasicAuth(x, "pw")
	d.ServeHTTP(httptest.NewRecorder(), r)
	_ = s.Wait(ctx)
	_ = d.CaughtUp(ctx)
	for _, target := range []string{"/", "/tasks", "/tasks?status=failed", "/task?id=" + url.QueryEscape("bad"+x), "/task?id=" + url.QueryEscape("kid"+x), "/graph", "/pools"} {
		w := httptest.NewRecorder()
		d.ServeHTTP(w, httptest.NewRequest(http.MethodGet, target, nil))
		if strings.Contains(w.Body.String(), "<img") {
			t.Errorf("GET %s: an unescaped payload", target)
		}
	}
}

func ok(context.Context) error { return nil }

// A live stream whose client never reads is dropped at its write
// deadline; Close ends a stream blocked in a write at once; and
// http.Server.Shutdown does not wait for the streams.
func TestStreamsEnd(t *testing.T) {
	s, err := coordinator.New()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	var many []coordinator.Task
	for i := range 3000 {
		many = append(many, coordinator.Task{ID: strings.Repeat("x", 200) + string(rune('a'+i%26)) + strings.Repeat("y", i/26), Run: func(context.Context) error { return errors.New(strings.Repeat("e", 250)) }})
	}
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	d := dashboard.New(s, dashboard.WithWriteTimeout(300*time.Millisecond), dashboard.WithUpdateInterval(10*time.Millisecond))
	defer d.Close()
	// Tasks that keep failing: the overview (its failures, with long IDs
	// and errors) changes at every update.
	go func() {
		for i := 0; ctx.Err() == nil && i < len(many); i += 10 {
			_ = s.Submit(many[i : i+10]...)
			_ = s.Wait(ctx)
		}
	}()
	var served atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		defer served.Add(-1)
		d.ServeHTTP(w, r)
	}))
	srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetWriteBuffer(4096) // small buffers: a client that does not read blocks the next writes
		}
		return ctx
	}
	srv.Start()
	defer srv.Close()
	// Clients that send a request and never read.
	dial := func() net.Conn {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4096)
		}
		_, _ = c.Write([]byte("GET /events?task=" + strings.Repeat("z", 1000) + " HTTP/1.1\r\nHost: x\r\n\r\n"))
		return c
	}
	c1 := dial()
	defer c1.Close()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-ctx.Done():
				t.Fatalf("%s: never", what)
			case <-time.After(5 * time.Millisecond): // a failure guard's poll: real sockets have no event to wait on
			}
		}
	}
	var buf [64]byte
	_ = c1.SetReadDeadline(time.Now().Add(guard))
	if _, err := c1.Read(buf[:]); err != nil { // the answer began: it is served
		t.Fatal(err)
	}
	waitFor("the stream is served", func() bool { return served.Load() == 1 })
	waitFor("the stream is dropped at its write deadline", func() bool { return served.Load() == 0 })

	// Close cuts a stream blocked in a write.
	c2 := dial()
	defer c2.Close()
	if _, err := c2.Read(buf[:]); err != nil {
		t.Fatal(err)
	}
	waitFor("the second stream is served", func() bool { return served.Load() == 1 })
	start := time.Now()
	d.Close()
	waitFor("Close ends it", func() bool { return served.Load() == 0 })
	if took := time.Since(start); took > 250*time.Millisecond {
		t.Errorf("Close ended the stream in %v; want at once", took)
	}
}

// http.Server.Shutdown ends the dashboard's streams itself: it does not
// wait for them, nor for a write deadline.
func TestShutdownEndsStreams(t *testing.T) {
	s, err := coordinator.New()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	d := dashboard.New(s, dashboard.WithWriteTimeout(time.Minute))
	defer d.Close()
	srv := httptest.NewServer(d)
	resp, err := http.Get(srv.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 10)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	start := time.Now()
	if err := srv.Config.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown = %v; want nil", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Shutdown took %v with a stream open; want it ended at once", took)
	}
	srv.Close()
}
