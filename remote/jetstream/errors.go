package jetstream

import (
	"errors"
	"fmt"

	"github.com/batonhq/baton/worker"
)

// Errors of this package. Each comment says who returns it.
var (
	// ErrInvalidOption is returned by NewPool and Serve for an option or
	// argument they cannot honour (a pool name that is not 1-64 letters,
	// digits, '-' or '_', a nil connection, a non-positive duration).
	ErrInvalidOption = errors.New("jetstream: invalid option")
	// ErrBadPayload is returned by Pool.Validate, and so by the
	// coordinator's Submit wrapped in its ErrInvalidTask, for a task whose
	// Payload is not a Payload (or *Payload) with a Kind, whose Data does
	// not fit in one NATS message, or whose ID cannot travel in a header.
	// Pool.Do returns it too, for a job Validate would refuse.
	ErrBadPayload = errors.New("jetstream: bad payload")
	// ErrUnknownKind is returned by Pool.Validate for a Kind outside the
	// list given to WithKinds, and is the error of an attempt whose kind
	// has no handler on the worker that took it (inside a *RemoteError).
	ErrUnknownKind = errors.New("jetstream: no handler for this kind")
	// ErrClosed is returned by Pool.Do once the Pool is closed, for the
	// attempts it was waiting for and for new ones.
	ErrClosed = errors.New("jetstream: pool closed")
	// ErrUnavailable is returned by Pool.Do when JetStream could not be
	// reached for longer than the pool's outage limit (WithMaxOutage): the
	// connection stayed down, or the stream did not answer. The attempt
	// fails and may be retried by the task's RetryPolicy.
	ErrUnavailable = errors.New("jetstream: JetStream unavailable")
	// ErrInFlight is returned by Pool.Do for a job whose attempt (ID, Round
	// and Attempt) another Do of the Pool is running: one attempt has one
	// outcome. A coordinator never does this.
	ErrInFlight = errors.New("jetstream: attempt already in flight")
	// ErrMaxDeliveries is returned by Pool.Do for an attempt that was
	// delivered to workers as many times as WithMaxDeliver allows without
	// an outcome: every worker that took it died or lost its lease. Do
	// returns it about a lease after the last delivery's lease ran out,
	// whether or not a worker is left (see the package doc, Decisions).
	ErrMaxDeliveries = errors.New("jetstream: attempt delivered too often without an outcome")
	// ErrSuperseded is returned by NewPool when a Pool of its instance of
	// a higher term of its epoch (WithGeneration) has its results
	// consumer: the new Pool is not made, and the newer one is left alone.
	ErrSuperseded = errors.New("jetstream: a newer generation of this pool instance runs")
)

// RemoteError is the error of an attempt whose handler returned an error on
// a worker machine, or that no handler there could run. Only its text
// crosses the network: errors.Is sees ErrUnknownKind for a missing handler,
// worker.ErrTimeout for a handler that failed at its deadline, and nothing
// else of the remote error's chain. A remote panic arrives as a
// *worker.PanicError whose Value is a *RemoteError with Panic set, and
// whose Stack is the remote goroutine's.
type RemoteError struct {
	Task     string // the task's ID
	Round    int    // the run number (Job.Round)
	Attempt  int    // the attempt number (Job.Attempt)
	Worker   string // the name of the Serve that ran it: its WithWorkerName, by default host name and process ID
	Delivery int    // how many times the attempt had been delivered when it ran (1 unless a worker died or lost its lease)
	Message  string // the remote error's text, or the panic value printed with %v
	Panic    bool   // the handler panicked

	unknownKind bool
	timedOut    bool
}

func (e *RemoteError) Error() string {
	what := "failed"
	if e.Panic {
		what = "panicked"
	}
	return fmt.Sprintf("jetstream: task %s round %d attempt %d %s on worker %s: %s",
		e.Task, e.Round, e.Attempt, what, e.Worker, e.Message)
}

// Is reports ErrUnknownKind for an attempt no handler could run, and
// worker.ErrTimeout for a handler that failed once the task's deadline had
// passed on the worker (a worker's clock may reach it before the
// coordinator's).
func (e *RemoteError) Is(target error) bool {
	return target == ErrUnknownKind && e.unknownKind || target == worker.ErrTimeout && e.timedOut
}
