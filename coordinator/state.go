package coordinator

import (
	"context"
	"iter"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/internal/idtable"
	"github.com/batonhq/baton/internal/lane"
	"github.com/batonhq/baton/internal/readyq"
	"github.com/batonhq/baton/timerwheel"
)

// The state is split by concern. This file holds its types; the rest:
//
//	ready.go      the one boundary to the loop (outbox: what to commit,
//	              answer, publish, stop and tell; advance)
//	submit.go     storing a batch, in phases
//	dispatch.go   handing ready work to the workers' lanes, taking it back
//	complete.go   applying what the workers report
//	cascade.go    how an end without success reaches what waits on it
//	timers.go     the delayed set: delays, backoffs, series' starts
//	lagged.go     events told late, for subscribers that accept it
//	schedule.go   series: first and next starts, what is missed
//	cancel.go     Cancel, Shutdown, status and Info
//	flow.go       pause, rate limits, tasks of several slots; keys.go, keys
//	retention.go  forgetting final tasks; freerecs.go, their records reused
//	durable.go    what a durable scheduler writes; restore.go, coming back
//	waittasks.go  WaitTasks and Batch watches
//
// and loop.go drives it, requests.go holds every message the API sends it.

const (
	noTask = -1

	// dispatchBudget bounds the expected work handed to one worker beyond
	// the attempt it runs: the lane of a pool whose attempts take c holds
	// about dispatchBudget/c of them (at least 2, so that a worker never
	// waits for a round trip between two slow attempts). It is a sizing
	// rule, not the guarantee: revocation enforces priority and keeps work
	// with idle workers whatever the estimate said.
	dispatchBudget = 50 * time.Microsecond
	// maxTarget caps the attempts handed to one lane at a time.
	maxTarget = lane.Size / 2
	// revokeDelay is how long a better priority waits before worse work
	// handed out but not started is taken back for it. Revoking at once on
	// every better arrival costs more than it saves when lanes turn over
	// within a budget anyway.
	revokeDelay = 4 * dispatchBudget
	// maxFirePerStep bounds how many delayed entries one loop iteration
	// makes ready; the rest follow in the next iterations.
	maxFirePerStep = 4096
)

// Internal statuses, beyond the public ones.
const (
	// dispatched: in a lane. Whether the task is Pending, Ready or Running
	// is what its item's claim state says.
	dispatched Status = 16 + iota
	// dropped: forgotten by retention; the record awaits reuse.
	dropped
	// reserved: spawned by an attempt still running (spawn.go); in the ID
	// table, invisible otherwise, until the attempt ends.
	reserved
	// joining: its function returned nil and the tasks it spawned are not
	// all final (spawn.go); Pending to the outside.
	joining
)

// hidden reports whether a record of status st is no task a reader sees:
// dropped (forgotten, awaiting reuse) or reserved (spawned by an attempt
// still running).
func hidden(st Status) bool { return st == dropped || st == reserved }

// rec flags.
const (
	fCancelReq uint8 = 1 << iota // Cancel or Shutdown reached it while its function ran
	fStarted                     // EventStarted was sent for the attempt out
	fFused                       // dispatched behind its dependency's item
	fClosed                      // the cancel came from Shutdown
	fExtra                       // rec.x is set
	fCross     uint8 = 1 << 7    // a successor lives in another pool: its success is reported at once

	fRuleShift       = 5
	fRule      uint8 = 3 << fRuleShift // its trigger rule (Task.When)
)

func (h *hot) rule() Trigger { return Trigger(h.flags&fRule) >> fRuleShift }

// when is t's trigger rule as the user gave it: the rule bits say
// NoneFailed for NoneFailedMinOneSuccess too, whose extra says minOne.
func (s *state) when(t int32) Trigger {
	w := s.hot[t].rule()
	if w == NoneFailed && s.minOne(t) {
		return NoneFailedMinOneSuccess
	}
	return w
}

// minOne reports whether t, under NoneFailed, also needs a dependency
// that succeeded (NoneFailedMinOneSuccess).
func (s *state) minOne(t int32) bool {
	x := s.tasks[t].x
	return x != nil && x.minOne
}

// anySucceeded reports whether a dependency of t succeeded.
func (s *state) anySucceeded(t int32) bool {
	r := &s.tasks[t]
	for _, d := range s.edges(r, r.deps) {
		if s.hot[d].status == Succeeded {
			return true
		}
	}
	return false
}

