package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	_ "time/tzdata" // the DST test's zone, whatever the machine has installed

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/coordinator/storetest"
)

// starts records when a task's function was called, on the fake clock.
type starts struct {
	mu   sync.Mutex
	at   []time.Time
	took func(run int) time.Duration // how long run n (1-based) takes
}

func (s *starts) run(ctx context.Context) error {
	s.mu.Lock()
	s.at = append(s.at, time.Now())
	n := len(s.at)
	s.mu.Unlock()
	if s.took != nil {
		time.Sleep(s.took(n))
	}
	return nil
}

func (s *starts) times() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.at)
}

// A cron task runs at each of its starts, never before, never twice for
// one: a day of a "30 * * * *" task, and of a daily one in a named zone.
func TestCronRunsAtItsStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		hourly, daily := &starts{}, &starts{}
		t0 := time.Now() // synctest: 2000-01-01 00:00 UTC
		err := s.Submit(
			coordinator.Task{ID: "hourly", Cron: "30 * * * *", Times: 24, Run: hourly.run},
			coordinator.Task{ID: "daily", Cron: "CRON_TZ=Asia/Tokyo 0 9 * * *", Times: 2, Run: daily.run},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		got := hourly.times()
		if len(got) != 24 {
			t.Fatalf("hourly ran %d times; want 24", len(got))
		}
		for i, at := range got {
			if want := t0.Add(time.Duration(i)*time.Hour + 30*time.Minute); !at.Equal(want) {
				t.Fatalf("hourly run %d at %v; want %v", i+1, at, want)
			}
		}
		// 09:00 in Tokyo is 00:00 UTC: submitted at that very instant, the
		// first start strictly after submission is a day later.
		if got := daily.times(); len(got) != 2 || !got[0].Equal(t0.Add(24*time.Hour)) || !got[1].Equal(t0.Add(48*time.Hour)) {
			t.Fatalf("daily ran at %v; want %v and a day later", got, t0.Add(24*time.Hour))
		}
		if info, _ := s.Info("hourly"); info.Status != coordinator.Succeeded || info.Runs != 24 {
			t.Fatalf("Info(hourly) = %+v; want succeeded after 24 runs", info)
		}
	})
}

// Daylight saving time is literal: in New York, 02:30 does not happen on
// the spring-forward day, and 01:30 happens twice on the fall-back day.
func TestCronAcrossDST(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		spec string
		from time.Time // the day before the change, noon
		want []string  // local start times over three days
	}{
		{"spring forward", "CRON_TZ=America/New_York 30 2 * * *", time.Date(2000, 4, 1, 12, 0, 0, 0, ny),
			[]string{"04-03 02:30 EDT", "04-04 02:30 EDT"}}, // none on 04-02
		{"fall back", "CRON_TZ=America/New_York 30 1 * * *", time.Date(2000, 10, 28, 12, 0, 0, 0, ny),
			[]string{"10-29 01:30 EDT", "10-29 01:30 EST", "10-30 01:30 EST", "10-31 01:30 EST"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				time.Sleep(time.Until(tc.from)) // fake time: to the day before the change
				s := newScheduler(t)
				st := &starts{}
				if err := s.Submit(coordinator.Task{ID: "nightly", Cron: tc.spec, Run: st.run}); err != nil {
					t.Fatalf("Submit = %v", err)
				}
				time.Sleep(3*24*time.Hour + time.Hour)
				synctest.Wait()
				var got []string
				for _, at := range st.times() {
					got = append(got, at.In(ny).Format("01-02 15:04 MST"))
				}
				t.Logf("%s: %v", tc.name, got)
				if !slices.Equal(got, tc.want) {
					t.Fatalf("starts %v; want %v", got, tc.want)
				}
				s.Cancel("nightly")
			})
		})
	}
}

// Times 0 means no end: the series runs until Cancel, which ends it
// Cancelled; Wait then returns.
func TestEndlessSeriesRunsUntilCancel(t *testing.T) {
	for _, tc := range []coordinator.Task{
		{Every: time.Minute},
		{Cron: "* * * * *"},
		{Schedule: everyHour{}},
	} {
		t.Run(fmt.Sprintf("%v %q %T", tc.Every, tc.Cron, tc.Schedule), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScheduler(t)
				st := &starts{}
				tc.ID, tc.Run = "endless", st.run
				if err := s.Submit(tc); err != nil {
					t.Fatalf("Submit = %v", err)
				}
				time.Sleep(1000 * time.Hour)
				synctest.Wait()
				if n := len(st.times()); n < 1000 {
					t.Fatalf("%d runs in 1,000 hours; want at least 1,000", n)
				}
				if !s.Cancel("endless") {
					t.Fatalf("Cancel = false")
				}
				settle(t, s)
				if info, _ := s.Info("endless"); info.Status != coordinator.Cancelled {
					t.Fatalf("Info = %+v; want cancelled", info)
				}
			})
		})
	}
}

