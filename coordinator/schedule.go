package coordinator

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/batonhq/baton/internal/dispatch"
	"github.com/robfig/cron/v3"
)

// Schedule gives the start times of a recurring task: Next returns the
// first start strictly after t, or the zero time when there is none. A
// robfig/cron/v3 cron.Schedule fits. The coordinator waits for Next: it
// must be quick and must not call the scheduler; a Next that panics, calls
// runtime.Goexit, or returns a time not after t, ends the series as if it
// had no more starts.
type Schedule interface {
	Next(t time.Time) time.Time
}

// Missed says what a recurring task does with the starts it missed: those
// whose time had passed when the previous run ended, because that run
// overran or the process was suspended. Runs of one task never overlap.
type Missed int

const (
	// MissedDefault is RunEachMissed for Every and RunOnceForMissed for
	// Cron and Schedule.
	MissedDefault Missed = iota
	// RunEachMissed runs every missed start, one after another at once,
	// then goes on with the schedule: a fixed rate that catches up.
	RunEachMissed
	// RunOnceForMissed runs once at once for all the missed starts, then
	// goes on with the first start after that run began.
	RunOnceForMissed
	// SkipMissed drops the missed starts and waits for the next one.
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
			sched, err = nil, fmt.Errorf("cron %q: %v", spec, p)
		}
	}()
	fields := strings.Fields(spec)
	if len(fields) > 0 && (strings.HasPrefix(fields[0], "CRON_TZ=") || strings.HasPrefix(fields[0], "TZ=")) {
		fields = fields[1:]
	}
	switch {
	case len(fields) == 0:
		return nil, fmt.Errorf("cron %q: no schedule", spec)
	case fields[0] == "@every":
		if d, err := time.ParseDuration(strings.Join(fields[1:], "")); err == nil && d <= 0 {
			return nil, fmt.Errorf("cron %q: @every needs a positive duration", spec)
		}
	}
	s, err := cronParser.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("cron %q: %w", spec, err)
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
	return dispatch.Contained(func() time.Time {
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

// after returns the start after t: t+Every, or the schedule's next.
func (x *extra) after(t time.Time) time.Time {
	if x.sched != nil {
		return x.sched.Next(t)
	}
	return addSat(t, x.every)
}

// first plans the first run of a recurring task that may start at start:
// then for Every, the schedule's first start at or after it otherwise.
func (x *extra) first(start time.Time) (time.Time, bool) {
	if x.sched == nil {
		x.planned = start
		return start, true
	}
	due := x.sched.Next(start.Add(-time.Nanosecond))
	x.planned = due
	return due, !due.IsZero()
}

// next plans the run after the one planned at x.planned, which ended at
// now, under the missed-run policy; false when the schedule has no more
// starts.
func (x *extra) next(now time.Time) (time.Time, bool) {
	slot := x.after(x.planned)
	if slot.IsZero() {
		return time.Time{}, false
	}
	if !slot.Before(now) || x.missed == RunEachMissed {
		x.planned = slot
		return slot, true
	}
	switch x.missed {
	case RunOnceForMissed:
		// One run now stands for every missed start: the next run is the
		// first start after the last of them.
		if x.sched == nil {
			k := now.Sub(slot) / x.every
			x.planned = addSat(slot, k*x.every)
		} else {
			x.planned = now
		}
		return now, true
	default: // SkipMissed
		if x.sched == nil {
			k := (now.Sub(slot) + x.every - 1) / x.every
			slot = addSat(slot, k*x.every)
		} else if slot = x.sched.Next(now.Add(-time.Nanosecond)); slot.IsZero() {
			return time.Time{}, false
		}
		x.planned = slot
		return slot, true
	}
}
