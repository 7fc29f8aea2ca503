package pgstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/batonhq/baton/coordinator"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// BatchID names a batch in baton.inbox (its row's id): SubmitTx returns
// it, Outcome and WaitBatch take it.
type BatchID int64

// SubmitTx adds tasks as one batch inside tx, the caller's transaction: a
// pgx.Tx or a database/sql *sql.Tx (of any driver). If tx commits, the
// leader accepts the batch whole, exactly once, or refuses it whole; if
// tx rolls back, nothing of it exists. Nothing runs before tx commits.
//
// SubmitTx checks, and refuses with the errors Submit gives, what the
// transaction can see: a task that is not described by data alone
// (*coordinator.TaskError wrapping coordinator.ErrNotDurable), an empty
// ID (ErrInvalidTask), an ID twice in the batch, stored, or in a batch
// waiting for the leader, including one of a concurrent transaction,
// which SubmitTx waits for as for a unique key, and refuses if it
// commits (ErrDuplicateID), a dependency neither in the batch nor stored
// nor waiting (ErrUnknownDependency), a cycle (*coordinator.CycleError).
// A refusal changes nothing in tx, which stays usable (SubmitTx works in
// a savepoint). What only the leader can check is the batch's outcome,
// told by Outcome and WaitBatch once tx has committed, with the same
// errors: the rest of Submit's validation (an unknown pool or function, a
// bad Cron, negative durations: ErrInvalidTask, ErrUnknownPool), and a
// dependency on a batch of another transaction that the leader refuses
// (ErrUnknownDependency). Under REPEATABLE READ or SERIALIZABLE, "what the
// transaction can see" is its snapshot: an ID stored by a batch the
// leader accepted after the snapshot was taken is refused by the leader
// (the batch's outcome, ErrDuplicateID); SERIALIZABLE may fail a
// conflicting insert as a serialization failure (SQLSTATE 40001),
// which the caller retries. It blocks for four statements on tx (and for a
// concurrent transaction that submits one of its IDs), and is safe for
// concurrent use (on different transactions). After Close it still
// works: it uses tx alone.
func (c *Client) SubmitTx(ctx context.Context, tx any, tasks ...coordinator.Task) (BatchID, error) {
	q, err := txOf(tx)
	if err != nil {
		return 0, err
	}
	ws, outside, err := checkBatch(tasks)
	if err != nil {
		return 0, err
	}
	ids := make([]string, len(ws))
	for i, w := range ws {
		ids[i] = w.ID
	}
	idsJSON, _ := json.Marshal(ids)
	if outside == nil {
		outside = []string{}
	}
	depsJSON, _ := json.Marshal(outside)
	body, err := json.Marshal(submitBody{Tasks: ws})
	if err != nil {
		return 0, fmt.Errorf("pgstore: SubmitTx: %w", err)
	}
	// In a savepoint: the batch's row, one pending row per ID (a unique
	// key: an ID that a concurrent transaction submits makes the insert
	// wait for it, and fail if it commits), the notification (delivered
	// when tx commits, never if it rolls back), then the check of what is
	// stored. The check comes after the insert, in a statement of its
	// own, so that it sees every batch committed until then: one accepted
	// while the insert waited is seen. A refusal or a failed insert rolls
	// the savepoint back, and the transaction goes on without any of it.
	for try := 0; ; try++ {
		id, refused, err := insertBatch(ctx, q, c.name, body, string(idsJSON), string(depsJSON), tasks)
		if err == nil && refused == nil {
			if err := q.exec(ctx, `RELEASE SAVEPOINT baton_submit`); err != nil {
				return 0, fmt.Errorf("pgstore: SubmitTx: %w", err)
			}
			return BatchID(id), nil
		}
		for _, undo := range []string{`ROLLBACK TO SAVEPOINT baton_submit`, `RELEASE SAVEPOINT baton_submit`} {
			if uerr := q.exec(ctx, undo); uerr != nil {
				if err != nil {
					// The first error says why (a transaction already
					// failed has no savepoint to go back to): both, it first.
					return 0, fmt.Errorf("pgstore: SubmitTx: %w (undoing it: %w)", err, uerr)
				}
				return 0, fmt.Errorf("pgstore: SubmitTx: %w", uerr)
			}
		}
		if refused != nil {
			return 0, refused
		}
		// Which ID is taken, now: pending in another batch (or earlier
		// in this transaction), or stored by a batch accepted since.
		var taken *string
		if err := q.queryRow(ctx, `SELECT min(x) FROM jsonb_array_elements_text($2::jsonb) AS x
			LEFT JOIN LATERAL (SELECT 1 FROM baton.pending p WHERE p.store = $1 AND p.id = x LIMIT 1) AS w(hit) ON true
			LEFT JOIN LATERAL (SELECT 1 FROM baton.tasks t WHERE t.store = $1 AND t.id = x LIMIT 1) AS s(hit) ON true
			WHERE w.hit IS NOT NULL OR s.hit IS NOT NULL`,
			c.name, string(idsJSON)).scan(&taken); err != nil {
			return 0, fmt.Errorf("pgstore: SubmitTx: %w", err)
		}
		if taken != nil {
			return 0, &coordinator.TaskError{ID: *taken, Err: coordinator.ErrDuplicateID, Detail: "submitted by another transaction"}
		}
		if !isUniqueViolation(err) {
			return 0, fmt.Errorf("pgstore: SubmitTx: %w", err)
		}
		// A pending row of a committed batch held the ID, and the lookup
		// did not see it: the leader refused that batch meanwhile, its
		// pending rows gone, and the ID is free again (try again); or,
		// under REPEATABLE READ and SERIALIZABLE, the transaction's
		// snapshot predates that batch, and one more try meets its row
		// again. (READ UNCOMMITTED is READ COMMITTED in PostgreSQL.)
		var iso string
		if qerr := q.queryRow(ctx, `SELECT current_setting('transaction_isolation')`).scan(&iso); qerr != nil {
			return 0, fmt.Errorf("pgstore: SubmitTx: %w", qerr)
		}
		snapshot := iso == "repeatable read" || iso == "serializable"
		if try == 2 || snapshot && try == 1 {
			why := "submitted by another transaction"
			if snapshot {
				why = "submitted by a transaction that committed after this one's snapshot was taken (" + iso + ")"
			}
			return 0, &coordinator.TaskError{ID: conflictingID(err, c.name, tasks), Err: coordinator.ErrDuplicateID,
				Detail: fmt.Sprintf("%s: %v", why, err)}
		}
	}
}

