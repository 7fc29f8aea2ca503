package dashboard_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/dashboard"
)

// streamWriter is a ResponseWriter that hands over what each Flush sends.
type streamWriter struct {
	mu      sync.Mutex
	h       http.Header
	buf     bytes.Buffer
	flushes chan string
}

func newStreamWriter() *streamWriter {
	return &streamWriter{h: http.Header{}, flushes: make(chan string, 100)}
}

func (w *streamWriter) Header() http.Header { return w.h }
func (w *streamWriter) WriteHeader(int)     {}
func (w *streamWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(b)
}
func (w *streamWriter) Flush() {
	w.mu.Lock()
	s := w.buf.String()
	w.buf.Reset()
	w.mu.Unlock()
	w.flushes <- s
}

type overviewJSON struct {
	Counts struct{ Succeeded, Running, Total int }
}

// overviewOf returns the overview event's data in one flush.
func overviewOf(t *testing.T, flush string) overviewJSON {
	t.Helper()
	for _, ev := range strings.Split(flush, "\n\n") {
		if data, ok := strings.CutPrefix(ev, "event: overview\ndata: "); ok {
			var v overviewJSON
			if err := json.Unmarshal([]byte(data), &v); err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no overview event in %q", flush)
	return overviewJSON{}
}

// However many events come, a live page gets one update per interval, and
// one per refresh (2s) when nothing happens. In a synctest bubble the
// scheduler and the dashboard run on fake time, so that this is exact.
func TestLiveUpdatesCoalesce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := coordinator.New(coordinator.WithWorkers(2))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Shutdown(context.Background())
		d := dashboard.New(s, dashboard.WithUpdateInterval(250*time.Millisecond))
		defer d.Close()
		ctx, cancel := context.WithCancel(context.Background())
		w := newStreamWriter()
		done := make(chan struct{})
		go func() {
			defer close(done)
			d.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/events", nil).WithContext(ctx))
		}()
		if got := overviewOf(t, <-w.flushes); got.Counts.Total != 0 {
			t.Fatalf("first update: %+v; want no task", got)
		}
		var g coordinator.Graph
		for i := range 1000 {
			g.Add(coordinator.Task{ID: "t" + string(rune('a'+i%26)) + strings.Repeat("x", i/26), Run: func(context.Context) error { return nil }})
		}
		if err := s.SubmitGraph(context.Background(), &g); err != nil {
			t.Fatal(err)
		}
		if err := s.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := len(w.flushes); n != 0 {
			t.Fatalf("%d updates within the interval; want none", n)
		}
		// The copy reads the feed once per interval; the stream sends at
		// most one update per interval: the 1,000 tasks' 3,000 changes
		// come as one update (or two, if the copy read them across two).
		var last overviewJSON
		for i := range 3 {
			time.Sleep(250 * time.Millisecond)
			synctest.Wait()
			if n := len(w.flushes); n > 1 {
				t.Fatalf("%d updates in interval %d; want at most 1", n, i)
			}
			if len(w.flushes) == 1 {
				last = overviewOf(t, <-w.flushes)
			}
		}
		if last.Counts.Succeeded != 1000 {
			t.Fatalf("update after the work: %+v; want 1000 succeeded", last)
		}
		// Nothing new: one update per refresh (2s).
		time.Sleep(2*time.Second + 250*time.Millisecond)
		synctest.Wait()
		if n := len(w.flushes); n != 1 {
			t.Fatalf("%d updates in a refresh with nothing new; want 1", n)
		}
		<-w.flushes
		cancel()
		<-done
	})
}

// Close ends the open live streams.
func TestCloseEndsStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := coordinator.New()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Shutdown(context.Background())
		d := dashboard.New(s)
		w := newStreamWriter()
		done := make(chan struct{})
		go func() {
			defer close(done)
			d.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/events", nil))
		}()
		<-w.flushes
		d.Close()
		<-done
		d.Close() // idempotent
	})
}

