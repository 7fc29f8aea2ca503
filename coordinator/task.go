package coordinator

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Task is one node of the graph. Submit copies what it needs; the caller may
// reuse the Task afterwards.
type Task struct {
	ID   string                          // unique, non-empty
	Run  func(ctx context.Context) error // the work; ctx ends on Cancel, on timeout and on Shutdown
	Deps []string                        // tasks that must succeed first (or end as When says): in the same batch (any order) or submitted before

	// Priority orders ready tasks of one pool: lower runs first (it must
	// fit in 32 bits: [math.MinInt32, math.MaxInt32]); ties start
	// in the order they became ready (submission order for tasks ready at
	// once).
	Priority int
	Retry    RetryPolicy

	Delay   time.Duration // not started before submission time + Delay
	Timeout time.Duration // per attempt; 0 = none

	// A recurring task runs again after each successful run, at most one
	// of: Every, at a fixed rate, each run planned from the last planned
	// start; Cron, a robfig/cron/v3 standard expression (five fields,
	// descriptors such as @hourly, a CRON_TZ= prefix or its alias TZ=; UTC
	// unless it names a zone, and CRON_TZ= with no zone is UTC too); or
	// Schedule. A series runs at its starts from its origin, the moment it
	// may start (submission plus Delay, once its dependencies allow): an
	// Every series at the origin itself and every Every after it; a Cron
	// or Schedule series at the starts Next gives strictly after the
	// origin, as robfig/cron's own scheduler does, so one submitted
	// exactly on one of its slots (testing/synctest starts on the hour)
	// waits for the next. Times is the total number of runs; 0
	// means no end: the series runs until Cancel or Shutdown. Missed says
	// what to do with the starts missed (see Missed). Runs never overlap;
	// a run that fails after its retries ends the series Failed.
	//
	// Cron time is literal, as robfig/cron's: in a zone with daylight
	// saving time, a start in the hour skipped in spring does not happen
	// and one in the hour repeated in autumn happens twice.
	Every    time.Duration
	Cron     string
	Schedule Schedule
	Times    int
	Missed   Missed

	Pool string // "" = the default pool
	// Payload is for custom worker types; for Func, a []byte (or nil); on
	// a durable scheduler, a []byte (or nil). Submit copies a []byte
	// Payload, so the caller may reuse its buffer; any other value is
	// shared with the attempts as it is (do not change it afterwards).
	Payload any

	// Func names a function registered with WithFunc, called with Payload
	// instead of Run (leave Run nil). A durable scheduler (WithStore)
	// needs it: a closure cannot be stored, a name can.
	Func string

	// When is the trigger rule: which ends of its dependencies let the
	// task run. The zero value, AllSucceeded, is the default rule.
	When Trigger

	// Key groups tasks for flow control: a tenant, a customer, a host.
	// Within a priority level of a pool, ready tasks of different keys take
	// turns, so that a key with many ready tasks does not hold back one
	// with few; WithKeys caps the attempts of a key running at once, across
	// pools, and weights the turns. "" is no key (such tasks take turns
	// together, as one more key, and are never capped).
	Key string
	// Slots is how many of its pool's workers the task takes while it runs
	// (0 means 1): a memory-hungry job may take 4 of 8. It starts only when
	// that many workers of its pool are free, and holds them until its
	// attempt ends. It must not exceed the pool's size.
	Slots int

	mapped bool // made by Map: it cannot recur (validateTask)
}

// Trigger is a task's rule for running after its dependencies, as in
// Airflow's trigger rules. Under every rule a task runs at most once per
// submission (its retries and recurring runs aside) and is skipped, never
// failed, when its rule cannot be met; what depends on it then follows
// its own rule.
//
// How a rule sees a dependency that did not succeed, by the root cause of
// its end: "failed" is a dependency that Failed, or was skipped because of
// a failure upstream; "cancelled" one that was Cancelled, or skipped
// because of a cancel upstream; a dependency skipped because a rule
// upstream was not met (see Cause) is neither.
//
// A Skipped task is seen by the worst end among its dependencies that did
// not succeed: a failure outranks a cancel, which outranks a skip by a
// rule. So the outcome of every task is a function of the graph and of the
// ends alone, whatever order they come in. A task is skipped as soon as
// its rule can no longer be met, but until all of its dependencies have
// ended its class may still get worse (skipped at once because one
// dependency was cancelled, it is seen as failed if another one fails
// later). AllSucceeded and AllDone do not tell the classes apart and react
// at once; AnyFailed and the NoneFailed rules wait until a Skipped dependency's
// class is final: it is failed (nothing is worse), or every dependency
// upstream of it has ended. A NoneFailed task behind a task skipped by a
// rule thus waits for that task's other dependencies too.
//
// TaskInfo.Cause of a task a rule skipped: under AllSucceeded and the
// NoneFailed rules, the root cause: an upstream task of the worst end, the first
// to reach the task among equals (one that failed or was cancelled, or
// whose own rule was not met, or a branch that did not choose the path;
// the dependencies that had ended when the task was submitted reach it in
// the order of its Deps, a branch that did not choose it after the
// others, and later ends in the order of their events);
// under AnyFailed, skipped because no dependency failed, and under
// NoneFailedMinOneSuccess, skipped because none succeeded, "": nothing
// upstream went wrong, the task's own rule was not met (so is a series
// whose schedule had no start left once it could start). EventSkipped.Cause names the cause known when the task was
// skipped; a worse end that came later is in TaskInfo.Cause.
// Upstream(ctx) tells a task how each of its dependencies ended.
//
// Tasks under a rule other than AllSucceeded are never fused into a
// dependency's lane: they go through the ready queue.
type Trigger int

