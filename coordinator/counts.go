package coordinator

import (
	"context"
	"maps"
	"time"
)

// Counts is how many tasks are in each status.
type Counts struct {
	Pending, Ready, Running, Succeeded, Failed, Cancelled, Skipped int

	// Paused: in CountsByPool, the pool is paused (Pause); in Counts,
	// every pool is.
	Paused bool
}

// Total is the number of tasks counted.
func (c Counts) Total() int {
	return c.Pending + c.Ready + c.Running + c.Succeeded + c.Failed + c.Cancelled + c.Skipped
}

// Of returns the count of one status.
func (c Counts) Of(st Status) int {
	switch st {
	case Pending:
		return c.Pending
	case Ready:
		return c.Ready
	case Running:
		return c.Running
	case Succeeded:
		return c.Succeeded
	case Failed:
		return c.Failed
	case Cancelled:
		return c.Cancelled
	case Skipped:
		return c.Skipped
	}
	return 0
}

func (c *Counts) add(st Status) {
	switch st {
	case Pending:
		c.Pending++
	case Ready:
		c.Ready++
	case Running:
		c.Running++
	case Succeeded:
		c.Succeeded++
	case Failed:
		c.Failed++
	case Cancelled:
		c.Cancelled++
	case Skipped:
		c.Skipped++
	}
}

// Counts returns how many tasks the scheduler holds in each status, over
// every pool (tasks forgotten by retention are not counted), as Info
// would report them. It blocks for a round trip to the coordinator, which
// looks at every task: 1.3ms for a million (BenchmarkCounts), so it suits a
// dashboard polled every second. Safe for concurrent use; after Shutdown
// it answers from the final state.
func (s *Scheduler) Counts() Counts {
	return s.census(func(st *state, now time.Time) census { return st.census(false, noStatus, 0, now) }).all
}

// CountsByPool is Counts per pool, keyed by pool name ("" is the default
// pool); every pool is listed, with zero counts if it holds no task.
func (s *Scheduler) CountsByPool() map[string]Counts {
	return s.census(func(st *state, now time.Time) census { return st.census(true, noStatus, 0, now) }).pools
}

// PoolSizes returns the number of workers of each pool, keyed by pool
// name ("" is the default pool), as WithWorkers and WithPool set them;
// every pool is listed. The sizes never change, so PoolSizes does not
// block and asks the coordinator nothing. Safe for concurrent use; the
// same after Shutdown. The map is the caller's.
func (s *Scheduler) PoolSizes() map[string]int {
	return maps.Clone(s.sizes)
}

// Tasks returns the IDs of the tasks in status st, in no particular order,
// at most limit of them (limit <= 0: all). It costs what Counts costs,
// plus the IDs returned. Safe for concurrent use; after Shutdown it
// answers from the final state.
func (s *Scheduler) Tasks(st Status, limit int) []string {
	return s.census(func(state *state, now time.Time) census { return state.census(false, st, limit, now) }).ids
}

type census struct {
	all   Counts
	pools map[string]Counts
	ids   []string
}

func (s *Scheduler) census(f func(*state, time.Time) census) census {
	r, _ := query(context.Background(), s, func(reply chan<- census) request {
		return censusReq{f: f, reply: reply}
	}, func(st *state) census { return f(st, s.clk.Now()) })
	return r
}

// census counts the tasks by status (and by pool), and lists the IDs of
// those in status want (noStatus: none), at most limit (<= 0: all).
func (s *state) census(byPool bool, want Status, limit int, now time.Time) census {
	s.freeze(now)
	defer s.thaw()
	var c census
	var pools []Counts
	if byPool {
		pools = make([]Counts, len(s.pools))
	}
	for t := range s.hot {
		h := &s.hot[t]
		st := h.status
		if hidden(st) {
			continue
		}
		if st >= dispatched {
			st = s.status(int32(t))
		}
		c.all.add(st)
		if byPool {
			pools[h.pool].add(st)
		}
		if st == want && (limit <= 0 || len(c.ids) < limit) {
			c.ids = append(c.ids, s.key(int32(t)))
		}
	}
	if byPool {
		c.pools = make(map[string]Counts, len(s.pools))
		for i, p := range s.pools {
			pools[i].Paused = p.paused
			c.pools[p.name] = pools[i]
		}
	}
	c.all.Paused = true
	for i := range s.pools {
		c.all.Paused = c.all.Paused && s.pools[i].paused
	}
	return c
}

// noStatus asks census for no IDs.
const noStatus Status = 255