// insertBatch opens the savepoint baton_submit, inserts a submit batch's
// inbox row and pending rows (in ID order: two batches sharing IDs wait
// for each other in one order, never in a deadlock), queues its
// notification, and checks the batch against what is stored: refused is
// its refusal (ErrDuplicateID, ErrUnknownDependency, a cycle), err the
// database's error. It leaves the savepoint open: the caller releases it,
// or rolls back to it.
func insertBatch(ctx context.Context, q txQuerier, store string, body []byte, idsJSON, depsJSON string, tasks []coordinator.Task) (id int64, refused, err error) {
	if err := q.exec(ctx, `SAVEPOINT baton_submit`); err != nil {
		return 0, nil, err
	}
	if err := q.queryRow(ctx, `
		WITH box AS (
		    INSERT INTO baton.inbox (store, kind, body, ids)
		    VALUES ($1, 'submit', $2, ARRAY(SELECT jsonb_array_elements_text($3::jsonb))) RETURNING id, ids),
		  pend AS (
		    INSERT INTO baton.pending (store, id, inbox)
		    SELECT $1, x, box.id FROM box, unnest(box.ids) AS x ORDER BY x),
		  woke AS (SELECT pg_notify($4, $1))
		SELECT (SELECT id FROM box), (SELECT count(*) FROM woke)`,
		store, body, idsJSON, chanInbox).scan(&id, new(int64)); err != nil {
		return 0, nil, err
	}
	var dups, missing string
	if err := q.queryRow(ctx, checkBatchSQL, store, idsJSON, depsJSON).scan(&dups, &missing); err != nil {
		return 0, nil, fmt.Errorf("checking the batch: %w", err)
	}
	var dupIDs, missingIDs []string
	if err := json.Unmarshal([]byte(dups), &dupIDs); err != nil {
		return 0, nil, err
	}
	if err := json.Unmarshal([]byte(missing), &missingIDs); err != nil {
		return 0, nil, err
	}
	switch {
	case len(dupIDs) > 0:
		return 0, &coordinator.TaskError{ID: dupIDs[0], Err: coordinator.ErrDuplicateID, Detail: "already submitted"}, nil
	case len(missingIDs) > 0:
		return 0, unknownDep(tasks, missingIDs[0]), nil
	}
	return id, findCycle(tasks), nil
}

