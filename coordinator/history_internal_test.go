package coordinator

import (
	"context"
	"errors"
	"flag"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/record"
)

// A shared record names its first task (a Feed tells a record of one task
// by its ID) until that task's history lets go of it: forgotten, or cut
// by perTask; past that, the task's slot may hold another task, which the
// record must not name.
func TestSharedRecordForgetsItsFirstTask(t *testing.T) {
	for _, how := range []string{"forgotten", "trimmed"} {
		t.Run(how, func(t *testing.T) {
			r := newRig(1)
			r.s.startHistory(2, 16)
			r.submit(t, Task{ID: "a", Run: noop}, Task{ID: "b", Run: noop})
			a, _ := r.s.findLive("a")
			r.s.remember(a, 0, 1, 1, 0, OutcomeSucceeded, nil, 1, 2, 3)
			shared := r.s.openRec
			if shared == nil || shared.shared != 1 || shared.task != a || r.s.histHead[a]&sharedLink == 0 {
				t.Fatalf("a's first success: record %+v, head %x; want a shared record of a, linked", shared, r.s.histHead[a])
			}
			if how == "trimmed" {
				for run := int32(2); run <= 3; run++ { // perTask 2: the shared record is cut off
					r.s.remember(a, 0, 1, run, 0, OutcomeSucceeded, nil, 4, 5, 6)
				}
				if h := r.s.history(a, t0); len(h.Attempts) != 2 || h.Dropped != 1 || h.Attempts[0].Run != 2 {
					t.Fatalf("History(a) = %+v; want runs 2 and 3, 1 dropped", h)
				}
			} else {
				r.s.forgetHistory(a)
			}
			if shared.task != noTask {
				t.Errorf("the shared record still names task %d once a let go of it", shared.task)
			}
		})
	}
}

// A task's count of attempts survives what its head says: a plain first
// success writes only its head (a shared link, counted as one), and a
// restored history that kept none of its attempts (all dropped) has a
// head that names no record, so that a first success after it is not
// taken for the task's first attempt (its Dropped would lose them).
func TestHistoryCountBesideItsHead(t *testing.T) {
	r := newRig(1)
	r.s.startHistory(3, 16)
	r.submit(t, Task{ID: "a", Run: noop}, Task{ID: "b", Run: noop})
	a, _ := r.s.findLive("a")
	b, _ := r.s.findLive("b")
	r.s.remember(a, 0, 1, 1, 0, OutcomeSucceeded, nil, 1, 2, 3)
	if h := r.s.history(a, t0); len(h.Attempts) != 1 || h.Dropped != 0 {
		t.Fatalf("History(a) after a plain first success = %+v; want it, none dropped", h)
	}
	r.s.remember(a, 0, 1, 2, 0, OutcomeFailed, &attemptDetail{err: errHistBoom}, 4, 5, 6)
	if h := r.s.history(a, t0); len(h.Attempts) != 2 || h.Dropped != 0 || h.Attempts[1].Err != errHistBoom {
		t.Fatalf("History(a) after a second run = %+v; want both, none dropped", h)
	}
	// b's stored history: 2 attempts, none kept.
	r.s.restoreHistory([]storedTask{{}, {hist: &record.History{Dropped: 2}}})
	r.s.remember(b, 0, 1, 1, 0, OutcomeSucceeded, nil, 7, 8, 9)
	if h := r.s.history(b, t0); len(h.Attempts) != 1 || h.Dropped != 2 {
		t.Fatalf("History(b) after a restore that kept none of 2 = %+v; want 1 attempt, 2 dropped", h)
	}
	if r.s.histHead[b]&sharedLink != 0 {
		t.Errorf("b's success after its dropped attempts joined a shared record")
	}
}

var errHistBoom = errors.New("boom")

