package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/batonhq/baton/coordinator"
	"github.com/jackc/pgx/v5"
)

// inboxBatch is how many requests the leader reads at a time.
const inboxBatch = 256

// deletePending deletes the pending rows of the decided batches $1
// (bigint[]): by their key, the IDs each batch's inbox row names (schema
// version 3 has no index on pending.inbox).
const deletePending = `DELETE FROM baton.pending p USING baton.inbox i
	WHERE i.id = ANY($1::bigint[]) AND p.store = i.store AND p.id = ANY(i.ids) AND p.inbox = i.id`

// serveInbox does the store's requests in id order, while the Service
// leads with scheduler s on store st, until ctx ends or the lead is lost
// (a commit or an answer refused: it returns the error).
func (sv *Service) serveInbox(ctx context.Context, s *coordinator.Scheduler, st *Store) error {
	c := sv.Client
	term := st.Term()
	gcEvery := max(c.cfg.retention/10, c.cfg.poll)
	lastGC := c.cfg.clk.Now().Add(-gcEvery)
	replays := int64(math.MaxInt64) // until known: every request may be a replay
	for {
		woken := c.l.wake(chanInbox)
		if replays == math.MaxInt64 {
			replays = sv.lastRequest(ctx)
		}
		n, err := sv.takeRequests(ctx, s, st, term, replays)
		if err != nil {
			return err
		}
		if c.cfg.clk.Since(lastGC) >= gcEvery {
			lastGC = c.cfg.clk.Now()
			// Decided requests past their retention go; so do pending IDs
			// of no request waiting (a submitter may write them by hand).
			// In the leader's term, as every write of its.
			b := &pgx.Batch{}
			b.Queue(`SELECT baton.fence($1, $2)`, c.name, term)
			b.Queue(`DELETE FROM baton.inbox WHERE store = $1 AND outcome IS NOT NULL
				AND done_at < now() - $2 * interval '1 microsecond'`, c.name, c.cfg.retention.Microseconds())
			b.Queue(`DELETE FROM baton.pending p WHERE p.store = $1 AND NOT EXISTS
				(SELECT 1 FROM baton.inbox i WHERE i.id = p.inbox AND i.outcome IS NULL)`, c.name)
			sent := c.cfg.clk.Now()
			if st.settle(term, sent, sendBatch(ctx, c.pool, b)) {
				return st.Fenced()
			}
		}
		if n == inboxBatch {
			continue // more wait
		}
		t := c.cfg.clk.Timer(c.cfg.poll)
		select {
		case <-woken:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-st.lost:
			t.Stop()
			return st.lostErr()
		}
		t.Stop()
	}
}

