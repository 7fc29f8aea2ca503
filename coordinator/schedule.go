package coordinator

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/batonhq/baton/internal/lane"
	"github.com/robfig/cron/v3"
)

// Schedule gives the start times of a recurring task: Next returns the
// first start strictly after t, or the zero time when there is none. A
// robfig/cron/v3 cron.Schedule fits. Next must be a pure function of t
// (the same t, the same start), as cron's are: the scheduler calls it more
// than once for one start (Submit checks there is a first start; the
// coordinator plans each start, and asks for the start after a late one
// to tell whether it was missed). The coordinator waits for Next: it must
// be quick and must not call the scheduler; a Next that panics, calls
// runtime.Goexit, or returns a time not after t, ends the series as if it
// had no more starts.
type Schedule interface {
	Next(t time.Time) time.Time
}

// Missed says what a recurring task does with the starts it missed. A
// start is missed when it cannot begin within a second of its time (or
// within half the time to the series' next start, if that is shorter):
// because the previous run overran it, because the process was suspended
// or stalled or not running at all (a durable scheduler restored later),
// or because its pool had no worker free. One rule decides it, when a
// worker could take the start, whatever made it late. Runs of one task
// never overlap.
type Missed int

const (
	// MissedDefault is RunEachMissed for Every and RunOnceForMissed for
	// Cron and Schedule.
	MissedDefault Missed = iota
	// RunEachMissed runs every missed start, one after another at once,
	// then goes on with the schedule: a fixed rate that catches up.
	RunEachMissed
	// RunOnceForMissed runs once at once for all the missed starts (and
	// for the last one, if it is merely late), then goes on with the first
	// start after that run began.
	RunOnceForMissed
	// SkipMissed drops the missed starts and waits for the next one; a
	// last start that is late but not missed still runs.
	SkipMissed
)

// String returns the policy's name, as written in Go.
func (m Missed) String() string {
	switch m {
	case MissedDefault:
		return "MissedDefault"
	case RunEachMissed:
		return "RunEachMissed"
	case RunOnceForMissed:
		return "RunOnceForMissed"
	case SkipMissed:
		return "SkipMissed"
	}
	return fmt.Sprintf("Missed(%d)", int(m))
}

// cronParser is robfig/cron's standard parser: five fields, descriptors
// such as @hourly and @every 5m, and a CRON_TZ= or TZ= prefix.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// parseCron parses a Cron expression. The parser panics on some inputs
// (a bad time zone prefix such as "TZ=0"), so it runs behind a recover; a
// spec that names no zone is in UTC.
func parseCron(spec string) (sched Schedule, err error) {
	defer func() {
		if p := recover(); p != nil {
			sched, err = nil, fmt.Errorf("cron %s: %v", quoteID(spec), p)
		}
	}()
	fields := strings.Fields(spec)
	if len(fields) > 0 && (strings.HasPrefix(fields[0], "CRON_TZ=") || strings.HasPrefix(fields[0], "TZ=")) {
		fields = fields[1:]
	}
	switch {
	case len(fields) == 0:
		return nil, fmt.Errorf("cron %s: no schedule", quoteID(spec))
	case fields[0] == "@every":
		if d, err := time.ParseDuration(strings.Join(fields[1:], "")); err == nil && d <= 0 {
			return nil, fmt.Errorf("cron %s: @every needs a positive duration", quoteID(spec))
		}
	}
	s, err := cronParser.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("cron %s: %w", quoteID(spec), err)
	}
	if ss, ok := s.(*cron.SpecSchedule); ok && !strings.HasPrefix(spec, "CRON_TZ=") && !strings.HasPrefix(spec, "TZ=") {
		ss.Location = time.UTC
	}
	return s, nil
}

// safeSchedule guards the coordinator against a user's Schedule that
// panics or calls runtime.Goexit: either ends the series, as a schedule
// with no more starts. Next runs Contained, since a Goexit would end the
// coordinator's goroutine (one goroutine per start of a series with a
// Schedule: Every and Cron do not pay for it).
type safeSchedule struct{ s Schedule }

func (g safeSchedule) Next(t time.Time) time.Time {
	return lane.Contained(func() time.Time {
		if n := g.s.Next(t); n.After(t) { // not strictly after t: no start may come twice
			return n
		}
		return time.Time{}
	})
}

