package coordinator

import (
	"context"
	"errors"
	"math/bits"
	"slices"
	"sync"
	"time"

	"github.com/batonhq/baton/actor"
)

// A change feed lets a reader such as a dashboard keep a copy of every
// task's row off the coordinator, and answer its own queries (sorts,
// filters, deep pages) from it, so that no query copies every task on
// the coordinator. While a feed is open the coordinator sets a bit per
// task on each transition (emit, pushReady, a drop, a reused record); a
// read takes the marked tasks' rows, at most a chunk, and clears their
// bits. Tasks handed to a worker change status (Ready to Running) without
// the coordinator: a read looks at the lanes' items, at most the lanes'
// capacity, and reports those whose status is not the one last reported.
// With no feed open, the coordinator pays a nil check at those places.
//
// Rejected: a sweep of every task at a fixed pace (no marks at all). It
// costs the same whether anything changed or not, and a million tasks
// take seconds to sweep at a share of the coordinator a dashboard can
// afford: a page would lag that far behind.

// TaskRow is one task as a Feed reports it: the summary a table
// shows.
type TaskRow struct {
	// Slot is the task's place in the scheduler, stable while it is held:
	// a later row of the same Slot replaces an earlier one (WithRetention
	// reuses the places of the tasks it forgot, for other tasks).
	Slot int
	// Gone says that the task that held Slot was forgotten (retention);
	// the other fields are zero.
	Gone     bool
	ID       string
	Status   Status
	Pool     string // "" for the default pool
	Key      string // its flow-control key (Task.Key)
	Priority int
	When     Trigger
	Attempts int    // attempts made in the current (or last) run
	Runs     int    // runs finished successfully
	Reruns   int    // times Rerun re-opened it
	Cause    string // for Skipped: the upstream task to blame
	Parent   string // the task whose attempt spawned it
	Children int    // the tasks its attempts spawned
	Joining  bool   // its function returned and it waits for its children
	Err      error  // the last attempt's error, as TaskInfo.Err
}

// EndedAttempt is one attempt's end as a Feed reports it, from the
// attempt history (WithHistory), in the order the coordinator recorded
// the ends; or the ends of several first attempts that succeeded plainly
// (no error, worker name or log line) on one worker of Pool, at the same
// times: the history keeps one record for those (Tasks > 1, no ID).
type EndedAttempt struct {
	ID      string // the task; "" when Tasks > 1, or for a first success its task's history no longer keeps (perTask, retention)
	Tasks   int    // the attempts this entry stands for: 1 but for first successes that ended together
	Pool    string
	Attempt int
	Run     int
	Outcome Outcome
	Started time.Time // zero if unknown
	Ended   time.Time
	Err     error
}

// FeedPage is one read of a Feed.
type FeedPage struct {
	Rows  []TaskRow      // tasks that changed since the last read, at most the read's max; a task once however often it changed
	Ended []EndedAttempt // attempts whose end the history recorded since the last read, at most max, oldest first
	// More says that rows or ended attempts are left for the next read.
	More bool
	// Dropped counts the ended attempts the history forgot before this
	// feed read them: the ring overwrote them, a task's perTask bound cut
	// them, or retention forgot their task (Tasks of Ended and Dropped
	// add up to the attempts that ended).
	Dropped uint64
	At      time.Time // the scheduler's clock at the read
}

// Feed reads the tasks that changed since its last read, and the
// attempts that ended, in chunks: Scheduler.Feed opens one. Its first
// reads report every task the scheduler holds, and every attempt its
// history still keeps; later ones, what changed since. A task is
// reported once per read however often it changed: a reader that reads
// less often reads less. It is safe for concurrent use, but reads are
// served one at a time; Next says what a read costs. A reader keeps its
// own copy (the dashboard does): the feed is the coordinator's only side.
type Feed struct {
	s  *Scheduler
	mu sync.Mutex // serializes Next and Close: cs is read by one request at a time
	cs *changeSet // owned by the coordinator while registered; after Shutdown, by mu's holder
}

