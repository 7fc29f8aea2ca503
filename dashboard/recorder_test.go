package dashboard

import (
	"errors"
	"fmt"
	"math"
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

// run is a running task as a look at the scheduler sees it.
func run(id string, attempt int) coordinator.SnapshotTask {
	return coordinator.SnapshotTask{ID: id, Status: coordinator.Running, Attempts: attempt}
}

// The recorder learns the attempts from looks (sample) and failure
// events: a task running at the first look started unseen; one seen
// running later started at that look; one gone from the running with no
// failure told within settle succeeded when the look missed it; a
// failure told ends the attempt it names, running or gone, or one the
// recorder never saw.
func TestRecorderHistory(t *testing.T) {
	r := newRecorder(4, 3, time.Second)
	boom := errors.New("boom")
	look := func(at time.Duration, running ...coordinator.SnapshotTask) {
		r.sample(t0.Add(at), map[string]coordinator.Totals{}, running)
	}
	look(0, run("old", 1))
	look(time.Second, run("old", 1), run("a", 1))
	r.record(ev(coordinator.EventRetrying, "a", 1, 2*time.Second, boom))
	look(3*time.Second, run("a", 2), run("b", 1))
	look(4*time.Second, run("a", 2))                                   // b gone: ended by 4s
	r.record(ev(coordinator.EventFailed, "c", 3, 4*time.Second, boom)) // never seen running
	look(5500*time.Millisecond, run("a", 2))                           // b: no failure within settle, a success
	h := r.history("a")
	if len(h) != 2 || h[0].Outcome != outcomeRunning || h[0].Attempt != 2 || !h[0].Start.Equal(t0.Add(3*time.Second)) ||
		h[1].Outcome != outcomeRetry || h[1].Err != "boom" || h[1].Duration(t0) != time.Second {
		t.Errorf("history(a) = %+v; want attempt 2 running since 3s, then attempt 1 retried after 1s", h)
	}
	if h := r.history("b"); len(h) != 1 || h[0].Outcome != outcomeOK || h[0].Duration(t0) != time.Second {
		t.Errorf("history(b) = %+v; want one success of 1s", h)
	}
	if h := r.history("c"); len(h) != 1 || !h[0].Start.IsZero() || h[0].Duration(t0) != 0 || h[0].Outcome != outcomeFailed {
		t.Errorf("history(c) = %+v; want one failed attempt of unknown start", h)
	}
	if h := r.history("old"); len(h) != 0 {
		t.Errorf("history(old) = %+v; want nothing: it started before the first look and is gone", h)
	}
	running, n := r.runningNow(10)
	if n != 1 || running[0].Task != "a" {
		t.Errorf("runningNow = %+v, %d; want a", running, n)
	}
	f := r.recentFailures(10)
	if len(f) != 2 || f[0].Task != "c" || f[1].Task != "a" {
		t.Errorf("recentFailures = %+v; want c then a", f)
	}
	// A failure told of an attempt gone from the running, within settle,
	// ends it as failed, with its start: not as a success.
	look(6*time.Second, run("a", 2), run("d", 1))
	look(7*time.Second, run("a", 2))
	r.record(ev(coordinator.EventFailed, "d", 1, 6500*time.Millisecond, boom))
	look(9*time.Second, run("a", 2))
	if h := r.history("d"); len(h) != 1 || h[0].Outcome != outcomeFailed || h[0].Duration(t0) != 500*time.Millisecond {
		t.Errorf("history(d) = %+v; want one failure after 0.5s", h)
	}
	// The rings forget the oldest: four attempts of every outcome, three failed.
	for i := range 5 {
		id := fmt.Sprint("x", i)
		look(time.Duration(10+2*i)*time.Second, run("a", 2), run(id, 1))
		look(time.Duration(11+2*i)*time.Second, run("a", 2))
	}
	look(30*time.Second, run("a", 2))
	if h := r.history("b"); len(h) != 0 {
		t.Errorf("history(b) after 5 more attempts = %+v; want forgotten", h)
	}
	if h := r.history("a"); len(h) != 2 {
		t.Errorf("history(a) = %+v; want its retried attempt still kept with the failures", h)
	}
}

// The rates come from the growth of the Totals between looks, counted in
// the bucket of the later look, or spread over a gap of several buckets;
// starts are the attempts that ended plus the growth of those running.
func TestRecorderRates(t *testing.T) {
	r := newRecorder(8, 8, time.Second)
	tot := func(ok, retries, skipped uint64) map[string]coordinator.Totals {
		return map[string]coordinator.Totals{"": {Succeeded: ok, Retries: retries}, "gpu": {Skipped: skipped}}
	}
	// Bucket 0 holds t0 to t0+10s; bucket 1 from t0+10s.
	r.sample(t0, tot(5, 0, 0), nil) // the first look counts nothing: what came before is unknown
	r.sample(t0.Add(2*time.Second), tot(6, 0, 0), []coordinator.SnapshotTask{run("b", 1)})
	r.sample(t0.Add(12*time.Second), tot(6, 1, 1), nil)
	bs := r.rates("", false, t0.Add(15*time.Second), 2)
	if len(bs) != 2 || bs[0].Started != 2 || bs[0].OK != 1 || bs[1].Started != 0 || bs[1].Retried != 1 || bs[1].Skipped != 0 {
		t.Errorf("rates(default) = %+v", bs)
	}
	all := r.rates("", true, t0.Add(15*time.Second), 2)
	if all[1].Skipped != 1 {
		t.Errorf("rates(all) = %+v; want gpu's skip", all)
	}
	// Not looked at for a minute: 60 successes spread over six buckets.
	r.sample(t0.Add(72*time.Second), tot(66, 1, 1), nil)
	for _, b := range r.rates("", false, t0.Add(72*time.Second), 6) {
		if b.OK != 10 {
			t.Errorf("after a gap, rates = %+v; want 10 successes in each of the last six buckets", r.rates("", false, t0.Add(72*time.Second), 6))
			break
		}
	}
	// Looks made at once, applied out of order: a look older than the
	// last is dropped, and totals read before the last look's count no
	// growth (never a negative one).
	r.sample(t0.Add(71*time.Second), tot(100, 1, 1), nil)
	r.sample(t0.Add(73*time.Second), tot(66, 1, 1), nil)
	if b := r.rates("", false, t0.Add(73*time.Second), 1)[0]; b.OK != 10 || b.Started != 10 {
		t.Errorf("after looks out of order, rates = %+v; want the 10 successes of before", b)
	}
	// Fifteen minutes later the buckets are stale: nothing is counted twice.
	late := r.rates("", true, t0.Add(72*time.Second+15*time.Minute), 2)
	if late[0] != (bucket{stamp: late[0].stamp}) || late[1] != (bucket{stamp: late[1].stamp}) {
		t.Errorf("rates 15 minutes later = %+v; want empty", late)
	}
}

// watch's channel closes at the first event after the call, once.
func TestRecorderWatch(t *testing.T) {
	r := newRecorder(4, 4, time.Second)
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

// A ring keeps the newest size attempts, listed newest first, growing as
// they come: a huge size costs nothing until attempts fill it.
func TestRingKeepsTheNewest(t *testing.T) {
	for _, size := range []int{1, 3, 5} {
		r := newRing(size)
		for n := 0; n <= 2*size+1; n++ {
			var got []int
			r.each(func(a *attempt) bool { got = append(got, a.Attempt); return true })
			var want []int
			for i := n; i > 0 && len(want) < size; i-- {
				want = append(want, i)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("size %d after %d pushes: %v; want %v", size, n, got, want)
			}
			r.push(attempt{Attempt: n + 1})
		}
	}
	huge := newRing(math.MaxInt)
	huge.push(attempt{Attempt: 1})
	if cap(huge.a) > 64 {
		t.Fatalf("a ring of MaxInt holding one attempt has room for %d", cap(huge.a))
	}
}