// Each missed-run policy, for a run that overruns three starts, on Every,
// Cron and Schedule: the policy decides what happens to the starts missed,
// and a run never starts before its start nor twice for one.
func TestMissedRunPolicies(t *testing.T) {
	m := time.Minute
	type want struct {
		policy coordinator.Missed
		at     []time.Duration // starts, from submission
	}
	// The first run takes 3.5 minutes; the others are instant; six runs.
	wants := []want{
		{coordinator.RunEachMissed, []time.Duration{0, 3*m + 30*time.Second, 3*m + 30*time.Second, 3*m + 30*time.Second, 4 * m, 5 * m}},
		{coordinator.RunOnceForMissed, []time.Duration{0, 3*m + 30*time.Second, 4 * m, 5 * m, 6 * m, 7 * m}},
		{coordinator.SkipMissed, []time.Duration{0, 4 * m, 5 * m, 6 * m, 7 * m, 8 * m}},
	}
	kinds := map[string]coordinator.Task{
		"every":    {Every: m},
		"cron":     {Cron: "* * * * *"},
		"schedule": {Schedule: everyMinute{}},
	}
	for kind, base := range kinds {
		for _, w := range wants {
			t.Run(fmt.Sprintf("%s/%v", kind, w.policy), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					s := newScheduler(t)
					st := &starts{took: func(n int) time.Duration {
						if n == 1 {
							return 3*m + 30*time.Second
						}
						return 0
					}}
					task := base
					task.ID, task.Run, task.Times, task.Missed = "series", st.run, 6, w.policy
					// Every starts at submission; Cron and Schedule at their
					// first start after it: submitted a second before a
					// minute, all three start on that minute.
					start := time.Now().Add(time.Minute)
					wait := time.Minute
					if task.Every == 0 {
						wait -= time.Second
					}
					time.Sleep(wait)
					if err := s.Submit(task); err != nil {
						t.Fatalf("Submit = %v", err)
					}
					settle(t, s)
					var got []time.Duration
					for _, at := range st.times() {
						got = append(got, at.Sub(start))
					}
					if !slices.Equal(got, w.at) {
						t.Fatalf("starts %v; want %v", got, w.at)
					}
				})
			})
		}
	}
}

// The defaults: Every catches up every missed start; Cron runs once for
// them all.
func TestMissedDefaults(t *testing.T) {
	for _, tc := range []struct {
		task coordinator.Task
		want int // runs started by 3.5 minutes
	}{
		{coordinator.Task{Every: time.Minute}, 4},
		{coordinator.Task{Cron: "* * * * *"}, 2},
	} {
		synctest.Test(t, func(t *testing.T) {
			s := newScheduler(t)
			st := &starts{took: func(n int) time.Duration {
				if n == 1 {
					return 3*time.Minute + 30*time.Second
				}
				return 0
			}}
			tc.task.ID, tc.task.Run, tc.task.Times = "series", st.run, 10
			if tc.task.Cron != "" {
				time.Sleep(59 * time.Second) // its first start is then the next minute, a second away
			}
			if err := s.Submit(tc.task); err != nil {
				t.Fatalf("Submit = %v", err)
			}
			if tc.task.Cron != "" {
				time.Sleep(time.Second)
			}
			time.Sleep(3*time.Minute + 30*time.Second)
			synctest.Wait()
			if n := len(st.times()); n != tc.want {
				t.Errorf("%v %q: %d runs by 3.5 minutes; want %d", tc.task.Every, tc.task.Cron, n, tc.want)
			}
			s.Cancel("series")
		})
	}
}

type everyMinute struct{}

func (everyMinute) Next(t time.Time) time.Time { return t.Truncate(time.Minute).Add(time.Minute) }