// An attempt's start that the coordinator infers (the end of the item
// before it in its lane) is never after its end: the item before it was
// timed, and its worker stamped its end after the clock reading with which
// the coordinator applies this one's (a review found Started after Ended
// by up to 500 µs for untimed attempts behind timed ones).
func TestInferredStartIsNotAfterTheEnd(t *testing.T) {
	r := newRig(1)
	r.s.startHistory(3, 16)
	r.submit(t, Task{ID: "a", Run: noop})
	a, _ := r.s.findLive("a")
	ls := &r.s.lanes[0]
	r.s.handedOut(ls, 0, t0)
	ls.lastEnd = t0.Add(10 * time.Millisecond).UnixNano() // the timed item before it, by its worker's clock
	r.s.endsAt(t0.Add(5 * time.Millisecond))              // the report's reading
	r.s.rememberEnd(ls, 0, a, OutcomeSucceeded, nil)
	h := r.s.history(a, t0)
	if len(h.Attempts) != 1 {
		t.Fatalf("History(a) = %+v; want one attempt", h)
	}
	if at := h.Attempts[0]; at.Started.After(at.Ended) || at.Started.Before(at.HandedOut) {
		t.Errorf("attempt handed out %v, started %v, ended %v; want handed out <= started <= ended", at.HandedOut, at.Started, at.Ended)
	}
}

// joinPlain is rememberEnd's common case without the times computed: a
// run of plain first successes in one report joins the shared record the
// first of them opened. Whatever the mix of attempts (plain, failing,
// touched, timed), readings and feed reads, the history and the feed are
// the ones rememberEnd alone gives.
func TestJoinPlainRecordsWhatRememberEndWould(t *testing.T) {
	joined := 0
	first := *joinSeed // a failing seed: -baton.joinseed=N -baton.joinseeds=1
	if first == 0 {
		first = rand.Uint64() // new seeds every run
	}
	for seed := first; seed < first+uint64(*joinSeeds); seed++ {
		with, n := joinScenario(t, seed, false)
		without, _ := joinScenario(t, seed, true)
		joined += n
		if len(with) != len(without) {
			t.Fatalf("seed %d: %d observations with joinPlain, %d without", seed, len(with), len(without))
		}
		for i := range with {
			if !reflect.DeepEqual(with[i], without[i]) {
				t.Fatalf("seed %d, observation %d:\nwith joinPlain    %+v\nwithout joinPlain %+v", seed, i, with[i], without[i])
			}
		}
	}
	if joined == 0 {
		t.Fatal("no report opened a join: the scenarios never reach joinPlain")
	}
}

var (
	joinSeed  = flag.Uint64("baton.joinseed", 0, "TestJoinPlainRecordsWhatRememberEndWould's first seed (0: a random one)")
	joinSeeds = flag.Int("baton.joinseeds", 60, "how many seeds TestJoinPlainRecordsWhatRememberEndWould runs")
)

