package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/worker"
	"github.com/benbjohnson/clock"
)

// The rules of MaxLag, through the public API: a lagged subscriber gets
// every event a prompt one would, in an order that keeps every rule the
// events keep, at most its lag late; a prompt subscriber beside it makes
// every event prompt again, until it goes.

// lagged subscribes a recorder that accepts events d late.
func lagged(s *coordinator.Scheduler, d time.Duration) (*recorder, func()) {
	r := &recorder{}
	unsubscribe := s.Subscribe(func(e coordinator.Event) {
		r.mu.Lock()
		r.events = append(r.events, e)
		r.mu.Unlock()
	}, coordinator.MaxLag(d))
	return r, unsubscribe
}

// lagWorkload submits a graph that exercises what the events tell, on
// pools "" (two workers) and "gpu" (one): chains (fused where they can
// be) of tasks of uneven durations, a flaky task that succeeds at its
// second attempt, a task that fails for good (what follows it is
// skipped), a join of two chains, and tasks of a second pool.
func lagWorkload(t *testing.T, s *coordinator.Scheduler) []string {
	t.Helper()
	durs := []time.Duration{0, time.Millisecond, 0, 7 * time.Millisecond, 300 * time.Microsecond, 30 * time.Millisecond, 0}
	var mu sync.Mutex
	tried := map[string]int{}
	var tasks []coordinator.Task
	var ids []string
	for c := range 6 {
		for i := range 8 {
			id := fmt.Sprintf("c%d.%d", c, i)
			d := durs[(c*3+i)%len(durs)]
			task := coordinator.Task{ID: id, Run: sleepFor(d)}
			if c%3 == 2 {
				task.Pool = "gpu"
			}
			if i > 0 {
				task.Deps = []string{fmt.Sprintf("c%d.%d", c, i-1)}
			}
			switch {
			case c == 1 && i == 3:
				task.Retry = coordinator.RetryPolicy{MaxAttempts: 2, BaseDelay: 2 * time.Millisecond}
				task.Run = func(context.Context) error {
					mu.Lock()
					tried[id]++
					n := tried[id]
					mu.Unlock()
					time.Sleep(d)
					if n == 1 {
						return errors.New("flaky")
					}
					return nil
				}
			case c == 4 && i == 2:
				task.Run = func(context.Context) error { return errors.New("broken") }
			}
			tasks = append(tasks, task)
			ids = append(ids, id)
		}
	}
	tasks = append(tasks, coordinator.Task{ID: "join", Run: sleepFor(time.Millisecond), Deps: []string{"c0.7", "c3.7"}})
	ids = append(ids, "join")
	for i := range 40 {
		id := fmt.Sprint("flat", i)
		tasks = append(tasks, coordinator.Task{ID: id, Run: sleepFor(durs[i%len(durs)])})
		ids = append(ids, id)
	}
	if err := s.Submit(tasks...); err != nil {
		t.Fatalf("Submit = %v", err)
	}
	return ids
}

// perTask is what the events say of each task, in order: kind, attempt,
// run, error and cause, without the times (they are what a lag changes).
func perTask(events []coordinator.Event) map[string][]string {
	out := map[string][]string{}
	for _, e := range events {
		err := ""
		if e.Err != nil {
			err = e.Err.Error()
		}
		out[e.TaskID] = append(out[e.TaskID], fmt.Sprintf("%v attempt %d run %d err %q cause %q", e.Kind, e.Attempt, e.Run, err, e.Cause))
	}
	return out
}