// conflictingID returns the ID of tasks that a unique violation on
// baton.pending's key names ("Key (store, id)=(<store>, <id>) already
// exists.", as PostgreSQL reports it to a driver that gives the
// detail, pgx's *pgconn.PgError), or "" if it cannot tell.
func conflictingID(err error, store string, tasks []coordinator.Task) string {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return ""
	}
	id, ok := strings.CutPrefix(pe.Detail, "Key (store, id)=("+store+", ")
	if !ok {
		return ""
	}
	if id, ok = strings.CutSuffix(id, ") already exists."); !ok {
		return ""
	}
	for _, t := range tasks {
		if t.ID == id {
			return id
		}
	}
	return ""
}

// isUniqueViolation reports whether err is PostgreSQL's unique_violation
// (SQLSTATE 23505), from any driver that tells an error's SQLSTATE.
func isUniqueViolation(err error) bool {
	var st interface{ SQLState() string }
	return errors.As(err, &st) && st.SQLState() == "23505"
}

// checkBatchSQL finds, for store $1, which of the IDs $2 (a JSON array)
// are stored and which of the dependencies $3 are neither stored nor
// pending.
//
// One index probe per ID (a LATERAL subquery with a LIMIT is never
// made a join): a plan that scans the store's tasks once per batch,
// or compares every ID with every task (a planner without statistics
// on a young table chose that: 3 s per batch of 1,000 at 22,000
// tasks), cannot be chosen.
const checkBatchSQL = `
	SELECT
	  (SELECT coalesce(jsonb_agg(x), '[]') FROM jsonb_array_elements_text($2::jsonb) AS x
	     CROSS JOIN LATERAL (SELECT 1 FROM baton.tasks t WHERE t.store = $1 AND t.id = x LIMIT 1) AS stored)::text,
	  (SELECT coalesce(jsonb_agg(d), '[]') FROM jsonb_array_elements_text($3::jsonb) AS d
	     LEFT JOIN LATERAL (SELECT 1 FROM baton.tasks t WHERE t.store = $1 AND t.id = d LIMIT 1) AS s(hit) ON true
	     LEFT JOIN LATERAL (SELECT 1 FROM baton.pending p WHERE p.store = $1 AND p.id = d LIMIT 1) AS w(hit) ON true
	    WHERE s.hit IS NULL AND w.hit IS NULL)::text`

// txQuerier is what SubmitTx needs of a transaction of either kind.
type txQuerier interface {
	queryRow(ctx context.Context, sql string, args ...any) scanner
	exec(ctx context.Context, sql string) error
}

type scanner interface{ scan(dest ...any) error }

func txOf(tx any) (txQuerier, error) {
	switch tx := tx.(type) {
	case pgx.Tx:
		if tx != nil {
			return pgxTx{tx}, nil
		}
	case *sql.Tx:
		if tx != nil {
			return sqlTx{tx}, nil
		}
	}
	return nil, fmt.Errorf("%w: got %T", ErrInvalidTx, tx)
}

type pgxTx struct{ tx pgx.Tx }
type pgxRow struct{ row pgx.Row }

func (t pgxTx) queryRow(ctx context.Context, sql string, args ...any) scanner {
	return pgxRow{t.tx.QueryRow(ctx, sql, args...)}
}
func (r pgxRow) scan(dest ...any) error { return r.row.Scan(dest...) }
func (t pgxTx) exec(ctx context.Context, sql string) error {
	_, err := t.tx.Exec(ctx, sql)
	return err
}

type sqlTx struct{ tx *sql.Tx }
type sqlRow struct{ row *sql.Row }

func (t sqlTx) queryRow(ctx context.Context, sql string, args ...any) scanner {
	return sqlRow{t.tx.QueryRowContext(ctx, sql, args...)}
}
func (r sqlRow) scan(dest ...any) error { return r.row.Scan(dest...) }
func (t sqlTx) exec(ctx context.Context, sql string) error {
	_, err := t.tx.ExecContext(ctx, sql)
	return err
}
