package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/batonhq/baton/coordinator"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Client submits, cancels and waits for the tasks of a store through the
// database, from any process, whether an instance leads the store or
// none does yet: its requests wait in baton.inbox for the leader, which
// takes them in order; its waits read baton.tasks and baton.inbox again
// at each notification the leader sends (LISTEN/NOTIFY) and every
// WithPoll. A Service is a Client too. It needs the submitter's
// privileges (RolesSQL), and its calls return a *SchemaError on a
// database not migrated to SchemaVersion.
//
// A Client is safe for concurrent use. Its calls block until what they
// wait for or their context's end (ctx.Err(): the request stays in the
// inbox, and the leader still does it). After Close they return
// ErrClosed, except SubmitTx, which uses the caller's transaction alone.
type Client struct {
	pool *pgxpool.Pool // immutable
	name string        // immutable
	cfg  *config       // immutable
	l    *listener     // immutable

	closed   chan struct{} // closed by Close
	onceCh   sync.Once     // closes closed
	schemaOK atomic.Bool   // checkSchema said yes once: not asked again
}

// NewClient returns a Client of store name on the database pool reaches.
// Its options: WithPoll, WithClock. It starts one goroutine that holds a
// connection of the pool for LISTEN (reconnecting as needed) until Close.
func NewClient(pool *pgxpool.Pool, name string, opts ...Option) (*Client, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: NewClient with a nil pool", ErrInvalidOption)
	}
	if !validName(name) {
		return nil, fmt.Errorf("%w: store name %q: 1-63 bytes of letters, digits, '-', '_' and '.'", ErrInvalidOption, name)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return newClient(pool, name, cfg), nil
}

func newClient(pool *pgxpool.Pool, name string, cfg *config) *Client {
	return &Client{pool: pool, name: name, cfg: cfg, l: newListener(pool, name, cfg.clk), closed: make(chan struct{})}
}

// Close stops the Client's listener and makes its later calls fail with
// ErrClosed; calls waiting return ErrClosed too. It is idempotent.
func (c *Client) Close() error {
	c.onceCh.Do(func() { close(c.closed) })
	c.l.close()
	return nil
}

// ready returns ErrClosed after Close, the schema's error, or nil.
func (c *Client) ready(ctx context.Context) error {
	select {
	case <-c.closed:
		return ErrClosed
	default:
	}
	if c.schemaOK.Load() {
		return nil
	}
	// Asked again until it says yes: a database away at the first call
	// must not fail every later one.
	if err := checkSchema(ctx, c.pool); err != nil {
		return err
	}
	c.schemaOK.Store(true)
	return nil
}

// wait is await, ending with ErrClosed at Close.
func (c *Client) wait(ctx context.Context, channel string, look func() (bool, error)) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-c.closed:
			cancel(ErrClosed)
		case <-ctx.Done():
		}
	}()
	// The database away (a restart, a failover) is waited out: the
	// call looks again at the next poll.
	err := await(ctx, c.l, c.cfg.clk, c.cfg.poll, channel, func() (bool, error) {
		done, err := look()
		if err != nil && ctx.Err() == nil && transient(err) {
			return false, nil
		}
		return done, err
	})
	if cause := context.Cause(ctx); errors.Is(cause, ErrClosed) {
		return ErrClosed
	}
	return err
}

// Submit adds a batch of tasks through the inbox and waits for the
// leader's answer: nil once it has committed the batch, or the error
// Submit gave (see SubmitTx for what is checked where). If ctx ends first
// it returns ctx.Err(): the batch is in the inbox and will be done.
func (c *Client) Submit(ctx context.Context, tasks ...coordinator.Task) error {
	if err := c.ready(ctx); err != nil {
		return err
	}
	var id BatchID
	if err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var err error
		id, err = c.SubmitTx(ctx, tx, tasks...)
		return err
	}); err != nil {
		return err
	}
	return c.WaitBatch(ctx, id)
}

// Outcome tells how the leader decided batch id: nil if it accepted it,
// the error Submit gave if it refused it, ErrPending while it waits in
// the inbox, ErrUnknownBatch if no such batch exists (its transaction
// rolled back, or the outcome is older than WithOutcomeRetention). It
// does not wait.
func (c *Client) Outcome(ctx context.Context, id BatchID) error {
	if err := c.ready(ctx); err != nil {
		return err
	}
	_, err := c.outcome(ctx, int64(id))
	return err
}

// outcome reads a request's row: done is false while it is pending; err
// is the request's refusal, ErrUnknownBatch, or the database's.
func (c *Client) outcome(ctx context.Context, id int64) (result string, err error) {
	var outcome, code, text *string
	var detail []byte
	err = c.pool.QueryRow(ctx, `SELECT outcome, code, error, detail FROM baton.inbox WHERE id = $1 AND store = $2`,
		id, c.name).Scan(&outcome, &code, &text, &detail)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", fmt.Errorf("%w: batch %d of store %q", ErrUnknownBatch, id, c.name)
	case err != nil:
		return "", fmt.Errorf("pgstore: reading batch %d: %w", id, err)
	case outcome == nil:
		return "", ErrPending
	case *outcome == "refused":
		var d refusal
		if detail != nil {
			if err := json.Unmarshal(detail, &d); err != nil {
				return *outcome, fmt.Errorf("%w: batch %d: detail %q", ErrCorruptRequest, id, detail)
			}
		}
		return *outcome, refusalError(deref(code), d, deref(text))
	}
	return *outcome, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// WaitBatch waits for the leader's decision on batch id and returns it as
// Outcome does, or ctx.Err().
func (c *Client) WaitBatch(ctx context.Context, id BatchID) error {
	if err := c.ready(ctx); err != nil {
		return err
	}
	var result error
	err := c.wait(ctx, chanCommit, func() (bool, error) {
		_, err := c.outcome(ctx, int64(id))
		if errors.Is(err, ErrPending) {
			return false, nil
		}
		result = err
		return true, nil
	})
	if err != nil {
		return err
	}
	return result
}

// Cancel asks the leader to cancel task id (coordinator.Scheduler.Cancel)
// and returns its answer: true if it cancelled a task that was not
// final. A Cancel the leader took and died before answering is done
// again by the next, which answers false if the first one took. If ctx
// ends first it returns ctx.Err(): the request is in the inbox and will
// be done. An id that is not UTF-8 without NUL bytes names no task
// submitted through the database: a *coordinator.TaskError wrapping
// coordinator.ErrInvalidTask.
func (c *Client) Cancel(ctx context.Context, id string) (bool, error) {
	if !isDBText(id) || len(id) > maxIDText {
		return false, &coordinator.TaskError{ID: id, Err: coordinator.ErrInvalidTask, Detail: fmt.Sprintf("not UTF-8 text without NUL bytes of at most %d bytes", maxIDText)}
	}
	if err := c.ready(ctx); err != nil {
		return false, err
	}
	body, _ := json.Marshal(cancelBody{ID: id})
	var row int64
	if err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO baton.inbox (store, kind, body, ids) VALUES ($1, 'cancel', $2, ARRAY[$3::text]) RETURNING id`,
			c.name, body, id).Scan(&row); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, chanInbox, c.name)
		return err
	}); err != nil {
		return false, fmt.Errorf("pgstore: Cancel: %w", err)
	}
	var result string
	err := c.wait(ctx, chanCommit, func() (bool, error) {
		out, err := c.outcome(ctx, row)
		if errors.Is(err, ErrPending) {
			return false, nil
		}
		result = out
		return true, err
	})
	return result == "cancelled", err
}