// rec is the coordinator's record of one task; what workers read lives in
// its lane.Spec, and what is read for every successor of every
// finished task lives in hot. Fields most tasks never use live in *extra.
type rec struct {
	attempts int32 // attempts started in the current run
	runs     int32 // runs finished successfully
	// link is the cause of a Skipped task (noTask: a rule skipped it with
	// no failure upstream) and the location of a dispatched one's item.
	link  int32
	arena int32 // the arena holding deps and succ
	deps  span  // its dependencies, as given
	succ  span  // tasks of its own batch that depend on it (later ones: x.more)
	x     *extra
}

// hot is the part of a record read for every successor of every finished
// task, 16 bytes in an array of its own: releasing a wide frontier onto
// the ready queue touches these and nothing else (a cache miss each on a
// large graph, where a whole record would cost two).
type hot struct {
	unmet  int32  // dependencies not yet succeeded (under a trigger rule: not yet final); 0 once started
	prio   int32  // Task.Priority
	rseq   uint32 // the sequence of its last becoming ready: validates ready-queue entries
	status Status
	flags  uint8
	pool   uint16
}

type span struct{ off, n int32 }

type extra struct {
	retry     RetryPolicy
	every     time.Duration
	sched     Schedule // Cron or Schedule (nil: Every, or not recurring)
	missed    Missed   // resolved: never MissedDefault for a recurring task
	times     int
	notBefore time.Time // submission + Delay
	planned   time.Time // recurring: planned start of the current run
	timer     timerwheel.Handle
	due       time.Time // when the timer is due (valid while inWheel)
	startBy   time.Time // a series' start being handed out: the worker must claim it by then (zero: no limit)
	follow    time.Time // the start after followOf, if followOK (following)
	followOf  time.Time
	followOK  bool
	inWheel   bool
	branched  bool     // its last run's successful attempt called Choose: only chosen successors run (branch.go)
	chosen    []string // the successors it chose, if branched
	children  []int32  // the tasks its attempts spawned, in the order they joined the graph (spawn.go)
	minOne    bool     // NoneFailedMinOneSuccess: the rule bits say NoneFailed
	err       error    // the last failed attempt's error, or the cancel cause
	result    any
	hasResult bool
	more      []int32         // dependents submitted in later batches
	values    context.Context // SubmitContext's context, for the attempts' values
	slots     int32           // Task.Slots, when more than 1
	reruns    int32           // times Rerun re-opened it (rerun.go)
}

// reruns is how many times Rerun re-opened t.
func (s *state) reruns(t int32) int32 {
	if x := s.tasks[t].x; x != nil {
		return x.reruns
	}
	return 0
}

// arena holds the dependency and successor lists of one submitted batch.
type arena struct {
	edges []int32
	live  int32 // records still using it
}

// holds is what retention needs to know of a task, in a slice of its own
// beside the records, so that schedulers without retention do not pay.
type holds struct {
	preds   int32  // predecessors whose ends are not settled (cascade.go): they may still tell it something
	kids    int32  // retained dependents, whose dependency lists name it
	refs    int32  // retained Skipped tasks that name it as their cause
	hash    uint32 // its ID's hash: dropping it need not read the ID again
	dropDue bool   // its time is up; dropped once nothing holds it
}

type retention struct {
	at    time.Time // when the task became final
	t     int32
	rerun int32 // its re-runs then (Rerun): an entry of an end since re-opened is stale
}

// poolState is one worker pool as the coordinator sees it.
type poolState struct {
	name      string
	size      int
	ready     readyq.Queue // entry: rseq<<32 | task; stale entries are skipped when met
	readyLive int          // tasks Ready in this pool
	lanes     []int        // its workers' lanes, indexes into state.lanes
	idle      int          // lanes whose worker waits for work
	measured  bool
	cost      time.Duration    // estimate of one attempt's time: see measure
	samples   [8]time.Duration // the last samples, a ring
	sampled   int              // samples taken
	maxTarget int              // immutable: maxTarget, unless a test lowered it
	revokeAt  time.Time        // when to take back worse work for a better ready task (zero: not planned)
	stuckAt   time.Time        // when a lane's attempt will have run revokeDelay (zero: none to watch)
	minPrio   int32            // the best priority any task of the pool was submitted with
	maxPrio   int32            // the worst
	totals    Totals           // what ended since New (Totals)

	// Flow control (flow.go).
	paused    bool       // Pause: nothing is handed out
	rate      *rateLimit // WithRateLimit, SetRateLimit (nil: none)
	tokenAt   time.Time  // when the rate limit has a token for the ready work waiting (zero: not waiting for one)
	tokenFrom time.Time  // when the token the ready work waits for came, or comes (zero: none owed; flow.go take)
	multi     bool       // a task of several slots was submitted to it: dispatch looks at the head of its queue
	reserving bool       // a task of several slots heads its best level: workers are kept for it
}

