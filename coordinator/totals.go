package coordinator

import (
	"context"
)

// Totals counts what happened in one pool since New: the tasks that
// reached each final status, and the failed attempts that were retried.
// Unlike Counts, totals only grow: retention forgets tasks, not totals.
// They are what a monitoring counter wants (otelbaton exports them).
type Totals struct {
	Succeeded, Failed, Cancelled, Skipped uint64 // tasks that reached the status
	Retries                               uint64 // failed attempts given a retry (counted when it is scheduled: a cancel during the wait does not take it back)
}

func (t *Totals) count(st Status) {
	switch st {
	case Succeeded:
		t.Succeeded++
	case Failed:
		t.Failed++
	case Cancelled:
		t.Cancelled++
	case Skipped:
		t.Skipped++
	}
}

// Of returns the total of one final status (0 for any other status).
func (t Totals) Of(st Status) uint64 {
	switch st {
	case Succeeded:
		return t.Succeeded
	case Failed:
		return t.Failed
	case Cancelled:
		return t.Cancelled
	case Skipped:
		return t.Skipped
	}
	return 0
}

// Totals returns each pool's Totals, keyed by pool name ("" is the default
// pool); every pool is listed. Counting costs the scheduler an addition
// per final task. Totals blocks for a round trip to the coordinator and
// costs a map of the pools, whatever the number of tasks: a collector may
// call it as often as it likes. Safe for concurrent use; after Shutdown
// it answers from the final state.
func (s *Scheduler) Totals() map[string]Totals {
	f := func(st *state) map[string]Totals {
		m := make(map[string]Totals, len(st.pools))
		for i := range st.pools {
			m[st.pools[i].name] = st.pools[i].totals
		}
		return m
	}
	r, _ := query(context.Background(), s, func(reply chan<- map[string]Totals) request {
		return totalsReq{f: f, reply: reply}
	}, f)
	return r
}
