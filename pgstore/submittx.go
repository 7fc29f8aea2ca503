package pgstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/batonhq/baton/coordinator"
	"github.com/jackc/pgx/v5"
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
// ID (ErrInvalidTask), an ID twice in the batch or already stored or
// waiting in the inbox (ErrDuplicateID), a dependency neither in the
// batch nor stored nor waiting in the inbox (ErrUnknownDependency), a
// cycle (*coordinator.CycleError). A refusal changes nothing in tx, which
// stays usable. What only the leader can check is the batch's outcome,
// told by Outcome and WaitBatch once tx has committed, with the same
// errors: the rest of Submit's validation (an unknown pool or function,
// a bad Cron, negative durations: ErrInvalidTask, ErrUnknownPool), and
// the races the transaction cannot see (an ID or dependency of a batch of
// another transaction not yet committed: ErrDuplicateID,
// ErrUnknownDependency). It blocks for three statements on tx, and is
// safe for concurrent use (on different transactions). After Close it
// still works: it uses tx alone.
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
	var dups, missing string
	if err := q.queryRow(ctx, `
		WITH batch AS (SELECT jsonb_array_elements_text($2::jsonb) AS id),
		     deps AS (SELECT jsonb_array_elements_text($3::jsonb) AS id)
		SELECT
		  coalesce((SELECT jsonb_agg(b.id) FROM batch b
		             WHERE EXISTS (SELECT 1 FROM baton.tasks t WHERE t.store = $1 AND t.id = b.id)
		                OR EXISTS (SELECT 1 FROM baton.inbox i WHERE i.store = $1 AND i.outcome IS NULL AND i.ids @> ARRAY[b.id])), '[]')::text,
		  coalesce((SELECT jsonb_agg(d.id) FROM deps d
		             WHERE NOT EXISTS (SELECT 1 FROM baton.tasks t WHERE t.store = $1 AND t.id = d.id)
		               AND NOT EXISTS (SELECT 1 FROM baton.inbox i WHERE i.store = $1 AND i.outcome IS NULL AND i.ids @> ARRAY[d.id])), '[]')::text`,
		c.name, string(idsJSON), string(depsJSON)).scan(&dups, &missing); err != nil {
		return 0, fmt.Errorf("pgstore: SubmitTx: checking the batch: %w", err)
	}
	var dupIDs, missingIDs []string
	if err := json.Unmarshal([]byte(dups), &dupIDs); err != nil {
		return 0, fmt.Errorf("pgstore: SubmitTx: %w", err)
	}
	if err := json.Unmarshal([]byte(missing), &missingIDs); err != nil {
		return 0, fmt.Errorf("pgstore: SubmitTx: %w", err)
	}
	if len(dupIDs) > 0 {
		return 0, &coordinator.TaskError{ID: dupIDs[0], Err: coordinator.ErrDuplicateID, Detail: "already submitted"}
	}
	if len(missingIDs) > 0 {
		return 0, unknownDep(tasks, missingIDs[0])
	}
	body, err := json.Marshal(submitBody{Tasks: ws})
	if err != nil {
		return 0, fmt.Errorf("pgstore: SubmitTx: %w", err)
	}
	var id int64
	if err := q.queryRow(ctx, `INSERT INTO baton.inbox (store, kind, body, ids)
		VALUES ($1, 'submit', $2, ARRAY(SELECT jsonb_array_elements_text($3::jsonb))) RETURNING id`,
		c.name, body, string(idsJSON)).scan(&id); err != nil {
		return 0, fmt.Errorf("pgstore: SubmitTx: %w", err)
	}
	// Delivered when tx commits, never if it rolls back.
	var ignored string
	if err := q.queryRow(ctx, `SELECT pg_notify($1, $2)::text`, chanInbox, c.name).scan(&ignored); err != nil {
		return 0, fmt.Errorf("pgstore: SubmitTx: %w", err)
	}
	return BatchID(id), nil
}

// txQuerier is what SubmitTx needs of a transaction of either kind.
type txQuerier interface {
	queryRow(ctx context.Context, sql string, args ...any) scanner
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

type sqlTx struct{ tx *sql.Tx }
type sqlRow struct{ row *sql.Row }

func (t sqlTx) queryRow(ctx context.Context, sql string, args ...any) scanner {
	return sqlRow{t.tx.QueryRowContext(ctx, sql, args...)}
}
func (r sqlRow) scan(dest ...any) error { return r.row.Scan(dest...) }