// laneState is one worker's lane as the coordinator sees it.
type laneState struct {
	l       *lane.Lane
	pool    int
	n       uint32            // items written
	pub     uint32            // items handed out: published, or to be by the loop (outbox.Publish)
	shown   uint32            // items the loop was told to publish
	end     uint32            // items from here to n are revoked: where stealing starts
	applied uint32            // items reported done and applied
	peek    uint32            // first item not yet seen claimed (EventStarted)
	fuseAt  uint32            // first item whose successors fusion has not fully considered
	live    int               // published items neither applied nor revoked
	open    bool              // the worker has work or has not yet reported itself idle
	refill  bool              // it reported progress this iteration: top it up
	worst   int32             // the worst priority published since it opened
	best    int32             // the best priority published since it opened
	head    uint32            // the item its worker was last seen running (unstick)
	headAt  time.Time         // since when (zero: it was running nothing)
	holder  int32             // 1 + the task of several slots this idle lane is held for (0: none; flow.go); -(1 + a hold) for an abandoned attempt (abandon.go)
	handed  *[lane.Size]int64 // per slot: when its item was handed out (UnixNano), for the history (history.go); nil until used
	seen    *[lane.Size]int64 // per slot: when the coordinator saw its item started (UnixNano; 0: not seen); nil until it watches starts
	lastEnd int64             // when the history's last item of this lane ended (UnixNano): where the next one's start is inferred from
	join    *attemptRec       // the shared record this lane's next plain first success may join at once (joinPlain), valid while joinSer is the open shared record
	joinSer uint64            // join's serial
}

// state is all scheduling state. It has no goroutines, channels or clock;
// its methods take now. It is not safe for concurrent use: the coordinator
// goroutine owns it (the one exception is state.final, see Scheduler).
type state struct {
	tasks  []rec
	hot    []hot // parallel to tasks
	specs  *lane.Specs
	ids    idtable.Table
	arenas []arena
	pools  []poolState
	byName map[string]int
	lanes  []laneState
	wheel  *timerwheel.Wheel[int32]
	hungry *atomic.Bool // shared with the workers: a pool has idle workers and nothing ready

	open    int // tasks not final
	closing bool
	cutting bool // Shutdown's cancellations have begun: children joining the graph from now on are cancelled at once (spawn.go)
	rseq    uint32

	watchers     // WaitTasks calls and Batches (waittasks.go)
	keyTable     // Task.Key: limits and turns (keys.go)
	abandonTable // what abandoned attempts hold while their functions run (abandon.go)
	historyTable // what attempts are remembered (history.go)

	// Spawning (spawn.go). fam is nil until the first Spawn; then it is
	// parallel to tasks.
	fam      []famRec
	pend     map[int32]*pending // by task: what its running attempt spawned or chose
	joins    []int32            // spawners whose children may all be final: joinAll completes them
	joinBusy bool               // joinAll is under way

	dur *durable // WithStore: what to write at the end of the iteration (nil: not durable)

	urged    bool // hurry asked workers to report an end: look at the lanes once more (ready)
	caughtUp bool // peek applied ends to tell a start after them: dispatch again (ready)

	frozen   bool          // a scan is under way: status reads items from frontier on as unclaimed
	frontier []uint32      // per lane, while frozen: the first item its worker had not claimed at freeze
	kinds    kindSet       // the kinds of events some listener wants: those are recorded (none: nobody listens)
	lag      time.Duration // while kinds is not empty: 0, events are told at once; else every listener accepts events this late (lagged.go)
	lagAt    time.Time     // while lagged: when to look at every lane for what the workers did unreported (zero: nothing out)
	events   []Event       // decided since the last ready
	eventCap int           // how many the last iteration that decided any decided: the next one's first allocation (emit)

	// The outbox's lists (ready.go), reused: what the loop must do.
	answers  []answer      // callers to answer at the end of the iteration (later)
	pubs     []publication // lane items to publish
	early    []publication // lane items to publish before the commit (journaled.go)
	stops    []stop        // attempt contexts to end
	stopReqs []stopReq     // attempts stopped this iteration, resolved into stops by ready
	goes     []goItem      // careful starts recorded this iteration (careful.go)

	sink        uint64 // submit's look-ahead loads land here
	rng         *rand.Rand
	scratch     []int32            // reused by submit and advance
	notes       []note             // the trigger-rule cascade's worklist (cascade.go)
	cascading   bool               // a cascade is applying notes
	causeClass  map[int32]endClass // Skipped tasks whose class is not their cause's status's (causeclass.go); nil until a re-run needs one
	work        []int32            // reused by fuse
	groupRoot   [lane.Size]int32   // reused by revokeTail
	groupSize   [lane.Size]int32   // reused by revokeTail
	groupWanted [lane.Size]bool    // reused by revokeTail
	tried       []int              // reused by steal
	arenaFree   []int32

	// WithMiddleware: when each task last became ready (UnixNano), for
	// worker.Job.Ready; grown by stampReady.
	stamps  bool
	readyAt []int64

	testCheck func(*state) // only for testing: called at the end of every iteration (export_test.go)

	// Retention (WithRetention): final tasks are forgotten after keep.
	retain      bool
	keep        time.Duration
	held        []holds // parallel to tasks when retention is on
	finalized   []int32 // final since the last settle: their retention time starts
	settledEnds []int32 // settled since the last settle (cascade.go): they no longer hold their successors
	expiry      []retention
	expHead     int
	recFree     freeRecs // dropped records, reused by submit, lowest first

	// The open change feeds' marks (changes.go); nil: none, and nothing
	// is marked. Last, so that no field the hot path reads moves for it.
	chg []*changeSet
}

