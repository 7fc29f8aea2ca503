package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
)

// The rules of Kinds, through the public API: a filtered subscriber gets
// exactly the events of its kinds that an unfiltered one gets, in the
// same order, beside one or alone, prompt or lagged; it loses nothing
// when it goes, and at Shutdown it has every event of its kinds.

// filtered subscribes a recorder told only kinds (lagged d, if d > 0).
func filtered(s *coordinator.Scheduler, d time.Duration, kinds ...coordinator.EventKind) (*recorder, func()) {
	r := &recorder{}
	opts := []coordinator.SubscribeOption{coordinator.Kinds(kinds...)}
	if d > 0 {
		opts = append(opts, coordinator.MaxLag(d))
	}
	unsubscribe := s.Subscribe(func(e coordinator.Event) {
		r.mu.Lock()
		r.events = append(r.events, e)
		r.mu.Unlock()
	}, opts...)
	return r, unsubscribe
}

// only returns the events of kinds, in order.
func only(events []coordinator.Event, kinds ...coordinator.EventKind) []coordinator.Event {
	return slices.DeleteFunc(slices.Clone(events), func(e coordinator.Event) bool { return !slices.Contains(kinds, e.Kind) })
}

// kindsWorkload is lagWorkload with a pause and a resume of pool "gpu"
// first, so that every kind but those of Spawn is told.
func kindsWorkload(t *testing.T, s *coordinator.Scheduler) []string {
	t.Helper()
	if err := s.Pause("gpu"); err != nil {
		t.Fatal(err)
	}
	if err := s.Resume("gpu"); err != nil {
		t.Fatal(err)
	}
	return lagWorkload(t, s)
}

var (
	failures    = []coordinator.EventKind{coordinator.EventFailed, coordinator.EventRetrying}
	timely      = []coordinator.EventKind{coordinator.EventFailed, coordinator.EventRetrying, coordinator.EventPaused, coordinator.EventResumed}
	startsSkips = []coordinator.EventKind{coordinator.EventStarted, coordinator.EventSkipped}
	ends        = []coordinator.EventKind{coordinator.EventSucceeded, coordinator.EventFailed, coordinator.EventCancelled, coordinator.EventSkipped}
)

// Beside an unfiltered subscriber, each filtered one gets exactly the
// events of its kinds, in order, the very same (times included); Kinds()
// gets nothing. Alone, each gets of every task what it got beside the
// unfiltered one, and a subscriber of timely kinds only gets them at the
// same times as a prompt one: without a report of every attempt, and
// without a lag.
func TestKindsSubscriber(t *testing.T) {
	_, opts := lagSizes()
	cases := []struct {
		name  string
		lag   time.Duration
		kinds []coordinator.EventKind
	}{
		{"failures", 0, failures},
		{"timely", 0, timely},
		{"starts and skips, lagged", 5 * time.Millisecond, startsSkips},
		{"ends, lagged", 5 * time.Millisecond, ends},
		{"ends", 0, ends},
		{"none", 0, nil},
	}
	var want []coordinator.Event
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, opts...)
		rec := record(s)
		recs := make([]*recorder, len(cases))
		for i, c := range cases {
			recs[i], _ = filtered(s, c.lag, c.kinds...)
		}
		kindsWorkload(t, s)
		settle(t, s)
		want = rec.all()
		for i, c := range cases {
			if got, want := recs[i].all(), only(want, c.kinds...); !slices.Equal(got, want) {
				t.Errorf("%s: beside an unfiltered subscriber, got %v; want %v", c.name, recs[i].lines(), (&recorder{events: want}).lines())
			}
		}
		for _, k := range []coordinator.EventKind{coordinator.EventPaused, coordinator.EventRetrying, coordinator.EventFailed, coordinator.EventSkipped} {
			if len(only(want, k)) == 0 {
				t.Fatalf("the workload told no %v", k)
			}
		}
	})
	for _, c := range cases {
		t.Run(c.name+" alone", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScheduler(t, opts...)
				rec, _ := filtered(s, c.lag, c.kinds...)
				kindsWorkload(t, s)
				settle(t, s)
				got := rec.all()
				if g, w := perTask(got), perTask(only(want, c.kinds...)); fmt.Sprint(g) != fmt.Sprint(w) {
					t.Fatalf("alone, got of each task %v; want %v", g, w)
				}
			})
		})
	}
}

// A subscriber of timely kinds only is told a failure at once, although
// it makes no attempt report itself at once: the worker reports the
// failure while the attempt it claimed next still runs.
func TestKindsTimely(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(1))
		rec, _ := filtered(s, 0, timely...)
		g := newGate()
		start := time.Now()
		if err := s.Submit(coordinator.Task{ID: "f", Run: func(context.Context) error { return errors.New("broken") }},
			coordinator.Task{ID: "long", Run: g.run}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := rec.lines(); !slices.Equal(got, []string{"f failed"}) {
			t.Fatalf("while long runs, the subscriber got %v; want [f failed]", got)
		}
		if at := rec.all()[0].At; !at.Equal(start) {
			t.Errorf("f failed told at %v; want %v, when it failed", at, start)
		}
		g.release()
		settle(t, s)
	})
}

