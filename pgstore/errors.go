package pgstore

import (
	"errors"
	"fmt"
)

// Errors of this package. Each comment says who returns it. A Store's
// Load and Commit also return the coordinator's errors
// (coordinator.ErrStoreLocked), wrapped.
var (
	// ErrInvalidOption is returned by NewStore, New and NewClient for an
	// option or argument they cannot honour: a nil pool, a store name
	// that is not 1-63 bytes of letters, digits, '-', '_' or '.', a lease
	// under MinLease, a coordinator option the Service sets itself.
	ErrInvalidOption = errors.New("pgstore: invalid option")
	// ErrFenced: another instance took the store over (a new term began
	// after this one's), so this one commits nothing more. A Store's
	// Commit returns it, wrapped; a durable scheduler stops on it as on
	// any failed commit (errors.Is(err, coordinator.ErrStoreFailed)
	// holds too), and a Service goes back to standby.
	ErrFenced = errors.New("pgstore: fenced: another instance leads the store now")
	// ErrOutage is returned, wrapped with the last database error, by a
	// Store's Commit when the database could not be reached for longer
	// than WithMaxOutage: the scheduler then stops as on any failed
	// commit, and a Service goes back to standby and leads again when
	// the database is back.
	ErrOutage = errors.New("pgstore: database unreachable for longer than the allowed outage")
	// ErrNotMigrated is returned by Load and by a Client's calls when the
	// database has no Baton schema, or an older one than this version
	// needs: run Migrate (as a role that may create tables).
	ErrNotMigrated = errors.New("pgstore: the database's Baton schema is missing or older than this version needs: run pgstore.Migrate")
	// ErrSchemaNewer is what a *SchemaError of a database migrated by a
	// newer version of this package matches (errors.Is): this version
	// neither migrates it nor uses it.
	ErrSchemaNewer = errors.New("pgstore: the database's Baton schema is newer than this version knows")
	// ErrInvalidTx is returned by SubmitTx for a transaction it cannot
	// use: nil, or neither a pgx.Tx nor a *sql.Tx.
	ErrInvalidTx = errors.New("pgstore: SubmitTx needs a pgx.Tx or a *sql.Tx")
	// ErrNoOutcome is returned by Outcome for a batch the leader has not
	// decided yet (it is still in the inbox), and by Outcome for a batch
	// the database does not know (never committed, or its outcome
	// removed after WithOutcomeRetention): errors.Is tells ErrPending and
	// ErrUnknownBatch apart.
	ErrNoOutcome = errors.New("pgstore: no outcome")
	// ErrPending: the batch is committed and waits for the leader
	// (wraps ErrNoOutcome).
	ErrPending = fmt.Errorf("%w: the batch waits for the leader", ErrNoOutcome)
	// ErrUnknownBatch: no such batch in the inbox: its transaction rolled
	// back, or its outcome was removed (wraps ErrNoOutcome).
	ErrUnknownBatch = fmt.Errorf("%w: no such batch (rolled back, or its outcome expired)", ErrNoOutcome)
	// ErrClosed is returned by the calls of a Client or Service after
	// Close or Shutdown.
	ErrClosed = errors.New("pgstore: closed")
	// ErrCorruptRequest is a batch's outcome (Outcome, Submit) when its
	// row in the inbox cannot be read: written by hand, or by a newer
	// version.
	ErrCorruptRequest = errors.New("pgstore: corrupt request in the inbox")
)

// SchemaError says which schema version the database has and which this
// package knows. errors.Is(err, ErrSchemaNewer) holds when the database's
// is newer, errors.Is(err, ErrNotMigrated) when it is older.
type SchemaError struct {
	Have int // the database's version (0: no schema)
	Know int // the newest this package knows
}

// Error says both versions and what to do.
func (e *SchemaError) Error() string {
	if e.Have > e.Know {
		return fmt.Sprintf("pgstore: the database's Baton schema is version %d, newer than this version of pgstore knows (%d): upgrade pgstore; it never migrates backwards", e.Have, e.Know)
	}
	return fmt.Sprintf("pgstore: the database's Baton schema is version %d; this version needs %d: run pgstore.Migrate", e.Have, e.Know)
}

// Is makes errors.Is(err, ErrSchemaNewer) or ErrNotMigrated hold.
func (e *SchemaError) Is(target error) bool {
	if e.Have > e.Know {
		return target == ErrSchemaNewer
	}
	return target == ErrNotMigrated
}
