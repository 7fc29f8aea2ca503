package coordinator

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batonhq/baton/internal/lane"
	"github.com/batonhq/baton/internal/record"
)

// Where an attempt is remembered: every attempt's end is written, as the
// coordinator applies it, to a ring of records bounded in total
// (WithHistory's total), and chained to the task's newest records, of
// which each task keeps WithHistory's perTask; History reads them. A
// record is a few words with no pointers (no garbage collector scans the
// ring); what only some attempts have (an error, a worker's name, log
// lines) lives in a map beside it, by record. Most attempts are first
// attempts that succeed plainly, ending together with others that one
// worker ran: those share one record (rememberShared), so that the
// history of a large graph of such tasks costs a record per report of a
// worker, not one per task.
//
// Times come from the coordinator's clock as it decides: when it handed
// the attempt out, when it saw it start (if it watches starts: Kinds), when
// it applied its end; a start it did not see is the later of the hand-out
// and the end of the item before it in its lane (the worker runs a lane's
// items one after the other). A worker reports an end at once when it
// runs dry, and a lane of long attempts holds few, so those times are
// exact to within a report for attempts long enough to matter, and cost
// no clock read. Attempts with a Timeout, for which the worker reads the
// clock anyway, are timed by the worker itself (lane.StampTimed).

// Outcome is how an attempt ended (Attempt.Outcome).
type Outcome uint8

// Outcomes of attempts.
const (
	OutcomeRunning     Outcome = iota // not over: handed to a worker, perhaps started
	OutcomeSucceeded                  // its function returned nil
	OutcomeFailed                     // it returned an error, panicked or timed out (Err says which)
	OutcomeCancelled                  // Cancel or Shutdown stopped it (Err: ErrCancelled or ErrClosed)
	OutcomeInterrupted                // it was running when its process died (a durable scheduler; Err: ErrInterrupted)
	OutcomeSnoozed                    // it asked to run again later (Snooze): not a failure
)