// A task page's stream reports its task; a cancel shows up in it.
func TestLiveTaskCancel(t *testing.T) {
	sc := newScene(t, dashboard.WithUpdateInterval(time.Millisecond))
	srv := httptest.NewServer(sc.d)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/events?task=block", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type = %q", ct)
	}
	events := bufio.NewScanner(res.Body)
	events.Buffer(nil, 1<<20)
	next := func() (kind string, task map[string]any) {
		for events.Scan() {
			line := events.Text()
			if k, ok := strings.CutPrefix(line, "event: "); ok {
				kind = k
			}
			if data, ok := strings.CutPrefix(line, "data: "); ok && kind == "task" {
				if err := json.Unmarshal([]byte(data), &task); err != nil {
					t.Fatal(err)
				}
				return kind, task
			}
		}
		t.Fatalf("stream ended: %v", events.Err())
		return "", nil
	}
	if _, task := next(); task["status"] != "running" || task["canCancel"] != true {
		t.Fatalf("first task event: %v; want running, cancellable", task)
	}
	form := url.Values{"id": {"block"}}
	post, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/task/cancel", strings.NewReader(form.Encode()))
	post.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	post.Header.Set("Accept", "application/json")
	pres, err := http.DefaultClient.Do(post)
	if err != nil {
		t.Fatal(err)
	}
	pres.Body.Close()
	if pres.StatusCode != http.StatusOK {
		t.Fatalf("cancel: %d", pres.StatusCode)
	}
	for {
		_, task := next()
		if task["status"] == "cancelled" {
			if task["canCancel"] != false || task["final"] != true {
				t.Errorf("cancelled task event: %v; want final, not cancellable", task)
			}
			break
		}
	}
}

// A stream for an unknown task says so once, without sending its ID back
// (however long it is), and goes on with overviews only.
func TestUnknownTaskSentOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, d := bareDashboard(t)
		ctx, cancel := context.WithCancel(context.Background())
		w := newStreamWriter()
		done := make(chan struct{})
		id := strings.Repeat("z", 900<<10)
		go func() {
			defer close(done)
			d.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/events?task="+id, nil).WithContext(ctx))
		}()
		first := <-w.flushes
		if !strings.Contains(first, "event: gone\ndata: {\"gone\":true}") || strings.Contains(first, "zzzz") || len(first) > 10<<10 {
			t.Fatalf("first update (%d bytes) = %.200q; want a gone event without the ID", len(first), first)
		}
		time.Sleep(3 * time.Second) // in the bubble: a refresh passes
		synctest.Wait()
		for len(w.flushes) > 0 {
			if f := <-w.flushes; strings.Contains(f, "gone") || strings.Contains(f, "zzzz") {
				t.Fatalf("a later update = %.200q; want overviews only", f)
			}
		}
		cancel()
		<-done
	})
}

// A HEAD of the live stream answers its headers and ends: net/http
// discards a HEAD response's body, so that its writes never block for a
// write deadline to end them, and the stream went on for as long as the
// client held the connection, looking its task up at every update.
func TestHeadOfTheStreamEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, d := bareDashboard(t)
		w := newStreamWriter()
		done := make(chan struct{})
		go func() {
			defer close(done)
			d.ServeHTTP(w, httptest.NewRequest(http.MethodHead, "/events?task=x", nil))
		}()
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("HEAD /events still served once every goroutine waits; want it ended after its headers")
		}
		if ct := w.h.Get("Content-Type"); ct != "text/event-stream" {
			t.Errorf("HEAD /events Content-Type %q; want text/event-stream", ct)
		}
	})
}

// bareDashboard is a dashboard of a scheduler with no task, both ended
// when the test does.
func bareDashboard(t *testing.T) (*coordinator.Scheduler, *dashboard.Dashboard) {
	t.Helper()
	s, err := coordinator.New()
	if err != nil {
		t.Fatal(err)
	}
	d := dashboard.New(s)
	t.Cleanup(func() {
		d.Close()
		_ = s.Shutdown(context.Background())
	})
	return s, d
}
