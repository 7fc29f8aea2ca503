package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/batonhq/baton/coordinator"
	"github.com/jackc/pgx/v5"
)

// taskColumns are the columns infoOf reads, in its order.
const taskColumns = `id, coalesce(status, 'pending'), coalesce(pool, ''), coalesce(key, ''), coalesce(priority, 0),
	coalesce(attempts, 0), coalesce(runs, 0), error_kind, error, coalesce(cause, ''), result, coalesce(parent, ''),
	(SELECT count(*) FROM baton.tasks c WHERE c.store = t.store AND c.parent = t.id)`

var statusByName = func() map[string]coordinator.Status {
	m := map[string]coordinator.Status{}
	for s := coordinator.Pending; s <= coordinator.Skipped; s++ {
		m[s.String()] = s
	}
	return m
}()

// infoOf reads a row of taskColumns.
func infoOf(row pgx.Row) (coordinator.TaskInfo, error) {
	var ti coordinator.TaskInfo
	var status string
	var errKind, errText *string
	var result []byte
	var children int64
	if err := row.Scan(&ti.ID, &status, &ti.Pool, &ti.Key, &ti.Priority, &ti.Attempts, &ti.Runs,
		&errKind, &errText, &ti.Cause, &result, &ti.Parent, &children); err != nil {
		return ti, err
	}
	st, ok := statusByName[status]
	if !ok {
		return ti, fmt.Errorf("%w: task %q has status %q", coordinator.ErrStoreCorrupt, ti.ID, status)
	}
	ti.Status, ti.Children = st, int(children)
	if result != nil {
		ti.Result = result
	}
	if errKind != nil {
		ti.Err = errOf(*errKind, deref(errText))
	}
	return ti, nil
}

// errOf is the error of columns error_kind (not NULL) and error: the
// sentinel for a cancelled, shut down or interrupted task (wrapped in its
// text where a function's error said more than the sentinel), an error of
// the text for another (its type is not kept).
func errOf(kind, text string) error {
	var sentinel error
	switch kind {
	case "cancelled":
		sentinel = coordinator.ErrCancelled
	case "closed":
		sentinel = coordinator.ErrClosed
	case "interrupted":
		sentinel = coordinator.ErrInterrupted
	default:
		return errors.New(text)
	}
	if text == "" || text == sentinel.Error() {
		return sentinel
	}
	return &textError{text, sentinel}
}

// textError is a sentinel wrapped in a text of its own.
type textError struct {
	text     string
	sentinel error
}

func (e *textError) Error() string { return e.text }

// Unwrap returns the sentinel.
func (e *textError) Unwrap() error { return e.sentinel }

// Info returns what baton.tasks says of task id as a TaskInfo (the
// scheduler's own Info, as of the leader's last commit), and false if no
// task has that ID. Err is the sentinel for a cancelled, shut down or
// interrupted task (its text, wrapping the sentinel, where the function's
// error said more), and an error of the text for another (its type is
// not kept); Result is the []byte the task recorded. It does not wait.
func (c *Client) Info(ctx context.Context, id string) (coordinator.TaskInfo, bool, error) {
	if err := c.ready(ctx); err != nil {
		return coordinator.TaskInfo{}, false, err
	}
	ti, err := infoOf(c.pool.QueryRow(ctx, `SELECT `+taskColumns+` FROM baton.tasks t
		WHERE store = $1 AND id = $2 ORDER BY seq DESC LIMIT 1`, c.name, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return coordinator.TaskInfo{}, false, nil
	}
	if err != nil {
		return coordinator.TaskInfo{}, false, fmt.Errorf("pgstore: Info(%q): %w", id, err)
	}
	return ti, true, nil
}

// WaitTasks waits until every listed task is final, as the scheduler's
// WaitTasks does: nil if all succeeded, a *coordinator.TasksError listing
// those that did not otherwise (their Err as Info gives it). An ID that
// is neither stored nor in a batch waiting in the inbox is an error at
// once, wrapping coordinator.ErrUnknownTask. A task dropped by the
// scheduler's retention while waited for is unknown too. If ctx ends
// first it returns ctx.Err().
func (c *Client) WaitTasks(ctx context.Context, ids ...string) error {
	if err := c.ready(ctx); err != nil {
		return err
	}
	var result error
	err := c.wait(ctx, chanCommit, func() (bool, error) {
		// The inbox first, then the tasks: a batch accepted between the
		// two reads is seen by the second (its acceptance and its tasks
		// are one commit).
		var pending []string
		if err := c.pool.QueryRow(ctx, `SELECT coalesce(array_agg(id), '{}') FROM baton.pending
			WHERE store = $1 AND id = ANY($2::text[])`, c.name, ids).Scan(&pending); err != nil {
			return false, fmt.Errorf("pgstore: WaitTasks: %w", err)
		}
		infos, err := c.infos(ctx, ids)
		if err != nil {
			return false, err
		}
		var bad []coordinator.TaskInfo
		for _, id := range ids {
			ti, ok := infos[id]
			if !ok {
				if slices.Contains(pending, id) {
					return false, nil
				}
				return false, &coordinator.TaskError{ID: id, Err: coordinator.ErrUnknownTask}
			}
			if !ti.Status.Final() {
				return false, nil
			}
			if ti.Status != coordinator.Succeeded {
				bad = append(bad, ti)
			}
		}
		if len(bad) > 0 {
			result = &coordinator.TasksError{Tasks: bad}
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	return result
}

func (c *Client) infos(ctx context.Context, ids []string) (map[string]coordinator.TaskInfo, error) {
	rows, err := c.pool.Query(ctx, `SELECT DISTINCT ON (id) `+taskColumns+` FROM baton.tasks t
		WHERE store = $1 AND id = ANY($2::text[]) ORDER BY id, seq DESC`, c.name, ids)
	if err != nil {
		return nil, fmt.Errorf("pgstore: WaitTasks: %w", err)
	}
	defer rows.Close()
	out := make(map[string]coordinator.TaskInfo, len(ids))
	for rows.Next() {
		ti, err := infoOf(rows)
		if err != nil {
			return nil, fmt.Errorf("pgstore: WaitTasks: %w", err)
		}
		out[ti.ID] = ti
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: WaitTasks: %w", err)
	}
	return out, nil
}