// isNil reports whether s is nil or holds a nil pointer, map, func...
func isNil(s Schedule) bool {
	if s == nil {
		return true
	}
	v := reflect.ValueOf(s)
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Slice, reflect.Chan, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// recurring reports whether the task runs more than once.
func (x *extra) recurring() bool { return x.every > 0 || x.sched != nil }

// following returns the start after x.planned, asking the schedule once
// per planned start (a Schedule's Next may be slow; it must be pure).
func (x *extra) following() time.Time {
	if !x.followOK || !x.followOf.Equal(x.planned) {
		x.follow, x.followOf, x.followOK = x.after(x.planned), x.planned, true
	}
	return x.follow
}

// after returns the start after t: t+Every, or the schedule's next.
func (x *extra) after(t time.Time) time.Time {
	if x.sched != nil {
		return x.sched.Next(t)
	}
	return addSat(t, x.every)
}

// first plans the first run of a recurring task that may start at start
// (its origin): start itself for Every, whose fixed rate counts from its
// origin; for Cron and Schedule, the schedule's first start strictly
// after it, as robfig/cron computes one (a cron task submitted on one of
// its slots waits for the next).
func (x *extra) first(start time.Time) (time.Time, bool) {
	if x.sched == nil {
		x.planned = start
		return start, true
	}
	due := x.sched.Next(start)
	x.planned = due
	return due, !due.IsZero()
}

// next plans the run after the one planned at x.planned: its next start,
// which may have passed already (the run overran). Whether a start that
// has passed runs is decided when a worker could take it (catchUp), as for
// every start. False when the schedule has no more starts.
func (x *extra) next() (time.Time, bool) {
	slot := x.following()
	if slot.IsZero() {
		return time.Time{}, false
	}
	x.planned = slot
	return slot, true
}

// missedAfter bounds how late a start may begin and still be on time: a
// second, or half the time to the series' next start if that is shorter.
// A start later than that was missed: the previous run overran it, the
// process was suspended or not running, or its pool had no worker free.
const missedAfter = time.Second

// lateness is how late the start at slot may begin and still be on time
// (missedAfter).
func (x *extra) lateness(slot time.Time) time.Duration {
	tol := missedAfter
	next := x.following()
	if !slot.Equal(x.planned) {
		next = x.after(slot)
	}
	if !next.IsZero() {
		tol = min(tol, next.Sub(slot)/2)
	}
	return tol
}

// catchUp decides what becomes of the start planned at x.planned, which a
// worker could take at now: the one function that says what is missed,
// whatever made the start late (a run that overran, a process suspended
// or restarted, a busy pool). A start on time runs. A missed one, under
// the task's Missed policy: RunEachMissed runs it (the next missed one
// follows at once); RunOnceForMissed runs once now for every start up to
// now; SkipMissed drops every start up to now, except the last one if it
// is on time, and otherwise waits for the next one. It reports whether
// the start runs now, and if not when the series is next due (zero: the
// schedule has no more starts).
func (x *extra) catchUp(now time.Time) (run bool, wait time.Time) {
	p := x.planned
	if !now.After(p) || x.missed == RunEachMissed || now.Sub(p) <= x.lateness(p) {
		return true, time.Time{}
	}
	last, next, found := x.lastStart(now)
	switch {
	case x.missed == RunOnceForMissed:
		x.planned = last // this run stands for every start up to now
		return true, time.Time{}
	case found && now.Sub(last) <= x.lateness(last): // SkipMissed, the last start on time
		x.planned = last
		return true, time.Time{}
	}
	x.planned = next
	return false, next
}

// lastStart returns the last start of the series at or before now, from
// x.planned on, and the start after it (zero: none). For a Cron or a
// Schedule, whose starts are known one by one, it looks for the last start
// within missedAfter of now only (one further back is missed anyway), not
// by walking every start missed: if there is none, it returns now itself
// as the last, with found false (now's next start is the series' next).
func (x *extra) lastStart(now time.Time) (last, next time.Time, found bool) {
	p := x.planned
	every := x.every
	if cd, ok := x.sched.(cron.ConstantDelaySchedule); ok {
		every = cd.Delay // @every: its starts are a grid from the planned one, as Every's
	}
	if x.sched == nil || every > 0 {
		k := now.Sub(p) / every
		last = addSat(p, k*every)
		return last, addSat(last, every), true
	}
	last, found = p, true
	if from := now.Add(-missedAfter); from.After(p) {
		last, found = now, false
		if n := x.sched.Next(from.Add(-time.Nanosecond)); !n.IsZero() && !n.After(now) {
			last, found = n, true
		}
	}
	for {
		n := x.sched.Next(last)
		if n.IsZero() || n.After(now) {
			return last, n, found
		}
		last, found = n, true
	}
}