// A Schedule that panics, or calls runtime.Goexit, ends its series; the
// scheduler goes on (a Goexit used to end the coordinator's goroutine).
type panicky struct {
	after int
	exit  bool // runtime.Goexit rather than panic
}

func (p *panicky) Next(t time.Time) time.Time {
	if p.after--; p.after < 0 {
		if p.exit {
			runtime.Goexit()
		}
		panic("broken schedule")
	}
	return t.Add(time.Second)
}

func TestPanickingScheduleEndsTheSeries(t *testing.T) {
	for _, exit := range []bool{false, true} {
		t.Run(fmt.Sprint("exit=", exit), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScheduler(t)
				st := &starts{}
				// Next is called once at Submit (to check there is a start),
				// once for the first run, then once per run.
				if err := s.Submit(coordinator.Task{ID: "p", Schedule: &panicky{after: 4, exit: exit}, Run: st.run}); err != nil {
					t.Fatalf("Submit = %v", err)
				}
				settle(t, s)
				if info, _ := s.Info("p"); info.Status != coordinator.Succeeded || len(st.times()) != 3 {
					t.Fatalf("Info = %+v after %d runs; want succeeded after 3", info, len(st.times()))
				}
				if err := s.Submit(coordinator.Task{ID: "after", Run: ok}); err != nil {
					t.Fatalf("Submit after = %v", err)
				}
				settle(t, s)
			})
		})
	}
}

// stalling advances a second at a time, then returns its argument: a
// start that is not after the previous one.
type stalling struct{ after int }

func (p *stalling) Next(t time.Time) time.Time {
	if p.after--; p.after < 0 {
		return t
	}
	return t.Add(time.Second)
}

// A Schedule that stops advancing ends the series: no start comes twice.
func TestStallingScheduleEndsTheSeries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		st := &starts{}
		if err := s.Submit(coordinator.Task{ID: "p", Schedule: &stalling{after: 4}, Times: 10, Run: st.run}); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		times := st.times()
		if info, _ := s.Info("p"); info.Status != coordinator.Succeeded || len(times) != 3 {
			t.Fatalf("Info = %+v after %d runs; want succeeded after 3", info, len(times))
		}
		for i := 1; i < len(times); i++ {
			if !times[i].After(times[i-1]) {
				t.Fatalf("runs at %v; want each after the previous", times)
			}
		}
		err := s.Submit(coordinator.Task{ID: "q", Schedule: &stalling{}, Run: ok})
		if !errors.Is(err, coordinator.ErrInvalidTask) {
			t.Fatalf("Submit(schedule with no start) = %v; want ErrInvalidTask", err)
		}
	})
}

// A nil *Graph is a mistake, not an empty graph: ErrNilGraph. An empty
// Graph adds nothing.
func TestSubmitNilGraph(t *testing.T) {
	s := newScheduler(t)
	if err := s.SubmitGraph(context.Background(), nil); !errors.Is(err, coordinator.ErrNilGraph) {
		t.Fatalf("SubmitGraph(nil) = %v; want ErrNilGraph", err)
	}
	if err := s.SubmitGraph(context.Background(), &coordinator.Graph{}); err != nil {
		t.Fatalf("SubmitGraph(empty) = %v; want nil", err)
	}
}

// Every series runs at its starts from the moment it may start (its
// origin, submission plus Delay): Every at the origin and every Every
// after it; Cron and Schedule at the starts their Next gives strictly
// after the origin, as robfig/cron's Next does, so one submitted exactly
// on one of its slots waits for the next (testing/synctest starts on the
// hour, where tests meet this first).
func TestSeriesFirstStart(t *testing.T) {
	m := time.Minute
	for _, tc := range []struct {
		name  string
		task  coordinator.Task
		early time.Duration // submitted this long before a minute
		want  time.Duration // first start, from that minute
	}{
		{"every on the minute", coordinator.Task{Every: m}, 0, 0},
		{"cron on its slot", coordinator.Task{Cron: "* * * * *"}, 0, m},
		{"schedule on its slot", coordinator.Task{Schedule: everyMinute{}}, 0, m},
		{"cron just before", coordinator.Task{Cron: "* * * * *"}, time.Nanosecond, 0},
		{"schedule just before", coordinator.Task{Schedule: everyMinute{}}, time.Nanosecond, 0},
		{"cron with a delay onto its slot", coordinator.Task{Cron: "* * * * *", Delay: 30 * time.Second}, 30 * time.Second, m},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScheduler(t)
				st := &starts{}
				minute := time.Now().Add(m)
				time.Sleep(m - tc.early)
				task := tc.task
				task.ID, task.Run, task.Times = "series", st.run, 1
				if err := s.Submit(task); err != nil {
					t.Fatal(err)
				}
				settle(t, s)
				if got := st.times(); len(got) != 1 || got[0].Sub(minute) != tc.want {
					t.Fatalf("started at %v; want %v after the minute", got, tc.want)
				}
			})
		})
	}
}

