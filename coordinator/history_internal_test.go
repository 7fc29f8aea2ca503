package coordinator

import "testing"

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