func newState(now time.Time, pools []poolState, lanesPerPool []int, rng *rand.Rand) *state {
	s := &state{
		pools:  pools,
		byName: make(map[string]int, len(pools)),
		wheel:  timerwheel.New[int32](now, time.Millisecond),
		hungry: new(atomic.Bool),
		specs:  new(lane.Specs),
		rng:    rng,
	}
	for i := range s.pools {
		p := &s.pools[i]
		if p.maxTarget == 0 {
			p.maxTarget = maxTarget
		}
		p.minPrio, p.maxPrio = math.MaxInt32, math.MinInt32
		s.byName[p.name] = i
		for range lanesPerPool[i] {
			id := len(s.lanes)
			s.lanes = append(s.lanes, laneState{l: lane.NewLane(id), pool: i, worst: math.MinInt32, best: math.MaxInt32})
			p.lanes = append(p.lanes, id)
			p.idle++
		}
	}
	return s
}

// spec returns task t's worker-visible data.
func (s *state) spec(t int32) *lane.Spec { return s.specs.Own(t) }

func (s *state) key(t int32) string { return s.specs.Own(t).ID }

// find resolves an ID.
func (s *state) find(id string) (int32, bool) {
	return s.ids.Find(id, s.ids.Hash(id), s.key)
}

// findLive resolves an ID for a caller: a task reserved by a running
// attempt's Spawn is not in the graph yet.
func (s *state) findLive(id string) (int32, bool) {
	t, ok := s.find(id)
	if ok && s.hot[t].status == reserved {
		return 0, false
	}
	return t, ok
}

func (s *state) extra(t int32) *extra {
	r := &s.tasks[t]
	if r.x == nil {
		r.x = &extra{}
		s.hot[t].flags |= fExtra
	}
	return r.x
}

// successors iterates over t's successors: the tasks of its own batch
// that depend on it (its succ span, in the arena), then those submitted
// later (x.more). Every walk over what waits on a task goes through it.
func (s *state) successors(t int32) iter.Seq[int32] {
	return func(yield func(int32) bool) {
		r := &s.tasks[t]
		for _, c := range s.edges(r, r.succ) {
			if !yield(c) {
				return
			}
		}
		if r.x != nil {
			for _, c := range r.x.more {
				if !yield(c) {
					return
				}
			}
		}
	}
}

// hasSuccessors reports whether anything waits on t.
func (s *state) hasSuccessors(t int32) bool {
	r := &s.tasks[t]
	return r.succ.n > 0 || (r.x != nil && len(r.x.more) > 0)
}