// checkEventRules checks what any subscriber's events must keep, prompt
// or lagged: times never go back; no attempt starts twice without an end
// between; no pool shows more attempts running than it has workers; a
// task starts only after its dependencies' successes; nothing follows a
// task's final event.
func checkEventRules(t *testing.T, events []coordinator.Event, sizes map[string]int, deps map[string][]string) {
	t.Helper()
	running := map[string]int{}
	on := map[string]bool{}
	final := map[string]bool{}
	succeeded := map[string]bool{}
	var last time.Time
	for i, e := range events {
		if e.At.Before(last) {
			t.Fatalf("event %d (%s %v) at %v, before the one ahead of it at %v", i, e.TaskID, e.Kind, e.At, last)
		}
		last = e.At
		if final[e.TaskID] {
			t.Fatalf("event %d: %s %v after its final event", i, e.TaskID, e.Kind)
		}
		switch e.Kind {
		case coordinator.EventStarted:
			if on[e.TaskID] {
				t.Fatalf("event %d: %s started again before its attempt ended", i, e.TaskID)
			}
			for _, d := range deps[e.TaskID] {
				if !succeeded[d] {
					t.Fatalf("event %d: %s started before its dependency %s succeeded", i, e.TaskID, d)
				}
			}
			on[e.TaskID] = true
			if running[e.Pool]++; running[e.Pool] > sizes[e.Pool] {
				t.Fatalf("event %d: %d attempts of pool %q running at %s's start; it has %d workers", i, running[e.Pool], e.Pool, e.TaskID, sizes[e.Pool])
			}
			continue
		case coordinator.EventSucceeded:
			succeeded[e.TaskID] = true
		}
		if on[e.TaskID] {
			on[e.TaskID] = false
			running[e.Pool]--
		}
		switch e.Kind {
		case coordinator.EventSucceeded, coordinator.EventFailed, coordinator.EventCancelled, coordinator.EventSkipped:
			final[e.TaskID] = true
		}
	}
}

func lagSizes() (map[string]int, []coordinator.Option) {
	sizes := map[string]int{"": 2, "gpu": 1}
	return sizes, []coordinator.Option{coordinator.WithWorkers(sizes[""]), coordinator.WithPool("gpu", sizes["gpu"], worker.Func{})}
}

func lagDeps() map[string][]string {
	deps := map[string][]string{"join": {"c0.7", "c3.7"}}
	for c := range 6 {
		for i := 1; i < 8; i++ {
			deps[fmt.Sprintf("c%d.%d", c, i)] = []string{fmt.Sprintf("c%d.%d", c, i-1)}
		}
	}
	return deps
}

// A lagged subscriber gets, of every task, the events a prompt subscriber
// gets, in the same order, and its events keep every rule the events
// keep; with retention on too. A prompt subscriber beside a lagged one
// makes them share every event.
func TestLaggedSubscriberGetsWhatAPromptOneGets(t *testing.T) {
	sizes, opts := lagSizes()
	deps := lagDeps()
	for _, retain := range []bool{false, true} {
		t.Run(fmt.Sprint("retention ", retain), func(t *testing.T) {
			if retain {
				opts = append(opts, coordinator.WithRetention(5*time.Millisecond))
			}
			var prompt, lag map[string][]string
			synctest.Test(t, func(t *testing.T) {
				s := newScheduler(t, opts...)
				rec := record(s)
				lagRec, _ := lagged(s, 10*time.Millisecond)
				lagWorkload(t, s)
				settle(t, s)
				if !slices.EqualFunc(rec.all(), lagRec.all(), func(a, b coordinator.Event) bool { return a == b }) {
					t.Fatalf("beside a prompt subscriber, the lagged one got %v; want %v", lagRec.lines(), rec.lines())
				}
				checkEventRules(t, rec.all(), sizes, deps)
				prompt = perTask(rec.all())
			})
			synctest.Test(t, func(t *testing.T) {
				s := newScheduler(t, opts...)
				rec, _ := lagged(s, 10*time.Millisecond)
				ids := lagWorkload(t, s)
				settle(t, s)
				checkEventRules(t, rec.all(), sizes, deps)
				lag = perTask(rec.all())
				if len(lag) != len(ids) {
					t.Fatalf("lagged subscriber heard of %d tasks; want %d", len(lag), len(ids))
				}
			})
			for id, want := range prompt {
				if got := lag[id]; !slices.Equal(got, want) {
					t.Errorf("lagged subscriber's events of %s:\n%v\nwant, as a prompt subscriber's:\n%v", id, got, want)
				}
			}
		})
	}
}