var outcomeNames = [...]string{"running", "succeeded", "failed", "cancelled", "interrupted", "snoozed"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Attempt is one attempt of a task, as History tells it.
type Attempt struct {
	Attempt   int       // 1-based within its run (TaskInfo.Attempts counts them)
	Run       int       // 1-based run (recurring tasks have several)
	Rerun     int       // the re-run it belongs to (Rerun): 0 before the first
	Pool      string    // its pool ("" for the default one)
	Worker    string    // the worker that ran it: "worker 2" for a local pool's third, what a custom or remote pool said (SetWorker), "" if unknown
	HandedOut time.Time // when the coordinator handed it to a worker
	Started   time.Time // when its function was called; zero if unknown (see History)
	Ended     time.Time // when it ended: its function returned, or the coordinator applied its end; zero while it runs
	Outcome   Outcome
	Err       error     // for OutcomeFailed, OutcomeCancelled and OutcomeInterrupted: why
	Logs      []LogLine // what it logged (Logger, AppendLog), oldest first: the newest WithTaskLogs allows
	// LogsDropped counts the lines it logged that are not in Logs
	// (WithTaskLogs's bounds): the oldest go first.
	LogsDropped int
}

// Duration is how long the attempt ran: from Started to Ended, or to now
// (the caller's) if it still runs; 0 if Started is unknown.
func (a Attempt) Duration(now time.Time) time.Duration {
	switch {
	case a.Started.IsZero():
		return 0
	case a.Ended.IsZero():
		return now.Sub(a.Started)
	}
	return a.Ended.Sub(a.Started)
}

// History is what a scheduler remembers of a task's attempts (History).
type History struct {
	Attempts []Attempt // oldest first; the last may be running
	Dropped  int       // older attempts no longer kept (WithHistory's bounds)
}

// Defaults of WithHistory.
const (
	DefaultHistoryPerTask = 10
	DefaultHistoryTotal   = 100_000
)

// WithHistory sets how many attempts the scheduler remembers (History):
// the newest perTask of each task, and total records in all (the oldest
// go first; History says how many of a task's were dropped). A record is
// one attempt, or the first attempts of several tasks that succeeded
// with no error, worker name or log line and ended together on one
// worker (up to 255 in one record), so that a graph of many such tasks
// keeps more than total attempts in total records. A durable scheduler
// (WithStore) keeps them across restarts: a restart applies the bounds
// again to what the store holds, the newest kept by their end times, so
// that at the total bound the attempts kept may differ from those kept
// before it where several ended at the same instant (ends one step of
// the coordinator applied) or in another order than the scheduler
// learned of them (a worker that times its attempts). The default is
// DefaultHistoryPerTask and DefaultHistoryTotal; WithHistory(0, 0) turns
// the history off (History then reports only the attempt running, if
// any). Its cost is in bench/README.md. perTask and total must be both 0
// or both positive, with perTask <= total <= 2^30; New refuses others
// with ErrInvalidOption.
func WithHistory(perTask, total int) Option {
	return func(c *config) error {
		if perTask < 0 || total < perTask || (perTask == 0) != (total == 0) || total > 1<<30 {
			return fmt.Errorf("%w: WithHistory(%d, %d): want 0 <= perTask <= total <= 2^30, both 0 or neither", ErrInvalidOption, perTask, total)
		}
		c.histPerTask, c.histTotal = perTask, total
		return nil
	}
}

// attemptRec is one attempt in the ring, or several (a shared record).
// serial is 1 + its place in the order ends were recorded; a task's
// records are chained newest first through prev (a link: a serial, the
// record it names gone once the ring slot holds another serial; or a
// shared record's serial with sharedLink set).
type attemptRec struct {
	serial  uint64
	prev    uint64
	task    int32 // its task, a shared record's first; noTask once that task forgot it
	lane    int32 // the lane that ran it (-1: none, as for an attempt a restore found interrupted)
	attempt int32
	run     int32
	rerun   int32
	outcome Outcome
	detail  bool  // an attemptDetail is kept for it
	shared  uint8 // a shared record: the attempts it stands for (0: not shared)
	handed  int64 // UnixNano; 0: unknown
	started int64
	ended   int64
}

// A shared record stands for the first attempts of several tasks (its
// shared count, up to 255) that succeeded plainly (no error, worker name,
// log line) on one lane with the same times: the items a worker ran and
// reported together. Each task's history is a link to it (histHead with
// sharedLink), which is the end of its chain: a task's later attempts
// chain records of its own before it. The record is filled while it is
// open (state.openShared) and the ring's newest, so that the ring keeps
// the order in which ends were recorded: any other record, or a Feed's
// read, closes it (openShared noShared).
const sharedLink uint64 = 1 << 63

// attemptDetail is what only some attempts have.
type attemptDetail struct {
	err         error
	worker      string
	logs        []LogLine
	logsDropped int
}

// empty reports whether d says nothing: the attempt needs no detail.
func (d *attemptDetail) empty() bool {
	return d.err == nil && d.worker == "" && len(d.logs) == 0 && d.logsDropped == 0
}

// historyTable is the state's attempt history (zero: off). Owned by the
// coordinator goroutine.
type historyTable struct {
	histPerTask int32
	histCap     int            // WithHistory's total: the ring's size
	recs        [][]attemptRec // the ring, in blocks of recBlock; it grows up to histCap, a block at a time (never copied)
	cums        [][]uint64     // per ring slot: the attempts recorded before its record (a Feed's Dropped counts attempts, not records)
	recorded    uint64         // attempts recorded so far
	recN        int            // records in the ring
	ringPos     int            // where the next record goes: (nextSerial-1) % histCap
	nextSerial  uint64         // the serial of the next record
	endNano     int64          // the clock's reading (UnixNano) for the report or harvest being applied: an unstamped attempt's end (endsAt)
	noJoin      bool           // tests only: rememberEnd records every end (joinPlain never joins), to compare with
	histHead    []uint64       // per task: the link to its newest record (0: none; deadLink: none kept, some dropped)
	histCount   []int32        // per task: attempts recorded since it was submitted (History's Dropped); 0 with a shared link for a head: 1 (histN)
	details     map[uint64]*attemptDetail
	openShared  uint64      // the serial of the shared record that plain successes like it join (noShared: none)
	openRec     *attemptRec // its slot (which holds another serial once the ring turned)
}

// noShared is openShared when no shared record is open: no serial, and
// not a lane's joinSer either (0 when it has no join).
const noShared = math.MaxUint64

// deadLink is the head of a task whose records are all dropped (a restore
// of a history that kept none): a serial never reached, so that the task's
// head is not 0, which says it has no history (a plain first success:
// joinsPlain, rememberEnd).
const deadLink = sharedLink - 1

// histN is how many attempts of t were recorded since it was submitted:
// a plain first success (rememberShared) writes only its head, so that
// the common case costs one write a task.
func (s *state) histN(t int32) int32 {
	if n := s.histCount[t]; n != 0 || s.histHead[t]&sharedLink == 0 {
		return n
	}
	return 1
}

// historyOn reports whether attempts are remembered.
func (s *state) historyOn() bool { return s.histPerTask > 0 }

// startHistory turns the history on (New).
func (s *state) startHistory(perTask, total int) {
	s.histPerTask, s.histCap = int32(perTask), total
	s.nextSerial = 1
	s.openShared = noShared
	for i := range s.lanes {
		s.lanes[i].l.StampTimed() // the workers time attempts with a Timeout themselves
	}
}

// recBlock is how many records a block of the ring holds.
const recBlock = 1024

// slot is the ring's record at idx (< recN).
func (s *state) slot(idx int) *attemptRec { return &s.recs[idx/recBlock][idx%recBlock] }

// growHistory gives the records of a new batch their history entries.
func (s *state) growHistory() {
	if n := len(s.tasks); len(s.histHead) < n {
		s.histHead = append(s.histHead, make([]uint64, n-len(s.histHead))...)
		s.histCount = append(s.histCount, make([]int32, n-len(s.histCount))...)
	}
}

// forgetHistory drops task t's history (retention forgot it, or its
// record is reused).
func (s *state) forgetHistory(t int32) {
	if !s.historyOn() || int(t) >= len(s.histHead) {
		return
	}
	for sr := s.histHead[t]; sr != 0; {
		r := s.link(t, sr)
		if r == nil {
			break
		}
		if r.shared > 0 { // the chain's end; it stays, its other tasks' and the feed's
			if r.task == t {
				r.task = noTask
			}
			break
		}
		if r.detail {
			delete(s.details, sr)
		}
		r.task = noTask // unreachable: the next record in its slot overwrites it
		sr = r.prev
	}
	s.histHead[t], s.histCount[t] = 0, 0
}

// rec returns the record of serial sr, or nil if it is gone.
func (s *state) rec(sr uint64) *attemptRec {
	if sr == 0 || s.recN == 0 {
		return nil
	}
	idx := int((sr - 1) % uint64(s.histCap))
	if idx >= s.recN {
		return nil
	}
	if r := s.slot(idx); r.serial == sr {
		return r
	}
	return nil
}

// link returns the record a link of task t's chain names, nil if the
// ring no longer holds it for t.
func (s *state) link(t int32, l uint64) *attemptRec {
	if l&sharedLink != 0 {
		if r := s.rec(l &^ sharedLink); r != nil && r.shared > 0 {
			return r
		}
		return nil
	}
	if r := s.rec(l); r != nil && r.task == t {
		return r
	}
	return nil
}

// remember records the end of an attempt of t: its attempt and run
// numbers, the lane that ran it (-1: none), its outcome and error, and
// its times (UnixNano, 0 if unknown), and what only some attempts have
// (d: nil or empty for none; copied). A durable scheduler's caller marks
// the history to be written (historyChanged).
func (s *state) remember(t int32, lane int32, attempt, run, rerun int32, o Outcome, d *attemptDetail, handed, started, ended int64) {
	if o == OutcomeSucceeded && attempt == 1 && run == 1 && rerun == 0 && lane >= 0 && s.histHead[t] == 0 && (d == nil || d.empty()) {
		s.rememberShared(t, lane, handed, started, ended)
		return
	}
	sr, r := s.newRec()
	s.recorded++
	*r = attemptRec{serial: sr, prev: s.histHead[t], task: t, lane: lane, attempt: attempt, run: run, rerun: rerun,
		outcome: o, handed: handed, started: started, ended: ended}
	if d != nil && !d.empty() {
		if s.details == nil {
			s.details = map[uint64]*attemptDetail{}
		}
		dd := new(attemptDetail) // a copy: the caller's d stays on its stack
		*dd = *d
		s.details[sr] = dd
		r.detail = true
	}
	s.histCount[t] = s.histN(t) + 1
	s.histHead[t] = sr
	if s.histCount[t] > s.histPerTask {
		s.trimHistory(t)
	}
}

// newRec takes the ring's next slot for a record of serial sr; the caller
// fills it.
func (s *state) newRec() (sr uint64, r *attemptRec) {
	s.openShared = noShared // the open shared record is the ring's newest record, or none
	sr = s.nextSerial
	s.nextSerial++
	idx := s.ringPos // (sr-1) % histCap, without a division
	if s.ringPos++; s.ringPos == s.histCap {
		s.ringPos = 0
	}
	if idx == s.recN {
		if idx%recBlock == 0 {
			n := min(recBlock, s.histCap-idx)
			s.recs = append(s.recs, make([]attemptRec, n))
			s.cums = append(s.cums, make([]uint64, n))
		}
		s.recN++
	}
	r = s.slot(idx)
	if r.serial != 0 && r.detail {
		delete(s.details, r.serial)
	}
	s.cums[idx/recBlock][idx%recBlock] = s.recorded
	return sr, r
}

// recordedBefore returns how many attempts were recorded before the
// record of serial sr, which the ring holds (or is the next serial).
func (s *state) recordedBefore(sr uint64) uint64 {
	if sr >= s.nextSerial {
		return s.recorded
	}
	idx := int((sr - 1) % uint64(s.histCap))
	return s.cums[idx/recBlock][idx%recBlock]
}

// attempts is how many attempts r stands for.
func (r *attemptRec) attempts() uint64 { return uint64(max(r.shared, 1)) }

// rememberShared records t's first attempt, which succeeded plainly on
// lane with these times, in the open shared record if it is the ring's
// newest and has the same lane and times, else in a new one (see
// sharedLink). Most such attempts join the record without this test
// (joinsPlain).
func (s *state) rememberShared(t, lane int32, handed, started, ended int64) {
	r := s.openRec // not rec: no division an attempt
	if r == nil || r.serial != s.openShared || r.lane != lane || r.handed != handed || r.started != started || r.ended != ended || r.shared == math.MaxUint8 {
		var sr uint64
		sr, r = s.newRec()
		*r = attemptRec{serial: sr, task: t, lane: lane, attempt: 1, run: 1, outcome: OutcomeSucceeded,
			handed: handed, started: started, ended: ended}
		s.openShared, s.openRec = sr, r
	}
	r.shared++
	s.recorded++
	s.histHead[t] = r.serial | sharedLink // histN: 1
}

// trimHistory cuts task t's chain after its newest perTask records.
func (s *state) trimHistory(t int32) {
	r := s.link(t, s.histHead[t])
	for k := int32(1); r != nil && k < s.histPerTask; k++ {
		r = s.link(t, r.prev)
	}
	if r == nil || r.shared > 0 {
		return
	}
	for sr := r.prev; sr != 0; {
		old := s.link(t, sr)
		if old == nil {
			break
		}
		if old.shared > 0 { // the chain's end; it stays, its other tasks' and the feed's
			if old.task == t {
				old.task = noTask // unlinked: forgetHistory would not reach it to say t is gone
			}
			break
		}
		if old.detail {
			delete(s.details, sr)
			old.detail = false
		}
		old.task, sr = noTask, old.prev
	}
	r.prev = 0
}

// rememberEnd records the end of the attempt of t at item seq of ls,
// whose function was called, as ended applies it; an end its worker did
// not stamp is the reading of the report or harvest applying it (endsAt).
func (s *state) rememberEnd(ls *laneState, seq uint32, t int32, o Outcome, err error) {
	r := &s.tasks[t]
	handed, seen := ls.attemptTimes(seq)
	started, ended, touched := ls.l.Ending(seq)
	if started == 0 {
		started = max(handed, ls.lastEnd) // behind the item before it, or handed to an idle worker
		if seen != 0 {
			started = min(started, seen)
		}
	}
	if ended == 0 {
		ended = s.endNano
	}
	if started > ended {
		// Inferred from the end of a timed item before it, which its
		// worker stamped after this iteration's clock reading.
		started = ended
	}
	ls.lastEnd = ended
	if o == OutcomeSucceeded && !touched && r.attempts == 1 && r.runs == 0 && r.x == nil && s.histHead[t] == 0 {
		// A plain first success (no re-run: that needs x) that joinsPlain
		// did not take: the first of its lane's report, a timed one, one
		// on a durable scheduler.
		s.rememberShared(t, int32(ls.l.ID), handed, started, ended)
		if started == ended && ended == s.endNano && ls.seen == nil && s.dur == nil && !s.noJoin {
			// The lane's next plain successes of this report end and
			// start at this reading too (behind this one): joinPlain.
			ls.join, ls.joinSer = s.openRec, s.openShared
		}
		s.historyChanged(t)
		return
	}
	s.rememberOther(ls, seq, t, o, err, touched, handed, started, ended)
}

// endsAt sets the clock's reading for the items a report or a harvest
// applies (endNano).
func (s *state) endsAt(now time.Time) {
	if s.historyOn() {
		s.endNano = now.UnixNano()
	}
}

// joinsPlain reports whether the end of the item at seq of ls, a plain
// first success of t (the caller checked its record: first attempt, first
// run, no extra), can join the shared record its lane's last plain success
// joined or opened (ls.join): its hand-out time is that record's, nothing
// stamped or touched it, and it started behind that item and ends at this
// reading, the record's end. While the record is open, ls.lastEnd is its
// end: any other end since made another record, which closed it. A new
// reading does not close it (a timed attempt, whose worker stamps its
// times, may still join it, as may an end at a reading that comes back on
// a mock clock). The coordinator has seen no start on this lane (sawStart
// drops ls.join), so that the start rememberEnd would infer is the
// record's. With joinPlain, it is rememberEnd's common case without the
// times computed: a report of n plain items computes them once. Both are
// small enough to be inlined.
func (s *state) joinsPlain(ls *laneState, seq uint32, t int32) bool {
	j := ls.join // not nil if joinSer is open: openShared is never joinSer's 0
	return ls.joinSer == s.openShared && j.ended == s.endNano && j.shared < math.MaxUint8 && s.histHead[t] == 0 &&
		j.handed == ls.handed[seq&(lane.Size-1)] && ls.l.Plain(seq)
}

// joinPlain records the end joinsPlain said can join ls.join. Never on a
// durable scheduler (rememberEnd opens no join there), which would have
// to mark the history to be written.
func (s *state) joinPlain(ls *laneState, t int32) {
	ls.join.shared++
	s.recorded++
	s.histHead[t] = ls.joinSer | sharedLink
}

// rememberOther is rememberEnd for an attempt that is not a plain first
// success, with its times; apart, so that the common case's frame is small.
//
//go:noinline
func (s *state) rememberOther(ls *laneState, seq uint32, t int32, o Outcome, err error, touched bool, handed, started, ended int64) {
	r := &s.tasks[t]
	var d *attemptDetail // most attempts have none: no copy of an empty one
	if err != nil || touched {
		var dv attemptDetail
		dv.err = err
		if touched {
			c := ls.l.Ctx(seq)
			dv.worker = c.Worker()
			if l, _ := c.Extra(nil).(*attemptLog); l != nil {
				dv.logs, dv.logsDropped = l.snapshot()
			}
		}
		d = &dv
	}
	s.remember(t, int32(ls.l.ID), r.attempts, r.runs+1, s.reruns(t), o, d, handed, started, ended)
	if !(s.closing && err == ErrClosed) {
		// A durable scheduler does not write what Shutdown stopped: the
		// attempt runs again, uncounted, in the next process (its state
		// record is not written either).
		s.historyChanged(t)
	}
}

// attemptTimes returns when the attempt at seq was handed out and when the
// coordinator saw it start (UnixNano; 0: unknown).
func (ls *laneState) attemptTimes(seq uint32) (handed, seen int64) {
	if ls.handed == nil {
		return 0, 0
	}
	i := seq & (lane.Size - 1)
	if ls.seen != nil {
		seen = ls.seen[i]
	}
	return ls.handed[i], seen
}

// handedOut records, for the history, when the item at seq of ls was
// put; the worker times an attempt with a timeout itself (it reads the
// clock for the deadline anyway).
func (s *state) handedOut(ls *laneState, seq uint32, now time.Time) {
	if ls.handed == nil {
		ls.handed = new([lane.Size]int64)
	}
	i := seq & (lane.Size - 1)
	ls.handed[i] = now.UnixNano()
	if ls.seen != nil {
		ls.seen[i] = 0
	}
}

// sawStart records, for the history, when the coordinator saw the item at
// seq of ls started. The slots' start times are kept once a start is
// seen (a scheduler that watches starts), each zeroed at hand-out.
func (ls *laneState) sawStart(seq uint32, now time.Time) {
	if ls.handed == nil {
		return
	}
	if ls.seen == nil {
		ls.seen = new([lane.Size]int64)
		ls.join, ls.joinSer = nil, 0 // joinPlain infers every start, which a seen one is not
	}
	ls.seen[seq&(lane.Size-1)] = now.UnixNano()
}

// workerName is how History names lane li's worker: its place in its pool.
func (s *state) workerName(li int32) string {
	if li < 0 || int(li) >= len(s.lanes) {
		return ""
	}
	p := &s.pools[s.lanes[li].pool]
	for k, l := range p.lanes {
		if l == int(li) {
			return fmt.Sprintf("worker %d", k)
		}
	}
	return ""
}

// history answers History for task t: its kept attempts, oldest first,
// and the one out now, if any.
func (s *state) history(t int32, now time.Time) History {
	var h History
	pool := s.pools[s.hot[t].pool].name
	if s.historyOn() && int(t) < len(s.histHead) {
		for sr := s.histHead[t]; sr != 0; {
			r := s.link(t, sr)
			if r == nil {
				break
			}
			a := Attempt{Attempt: int(r.attempt), Run: int(r.run), Rerun: int(r.rerun), Pool: pool, Outcome: r.outcome,
				HandedOut: unixTime(r.handed), Started: unixTime(r.started), Ended: unixTime(r.ended)}
			a.Worker = s.workerName(r.lane)
			if r.detail {
				if d := s.details[sr]; d != nil {
					// A copy: the caller may change it, and the kept lines
					// are written to a durable store as later attempts end.
					a.Err, a.Logs, a.LogsDropped = d.err, slices.Clone(d.logs), d.logsDropped
					if d.worker != "" {
						a.Worker = d.worker
					}
				}
			}
			h.Attempts = append(h.Attempts, a)
			sr = r.prev
		}
		for i, j := 0, len(h.Attempts)-1; i < j; i, j = i+1, j-1 {
			h.Attempts[i], h.Attempts[j] = h.Attempts[j], h.Attempts[i]
		}
		h.Dropped = int(s.histN(t)) - len(h.Attempts)
	}
	if a, ok := s.runningAttempt(t, pool); ok {
		h.Attempts = append(h.Attempts, a)
	}
	return h
}

// runningAttempt describes t's attempt out on a worker now, if any.
func (s *state) runningAttempt(t int32, pool string) (Attempt, bool) {
	r := &s.tasks[t]
	h := &s.hot[t]
	if h.status != dispatched || r.link == noTask {
		return Attempt{}, false
	}
	ls, seq := s.locate(r.link)
	a := Attempt{Attempt: int(r.attempts), Run: int(r.runs) + 1, Rerun: int(s.reruns(t)), Pool: pool, Outcome: OutcomeRunning,
		Worker: s.workerName(int32(ls.l.ID))}
	handed, seen := ls.attemptTimes(seq)
	started, _ := ls.l.Stamps(seq)
	if started == 0 && (h.flags&fStarted != 0 || lane.Running(ls.l.State(seq))) {
		started = seen
		if started == 0 {
			started = max(handed, ls.lastEnd)
		}
	}
	a.HandedOut, a.Started = unixTime(handed), unixTime(started)
	if ls.l.Touched(seq) {
		c := ls.l.Ctx(seq)
		if w := c.Worker(); w != "" {
			a.Worker = w
		}
		if l, _ := c.Extra(nil).(*attemptLog); l != nil {
			a.Logs, a.LogsDropped = l.snapshot()
		}
	}
	return a, true
}

// lineNano is a log line's time as stored: UnixNano, 0 for the zero
// time (a line appended without one), and the nearest representable time
// for one before 1678 or after 2262.
func lineNano(t time.Time) int64 {
	switch {
	case t.IsZero():
		return 0
	case t.Before(minNanoTime):
		return math.MinInt64
	case t.After(maxNanoTime):
		return math.MaxInt64
	}
	return t.UnixNano()
}

var minNanoTime, maxNanoTime = time.Unix(0, math.MinInt64), time.Unix(0, math.MaxInt64)

// unixTime is the time of UnixNano n; zero for 0.
func unixTime(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

type historyReply struct {
	h  History
	ok bool
}

type historyReq struct {
	id    string
	reply chan<- historyReply
}

func (r historyReq) apply(l *loop, now time.Time) {
	h, ok := l.st.historyOf(r.id, now)
	r.reply <- historyReply{h, ok}
}

// historyOf answers History.
func (s *state) historyOf(id string, now time.Time) (History, bool) {
	t, ok := s.findLive(id)
	if !ok || s.hot[t].status == reserved {
		return History{}, false
	}
	return s.history(t, now), true
}

// History returns the attempts the scheduler remembers of task id (see
// WithHistory), oldest first, the attempt out on a worker now last
// (OutcomeRunning), and how many older ones it no longer keeps; false if
// the task is unknown (never submitted, or forgotten by retention, with
// its history). Each attempt says when it was handed to a worker, when
// its function started and when it ended, on the scheduler's clock: as
// the worker read them for an attempt with a Timeout, as the coordinator
// learned of them otherwise, to within a report of the worker (a start it
// did not see is the later of the hand-out and the end of the attempt the
// same worker ran before; see the top of history.go). A
// durable scheduler (WithStore) keeps them across restarts; an attempt
// a crash interrupted is OutcomeInterrupted. History blocks until the
// coordinator answers (as Info does), is safe for concurrent use, and
// after Shutdown reports what the scheduler remembered when it stopped.
func (s *Scheduler) History(id string) (History, bool) {
	r, _ := query(context.Background(), s, func(reply chan<- historyReply) request {
		return historyReq{id: id, reply: reply}
	}, func(st *state) historyReply {
		h, ok := st.historyOf(id, s.clk.Now())
		return historyReply{h, ok}
	})
	return r.h, r.ok
}

// SetWorker records, for the history, which worker runs the attempt whose
// context is ctx: a custom or remote pool's name for it (a host, a
// process). Without it, History names a local pool's worker by its place
// in the pool ("worker 2"). It returns ErrNoAttempt if ctx is not a
// running attempt's context. It does not block and is safe for concurrent
// use.
func SetWorker(ctx context.Context, name string) error {
	c, ok := lane.Of(ctx)
	if !ok || !c.SetWorker(strings.Clone(name)) { // its own copy: name may be cut from a larger string
		return ErrNoAttempt
	}
	return nil
}

// A durable scheduler keeps each task's history in a history record
// (record.KindHistory), rewritten as an attempt of the task ends, and its
// latest attempt in its state record too (record.State.Last). A task
// whose only attempt succeeded plainly (no error, worker name or log
// line: most tasks) writes no history record: its state's Last is its
// history, so that the history costs a durable scheduler no record more
// per task.

// historyChanged marks t's history to be written with this iteration's
// commit, on a durable scheduler (inlined: most schedulers are not).
func (s *state) historyChanged(t int32) {
	if d := s.dur; d != nil {
		d.markHistory(t)
	}
}

// markHistory is historyChanged on a durable scheduler.
func (d *durable) markHistory(t int32) {
	if int(t) >= len(d.histMark) {
		d.histMark = slices.Grow(d.histMark, int(t)+1-len(d.histMark))
		d.histMark = d.histMark[:cap(d.histMark)]
	}
	if d.histMark[t] != d.epoch {
		d.histMark[t] = d.epoch
		d.histDirty = append(d.histDirty, t)
	}
}

// attemptOf is the stored form of the record of serial sr.
func (s *state) attemptOf(sr uint64, r *attemptRec) record.Attempt {
	a := record.Attempt{Attempt: r.attempt, Run: r.run, Rerun: r.rerun, Outcome: uint8(r.outcome),
		Handed: r.handed, Started: r.started, Ended: r.ended, Worker: s.workerName(r.lane)}
	if r.detail {
		if d := s.details[sr]; d != nil {
			a.ErrKind, a.ErrMsg, a.Timeout = errKindOf(d.err)
			if d.worker != "" {
				a.Worker = d.worker
			}
			a.LinesDropped = int32(min(d.logsDropped, math.MaxInt32))
			for _, l := range d.logs {
				a.Lines = append(a.Lines, record.Line{Time: lineNano(l.Time), Level: int32(l.Level), Msg: l.Message, Attrs: l.Attrs})
			}
		}
	}
	return a
}

// lastAttempt is t's latest attempt that ended, for its state record:
// one Shutdown stopped is not (it is not written: it runs again).
func (s *state) lastAttempt(t int32) (record.Attempt, bool) {
	for sr := s.histHead[t]; ; {
		r := s.link(t, sr)
		if r == nil {
			return record.Attempt{}, false
		}
		if s.closing && r.outcome == OutcomeCancelled && r.detail {
			if d := s.details[sr]; d != nil && d.err == ErrClosed {
				sr = r.prev
				continue
			}
		}
		return s.attemptOf(sr, r), true
	}
}

// historyRecord is t's history record; false if its state's Last says it
// all (one attempt, which succeeded plainly).
func (s *state) historyRecord(t int32) (record.History, bool) {
	var h record.History
	for sr := s.histHead[t]; sr != 0; {
		r := s.link(t, sr)
		if r == nil {
			break
		}
		h.Attempts = append(h.Attempts, s.attemptOf(sr, r))
		sr = r.prev
	}
	slices.Reverse(h.Attempts)
	h.Dropped = s.histN(t) - int32(len(h.Attempts))
	if h.Dropped == 0 && len(h.Attempts) == 1 {
		// The state's Last holds such an attempt whole, its worker's
		// name included (a remote pool names every worker): no record.
		if a := &h.Attempts[0]; a.Outcome == uint8(OutcomeSucceeded) && a.ErrKind == record.ErrKindNone && len(a.Lines) == 0 && a.LinesDropped == 0 {
			return h, false
		}
	}
	return h, true
}

// restoreHistory rebuilds the histories a store holds: each task's
// history record, or its state's Last, in the order the attempts ended.
func (s *state) restoreHistory(stored []storedTask) {
	type ended struct {
		t int32
		a record.Attempt
	}
	var all []ended
	for i := range stored {
		t := int32(i)
		switch st := &stored[i]; {
		case st.hist != nil:
			for _, a := range st.hist.Attempts {
				all = append(all, ended{t, a})
			}
			s.histCount[t] = st.hist.Dropped
			if st.hist.Dropped > 0 {
				s.histHead[t] = deadLink // remember chains its attempts after it
			}
		case st.state.Last != nil:
			all = append(all, ended{t, *st.state.Last})
		}
	}
	slices.SortStableFunc(all, func(x, y ended) int { return cmp.Compare(x.a.Ended, y.a.Ended) })
	for _, e := range all {
		a := &e.a
		d := attemptDetail{err: kindErr(a.ErrKind, a.ErrMsg, a.Timeout), worker: a.Worker, logsDropped: int(a.LinesDropped)}
		for _, l := range a.Lines {
			d.logs = append(d.logs, LogLine{Time: unixTime(l.Time), Level: slog.Level(l.Level), Message: l.Msg, Attrs: l.Attrs})
		}
		lane := int32(-1)
		if l := s.laneNamed(e.t, d.worker); l >= 0 {
			lane, d.worker = l, "" // named by its lane again: a plain first success shares a record, as it did
		}
		s.remember(e.t, lane, a.Attempt, a.Run, a.Rerun, Outcome(a.Outcome), &d, a.Handed, a.Started, a.Ended)
	}
}

// laneNamed returns the lane of t's pool that workerName calls name, or
// -1 if none does (a custom pool's name, a pool smaller than it was).
func (s *state) laneNamed(t int32, name string) int32 {
	k, ok := strings.CutPrefix(name, "worker ")
	if !ok {
		return -1
	}
	i, err := strconv.Atoi(k)
	p := &s.pools[s.hot[t].pool]
	if err != nil || i < 0 || i >= len(p.lanes) || s.workerName(int32(p.lanes[i])) != name {
		return -1
	}
	return int32(p.lanes[i])
}