// joinScenario runs a random graph on a rig, reading a feed now and then,
// and returns what the feed read and every task's history at the end, and
// how many lanes had a join open at the end of a report.
func joinScenario(t *testing.T, seed uint64, noJoin bool) (seen []any, joins int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	r := newRig(1 + rng.IntN(3))
	r.cheap(0)
	r.s.startHistory(1+rng.IntN(4), 8+rng.IntN(300))
	r.s.noJoin = noJoin
	if rng.IntN(3) == 0 {
		r.s.setObserved(1<<EventStarted, 0) // the coordinator sees starts: an inferred start is the earlier
	}
	boom := errors.New("boom")
	n := 20 + rng.IntN(200)
	mixed := 20 // one in mixed of each kind of attempt that is not plain
	if rng.IntN(3) == 0 {
		mixed, n = 1000, 300+rng.IntN(400) // long runs of plain ones: more than a shared record holds
	}
	tasks := make([]Task, n)
	for i := range tasks {
		tk := Task{ID: "t" + itoa(i), Run: noop}
		switch k := rng.IntN(mixed); {
		case k == 0:
			tk.Run = func(context.Context) error { return boom }
		case k == 1:
			tk.Run = func(ctx context.Context) error { return SetWorker(ctx, "w") }
		case k == 2:
			tk.Timeout = time.Second // its worker stamps its times
		case k == 3:
			fails := 1
			tk.Retry = RetryPolicy{MaxAttempts: 3}
			tk.Run = func(context.Context) error {
				if fails > 0 {
					fails--
					return boom
				}
				return nil
			}
		}
		if i > 0 && rng.IntN(3) == 0 {
			tk.Deps = []string{"t" + itoa(rng.IntN(i))}
		}
		tasks[i] = tk
	}
	r.submit(t, tasks...)
	if rng.IntN(3) == 0 {
		// Some tasks come back from a store with attempts none of which
		// their history kept: their first success is not their first.
		stored := make([]storedTask, n)
		for i := range stored {
			if rng.IntN(4) == 0 {
				stored[i].hist = &record.History{Dropped: int32(1 + rng.IntN(3))}
			}
		}
		r.s.restoreHistory(stored)
	}
	cs := &changeSet{}
	r.s.chg = append(r.s.chg, cs)
	for range 100 * n {
		if r.s.open == 0 {
			break
		}
		switch rng.IntN(6) {
		case 0, 1:
			r.now = r.now.Add(time.Duration(rng.IntN(3)) * time.Millisecond)
		case 2:
			if r.now.After(t0) {
				r.now = r.now.Add(-time.Millisecond) // a mock clock set back: a reading comes again
			}
		}
		// The workers' clock (a timed attempt's stamps) is at or ahead of
		// the readings the coordinator applies ends with, and now and then
		// stands still, so that timed attempts are stamped alike.
		if rng.IntN(3) > 0 {
			r.clk.Set(r.now.Add(time.Duration(rng.IntN(3)) * time.Millisecond))
		}
		r.step()
		for _, li := range rng.Perm(len(r.s.lanes)) {
			switch rng.IntN(4) {
			case 0: // left alone
			case 1: // a few items run, unreported: the next iteration's harvest applies them
				for range rng.IntN(8) {
					r.s.lanes[li].l.Step(r.env)
				}
			default:
				r.drain(li)
				if r.s.lanes[li].join != nil && r.s.lanes[li].joinSer == r.s.openShared {
					joins++
				}
			}
		}
		if rng.IntN(5) == 0 {
			p := r.s.changes(cs, 1+rng.IntN(40), r.now)
			seen = append(seen, p.Ended, p.Dropped)
		}
	}
	if r.s.open != 0 {
		t.Fatalf("seed %d: %d tasks still open", seed, r.s.open)
	}
	for i := range n {
		h, _ := r.s.historyOf("t"+itoa(i), r.now)
		seen = append(seen, h)
	}
	return seen, joins
}

// An attempt whose start the coordinator saw does not join a shared
// record of attempts that started at the reading their ends were applied
// with: its start is the earlier one it saw.
func TestJoinPlainKeepsASeenStart(t *testing.T) {
	r := newRig(1)
	r.cheap(0)
	r.s.startHistory(3, 16)
	r.submit(t, Task{ID: "a", Run: noop}, Task{ID: "b", Run: noop}, Task{ID: "c", Run: noop})
	r.step()
	if got := r.items(0); len(got) != 3 {
		t.Fatalf("lane 0 holds %v; want a, b and c", got)
	}
	ls := &r.s.lanes[0]
	seen := t0.Add(time.Millisecond)
	ls.sawStart(ls.applied+2, seen) // c's start, seen before its end is applied
	r.now = t0.Add(2 * time.Millisecond)
	r.drain(0)
	// b started behind a at the report's reading (a shared record it
	// opens, which c would join); c started when it was seen.
	r.wantStarted(t, map[string]time.Time{"a": t0, "b": r.now, "c": seen})

	// The coordinator sees a start for the first time once a join is open
	// on the lane: the same.
	r = newRig(1)
	r.cheap(0)
	r.s.startHistory(3, 16)
	r.submit(t, Task{ID: "a", Run: noop}, Task{ID: "b", Run: noop}, Task{ID: "c", Run: noop}, Task{ID: "d", Run: noop})
	r.step()
	ls = &r.s.lanes[0]
	if got := r.items(0); len(got) != 4 {
		t.Fatalf("lane 0 holds %v; want a, b, c and d", got)
	}
	r.now = t0.Add(2 * time.Millisecond)
	ls.l.Step(r.env)
	ls.l.Step(r.env)
	r.s.harvest(ls, r.now) // a and b, unreported (as when a pool is hungry): b opens a join
	if ls.join == nil {
		t.Fatal("b's end opened no join: the case is not reached")
	}
	ls.sawStart(ls.applied+1, seen) // d's start, seen before its end is applied
	ls.l.Step(r.env)
	ls.l.Step(r.env)
	r.s.harvest(ls, r.now) // c and d, at the same reading
	r.wantStarted(t, map[string]time.Time{"a": t0, "b": r.now, "c": r.now, "d": seen})
}