// Shutdown at odd moments (at once, while attempts run, between a
// worker's reports, from inside the lagged subscriber's callback): when
// it returns, the lagged subscriber has every event decided, every task
// has exactly one final event, its last, and it is the status Info
// reports.
func TestLaggedSubscriberAtShutdown(t *testing.T) {
	sizes, opts := lagSizes()
	deps := lagDeps()
	for _, at := range []time.Duration{0, 1, 500 * time.Microsecond, 3 * time.Millisecond, 12 * time.Millisecond, 41 * time.Millisecond, -7, -30} {
		t.Run(fmt.Sprint("at ", at), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, err := coordinator.New(opts...)
				if err != nil {
					t.Fatalf("New = %v", err)
				}
				rec := &recorder{}
				inside := make(chan struct{}) // closed once the callback's Shutdown returned
				s.Subscribe(func(e coordinator.Event) {
					rec.mu.Lock()
					rec.events = append(rec.events, e)
					n := len(rec.events)
					rec.mu.Unlock()
					if at < 0 && n == int(-at) { // at the -at'th event, from inside the callback
						if err := s.Shutdown(context.Background()); err != nil {
							t.Errorf("Shutdown from the callback = %v", err)
						}
						close(inside)
					}
				}, coordinator.MaxLag(5*time.Millisecond))
				ids := lagWorkload(t, s)
				switch {
				case at > 0:
					time.Sleep(at) // fake time: to the moment
				case at < 0:
					<-inside
				}
				if err := s.Shutdown(context.Background()); err != nil {
					t.Fatalf("Shutdown = %v", err)
				}
				events := rec.all()
				checkEventRules(t, events, sizes, deps)
				last := map[string]coordinator.EventKind{}
				for _, e := range events {
					last[e.TaskID] = e.Kind
				}
				want := map[coordinator.Status]coordinator.EventKind{coordinator.Succeeded: coordinator.EventSucceeded,
					coordinator.Failed: coordinator.EventFailed, coordinator.Cancelled: coordinator.EventCancelled, coordinator.Skipped: coordinator.EventSkipped}
				for _, id := range ids {
					info, _ := s.Info(id)
					if k, ok := last[id]; !ok || k != want[info.Status] {
						t.Fatalf("%s: last event %v (told: %v); want %v, as Info says %v", id, k, ok, want[info.Status], info.Status)
					}
				}
			})
		})
	}
}

// lagProbe submits, to a pool of one worker that has not run anything
// yet, eight tasks that the worker gets in one lane: three of a
// millisecond, one that runs until the probe is released, four of a
// millisecond. The worker reports its first claim and, then, nothing
// until the long one has ended (its lane asks for a report half way):
// what it did meanwhile is learnt through the lag, if there is one. It
// returns the time each function started and ended.
type lagProbe struct {
	mu         sync.Mutex
	start, end map[string]time.Time
	release    chan struct{}
	running    chan struct{}
}

func probe(t *testing.T, s *coordinator.Scheduler, pool string) *lagProbe {
	t.Helper()
	p := &lagProbe{start: map[string]time.Time{}, end: map[string]time.Time{}, release: make(chan struct{}), running: make(chan struct{})}
	body := func(id string, wait func(context.Context)) func(context.Context) error {
		return func(ctx context.Context) error {
			p.mu.Lock()
			p.start[id] = time.Now()
			p.mu.Unlock()
			wait(ctx)
			p.mu.Lock()
			p.end[id] = time.Now()
			p.mu.Unlock()
			return nil
		}
	}
	var tasks []coordinator.Task
	for i := range 8 {
		id := fmt.Sprintf("%s.q%d", pool, i)
		wait := func(context.Context) { time.Sleep(time.Millisecond) }
		if i == 3 {
			id = pool + ".long"
			wait = func(ctx context.Context) {
				close(p.running)
				select {
				case <-p.release:
				case <-ctx.Done(): // the test failed: Shutdown
				}
			}
		}
		tasks = append(tasks, coordinator.Task{ID: id, Pool: pool, Run: body(id, wait)})
	}
	if err := s.Submit(tasks...); err != nil {
		t.Fatalf("Submit = %v", err)
	}
	<-p.running
	return p
}

// happened returns when what event e tells happened: the start or the
// end of the function.
func (p *lagProbe) happened(e coordinator.Event) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e.Kind == coordinator.EventStarted {
		at, ok := p.start[e.TaskID]
		return at, ok
	}
	at, ok := p.end[e.TaskID]
	return at, ok
}

// timed is a subscriber that notes when it receives each event.
type timed struct {
	mu   sync.Mutex
	got  []coordinator.Event
	when []time.Time
}

func (tr *timed) fn(e coordinator.Event) {
	tr.mu.Lock()
	tr.got = append(tr.got, e)
	tr.when = append(tr.when, time.Now())
	tr.mu.Unlock()
}