// Feed opens a change feed on the scheduler. From then on, every
// transition of a task marks it, until Close: a bit set for each, and a
// bit and a byte per task held. While no feed is open the coordinator
// pays a nil check at the transitions, nothing else. It blocks for a
// round trip to the coordinator. After Shutdown it returns a feed that
// reads the final state.
func (s *Scheduler) Feed() *Feed {
	f := &Feed{s: s, cs: &changeSet{}}
	select {
	case <-s.loopDone:
		return f
	default:
	}
	_, err := actor.Call(context.Background(), s.mailbox, func(reply chan<- struct{}) request {
		return feedReq{cs: f.cs, open: true, reply: reply}
	})
	_ = err // stopped: the feed reads the final state
	return f
}

// ErrFeedClosed is returned by Feed.Next after Close.
var ErrFeedClosed = errors.New("coordinator: change feed closed")

// Next returns the rows of at most max tasks that changed since the last
// read, and at most max attempts that ended since, and whether more wait.
// It holds the coordinator for what it returns, plus a look at the
// lanes (at most their capacity) and a scan of a bit per task held
// (bench BenchmarkFeed, a million tasks held, on a shared machine: a
// read of 1,000 rows 0.17–0.37ms, a read when nothing changed 0.04–0.08ms).
// max <= 0 means 1,000. It blocks for a round trip to the coordinator,
// returns ctx.Err() if ctx ends first, ErrFeedClosed after Close, and
// after Shutdown reads the final state.
func (f *Feed) Next(ctx context.Context, max int) (FeedPage, error) {
	if max <= 0 {
		max = 1000
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cs.closed {
		return FeedPage{}, ErrFeedClosed
	}
	if err := ctx.Err(); err != nil {
		return FeedPage{}, err // before the final state too: a Feed's read after Shutdown with an ended ctx reads nothing
	}
	return query(ctx, f.s, func(reply chan<- FeedPage) request {
		return changesReq{cs: f.cs, max: max, reply: reply}
	}, func(st *state) FeedPage { return st.changes(f.cs, max, f.s.clk.Now()) })
}

// Close ends the feed: the coordinator stops marking for it. It blocks
// for a round trip to the coordinator (none after Shutdown); idempotent,
// safe for concurrent use.
func (f *Feed) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cs.closed {
		return
	}
	f.cs.closed = true
	select {
	case <-f.s.loopDone:
		return
	default:
	}
	_, _ = actor.Call(context.Background(), f.s.mailbox, func(reply chan<- struct{}) request {
		return feedReq{cs: f.cs, reply: reply}
	})
}

type feedReq struct {
	cs    *changeSet
	open  bool
	reply chan<- struct{}
}

func (r feedReq) apply(l *loop, now time.Time) {
	st := l.st
	if r.open {
		st.chg = append(st.chg, r.cs)
	} else {
		st.chg = slices.DeleteFunc(st.chg, func(c *changeSet) bool { return c == r.cs })
		if len(st.chg) == 0 {
			st.chg = nil // the marks' nil check
		}
	}
	r.reply <- struct{}{}
}

type changesReq struct {
	cs    *changeSet
	max   int
	reply chan<- FeedPage
}

func (r changesReq) apply(l *loop, now time.Time) {
	r.reply <- l.st.changes(r.cs, r.max, now)
}

// changeSet is one feed's marks. Owned by the coordinator goroutine.
type changeSet struct {
	marks  bitset   // tasks changed since they were last reported
	shown  []Status // per task: 1 + the status last reported (0: never, or gone)
	hi     int      // tasks below hi were marked when they joined; from hi on, all are new
	pos    int      // where the next read's scan of the marks starts (a word index)
	serial uint64   // the next history record to report (0: the oldest kept)
	before uint64   // the attempts recorded before that record (state.recordedBefore)
	closed bool     // Close was called (guarded by the feed's mu)
}

// mark marks t changed for every open feed.
func (s *state) markChanged(t int32) {
	for _, cs := range s.chg {
		if int(t) < cs.hi {
			cs.marks.set(t)
		}
	}
}