func (s *state) edges(r *rec, sp span) []int32 {
	return s.arenas[r.arena].edges[sp.off : sp.off+sp.n : sp.off+sp.n]
}

// loc encodes an item's place for rec.link: lane and slot.
func loc(li int, seq uint32) int32 { return int32(li)<<10 | int32(seq&(lane.Size-1)) }

// loc's ten bits of slot must hold every slot of a lane.
var _ [1]struct{} = [lane.Size >> 10]struct{}{}

// locate decodes rec.link into the lane and the item's sequence.
func (s *state) locate(link int32) (*laneState, uint32) {
	ls := &s.lanes[link>>10]
	slot := uint32(link) & (lane.Size - 1)
	return ls, ls.applied + (slot-ls.applied)&(lane.Size-1)
}

func (s *state) emit(kind EventKind, t int32, now time.Time) *Event {
	if s.dur != nil {
		s.dur.touch(t) // every transition with an event is written
	}
	if s.chg != nil {
		s.markChanged(t) // and read by the change feeds (changes.go)
	}
	if !s.kinds.has(kind) {
		return nil
	}
	if s.events == nil {
		// The slice goes to the subscribers with the outbox: a new one per
		// iteration, sized as the last one was rather than grown by
		// doubling (a lagged subscriber's iterations decide thousands).
		s.events = make([]Event, 0, max(s.eventCap, 16))
	}
	r := &s.tasks[t]
	s.events = append(s.events, Event{Kind: kind, TaskID: s.key(t), Pool: s.pools[s.hot[t].pool].name,
		Attempt: int(r.attempts), Run: int(r.runs) + 1, At: now})
	e := &s.events[len(s.events)-1]
	if s.fam != nil && s.fam[t].parent != noTask {
		e.Parent = s.key(s.fam[t].parent)
	}
	return e
}

// setObserved says which kinds of events are recorded (those some
// listener wants; none: nobody listens), and how late they may be told:
// lag 0, at once (prompt); otherwise up to lag after they happened
// (lagged.go). As they start being told at once, every attempt handed out
// is asked to be reported as soon as it ends.
func (s *state) setObserved(kinds kindSet, lag time.Duration) {
	if kinds == 0 {
		lag = 0
	}
	was := s.prompt()
	s.kinds = kinds
	if kinds&lateKinds != 0 && lag == 0 && !was {
		s.hurryAll()
	}
	if lag != s.lag {
		s.lagAt = time.Time{} // planned again by ready, for the new lag
	}
	s.lag = lag
}

// prompt reports whether events are told as soon as they happen, which
// takes every attempt reported by its worker as soon as it ends, and
// every start looked for in every iteration (ready). A lagged listener
// (MaxLag) alone is not prompt (lagged.go), nor are listeners of timely
// kinds only (lateKinds): a worker reports every failure at once anyway.
func (s *state) prompt() bool { return s.kinds&lateKinds != 0 && s.lag == 0 }

// poolLanes returns the lanes of pool i, for New to start their workers.
func (s *state) poolLanes(i int) []*lane.Lane {
	var out []*lane.Lane
	for _, li := range s.pools[i].lanes {
		out = append(out, s.lanes[li].l)
	}
	return out
}

// empty reports whether no task was ever submitted or restored.
func (s *state) empty() bool { return len(s.tasks) == 0 }

// settledAll reports whether every task is final (Wait's answer).
func (s *state) settledAll() bool { return s.open == 0 }

// tellsStarts reports whether starts are recorded as the workers claim
// their attempts: for listeners of EventStarted (subscribers, the task
// log at Debug), and on a durable scheduler, which commits every start
// whether or not anyone listens (a crash during the attempt must count
// it). A start found while the lanes are looked at for another reason is
// told then; whether they are looked at in every iteration is
// watchesStarts'.
func (s *state) tellsStarts() bool { return s.kinds.has(EventStarted) || s.dur != nil }

// watchesStarts reports whether ready looks at every lane for starts in
// every iteration: for a prompt listener of EventStarted, and on a
// durable scheduler. For lagged listeners alone, only at the look lagDue
// plans.
func (s *state) watchesStarts() bool {
	return (s.lag == 0 && s.kinds.has(EventStarted)) || s.dur != nil
}

func (e *Event) setCause(s *state, cause int32) {
	if e != nil && cause != noTask {
		e.Cause = s.key(cause)
	}
}
