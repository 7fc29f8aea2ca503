package coordinator

import (
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/actor"
)

// subscriber delivers events to one callback on its own goroutine, so a
// slow or blocked callback never holds up the coordinator. Its queue is
// unbounded: a callback that never returns keeps every later event in memory
// until it is unsubscribed. A callback that panics is unsubscribed; the
// panic, with its stack, is logged at Error.
type subscriber struct {
	fn     func(Event)   // immutable
	log    *slog.Logger  // immutable
	lag    time.Duration // immutable: how late it accepts events (MaxLag; 0: at once)
	kinds  kindSet       // immutable: the kinds of events it is told (Kinds; default: every kind)
	gone   actor.Signal  // immutable: notified by unsubscribe, so that the loop drops it (zero: nobody to tell)
	site   string        // immutable: where Subscribe was called (file:line), for ShutdownError
	name   string        // immutable: what ShutdownError calls it ("": "subscriber" and its site)
	signal actor.Signal
	inCall atomic.Pointer[Event] // the event fn is being called with (nil: none), for ShutdownError
	goid   atomic.Uint64         // the delivery goroutine's id, once it runs
	exited chan struct{}         // closed when the delivery goroutine returns
	out    atomic.Bool           // set with closed, under mu: read before each event without the lock (isClosed)

	mu     sync.Mutex
	queue  [][]Event // guarded by mu: chunks published, not yet delivered
	closed bool      // guarded by mu: unsubscribed; deliver nothing more
	last   bool      // guarded by mu: the scheduler has stopped; exit once the queue is empty
}

func newSubscriber(fn func(Event), log *slog.Logger) *subscriber {
	return &subscriber{fn: fn, log: log, kinds: allKinds, signal: actor.NewSignal(), exited: make(chan struct{})}
}

// SubscribeOption configures one subscription (Subscribe).
type SubscribeOption func(*subscriber)

// Kinds says which kinds of events the subscriber is told: only those
// listed, in the order they happen, as an unfiltered subscriber is told
// them. Without Kinds a subscriber is told every kind; Kinds() with none
// listed, none at all (it costs nothing). Kinds panics on a kind the
// package does not define.
//
// The coordinator makes only the kinds some listener wants (subscribers,
// and WithLogger's task log at the levels its handler enables), so that
// a subscriber that leaves out the two kinds every attempt makes,
// EventStarted and EventSucceeded, costs the scheduler next to nothing
// on short tasks (bench/README.md, BenchmarkObserve). Starts cost more
// than their events: while somebody wants EventStarted, the coordinator
// looks at the workers' lanes for attempts they claimed and did not
// report; without it, it looks for none (a durable scheduler
// (WithStore) commits every start all the same).
//
// Some kinds are timely: EventFailed, EventRetrying, EventSnoozed,
// EventPaused, EventResumed and EventReopened are decided as soon as they
// happen, since a worker reports every failure (and snooze) at once. A subscriber of these kinds only is told at once
// without making the coordinator have every attempt reported (which a
// prompt subscriber of any other kind does: see MaxLag), and MaxLag
// changes nothing for it.
func Kinds(kinds ...EventKind) SubscribeOption {
	var m kindSet
	for _, k := range kinds {
		if int(k) >= len(kindNames) {
			panic("coordinator: Kinds: unknown " + k.String())
		}
		m |= 1 << k
	}
	return func(sub *subscriber) { sub.kinds = m }
}

// kindSet is a set of event kinds: bit k for EventKind k.
type kindSet uint16

// allKinds holds every kind the package defines.
const allKinds kindSet = 1<<len(kindNames) - 1

// lateKinds are the kinds a listener may be told late: those decided when
// the coordinator learns what a worker did, which it learns at once only
// if it asks for every attempt to be reported (a prompt listener), or
// looks at the lanes (a lagged one). The others, failures and pauses,
// are decided as soon as they happen (Kinds).
const lateKinds = allKinds &^ (1<<EventFailed | 1<<EventRetrying | 1<<EventPaused | 1<<EventResumed | 1<<EventSnoozed | 1<<EventReopened)

var _ = [16 - len(kindNames)]struct{}{} // every kind has its bit in a kindSet

func (m kindSet) has(k EventKind) bool { return m&(1<<k) != 0 }

// kindsOf returns the kinds of events holds.
func kindsOf(events []Event) kindSet {
	var m kindSet
	for i := range events {
		m |= 1 << events[i].Kind
	}
	return m
}