// lags returns, for every event received since from of the probe's
// tasks, how late it was received, and the largest.
func (tr *timed) lags(t *testing.T, p *lagProbe, from int) (most time.Duration, n int) {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for i := from; i < len(tr.got); i++ {
		e := tr.got[i]
		at, ok := p.happened(e)
		if !ok {
			continue
		}
		if e.At.Before(at) {
			t.Fatalf("%s %v at %v, before it happened (%v)", e.TaskID, e.Kind, e.At, at)
		}
		lag := tr.when[i].Sub(at)
		if e.At.Sub(at) > lag {
			t.Fatalf("%s %v received at %v, before its At %v", e.TaskID, e.Kind, tr.when[i], e.At)
		}
		most = max(most, lag)
		n++
	}
	return most, n
}

func (tr *timed) len() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.got)
}

// A lagged event is received at most the lag after it happened, even
// while the worker runs a long attempt and reports nothing; a prompt
// subscriber added beside the lagged one makes every event prompt; once
// it unsubscribes, events lag again.
func TestLagBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 10 * time.Millisecond
		pools := []string{"p1", "p2", "p3"}
		var opts []coordinator.Option
		for _, p := range pools {
			opts = append(opts, coordinator.WithPool(p, 1, worker.Func{}))
		}
		s := newScheduler(t, opts...)
		var lag timed
		s.Subscribe(lag.fn, coordinator.MaxLag(d))

		// Lagged alone: the ends before the long attempt and its start
		// are learnt through the lag, not at once, and within it.
		p := probe(t, s, "p1")
		time.Sleep(5 * d) // fake time: the long attempt runs, its worker reports nothing
		synctest.Wait()
		most, n := lag.lags(t, p, 0)
		if n != 7 || most == 0 || most > d {
			t.Fatalf("lagged alone: %d events of the probe, the latest received %v after it happened; want 7 (3 tasks and a start), within (0, %v]", n, most, d)
		}
		close(p.release)
		settle(t, s)
		if most, n = lag.lags(t, p, 0); n != 16 || most > d {
			t.Fatalf("lagged alone: %d events of the probe, the latest received %v after it happened; want 16, within %v", n, most, d)
		}

		// A prompt subscriber beside it: every event at once, for both.
		var prompt timed
		unsubscribe := s.Subscribe(prompt.fn)
		from := lag.len()
		p = probe(t, s, "p2")
		time.Sleep(5 * d)
		close(p.release)
		settle(t, s)
		if most, n = lag.lags(t, p, from); n != 16 || most != 0 {
			t.Fatalf("beside a prompt subscriber: %d events of the probe, the latest received %v after it happened; want 16, all at once", n, most)
		}
		if most, n = prompt.lags(t, p, 0); n != 16 || most != 0 {
			t.Fatalf("prompt subscriber: %d events of the probe, the latest received %v after it happened; want 16, all at once", n, most)
		}

		// The prompt one gone: lagged again.
		unsubscribe()
		synctest.Wait()
		from = lag.len()
		p = probe(t, s, "p3")
		time.Sleep(5 * d)
		synctest.Wait()
		if most, n = lag.lags(t, p, from); n != 7 || most == 0 || most > d {
			t.Fatalf("the prompt subscriber gone: %d events of the probe, the latest received %v after it happened; want 7, within (0, %v]", n, most, d)
		}
		close(p.release)
		settle(t, s)
	})
}