// One function decides what is missed, whatever made a start late: a
// start is missed when it cannot begin within a second of its time (or
// half the time to the next start, if that is shorter). Here a series
// every minute ran at its first start and then could not start again
// until 11.5 minutes later, because the coordinator was stalled (a
// Schedule's Next that takes minutes), because its pool's one worker was
// busy, or because the process was down (a durable scheduler crashed and
// restored then); in every case, for Every, Cron and Schedule alike, the
// policy decides the same. SkipMissed used to run the second start 10.5
// minutes late after a stall, RunOnceForMissed to run twice, where the
// restart path treated that start as missed.
func TestMissedStartsAreDecidedAlike(t *testing.T) {
	m := time.Minute
	late := 11*m + 30*time.Second
	wants := map[coordinator.Missed][]time.Duration{
		coordinator.RunEachMissed:    {0, late, late},   // catches up, one after another
		coordinator.RunOnceForMissed: {0, late, 12 * m}, // one run for the starts up to now, then the next
		coordinator.SkipMissed:       {0, 12 * m, 13 * m},
	}
	kinds := map[string]coordinator.Task{"every": {Every: m}, "cron": {Cron: "* * * * *"}, "schedule": {Schedule: everyMinute{}}}
	for _, how := range []string{"stalled", "busy pool", "queued in a lane", "restarted"} {
		for kind, base := range kinds {
			for policy, want := range wants {
				if how == "restarted" && kind == "schedule" {
					continue // a Schedule is a Go value: not durable
				}
				t.Run(fmt.Sprintf("%s/%s/%v", how, kind, policy), func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						checkMissed(t, how, base, policy, late, want)
					})
				})
			}
		}
	}
}

func checkMissed(t *testing.T, how string, series coordinator.Task, policy coordinator.Missed, late time.Duration, want []time.Duration) {
	// Every starts at submission, Cron and Schedule on the next minute:
	// submitted a second before it, both start then.
	early := time.Duration(0)
	if series.Every == 0 {
		early = time.Second
		time.Sleep(time.Minute - early)
	}
	first := time.Now().Add(early)
	st := &starts{}
	series.ID, series.Times, series.Missed, series.Run = "series", 3, policy, st.run
	hold := 30 * time.Second // after the first start, what makes the next one late begins
	switch how {
	case "stalled":
		s := newScheduler(t)
		if err := s.Submit(series); err != nil {
			t.Fatal(err)
		}
		time.Sleep(early + hold)
		// Its first start is planned on the coordinator, which waits for
		// Next.
		stall := coordinator.Task{ID: "stall", Times: 1, Run: ok, Schedule: &sleepyNext{d: late - hold}}
		if err := s.Submit(stall); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
	case "busy pool":
		s := newScheduler(t, coordinator.WithWorkers(1))
		busy := coordinator.Task{ID: "busy", Delay: early + hold, Run: func(context.Context) error {
			time.Sleep(late - hold)
			return nil
		}}
		if err := s.Submit(series, busy); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
	case "queued in a lane":
		// A long task becomes ready with the second start, is better, and
		// is handed out first: the start, on time when handed out behind
		// it, waits in the lane for 10.5 minutes. Only the worker knows
		// when it could take it (it used to run as if on time).
		s := newScheduler(t, coordinator.WithWorkers(1))
		long := coordinator.Task{ID: "long", Delay: early + time.Minute, Priority: -1, Run: func(context.Context) error {
			time.Sleep(late - time.Minute)
			return nil
		}}
		if err := s.Submit(series, long); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
	case "restarted":
		mem := storetest.NewMemory()
		step := coordinator.WithFunc("step", func(ctx context.Context, _ []byte) error { return st.run(ctx) })
		s1 := restored(t, mem, step)
		series.Run, series.Func = nil, "step"
		if err := s1.Submit(series); err != nil {
			t.Fatal(err)
		}
		time.Sleep(early + hold)
		crashed := mem.Crash()
		if err := s1.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(late - hold)
		settle(t, restored(t, crashed, step))
	}
	var got []time.Duration
	for _, at := range st.times() {
		got = append(got, at.Sub(first))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("starts %v; want %v", got, want)
	}
}