// MaxLag says that the subscriber accepts every event up to d after it
// happened, on the scheduler's clock (WithClock), in exchange for a
// scheduler that does not have every attempt reported one by one for it.
//
// A subscriber told events at once (without MaxLag, or with d <= 0, which
// is the same) makes the coordinator have every attempt reported by its
// worker as soon as it ends: a wake of the coordinator per attempt, which
// on tasks of tens of microseconds costs several percent of throughput,
// about three times what a lagged subscriber costs (bench/README.md,
// BenchmarkObserve). Either way the events themselves are made, which on
// empty tasks costs more than the tasks.
//
// While every subscriber accepts a lag, the coordinator asks for no
// report of its own: it decides the events when it learns what the
// workers did from the reports they send anyway (a worker reports every
// half lane of attempts, when it runs dry, and at every failure), and it
// looks at every worker's lane every d while work it handed out has not
// come back, so that no event waits longer than d for it. The subscriber
// gets the events of each task that a prompt subscriber would, in the
// same order, and across tasks they keep the same rules (an end is told
// before the start it made room for, a start after the successes it
// waited for); only later, and in larger groups. With several lagged
// subscribers, the smallest d counts for all; with a prompt one (or
// WithLogger's task log at an enabled level), every subscriber is told
// at once, until it goes. Subscribers of timely kinds only (Kinds) do
// not count: they are told at once without costing a report per attempt.
//
// What a lag changes is the times: an event's At is when the coordinator
// learned of it, up to d after the worker claimed or ended the attempt,
// so that durations computed from Ats are accurate to about d (the
// EventStarted of a short attempt often comes with its end, at the same
// At). Under a mock clock (clock.Mock), the look at the lanes is a timer
// like the others: it fires only as the clock is moved, so events may
// wait for the test to move it. A d of a millisecond or less gains little
// and costs a wake per d while work is out; a d of a fraction of what the
// caller refreshes at (a dashboard's update interval) costs nothing
// measurable.
func MaxLag(d time.Duration) SubscribeOption {
	return func(sub *subscriber) { sub.lag = max(d, 0) }
}

// publish appends one loop iteration's events. It reports false once the
// subscriber has unsubscribed. Called only by the coordinator goroutine.
func (sub *subscriber) publish(events []Event) bool {
	sub.mu.Lock()
	closed := sub.closed
	if !closed {
		sub.queue = append(sub.queue, events)
	}
	sub.mu.Unlock()
	sub.signal.Notify()
	return !closed
}

// end tells the delivery goroutine that no more events will come.
func (sub *subscriber) end() {
	sub.mu.Lock()
	sub.last = true
	sub.mu.Unlock()
	sub.signal.Notify()
}

func (sub *subscriber) unsubscribe() {
	sub.mu.Lock()
	sub.closed = true
	sub.out.Store(true)
	sub.queue = nil
	sub.mu.Unlock()
	sub.signal.Notify()
	if sub.gone != (actor.Signal{}) {
		sub.gone.Notify() // the loop drops it now, not at the next events: it may have been the last prompt one
	}
}

// run is the delivery goroutine. It calls fn for every event in order and
// returns after unsubscribe, after a panic in fn, or when the scheduler has
// stopped and every event has been delivered.
func (sub *subscriber) run() {
	defer close(sub.exited)
	sub.goid.Store(goid())
	for range sub.signal.C() {
		for {
			sub.mu.Lock()
			chunks, closed, last := sub.queue, sub.closed, sub.last
			sub.queue = nil
			sub.mu.Unlock()
			if closed {
				return
			}
			if len(chunks) == 0 {
				if last {
					return
				}
				break
			}
			for _, events := range chunks { // never written again: the loop publishes a new slice each time
				for i := range events {
					e := &events[i]
					if !sub.kinds.has(e.Kind) {
						continue
					}
					if sub.isClosed() {
						return
					}
					if !sub.call(e) {
						sub.unsubscribe()
						return
					}
				}
			}
		}
	}
}

// call delivers one event, and reports false if the callback panicked.
func (sub *subscriber) call(e *Event) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			ok = false
			defer func() { _ = recover() }() // a logger that panics too: the report is lost, the process is not
			sub.log.Error("coordinator: subscriber panicked and was unsubscribed",
				slog.Any("panic", r), slog.String("event", e.Kind.String()), slog.String("task", e.TaskID),
				slog.String("stack", string(debug.Stack())))
		}
	}()
	sub.inCall.Store(e)
	sub.fn(*e)
	sub.inCall.Store(nil)
	return true
}

// describe says, for ShutdownError, where the subscriber was subscribed
// and what its delivery is doing. Safe for concurrent use.
func (sub *subscriber) describe() string {
	sub.mu.Lock()
	waiting := 0
	for _, chunk := range sub.queue {
		for i := range chunk {
			if sub.kinds.has(chunk[i].Kind) {
				waiting++
			}
		}
	}
	sub.mu.Unlock()
	d := sub.name
	if d == "" {
		d = "subscriber " + sub.site
	}
	switch e := sub.inCall.Load(); {
	case e == nil:
	case e.TaskID != "":
		d += fmt.Sprintf(" in its callback for %v of task %s", e.Kind, quoteID(e.TaskID))
	default:
		d += fmt.Sprintf(" in its callback for %v of pool %s", e.Kind, quoteID(e.Pool))
	}
	return d + fmt.Sprintf(", %d events not yet delivered", waiting)
}

// isClosed reports whether the subscriber has unsubscribed. It takes no
// lock: the delivery goroutine asks before every event.
func (sub *subscriber) isClosed() bool { return sub.out.Load() }

// goid returns the calling goroutine's id, read from its stack header
// ("goroutine 123 [running]:"). Only Shutdown and the subscribers use it,
// to tell a call made from inside a subscriber callback.
func goid() uint64 {
	var buf [32]byte
	n := runtime.Stack(buf[:], false)
	const prefix = len("goroutine ")
	var id uint64
	for _, c := range buf[prefix:n] {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + uint64(c-'0')
	}
	return id
}