// Under a mock clock, the look at the lanes is a timer like the others:
// what the worker did unreported is told when the clock reaches the lag,
// at the lag.
func TestLagMockClock(t *testing.T) {
	clk := clock.NewMock()
	armed := make(chan time.Time, 100)
	s := newScheduler(t, coordinator.WithWorkers(1), coordinator.WithClock(clk), coordinator.WithTimerArmed(func(due time.Time) {
		if !due.IsZero() {
			armed <- due
		}
	}))
	events := make(chan coordinator.Event, 100)
	const d = 50 * time.Millisecond
	s.Subscribe(func(e coordinator.Event) { events <- e }, coordinator.MaxLag(d))
	next := func() coordinator.Event {
		t.Helper()
		select {
		case e := <-events:
			return e
		case <-time.After(10 * time.Second): // only reports a failure
			t.Fatalf("no event within 10s")
		}
		return coordinator.Event{}
	}
	start := clk.Now()
	// One lane of eight: the worker reports its first claim (q0), and then
	// nothing until the item after long has ended (the lane asks for a
	// report half way): q0's end, q1, and long's start wait for the look.
	g0, release, running := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var tasks []coordinator.Task
	for _, id := range []string{"q0", "q1", "long", "q3", "q4", "q5", "q6", "q7"} {
		run := ok
		switch id {
		case "q0":
			run = func(context.Context) error { <-g0; return nil }
		case "long":
			run = func(ctx context.Context) error {
				close(running)
				select {
				case <-release:
				case <-ctx.Done(): // the test failed: Shutdown
				}
				return nil
			}
		}
		tasks = append(tasks, coordinator.Task{ID: id, Run: run})
	}
	if err := s.Submit(tasks...); err != nil {
		t.Fatalf("Submit = %v", err)
	}
	if e := next(); e.TaskID != "q0" || e.Kind != coordinator.EventStarted || !e.At.Equal(start) {
		t.Fatalf("first event %s %v at %v; want q0 started at once", e.TaskID, e.Kind, e.At.Sub(start))
	}
	select {
	case due := <-armed:
		if !due.Equal(start.Add(d)) {
			t.Fatalf("timer armed for %v; want the lag, %v", due.Sub(start), d)
		}
	case <-time.After(10 * time.Second): // only reports a failure
		t.Fatalf("no timer armed within 10s")
	}
	close(g0)
	<-running
	select {
	case e := <-events:
		t.Fatalf("%s %v told before the clock reached the lag", e.TaskID, e.Kind)
	default:
	}
	clk.Add(d)
	var got []string
	for len(got) < 4 {
		e := next()
		if !e.At.Equal(start.Add(d)) {
			t.Fatalf("%s %v at %v; want at the lag, %v", e.TaskID, e.Kind, e.At.Sub(start), d)
		}
		got = append(got, e.TaskID+" "+e.Kind.String())
	}
	want := []string{"q0 succeeded", "q1 started", "q1 succeeded", "long started"}
	if !slices.Equal(got, want) {
		t.Fatalf("events at the lag: %v; want %v", got, want)
	}
	close(release)
	if err := s.Wait(context.Background()); err != nil {
		t.Fatalf("Wait = %v", err)
	}
}

// infos returns, for every task, what Info says of it at the end: status,
// attempts, runs, error and cause.
func infos(t *testing.T, s *coordinator.Scheduler, ids []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, id := range ids {
		info, found := s.Info(id)
		if !found {
			t.Fatalf("Info(%q): unknown", id)
		}
		out[id] = fmt.Sprintf("%v attempts %d runs %d err %v cause %q", info.Status, info.Attempts, info.Runs, info.Err, info.Cause)
	}
	return out
}

// endsUnder runs workload on a scheduler that listen subscribes to, in a
// bubble, and returns how each of its tasks ended (infos) and the totals.
func endsUnder(t *testing.T, workload func(*testing.T, *coordinator.Scheduler) []string, listen func(*coordinator.Scheduler)) (map[string]string, map[string]coordinator.Totals) {
	_, opts := lagSizes()
	var got map[string]string
	var totals map[string]coordinator.Totals
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, opts...)
		ids := workload(t, s)
		listen(s)
		settle(t, s)
		got, totals = infos(t, s, ids), s.Totals()
	})
	return got, totals
}

// Nothing is lost when nobody listens, or when the only (lagged)
// listener leaves half way: with no attempt urgent for a subscriber, every
// end is still applied, and every task ends as it does under a prompt
// subscriber, with the same totals.
func TestNothingLostWithoutPromptSubscriber(t *testing.T) {
	run := func(t *testing.T, listen func(*coordinator.Scheduler)) (map[string]string, map[string]coordinator.Totals) {
		return endsUnder(t, lagWorkload, listen)
	}
	want, wantTotals := run(t, func(s *coordinator.Scheduler) { record(s) })
	for _, c := range []struct {
		name   string
		listen func(*coordinator.Scheduler)
	}{
		{"nobody", func(*coordinator.Scheduler) {}},
		{"lagged, gone half way", func(s *coordinator.Scheduler) {
			_, unsubscribe := lagged(s, time.Millisecond)
			time.Sleep(10 * time.Millisecond) // fake time: half way through the workload
			unsubscribe()
		}},
		{"prompt, gone half way", func(s *coordinator.Scheduler) {
			unsubscribe := s.Subscribe(func(coordinator.Event) {})
			time.Sleep(10 * time.Millisecond)
			unsubscribe()
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, totals := run(t, c.listen)
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