// lastRequest returns the id of the newest request of the store's inbox
// (0: none), math.MaxInt64 if the database cannot tell now. A request up
// to it may have been read by an earlier leader, which may have started
// its batch's tasks before its commit and died of one (doSubmit).
func (sv *Service) lastRequest(ctx context.Context) int64 {
	var last int64
	if err := sv.pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM baton.inbox WHERE store = $1`, sv.name).Scan(&last); err != nil {
		return math.MaxInt64
	}
	return last
}

// takeRequests does the requests waiting in the inbox, at most
// inboxBatch, and returns how many it read. Those up to replays were
// there when the lead began.
func (sv *Service) takeRequests(ctx context.Context, s *coordinator.Scheduler, st *Store, term, replays int64) (int, error) {
	c := sv.Client
	type req struct {
		id   int64
		kind string
		body []byte
		ids  []string
	}
	rows, err := c.pool.Query(ctx, `SELECT id, kind, body, ids FROM baton.inbox
		WHERE store = $1 AND outcome IS NULL ORDER BY id LIMIT $2`, c.name, inboxBatch)
	if err != nil {
		return 0, nil // the database is away: look again later; a commit will tell if the lead is lost
	}
	reqs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (req, error) {
		var q req
		err := r.Scan(&q.id, &q.kind, &q.body, &q.ids)
		return q, err
	})
	if err != nil {
		return 0, nil
	}
	for _, q := range reqs {
		var err error
		switch q.kind {
		case "submit":
			err = sv.doSubmit(ctx, s, st, term, q.id, q.body, q.ids, q.id <= replays)
		case "cancel":
			err = sv.doCancel(ctx, s, st, term, q.id, q.body)
		}
		if err != nil {
			return 0, err
		}
	}
	return len(reqs), nil
}

// doSubmit submits one batch. Its acceptance is written by the commit
// that stores its tasks (Store.expect); a refusal by answer. The row
// stays undecided until then, so the batch is journaled
// (SubmitJournaled: its roots may start before that commit), unless it
// may be a replay (a request an earlier leader may have read: its
// function may be what killed that leader, and it must not start
// before a commit again).
func (sv *Service) doSubmit(ctx context.Context, s *coordinator.Scheduler, st *Store, term, id int64, body []byte, ids []string, replay bool) error {
	tasks, err := decodeSubmit(body, ids)
	if err == nil {
		if len(tasks) == 0 {
			return sv.answer(ctx, st, term, id, "accepted", nil)
		}
		st.expect(id, ids)
		if replay {
			err = s.SubmitContext(ctx, tasks...)
		} else {
			err = s.SubmitJournaled(ctx, tasks...)
		}
		if err == nil {
			if !st.wasAccepted(id) {
				// Its tasks came in more than one commit (a scheduler
				// that splits batches): say so now.
				return sv.answer(ctx, st, term, id, "accepted", nil)
			}
			return nil
		}
		st.unexpect(id)
	}
	switch {
	case errors.Is(err, coordinator.ErrStoreFailed), errors.Is(err, coordinator.ErrClosed):
		return err // the lead is lost; the next leader does it
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return sv.answer(ctx, st, term, id, "refused", err)
}

// doCancel cancels one task.
func (sv *Service) doCancel(ctx context.Context, s *coordinator.Scheduler, st *Store, term, id int64, body []byte) error {
	var b cancelBody
	if err := json.Unmarshal(body, &b); err != nil {
		return sv.answer(ctx, st, term, id, "refused", fmt.Errorf("%w: %v", ErrCorruptRequest, err))
	}
	outcome := "not_cancelled"
	if s.Cancel(b.ID) {
		outcome = "cancelled"
	}
	return sv.answer(ctx, st, term, id, outcome, nil)
}

// answer writes a request's outcome, in term (fenced as a commit is).
// Only ErrFenced stops the lead; the database away, it tries again.
func (sv *Service) answer(ctx context.Context, st *Store, term, id int64, outcome string, refused error) error {
	var code, text *string
	var detail []byte
	if refused != nil {
		cd, d := describeRefusal(refused)
		msg := refused.Error()
		code, text = &cd, &msg
		detail, _ = json.Marshal(d)
	}
	c := sv.Client
	for {
		b := &pgx.Batch{}
		b.Queue(`SELECT baton.fence($1, $2)`, c.name, term)
		b.Queue(`UPDATE baton.inbox SET outcome = $2, code = $3, error = $4, detail = $5, done_at = now(), term = $6
			WHERE id = $1 AND outcome IS NULL`, id, outcome, code, text, detail, term)
		b.Queue(deletePending, []int64{id})
		b.Queue(`SELECT pg_notify($1, $2)`, chanCommit, c.name)
		sent := c.cfg.clk.Now()
		err := sendBatch(ctx, c.pool, b)
		if st.settle(term, sent, err) {
			return st.Fenced()
		}
		if err == nil || ctx.Err() != nil {
			return ctx.Err()
		}
		t := c.cfg.clk.Timer(c.cfg.poll)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-st.lost:
			t.Stop()
			return st.lostErr()
		}
	}
}