const (
	// AllSucceeded runs the task once every dependency succeeded; it is
	// skipped as soon as one does not.
	AllSucceeded Trigger = iota
	// AllDone runs the task once every dependency is final, whatever its
	// end: cleanup. It is never skipped because of a dependency.
	AllDone
	// AnyFailed runs the task as soon as one dependency failed (the others
	// may still run): alerting. It is skipped once every dependency is
	// final and none failed. It needs at least one dependency.
	AnyFailed
	// NoneFailed runs the task once every dependency is final and none
	// failed or was cancelled (succeeded, or skipped by a rule upstream);
	// it is skipped as soon as one fails or is cancelled.
	NoneFailed
	// NoneFailedMinOneSuccess is NoneFailed that also needs one dependency
	// to have succeeded, Airflow's none_failed_min_one_success: the join
	// after a branch (Choose), which runs after whichever path was chosen
	// and is skipped, by its own rule (Cause ""), when no path ran. It
	// needs at least one dependency.
	NoneFailedMinOneSuccess
)

// String returns the rule's name, as written in Go.
func (t Trigger) String() string {
	switch t {
	case AllSucceeded:
		return "AllSucceeded"
	case AllDone:
		return "AllDone"
	case AnyFailed:
		return "AnyFailed"
	case NoneFailed:
		return "NoneFailed"
	case NoneFailedMinOneSuccess:
		return "NoneFailedMinOneSuccess"
	}
	return fmt.Sprintf("Trigger(%d)", int(t))
}

// RetryPolicy says how often and when a failed attempt is tried again.
// The zero value means one attempt, no retry.
type RetryPolicy struct {
	MaxAttempts int              // attempts per run, the first included; 0 means 1
	BaseDelay   time.Duration    // wait after the first failure; doubles after each further failure
	MaxDelay    time.Duration    // cap on one wait (0: no cap)
	Jitter      float64          // 0..1: a wait of d is drawn uniformly from [d*(1-Jitter), d]
	RetryIf     func(error) bool // nil: every error is retried; called on the worker's side, a RetryIf that panics or calls runtime.Goexit says no
}

// Delay is the wait before the next attempt after the given number of
// consecutive failures: min(MaxDelay, BaseDelay*2^(failures-1)), before
// jitter. It is 0 for failures < 1 and never overflows.
func (p RetryPolicy) Delay(failures int) time.Duration {
	if failures < 1 || p.BaseDelay <= 0 {
		return 0
	}
	d := p.BaseDelay
	for i := 1; i < failures; i++ {
		if d > (1<<62)/2 || (p.MaxDelay > 0 && d >= p.MaxDelay) {
			break
		}
		d *= 2
	}
	if p.MaxDelay > 0 && d > p.MaxDelay {
		d = p.MaxDelay
	}
	return d
}

// wait is the backoff after failures consecutive failures, jitter drawn
// from rng: within [d*(1-Jitter), d] for d = Delay(failures), computed so
// that no value Submit accepts can overflow.
func (p RetryPolicy) wait(failures int, rng *rand.Rand) time.Duration {
	d := p.Delay(failures)
	if p.Jitter <= 0 || d <= 0 {
		return d
	}
	span := float64(d) * p.Jitter // at most d: never overflows an int64 below
	n := time.Duration(span)
	if span >= float64(d) {
		n = d
	}
	return d - n + time.Duration(rng.Uint64N(uint64(n)+1))
}

func (p RetryPolicy) attempts() int {
	if p.MaxAttempts == 0 {
		return 1
	}
	return p.MaxAttempts
}

