package coordinator

import (
	"errors"
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
	r.s.rememberEnd(ls, 0, a, OutcomeSucceeded, nil, t0.Add(5*time.Millisecond))
	h := r.s.history(a, t0)
	if len(h.Attempts) != 1 {
		t.Fatalf("History(a) = %+v; want one attempt", h)
	}
	if at := h.Attempts[0]; at.Started.After(at.Ended) || at.Started.Before(at.HandedOut) {
		t.Errorf("attempt handed out %v, started %v, ended %v; want handed out <= started <= ended", at.HandedOut, at.Started, at.Ended)
	}
}