// The default is unchanged: an unfiltered subscriber alone, beside
// filtered ones, or given every kind, is told of every task the same
// events; Kinds of an unknown kind panics.
func TestKindsDefault(t *testing.T) {
	_, opts := lagSizes()
	run := func(listen func(*coordinator.Scheduler)) map[string][]string {
		var out []coordinator.Event
		synctest.Test(t, func(t *testing.T) {
			s := newScheduler(t, opts...)
			rec := record(s)
			listen(s)
			kindsWorkload(t, s)
			settle(t, s)
			out = rec.all()
		})
		return perTask(out)
	}
	want := run(func(*coordinator.Scheduler) {})
	all := []coordinator.EventKind{coordinator.EventStarted, coordinator.EventSucceeded, coordinator.EventFailed,
		coordinator.EventRetrying, coordinator.EventCancelled, coordinator.EventSkipped, coordinator.EventRecurred,
		coordinator.EventPaused, coordinator.EventResumed, coordinator.EventJoining, coordinator.EventSpawned}
	for name, listen := range map[string]func(*coordinator.Scheduler){
		"beside a filtered one":    func(s *coordinator.Scheduler) { filtered(s, 0, failures...) },
		"beside a lagged filtered": func(s *coordinator.Scheduler) { filtered(s, time.Millisecond, startsSkips...) },
		"beside one of every kind": func(s *coordinator.Scheduler) { filtered(s, 0, all...) },
	} {
		if got := run(listen); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: the unfiltered subscriber got of each task %v; want %v", name, got, want)
		}
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "EventKind(99)") {
			t.Errorf("Kinds(99) panicked with %v; want a panic naming EventKind(99)", r)
		}
	}()
	coordinator.Kinds(coordinator.EventFailed, 99)
}

// Nothing is lost when a filtered subscriber goes half way (or is there
// all along): every task ends as it does with a prompt unfiltered one.
func TestKindsNothingLost(t *testing.T) {
	run := func(t *testing.T, listen func(*coordinator.Scheduler)) (map[string]string, map[string]coordinator.Totals) {
		return endsUnder(t, kindsWorkload, listen)
	}
	want, wantTotals := run(t, func(s *coordinator.Scheduler) { record(s) })
	for _, c := range []struct {
		name string
		lag  time.Duration
		k    []coordinator.EventKind
	}{{"failures", 0, failures}, {"starts, lagged", time.Millisecond, startsSkips}, {"ends", 0, ends}} {
		for _, gone := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, gone half way %v", c.name, gone), func(t *testing.T) {
				got, totals := run(t, func(s *coordinator.Scheduler) {
					_, unsubscribe := filtered(s, c.lag, c.k...)
					if gone {
						time.Sleep(10 * time.Millisecond) // fake time: half way through the workload
						unsubscribe()
					}
				})
				for id, w := range want {
					if got[id] != w {
						t.Errorf("Info(%q) = %s; want %s", id, got[id], w)
					}
				}
				if fmt.Sprint(totals) != fmt.Sprint(wantTotals) {
					t.Errorf("Totals() = %v; want %v", totals, wantTotals)
				}
			})
		}
	}
}

// Shutdown at odd moments: when it returns, a subscriber of the final
// kinds only (no startsSkips) has, of every task, exactly one final event, the
// status Info reports.
func TestKindsAtShutdown(t *testing.T) {
	_, opts := lagSizes()
	for _, lag := range []time.Duration{0, 5 * time.Millisecond} {
		for _, at := range []time.Duration{0, 500 * time.Microsecond, 3 * time.Millisecond, 12 * time.Millisecond} {
			t.Run(fmt.Sprintf("lag %v at %v", lag, at), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					s, err := coordinator.New(opts...)
					if err != nil {
						t.Fatalf("New = %v", err)
					}
					rec, _ := filtered(s, lag, append(ends, coordinator.EventRetrying)...)
					ids := lagWorkload(t, s)
					time.Sleep(at) // fake time: to the moment
					if err := s.Shutdown(context.Background()); err != nil {
						t.Fatalf("Shutdown = %v", err)
					}
					final := map[string][]coordinator.EventKind{}
					for _, e := range rec.all() {
						if e.Kind == coordinator.EventRetrying {
							if len(final[e.TaskID]) > 0 {
								t.Fatalf("%s: retrying after its final event", e.TaskID)
							}
							continue
						}
						final[e.TaskID] = append(final[e.TaskID], e.Kind)
					}
					want := map[coordinator.Status]coordinator.EventKind{coordinator.Succeeded: coordinator.EventSucceeded,
						coordinator.Failed: coordinator.EventFailed, coordinator.Cancelled: coordinator.EventCancelled, coordinator.Skipped: coordinator.EventSkipped}
					for _, id := range ids {
						info, _ := s.Info(id)
						if k := final[id]; len(k) != 1 || k[0] != want[info.Status] {
							t.Fatalf("%s: final events %v; want [%v], as Info says %v", id, k, want[info.Status], info.Status)
						}
					}
				})
			})
		}
	}
}