// Status is where a task is in its life cycle:
//
//	Pending ──deps met, delay passed──▶ Ready ──a worker claims it──▶ Running
//	Running ──ok, last run──▶ Succeeded
//	Running ──ok, more runs──▶ Pending (until the next planned start)
//	Running ──error, attempts left──▶ Pending (backoff) ──▶ Ready
//	Running ──error, none left──▶ Failed
//	Pending, Ready ──Cancel──▶ Cancelled; Running ──Cancel──▶ Cancelled when Run returns
//	Pending ──a dependency Failed, was Cancelled or Skipped──▶ Skipped
//	Running ──ok, having spawned tasks──▶ Pending (joining) ──they are all final──▶ as its Running ──ok──▶ would, or Failed
//
// Ready covers a task queued for its pool and one handed to a worker that
// has not claimed it yet (see the package doc, Dispatch); Running means a
// worker claimed the attempt: its function has been called and has not
// returned, or is about to be called. Succeeded, Failed, Cancelled and
// Skipped are final.
type Status uint8

const (
	Pending   Status = iota // waiting for dependencies, a delay, a backoff, its next run, or the tasks it spawned
	Ready                   // queued for a worker of its pool
	Running                 // a worker claimed its attempt: its function runs
	Succeeded               // final: every run succeeded
	Failed                  // final: a run failed with no attempts left
	Cancelled               // final: cancelled, or shut down before it finished
	Skipped                 // final: a dependency failed or was cancelled

)

