package replica

import "errors"

// Errors of this package. Each comment says who returns it.
var (
	// ErrInvalidOption is returned by NewStore's first Load, New and
	// NewClient for an option or argument they cannot honour (a store name
	// that is not 1-64 letters, digits, '-' or '_', a nil connection, a
	// lease shorter than MinLease, a coordinator option the replica sets
	// itself).
	ErrInvalidOption = errors.New("replica: invalid option")
	// ErrFenced: another replica took the store over (its term began in
	// the log after this one's last append), so this one may append
	// nothing more. A Store's Commit returns it, wrapped; a durable
	// scheduler stops on it as on any failed commit (errors.Is(err,
	// coordinator.ErrStoreFailed) holds too), and a Replica goes back to
	// standby. The lease's gate (Middleware) and a Replica's remote
	// pools' fence (jetstream.WithFence) fail an attempt they hold back
	// with it too, wrapped ("attempt not started", or not published
	// again); that failure's commit is refused.
	ErrFenced = errors.New("replica: fenced: another replica leads the store now")
	// ErrCommitTooLarge is returned by Commit for a commit whose records
	// need more than 1,000 messages (an atomic batch's limit): about a
	// gigabyte with the server's default 1 MiB max payload.
	ErrCommitTooLarge = errors.New("replica: commit too large for one atomic batch")
	// ErrNoLeader is returned by a Client's (and a Replica's) calls whose
	// context ended while no replica led the store: none runs, or the
	// leader died and no standby has taken over yet (a standby takes over
	// a lease after the leader's last sign of life). Start a replica
	// (New), or call again with a longer context.
	ErrNoLeader = errors.New("replica: no replica leads the store (start one with replica.New, or give the call a longer context: a standby takes over a lease after the leader falls silent)")
	// ErrLeaderLost is returned by Submit and Cancel when the leader that
	// had the request stopped leading before it answered: the request may
	// or may not have been applied. Look (Info) before trying again: a
	// batch that was stored makes a second Submit fail with
	// coordinator.ErrDuplicateID.
	ErrLeaderLost = errors.New("replica: the leader was lost with the request in flight; it may or may not have been applied")
	// ErrAnswerTooLarge is returned by a Client's call whose answer
	// would exceed the NATS server's max payload (1 MiB by default): an
	// Info or a WaitTasks error that carries large results
	// (coordinator.SetResult). Read such results where they are
	// written, or keep them smaller than the max payload.
	ErrAnswerTooLarge = errors.New("replica: the leader's answer exceeds the server's max payload")
	// ErrClosed is returned by a Client's calls after its Close, by a
	// Replica's after its Shutdown, and (wrapped) by a Store's Load and
	// Commit after its Close.
	ErrClosed = errors.New("replica: closed")
)