// changes reads the marked tasks of cs, at most max, and the history's
// ends since cs's last read, at most max.
func (s *state) changes(cs *changeSet, max int, now time.Time) FeedPage {
	s.freeze(now)
	defer s.thaw()
	n := len(s.hot)
	if cs.hi < n {
		// Tasks that joined since the last read: all new.
		words := (n + 63) / 64
		if len(cs.marks) < words {
			cs.marks = append(cs.marks, make(bitset, words-len(cs.marks))...)
		}
		for t := cs.hi; t < n; t++ {
			cs.marks.set(int32(t))
		}
		cs.shown = append(cs.shown, make([]Status, n-len(cs.shown))...)
		cs.hi = n
	}
	// Items handed to workers start without the coordinator: report those
	// whose status is not the one last reported.
	for i := range s.lanes {
		ls := &s.lanes[i]
		for seq := ls.applied; seq != ls.n; seq++ {
			t := ls.l.Task(seq)
			if t < 0 || int(t) >= n || s.hot[t].status != dispatched {
				continue
			}
			if cs.shown[t] != s.status(t)+1 {
				cs.marks.set(t)
			}
		}
	}
	out := FeedPage{At: now, Rows: make([]TaskRow, 0, min(max, 64))}
	words, from := len(cs.marks), cs.pos
	for k := 0; k < words && len(out.Rows) < max; k++ {
		w := (from + k) % words
		for cs.marks[w] != 0 && len(out.Rows) < max {
			b := bits.TrailingZeros64(cs.marks[w])
			cs.marks[w] &^= 1 << b
			t := int32(w*64 + b)
			switch st := s.hot[t].status; st {
			case reserved:
				// Not in the graph until its spawner's attempt ends
				// (EventSpawned marks it then).
			case dropped:
				if cs.shown[t] != 0 {
					cs.shown[t] = 0
					out.Rows = append(out.Rows, TaskRow{Slot: int(t), Gone: true})
				}
			default:
				ti, _ := s.infoOf(t)
				cs.shown[t] = ti.Status + 1
				out.Rows = append(out.Rows, TaskRow{Slot: int(t), ID: ti.ID, Status: ti.Status, Pool: ti.Pool, Key: ti.Key,
					Priority: ti.Priority, When: ti.When, Attempts: ti.Attempts, Runs: ti.Runs, Reruns: ti.Reruns,
					Cause: ti.Cause, Parent: ti.Parent, Children: ti.Children, Joining: ti.Joining, Err: ti.Err})
			}
		}
		cs.pos = w // the next read goes on from here
	}
	out.More = slices.ContainsFunc(cs.marks, func(w uint64) bool { return w != 0 })
	if s.historyOn() {
		oldest := s.nextSerial - uint64(s.recN)
		if cs.serial == 0 {
			cs.serial, cs.before = oldest, s.recordedBefore(oldest) // a new feed reads what the history keeps
		}
		if cs.serial < oldest {
			// Records the ring overwrote before this feed read them: the
			// attempts they stood for.
			out.Dropped = s.recordedBefore(oldest) - cs.before
			cs.serial, cs.before = oldest, s.recordedBefore(oldest)
		}
		s.openShared = noShared // read: plain successes that end later join a new shared record
		for ; cs.serial < s.nextSerial && len(out.Ended) < max; cs.serial++ {
			r := s.rec(cs.serial)
			if r == nil {
				continue // not reached: the ring holds every serial from oldest on
			}
			n := r.attempts()
			cs.before += n
			if r.task == noTask && r.shared == 0 {
				out.Dropped += n // a perTask cut or retention forgot it before this feed read it
				continue
			}
			e := EndedAttempt{Tasks: 1, Attempt: int(r.attempt), Run: int(r.run), Outcome: r.outcome,
				Started: unixTime(r.started), Ended: unixTime(r.ended)}
			switch {
			case r.shared > 1 || r.task == noTask:
				e.Tasks, e.Pool = int(r.shared), s.pools[s.lanes[r.lane].pool].name
			default:
				e.ID, e.Pool = s.key(r.task), s.pools[s.hot[r.task].pool].name
			}
			if r.detail {
				e.Err = s.details[cs.serial].err
			}
			out.Ended = append(out.Ended, e)
		}
		out.More = out.More || cs.serial < s.nextSerial
	}
	return out
}
