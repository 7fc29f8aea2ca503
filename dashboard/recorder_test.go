package dashboard

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)

func ev(k coordinator.EventKind, id string, attempt int, at time.Duration, err error) coordinator.Event {
	return coordinator.Event{Kind: k, TaskID: id, Attempt: attempt, Run: 1, At: t0.Add(at), Err: err}
}

func TestRecorderHistory(t *testing.T) {
	r := newRecorder(4, 2)
	boom := errors.New("boom")
	for _, e := range []coordinator.Event{
		ev(coordinator.EventStarted, "a", 1, 0, nil),
		ev(coordinator.EventRetrying, "a", 1, time.Second, boom),
		ev(coordinator.EventStarted, "a", 2, 2*time.Second, nil),
		ev(coordinator.EventStarted, "b", 1, 2*time.Second, nil),
		ev(coordinator.EventSucceeded, "b", 1, 3*time.Second, nil),
		ev(coordinator.EventFailed, "c", 3, 3*time.Second, boom), // started before the recorder
	} {
		r.record(e)
	}
	h := r.history("a")
	if len(h) != 2 || h[0].Outcome != outcomeRunning || h[0].Attempt != 2 ||
		h[1].Outcome != outcomeRetry || h[1].Err != "boom" || h[1].Duration(t0) != time.Second {
		t.Errorf("history(a) = %+v; want attempt 2 running, then attempt 1 retried after 1s", h)
	}
	if h := r.history("c"); len(h) != 1 || !h[0].Start.IsZero() || h[0].Duration(t0) != 0 || h[0].Outcome != outcomeFailed {
		t.Errorf("history(c) = %+v; want one failed attempt of unknown start", h)
	}
	running, n := r.runningNow(10)
	if n != 1 || running[0].Task != "a" {
		t.Errorf("runningNow = %+v, %d; want a", running, n)
	}
	f := r.recentFailures(10)
	if len(f) != 2 || f[0].Task != "c" || f[1].Task != "a" {
		t.Errorf("recentFailures = %+v; want c then a", f)
	}
	// The rings forget the oldest: four attempts of every outcome, two failed.
	for i := range 5 {
		id := fmt.Sprint("x", i)
		r.record(ev(coordinator.EventStarted, id, 1, 4*time.Second, nil))
		r.record(ev(coordinator.EventSucceeded, id, 1, 5*time.Second, nil))
	}
	if h := r.history("b"); len(h) != 0 {
		t.Errorf("history(b) after 5 more attempts = %+v; want forgotten", h)
	}
	if h := r.history("a"); len(h) != 2 {
		t.Errorf("history(a) = %+v; want its retried attempt still kept with the failures", h)
	}
}

func TestRecorderRates(t *testing.T) {
	r := newRecorder(8, 8)
	boom := errors.New("boom")
	// Bucket 0 holds t0 to t0+10s; bucket 1 from t0+10s.
	r.record(ev(coordinator.EventStarted, "a", 1, time.Second, nil))
	r.record(ev(coordinator.EventSucceeded, "a", 1, 2*time.Second, nil))
	r.record(ev(coordinator.EventStarted, "b", 1, 11*time.Second, nil))
	r.record(ev(coordinator.EventRetrying, "b", 1, 12*time.Second, boom))
	r.record(coordinator.Event{Kind: coordinator.EventSkipped, TaskID: "c", Pool: "gpu", At: t0.Add(12 * time.Second)})
	bs := r.rates("", false, t0.Add(15*time.Second), 2)
	if len(bs) != 2 || bs[0].Started != 1 || bs[0].OK != 1 || bs[1].Started != 1 || bs[1].Retried != 1 || bs[1].Skipped != 0 {
		t.Errorf("rates(default) = %+v", bs)
	}
	all := r.rates("", true, t0.Add(15*time.Second), 2)
	if all[1].Skipped != 1 {
		t.Errorf("rates(all) = %+v; want gpu's skip", all)
	}
	// Fifteen minutes later the buckets are stale: nothing is counted twice.
	late := r.rates("", true, t0.Add(15*time.Minute+15*time.Second), 2)
	if late[0] != (bucket{stamp: late[0].stamp}) || late[1] != (bucket{stamp: late[1].stamp}) {
		t.Errorf("rates 15 minutes later = %+v; want empty", late)
	}
}

// watch's channel closes at the first event after the call, once.
func TestRecorderWatch(t *testing.T) {
	r := newRecorder(4, 4)
	c := r.watch()
	select {
	case <-c:
		t.Fatal("closed before any event")
	default:
	}
	for range 1000 {
		r.record(ev(coordinator.EventSkipped, "x", 0, 0, nil))
	}
	<-c // closed, once, for all of them
	c2 := r.watch()
	select {
	case <-c2:
		t.Fatal("a new watch is closed before a new event")
	default:
	}
}

func TestCut(t *testing.T) {
	if got := cut("héllo", 2); got != "h…" {
		t.Errorf("cut = %q", got)
	}
	if got := cut("hello", 5); got != "hello" {
		t.Errorf("cut = %q", got)
	}
}

// topK's first k are those of a full sort, whichever way it takes.
func TestTopK(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 10, 1000} {
		for _, k := range []int{1, 3, 50, 2000} {
			rows := make([]coordinator.SnapshotTask, n)
			for i := range rows {
				rows[i] = coordinator.SnapshotTask{ID: fmt.Sprint(rnd.IntN(n + 1)), Priority: rnd.IntN(5)}
			}
			less := compareBy("priority", true)
			want := slices.Clone(rows)
			slices.SortFunc(want, less)
			got := topK(slices.Clone(rows), k, less)
			want = want[:min(k, n)]
			if len(got) > k {
				got = got[:k]
			}
			if !slices.Equal(got, want) {
				t.Errorf("topK(n=%d, k=%d) differs from a sort", n, k)
			}
		}
	}
}

func TestPreview(t *testing.T) {
	for _, c := range []struct {
		v    any
		want string
	}{
		{"text", "text"},
		{[]byte("bytes as text"), "bytes as text"},
		{[]byte{0, 1, 2}, "3 bytes: 00 01 02"},
		{map[string]int{"a": 1}, "map[a:1]"},
		{panicky{}, "%!v(PANIC=String method: oops)"}, // fmt recovers it
		{strings.Repeat("x", 5000), strings.Repeat("x", previewLimit) + "…"},
	} {
		if got := preview(c.v); got != c.want {
			t.Errorf("preview(%T) = %q; want %q", c.v, got, c.want)
		}
	}
}

type panicky struct{}

func (panicky) String() string { panic("oops") }
