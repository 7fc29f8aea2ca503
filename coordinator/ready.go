package coordinator

import (
	"fmt"
	"time"

	"github.com/batonhq/baton/internal/lane"
)

// outbox is the one boundary between the state and the loop that drives
// it, after etcd raft's Ready/Advance: after every message the loop asks
// the state what the outside world must now see (ready), does all of that
// I/O in this order, and then acknowledges it (advance) before it touches
// the state again. The state itself touches no channel, store or context.
//
//  0. Early: the attempts of journaled roots handed out (journaled.go),
//     which no crash can undo, made visible to their workers at once.
//  1. Commit, on a durable scheduler: what the iteration decided, in one
//     group commit. Everything below waits for it: a worker runs a task
//     only once the ends that released it are committed, and nothing is
//     published after a failed commit (a crash must never undo what a
//     worker, a caller or a subscriber has seen); only the stops are
//     still carried out, since a crash stops every function too, and
//     with cause ErrClosed, as a crash's (the cause decided was not
//     stored).
//  2. Answers: the callers waiting for a decision of this iteration
//     (Submit, Cancel, Wait, WaitTasks, Batch.Wait), told the commit's
//     error if it failed.
//  3. Publish: the attempts handed out, made visible to their workers
//     (a worker whose lane was closed is woken).
//  4. Stop: the contexts of running attempts to end (Cancel, Shutdown).
//  5. Events, for the subscribers and the task log.
type outbox struct {
	Failed  error         // a commit failed before this iteration (ErrStoreFailed, wrapped): commit nothing more
	Commit  *Changes      // nil: nothing to write
	Answers []answer      // delivered with the commit's error
	Early   []publication // journaled roots, published before the commit (journaled.go)
	Go      []goItem      // careful starts committed: let them start, after a good commit only (careful.go)
	Publish []publication // after a good commit only
	Stop    []stop        // after a failed commit too, with cause ErrClosed
	Events  []Event       // after a good commit only; shared with the subscribers from then on
	Due     time.Time     // the earliest time the state must be woken
	HasDue  bool          // false: nothing is due, stop the timer
	Settled bool          // every task is final: release the waiters
	Done    bool          // shut down and every worker idle: stop
}

// answer is a caller waiting for a decision of this iteration. Exactly
// one of its channels is set; the loop delivers it (deliver) once the
// iteration's commit is done.
type answer struct {
	err  chan<- error    // sent val, or the commit's error
	ok   chan<- bool     // sent true, or false if the commit failed
	done chan<- struct{} // closed
	val  error
}

// deliver answers a, told the iteration's commit error (nil: committed,
// or nothing to commit). Only the loop calls it.
func (a answer) deliver(commitErr error) {
	switch {
	case a.err != nil:
		if commitErr != nil {
			a.err <- commitErr
		} else {
			a.err <- a.val
		}
	case a.ok != nil:
		a.ok <- commitErr == nil
	case a.done != nil:
		close(a.done)
	}
}

// publication makes a lane's items from..to visible to its worker, waking
// it if it had closed its lane. Only the loop calls do.
type publication struct {
	l        *lane.Lane
	from, to uint32
}

func (p publication) do() {
	if !p.l.Publish(p.from, p.to) {
		// A closed lane (or one its worker closed just now): open it
		// again and wake the worker. If the worker's idle report is on its
		// way, report sees that the lane has moved on.
		p.l.Open(p.to)
		p.l.Wake()
	}
}

// stop ends the context of a running attempt. Only the loop calls do.
type stop struct {
	ctx   *lane.Context
	cause error
}

func (st stop) do() { st.ctx.Cancel(st.cause) }

// stopReq is an attempt the state has stopped (its claim word says
// Stopping) and whose context the loop must end.
type stopReq struct {
	ls    *laneState
	seq   uint32
	cause error
}

// later queues an answer for the end of the iteration: after its commit,
// on a durable scheduler.
func (s *state) later(a answer) { s.answers = append(s.answers, a) }

// ready makes what is due ready, settles retention, dispatches, reports
// the starts it can see, and returns what the loop must do (outbox),
// with a durable scheduler's commit written at now (iterate, then pack).
// The loop must call advance before it touches the state again.
func (s *state) ready(now time.Time) outbox {
	o := s.iterate(now)
	s.pack(&o, now)
	return o
}