var statusNames = [...]string{"pending", "ready", "running", "succeeded", "failed", "cancelled", "skipped"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Final reports whether s is a final state.
func (s Status) Final() bool { return s >= Succeeded && s <= Skipped }

// EventKind says what an Event reports. The names carry an Event prefix
// because Succeeded, Failed, Cancelled and Skipped already name statuses.
type EventKind uint8

const (
	EventStarted   EventKind = iota // a worker claimed an attempt: its function was called (At: when the coordinator learned it; see Dispatch)
	EventSucceeded                  // the task's last run succeeded: it is final
	EventFailed                     // a run failed with no attempts left: final
	EventRetrying                   // an attempt failed; the next one waits Event.Wait
	EventCancelled                  // the task was cancelled (Event.Err: ErrCancelled, or ErrClosed by Shutdown): final
	EventSkipped                    // a dependency failed or was cancelled (Event.Cause): final
	EventRecurred                   // run Event.Run of a recurring task succeeded; more runs follow
	EventPaused                     // Pause: pool Event.Pool starts nothing until resumed (TaskID is empty)
	EventResumed                    // Resume: pool Event.Pool starts work again (TaskID is empty)
	EventJoining                    // its attempt succeeded having spawned tasks (Spawn): it waits for them, Pending, holding no worker
	EventSpawned                    // a task spawned by an attempt of Event.Parent joined the graph, that attempt having succeeded: it is Pending
	EventSnoozed                    // its attempt asked to run again in Event.Wait (Snooze): no failure, no attempt used
	EventReopened                   // Rerun re-opened the final task: it is Pending again (Event.Cause: who asked, RerunRequest.By)
)

var kindNames = [...]string{"started", "succeeded", "failed", "retrying", "cancelled", "skipped", "recurred", "paused", "resumed", "joining", "spawned", "snoozed", "reopened"}

func (k EventKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event reports one decision of the coordinator about one task, or, for
// EventPaused and EventResumed, about one pool (TaskID is then empty).
type Event struct {
	Kind    EventKind
	TaskID  string
	Pool    string        // the task's pool ("" for the default one)
	Attempt int           // the attempt it concerns (1-based within the run)
	Run     int           // the run it concerns (1-based; recurring tasks have several)
	Err     error         // for EventRetrying and EventFailed: the attempt's error; for EventCancelled: ErrCancelled or ErrClosed
	Wait    time.Duration // for EventRetrying: the backoff chosen, jitter included
	Cause   string        // for EventSkipped: the upstream task to blame, as known then (see Trigger); for EventReopened: who asked (RerunRequest.By)
	Parent  string        // the task whose attempt spawned this one (Spawn); "" for a task submitted
	At      time.Time     // the coordinator's clock when it decided
}

// TaskInfo is a snapshot of one task, from Info.
type TaskInfo struct {
	ID       string
	Status   Status
	Pool     string
	Key      string // its flow-control key (Task.Key); "" for none
	Slots    int    // the workers of its pool an attempt takes (Task.Slots): 1 unless more were asked
	Priority int
	When     Trigger // its trigger rule (Task.When)
	Attempts int     // attempts made in the current (or last) run
	Runs     int     // runs finished successfully
	Err      error   // the last attempt's error, if it failed; for Cancelled: ErrCancelled or ErrClosed
	Cause    string  // for Skipped: the upstream task to blame, of the worst end (see Trigger); "" when its own rule was not met
	Result   any     // what the last successful attempt recorded with SetResult
	Parent   string  // the task whose attempt spawned it (Spawn); "" for a task submitted
	Children int     // the tasks its attempts spawned that joined the graph
	Joining  bool    // its function returned nil and the tasks it spawned are not all final: it is Pending until they are (Spawn)
	Reruns   int     // times Rerun re-opened it
}

// Errors returned by Submit, wrapped in a *TaskError naming the task
// (ErrCycle: a *CycleError).
var (
	ErrInvalidTask       = errors.New("coordinator: invalid task")
	ErrDuplicateID       = errors.New("coordinator: duplicate task id")
	ErrUnknownDependency = errors.New("coordinator: unknown dependency")
	ErrUnknownPool       = errors.New("coordinator: unknown pool")
	ErrCycle             = errors.New("coordinator: dependency cycle")
)

// ErrClosed is returned, unwrapped, by Submit once Shutdown has begun, and
// is the context cause of the attempts running at Shutdown.
var ErrClosed = errors.New("coordinator: scheduler is shut down")

// ErrCancelled is the context cause of an attempt whose task was cancelled
// while it ran.
var ErrCancelled = errors.New("coordinator: task cancelled")

// TaskError is a Submit error about one task. errors.Is sees the sentinel
// in Err.
type TaskError struct {
	ID     string // the task's ID
	Err    error  // one of the Err* sentinels, or a pool Validator's error
	Detail string // what exactly is wrong, if more than Err says
}

// Error names the task once, its ID cut to its first 64 bytes: for
// example `coordinator: task "c": unknown dependency: "b"`.
func (e *TaskError) Error() string {
	msg := "coordinator: task " + quoteID(e.ID) + ": " + strings.TrimPrefix(e.Err.Error(), "coordinator: ")
	if e.Detail != "" {
		msg += ": " + cut(e.Detail, maxDetailInMessage)
	}
	return msg
}

// maxDetailInMessage is how much of a TaskError's Detail its message
// shows: a detail may quote the user's strings (a cron expression, a
// pool's own error).
const maxDetailInMessage = 256

// cut returns s cut to about n bytes at a rune's start, saying how long
// it was.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:runeStart(s, n)] + fmt.Sprintf("… (%d bytes)", len(s))
}

// runeStart returns i, or the start of the rune i falls in (a few bytes
// back at most: bytes that are not UTF-8 are cut anywhere).
func runeStart(s string, i int) int {
	for back := 0; back < utf8.UTFMax && i-back > 0; back++ {
		if utf8.RuneStart(s[i-back]) {
			return i - back
		}
	}
	return i
}

// maxIDInMessage is how much of an ID an error message quotes.
const maxIDInMessage = 64

// quoteID quotes id for an error message, cut to its first
// maxIDInMessage bytes (at a rune's start) with its length said: a
// 5,000-byte ID must not make a 5,000-byte message.
func quoteID(id string) string {
	if len(id) <= maxIDInMessage {
		return strconv.Quote(id)
	}
	return fmt.Sprintf("%q… (%d bytes)", id[:runeStart(id, maxIDInMessage)], len(id))
}

func (e *TaskError) Unwrap() error { return e.Err }

// CycleError rejects a batch whose dependencies form a cycle. errors.Is(err,
// ErrCycle) is true for it.
type CycleError struct {
	InCycle []string // tasks on a cycle, sorted
	Behind  []string // tasks on no cycle that wait on one, sorted
}

// Error names at most the first 10 tasks of each list, each ID cut as a
// TaskError cuts it; the lists themselves are whole.
func (e *CycleError) Error() string {
	s := "coordinator: dependency cycle among " + listIDs(e.InCycle)
	if len(e.Behind) > 0 {
		s += "; blocked behind it: " + listIDs(e.Behind)
	}
	return s
}

// listIDs writes up to 10 IDs, quoted and cut (quoteID), and how many
// more there are.
func listIDs(ids []string) string {
	const most = 10
	var b strings.Builder
	for i, id := range ids {
		if i == most {
			fmt.Fprintf(&b, " and %d more", len(ids)-most)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quoteID(id))
	}
	return b.String()
}

// Is makes errors.Is(err, ErrCycle) true.
func (e *CycleError) Is(target error) bool { return target == ErrCycle }