// wantStarted checks that each task's history holds one attempt, which
// started at the time given.
func (r *rig) wantStarted(t *testing.T, want map[string]time.Time) {
	t.Helper()
	for id, started := range want {
		h, _ := r.s.historyOf(id, r.now)
		if len(h.Attempts) != 1 || !h.Attempts[0].Started.Equal(started) {
			t.Errorf("History(%s) = %+v; want one attempt started %v", id, h, started)
		}
	}
}

// A shared record stays open across readings of the clock: ends that
// match it join it whenever they are applied (a review found the records
// split once a new reading closed them, and a small ring then dropping an
// attempt it had kept). Worker-stamped ends equal to it, an end at the
// stamped end of the one before it, an end at a reading that came back.
func TestSharedRecordOpenAcrossReadings(t *testing.T) {
	type step struct {
		clock time.Time // the workers' clock as the item runs (its stamps, if timed)
		at    time.Time // the reading the harvest that applies it is made with
	}
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	timed := Task{Run: noop, Timeout: time.Second}
	plain := Task{Run: noop}
	for _, c := range []struct {
		name  string
		tasks []Task
		steps []step
		idle  time.Time // a harvest of nothing between the last two steps (zero: none)
		want  []int     // the tasks of each record the feed reads, in order
	}{
		{"stamped alike at two readings", []Task{timed, timed}, []step{{t0, ms(1)}, {t0, ms(2)}}, time.Time{}, []int{2}},
		{"at the stamped end before it", []Task{timed, plain}, []step{{ms(5), ms(1)}, {ms(5), ms(5)}}, time.Time{}, []int{2}},
		{"a reading that comes back", []Task{plain, plain, plain}, []step{{t0, ms(1)}, {t0, ms(1)}, {t0, ms(1)}}, ms(2), []int{1, 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(1)
			r.cheap(0)
			r.s.startHistory(3, 64)
			for i := range c.tasks {
				c.tasks[i].ID = "t" + itoa(i)
			}
			r.submit(t, c.tasks...)
			r.step() // all handed out at t0
			ls := &r.s.lanes[0]
			if got := r.items(0); len(got) != len(c.tasks) {
				t.Fatalf("lane 0 holds %v; want every task", got)
			}
			cs := &changeSet{}
			r.s.chg = append(r.s.chg, cs)
			for i, st := range c.steps {
				if i == len(c.steps)-1 && !c.idle.IsZero() {
					r.s.harvestAll(c.idle) // a request's look, say: nothing to apply
				}
				r.clk.Set(st.clock)
				ls.l.Step(r.env)
				r.s.harvest(ls, st.at)
			}
			var got []int
			for _, e := range r.s.changes(cs, 100, ms(10)).Ended {
				got = append(got, e.Tasks)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("the feed read records of %v tasks; want %v", got, c.want)
			}
		})
	}
	// With a ring of two records, a third end keeps the first two's one
	// record: t0's attempt is still there.
	r := newRig(1)
	r.cheap(0)
	r.s.startHistory(2, 2)
	r.submit(t, Task{ID: "a", Run: noop, Timeout: time.Second}, Task{ID: "b", Run: noop, Timeout: time.Second},
		Task{ID: "c", Run: func(context.Context) error { return errHistBoom }})
	r.step()
	ls := &r.s.lanes[0]
	r.clk.Set(t0)
	for i := range 3 {
		ls.l.Step(r.env)
		r.s.harvest(ls, t0.Add(time.Duration(i+1)*time.Millisecond))
	}
	if h, _ := r.s.historyOf("a", r.now); len(h.Attempts) != 1 || h.Dropped != 0 {
		t.Errorf("History(a) = %+v; want its attempt, none dropped", h)
	}
}