// sleepyNext is a Schedule whose second Next call (the first is Submit's
// check) takes d, holding the coordinator, which waits for it: a stalled
// coordinator.
type sleepyNext struct {
	d     time.Duration
	calls int
}

func (s *sleepyNext) Next(t time.Time) time.Time {
	if s.calls++; s.calls == 2 {
		time.Sleep(s.d)
	}
	return t.Add(time.Hour)
}

// A retry of a series' run is not a start: its backoff makes it late by
// design, and no missed-run policy drops it.
func TestRetryOfASeriesRunIsNotMissed(t *testing.T) {
	for _, policy := range []coordinator.Missed{coordinator.SkipMissed, coordinator.RunOnceForMissed} {
		t.Run(policy.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScheduler(t)
				start := time.Now()
				var at []time.Duration
				calls := 0
				err := s.Submit(coordinator.Task{ID: "series", Every: time.Minute, Times: 2, Missed: policy,
					Retry: coordinator.RetryPolicy{MaxAttempts: 2, BaseDelay: 10 * time.Second},
					Run: func(context.Context) error {
						at = append(at, time.Since(start))
						if calls++; calls == 1 {
							return errors.New("once")
						}
						return nil
					}})
				if err != nil {
					t.Fatal(err)
				}
				settle(t, s)
				if want := []time.Duration{0, 10 * time.Second, time.Minute}; !slices.Equal(at, want) {
					t.Fatalf("calls at %v; want %v (the retry runs after its backoff)", at, want)
				}
			})
		})
	}
}

// onceAt is a Schedule with one start.
type onceAt struct{ at time.Time }

func (o onceAt) Next(t time.Time) time.Time {
	if t.Before(o.at) {
		return o.at
	}
	return time.Time{}
}

// A series whose schedule has no start left once it may start (its
// dependency ended after the schedule's only start) cannot run: it is
// Skipped, as a task whose own rule is not met, and what waits on it
// follows. It used to wait in the delayed set for ever, and Wait with it.
func TestSeriesWithNoStartLeftIsSkipped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		err := s.Submit(
			coordinator.Task{ID: "dep", Run: func(context.Context) error { time.Sleep(2 * time.Hour); return nil }},
			coordinator.Task{ID: "series", Deps: []string{"dep"}, Schedule: onceAt{time.Now().Add(time.Hour)},
				Run: func(context.Context) error { t.Error("series ran"); return nil }},
			coordinator.Task{ID: "after", Deps: []string{"series"}, Run: ok},
		)
		if err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		if ti, _ := s.Info("series"); ti.Status != coordinator.Skipped || ti.Cause != "" {
			t.Errorf("series is %v (cause %q); want skipped by itself", ti.Status, ti.Cause)
		}
		if ti, _ := s.Info("after"); ti.Status != coordinator.Skipped || ti.Cause != "series" {
			t.Errorf("after is %v (cause %q); want skipped because of series", ti.Status, ti.Cause)
		}
	})
}

// A cron @every series keeps to its own grid of starts after missed ones,
// as Every does: SkipMissed waits for the next start of the grid, not for
// one a period after the moment it noticed.
func TestAtEveryKeepsItsGridAfterMissedStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(1))
		st := &starts{}
		start := time.Now()
		err := s.Submit(
			coordinator.Task{ID: "series", Cron: "@every 10s", Times: 3, Missed: coordinator.SkipMissed, Run: st.run},
			coordinator.Task{ID: "busy", Delay: 15 * time.Second, Run: func(context.Context) error { // holds the worker 15s to 33s
				time.Sleep(18 * time.Second)
				return nil
			}},
		)
		if err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		var got []time.Duration
		for _, at := range st.times() {
			got = append(got, at.Sub(start))
		}
		// Starts at 10s, 20s (missed: busy), 30s (missed: 3s late), 40s, 50s.
		if want := []time.Duration{10 * time.Second, 40 * time.Second, 50 * time.Second}; !slices.Equal(got, want) {
			t.Fatalf("starts %v; want %v", got, want)
		}
	})
}