// pack adds to o a durable scheduler's commit of what the iteration
// changed, its states written at now. The loop reads its clock again for
// it, after iterate: iterate may apply an end that came after the
// iteration's first reading (it harvests the lanes as it dispatches, and
// an iteration may be long: a goroutine descheduled on a loaded machine),
// and a state's At must not be earlier than what it records (a replica's
// test saw a task's success written 1 ms before its function began).
func (s *state) pack(o *outbox, now time.Time) {
	if s.dur != nil {
		o.Failed = s.dur.failed
		o.Commit = s.takeCommit(now)
	}
}

// iterate is ready without the commit (pack).
func (s *state) iterate(now time.Time) outbox {
	s.fireDue(now)
	s.joinAll(now)
	s.settle(now)
	if s.urged {
		// hurry set a flag its worker may have read too early (it reads
		// it after an attempt ends): what ended before is seen here.
		s.urged = false
		s.harvestAll(now)
	}
	look := s.lagDue(now) && s.tellsStarts() // the look also finds the starts nobody reported, if anyone wants them
	s.dispatch(now)
	for {
		for s.watchesStarts() || look {
			s.caughtUp = false
			for i := range s.lanes {
				if ls := &s.lanes[i]; ls.open {
					s.peek(ls, now, true)
				}
			}
			if !s.caughtUp {
				break
			}
			// peek applied ends to tell starts in order: what they released
			// is dispatched now, not at the next message, which may not come.
			s.joinAll(now)
			s.settle(now)
			s.dispatch(now)
		}
		if len(s.joins) == 0 {
			break
		}
		// A spawner's join completed by an end applied while dispatching
		// (a series' end, a harvest): what it releases goes out now.
		s.joinAll(now)
		s.settle(now)
		s.dispatch(now)
	}
	// Dispatching harvests the lanes it fills: the ends it applied settle
	// now, before the watches are answered, so that a batch whose Wait
	// returns is forgotten already under WithRetention(0) and its IDs may
	// be submitted again at once.
	s.settle(now)
	s.answerWatches() // after every cascade of the iteration: the causes they report are as bad as they got
	for i := range s.lanes {
		if ls := &s.lanes[i]; ls.pub != ls.shown {
			if e := s.earlyTo(ls); e != ls.shown {
				s.early = append(s.early, publication{l: ls.l, from: ls.shown, to: e})
				ls.shown = e
				if e == ls.pub {
					continue
				}
			}
			s.pubs = append(s.pubs, publication{l: ls.l, from: ls.shown, to: ls.pub})
			ls.shown = ls.pub
		}
	}
	for _, r := range s.stopReqs {
		if int32(r.seq-r.ls.applied) >= 0 { // not applied since: its context is still the attempt's
			s.stops = append(s.stops, stop{ctx: r.ls.l.Ctx(r.seq), cause: r.cause})
		}
	}
	clear(s.stopReqs)
	s.stopReqs = s.stopReqs[:0]
	s.planLag(now)
	if s.testCheck != nil {
		s.testCheck(s)
	}
	due, ok := s.nextDue()
	o := outbox{Answers: s.answers, Go: s.goes, Early: s.early, Publish: s.pubs, Stop: s.stops, Events: s.events,
		Due: due, HasDue: ok, Settled: s.open == 0, Done: s.settled()}
	return o
}

// maxEventCap bounds the first allocation of an iteration's events: a
// burst does not make every later iteration allocate as much.
const maxEventCap = 1 << 14

// commitFailure is what a failed commit makes of the store's error: the
// error every later answer gets.
func commitFailure(err error) error { return fmt.Errorf("%w: %w", ErrStoreFailed, err) }

// advance acknowledges the last outbox: the loop has committed it
// (commitErr is the store's answer, nil if there was nothing to commit),
// answered its callers, published its items, stopped its attempts and
// handed its events over (the subscribers share the slice from now on).
// On a durable scheduler it returns the commit failure that stopped it,
// if any (ErrStoreFailed, wrapped): then nothing more is written, and the
// loop publishes nothing more.
func (s *state) advance(commitErr error) error {
	clear(s.answers)
	clear(s.pubs)
	clear(s.early)
	clear(s.stops)
	clear(s.goes)
	s.answers, s.pubs, s.early, s.stops, s.goes = s.answers[:0], s.pubs[:0], s.early[:0], s.stops[:0], s.goes[:0]
	if len(s.events) > 0 {
		s.eventCap = min(len(s.events), maxEventCap)
	}
	s.events = nil
	if s.dur == nil {
		return nil
	}
	return s.committed(commitErr)
}
