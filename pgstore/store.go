package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Channels of LISTEN/NOTIFY. Every payload is a store's name; a
// notification only wakes its listeners, which then read the tables: a
// lost, late or forged one (any role may NOTIFY) changes nothing but
// when they look.
const (
	chanCommit = "baton_commit" // a leader committed ends of tasks or outcomes of requests
	chanInbox  = "baton_inbox"  // a request was added to the inbox
	chanLead   = "baton_lead"   // a leader resigned: standbys may claim at once
)

// fencedCode is the SQLSTATE baton.fence raises for a deposed term.
const fencedCode = "BF001"

// Store is a coordinator.Store on a PostgreSQL database: the records of
// one durable scheduler, named by the store's name, in baton.records,
// with their task records decoded into baton.tasks (docs/postgres.md has
// the schema). Create it with NewStore and hand it to
// coordinator.WithStore, which loads, commits to and closes it; a Service
// does so for each term it leads.
//
// Load claims the store's lease (a new term); every Commit is one
// transaction conditional on that term (baton.fence), so that once
// another instance has claimed the store, this one commits nothing more
// (ErrFenced). A heartbeat renews the lease while the scheduler commits
// nothing. A Store is safe for concurrent use, though the scheduler never
// calls it concurrently. After Close, Commit fails and Load may claim the
// store again.
type Store struct {
	pool *pgxpool.Pool // immutable
	name string        // immutable
	cfg  *config       // immutable

	commitMu sync.Mutex // held by Commit and Close: a Close waits for a Commit in flight

	mu       sync.Mutex
	term     int64                 // guarded by mu: the term this Store leads (0: none)
	fenced   error                 // guarded by mu: set once a newer term was seen
	renewed  time.Time             // guarded by mu: when the last renewal that landed was sent (this clock)
	expected map[string]*inboxWant // guarded by mu: task ID -> the inbox batch it belongs to
	hbStop   chan struct{}         // guarded by mu: closes to stop the heartbeat
	hbDone   chan struct{}         // guarded by mu: closed when it has stopped
	lost     chan struct{}         // closed when the term is lost: fenced, or a commit failed for good
	lostWhy  error                 // guarded by mu: why lost was closed
	accepted map[int64]bool        // guarded by mu: inbox rows a commit marked accepted, until wasAccepted asks
	renewal  chan struct{}         // guarded by mu: closed at the next renewal that lands
}

// inboxWant is an inbox batch the leader has handed to Submit: the commit
// that stores its tasks marks it accepted.
type inboxWant struct {
	row  int64
	left int // its task IDs not seen yet in the commit being built
}

var _ coordinator.Store = (*Store)(nil)

// NewStore returns a Store on store name of the database pool reaches. It
// touches nothing: coordinator.New's Load does. Its options: WithLease,
// WithInstance, WithLockWait, WithMaxOutage, WithClock. The pool's role
// needs the scheduler's privileges (RolesSQL), and the schema migrated
// (Migrate).
func NewStore(pool *pgxpool.Pool, name string, opts ...Option) (*Store, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: NewStore with a nil pool", ErrInvalidOption)
	}
	if !validName(name) {
		return nil, fmt.Errorf("%w: store name %q: 1-63 bytes of letters, digits, '-', '_' and '.'", ErrInvalidOption, name)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return &Store{pool: pool, name: name, cfg: cfg}, nil
}

// Name returns the store's name. It does not block; safe for
// concurrent use, and after Close.
func (s *Store) Name() string { return s.name }

// Term returns the term this Store leads, 0 before Load and after Close.
// Safe for concurrent use.
func (s *Store) Term() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.term
}

// Fenced returns ErrFenced, wrapped, once the Store has seen another term
// begin (a refused commit or heartbeat), and nil before. Safe for
// concurrent use.
func (s *Store) Fenced() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fenced
}

// Load checks the schema, claims the store (a new term: it fails with an
// error wrapping coordinator.ErrStoreLocked while another instance's lease
// runs, after waiting up to WithLockWait for it to lapse) and calls fn
// with every record in key order. Its other errors: a *SchemaError
// (ErrNotMigrated, ErrSchemaNewer), fn's error as is, and the database's.
// On an error nothing stays claimed. It blocks for the reading.
func (s *Store) Load(fn func(key, value []byte) error) (err error) {
	ctx := context.Background()
	s.mu.Lock()
	open := s.term != 0
	s.mu.Unlock()
	if open {
		return fmt.Errorf("%w: store %q: this Store is already open (a Store serves one scheduler)", coordinator.ErrStoreLocked, s.name)
	}
	if err := checkSchema(ctx, s.pool); err != nil {
		return err
	}
	term, err := s.claim(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			s.resign(ctx, term)
		}
	}()
	rows, err := s.pool.Query(ctx, `SELECT key, value FROM baton.records WHERE store = $1 ORDER BY key`, s.name)
	if err != nil {
		return fmt.Errorf("pgstore: store %q: reading records: %w", s.name, err)
	}
	defer rows.Close()
	var last []byte
	for rows.Next() {
		raw := rows.RawValues()
		// bytea comes back in binary format: the bytes as they are.
		k, v := raw[0], raw[1]
		if last != nil && bytes.Compare(last, k) >= 0 {
			return fmt.Errorf("%w: store %q: key %q after %q (the database's collation of bytea is not bytewise?)", coordinator.ErrStoreCorrupt, s.name, k, last)
		}
		last = append(last[:0], k...)
		if v == nil {
			v = []byte{}
		}
		if err := fn(k, v); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pgstore: store %q: reading records: %w", s.name, err)
	}
	s.mu.Lock()
	s.term, s.fenced, s.expected, s.accepted = term, nil, map[string]*inboxWant{}, map[int64]bool{}
	s.lost, s.lostWhy, s.renewal = make(chan struct{}), nil, make(chan struct{})
	s.renewed = s.cfg.clk.Now()
	s.hbStop, s.hbDone = make(chan struct{}), make(chan struct{})
	go s.heartbeat(term, s.hbStop, s.hbDone)
	s.mu.Unlock()
	return nil
}

// claim begins a new term if the lease has lapsed or was given up,
// waiting up to WithLockWait for it.
func (s *Store) claim(ctx context.Context) (int64, error) {
	start := s.cfg.clk.Now()
	ended := false // a stuck session was ended for this claim
	for {
		var term int64
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			// A leader stopped in the middle of a commit holds the row:
			// wait for it a lease at most, then end its session (endStuck).
			if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, fmt.Sprint(s.cfg.lease.Milliseconds())); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO baton.stores (store) VALUES ($1) ON CONFLICT DO NOTHING`, s.name); err != nil {
				return err
			}
			return tx.QueryRow(ctx, `
			UPDATE baton.stores
			   SET term = term + 1, holder = $2, lease = $3 * interval '1 microsecond',
			       expires = now() + $3 * interval '1 microsecond', claimed_at = now()
			 WHERE store = $1 AND (expires <= now() OR holder = '')
			RETURNING term`, s.name, s.cfg.instance, s.cfg.lease.Microseconds()).Scan(&term)
		})
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "55P03" { // lock_timeout
			why := "a stuck session was ended, and the row is locked again"
			if !ended {
				n, berr := s.endStuck(ctx)
				if berr == nil && n > 0 {
					ended = true
					continue
				}
				why = "no session found stuck past the lease: the leader beats, or its session is not visible to this login role (see endStuck)"
				if berr != nil {
					why = berr.Error()
				}
			}
			return 0, fmt.Errorf("%w: store %q: its lease row stayed locked for %v: %s", coordinator.ErrStoreLocked, s.name, s.cfg.lease, why)
		}
		if err == nil {
			return term, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return 0, fmt.Errorf("pgstore: store %q: claiming the lease: %w", s.name, err)
		}
		var holder string
		var leftUS int64
		err = s.pool.QueryRow(ctx, `SELECT holder, CASE WHEN expires <= now() THEN 0
				ELSE (extract(epoch FROM expires - now()) * 1e6)::bigint END
			FROM baton.stores WHERE store = $1`, s.name).Scan(&holder, &leftUS)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("pgstore: store %q: reading the lease: %w", s.name, err)
		}
		left := time.Duration(leftUS) * time.Microsecond
		if holder == "" || left == 0 {
			continue
		}
		waited := s.cfg.clk.Since(start)
		if waited >= s.cfg.lockWait {
			return 0, fmt.Errorf("%w: store %q is led by %q for %v more (its lease)", coordinator.ErrStoreLocked, s.name, holder, left.Round(time.Millisecond))
		}
		wait := min(left+time.Millisecond, s.cfg.lockWait-waited)
		t := s.cfg.clk.Timer(wait)
		<-t.C
	}
}

// endStuck ends the session of a leader stopped in the middle of sending
// a commit, and reports how many it ended (0 or 1). Such a session holds
// the store's row (its transaction is the row's xmax, from fence) while
// the server waits for the rest of its pipeline, for as long as its
// connection lives: no claim could take the row. It is ended only if the
// row's lease is over (on the database's clock), and the server has
// waited for that client (wait event ClientRead) since its last statement
// more than a lease ago, and the leader has not beaten (baton.beats) for
// a lease: a leader alive but slow to send a long commit beats meanwhile
// (beat) and is left alone. Its transaction rolls back: it commits nothing, as fencing
// would have it. Ending it takes a caller that may see and signal the
// session: the same login role, as roles.sql's deployment has every
// instance use, or one with pg_read_all_stats and pg_signal_backend;
// without, it finds nothing, and the claim reports the store locked.
func (s *Store) endStuck(ctx context.Context) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(a.pid))
		  FROM baton.stores st JOIN pg_stat_activity a ON a.backend_xid = st.xmax
		 WHERE st.store = $1 AND st.expires <= now() AND a.pid <> pg_backend_pid()
		   AND a.wait_event_type = 'Client' AND a.wait_event = 'ClientRead'
		   AND a.state_change <= now() - st.lease
		   AND NOT EXISTS (SELECT 1 FROM baton.beats b
		                    WHERE b.store = st.store AND b.term = st.term AND b.at > now() - st.lease)`, s.name).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("pgstore: store %q: ending a stuck leader's session: %w", s.name, err)
	}
	return n, nil
}

// heartbeat renews the lease every third of it, until stop closes or the
// store is fenced; beside it, beat says every third of a lease that the
// leader lives.
func (s *Store) heartbeat(term int64, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	quit, beaten := make(chan struct{}), make(chan struct{})
	go s.beat(term, stop, quit, beaten)
	defer func() { close(quit); <-beaten }()
	tick := s.cfg.clk.Ticker(s.cfg.lease / 3)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		s.mu.Lock()
		recent := s.cfg.clk.Since(s.renewed) < s.cfg.lease/3
		s.mu.Unlock()
		if recent {
			continue // a commit renewed it
		}
		ctx, cancel := s.cfg.clk.WithTimeout(context.Background(), s.cfg.lease)
		sent := s.cfg.clk.Now()
		_, err := s.pool.Exec(ctx, `SELECT baton.fence($1, $2)`, s.name, term)
		cancel()
		if s.settle(term, sent, err) {
			return
		}
	}
}

// beatSQL records that the leader of a term lives (baton.beats), unless a
// later term has begun.
const beatSQL = `INSERT INTO baton.beats (store, term, at) VALUES ($1, $2, now())
	ON CONFLICT (store) DO UPDATE SET term = EXCLUDED.term, at = EXCLUDED.at WHERE baton.beats.term <= EXCLUDED.term`

// beat writes the leader's beat every third of a lease until stop or
// quit closes. It is its own row, which the leader's commits never hold:
// it goes on while a long commit holds the lease row (and the renewal
// waits behind it), so that a claim leaves a leader that is slow to send
// its commit alone (endStuck). A beat that fails is not retried: the
// next one comes a third of a lease later.
func (s *Store) beat(term int64, stop, quit <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	tick := s.cfg.clk.Ticker(s.cfg.lease / 3)
	defer tick.Stop()
	for {
		ctx, cancel := s.cfg.clk.WithTimeout(context.Background(), s.cfg.lease/3)
		_, _ = s.pool.Exec(ctx, beatSQL, s.name, term)
		cancel()
		select {
		case <-stop:
			return
		case <-quit:
			return
		case <-tick.C:
		}
	}
}

// settle records how a statement conditional on term went: a renewal
// that landed, or a refusal that fences the store (true).
func (s *Store) settle(term int64, sent time.Time, err error) (fenced bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		if s.term == term && sent.After(s.renewed) {
			s.renewed = sent
			close(s.renewal)
			s.renewal = make(chan struct{})
		}
		return false
	}
	if !isFenced(err) {
		return false
	}
	if s.fenced == nil {
		s.fenced = fmt.Errorf("%w: store %q, term %d", ErrFenced, s.name, term)
		s.loseLocked(s.fenced)
	}
	return true
}

// loseLocked closes lost, once, saying why. Called with mu held.
func (s *Store) loseLocked(why error) {
	if s.lostWhy == nil && s.lost != nil {
		s.lostWhy = why
		close(s.lost)
	}
}

// lostErr says why lost was closed.
func (s *Store) lostErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lostWhy
}

// wasAccepted reports whether a commit marked inbox row accepted, and
// forgets it.
func (s *Store) wasAccepted(row int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ok := s.accepted[row]
	delete(s.accepted, row)
	return ok
}

// LeaseValid reports whether this Store's lease is surely still its own
// by its clock: a renewal sent less than seven eighths of a lease ago
// landed (the database counts the lease from its own receipt, later).
// Safe for concurrent use.
func (s *Store) LeaseValid() bool {
	valid, _, _ := s.lease()
	return valid
}

// lease returns whether the lease is valid, a channel closed at the next
// renewal, and one closed when the term is lost.
func (s *Store) lease() (valid bool, renewal, lost <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	valid = s.term != 0 && s.lostWhy == nil && s.cfg.clk.Since(s.renewed) < s.cfg.lease-s.cfg.lease/8
	return valid, s.renewal, s.lost
}

func isFenced(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == fencedCode
}

// Commit writes c in one transaction conditional on the Store's term: its
// records in baton.records, their columns in baton.tasks, the acceptance
// of the inbox batches whose tasks it stores, and a notification to
// waiters. While the database cannot be reached it tries again, the same
// transaction (which writes the same values: a try that landed unseen is
// harmless), for up to WithMaxOutage, then fails with ErrOutage; it fails
// with ErrFenced once another term has begun. It blocks meanwhile.
func (s *Store) Commit(c *coordinator.Changes) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.mu.Lock()
	term, fenced := s.term, s.lostWhy
	var accepted []int64
	defs, states := project(c)
	if term != 0 && fenced == nil {
		accepted = s.acceptedBy(defs.submitted)
	}
	s.mu.Unlock()
	switch {
	case term == 0:
		return fmt.Errorf("pgstore: store %q: Commit before Load or after Close", s.name)
	case fenced != nil:
		return fenced
	}
	start := s.cfg.clk.Now()
	backoff := 20 * time.Millisecond
	for {
		// A new pgx.Batch each try: pgx keeps in a queued query the
		// statement it prepared on the connection of the last try, which
		// the next connection does not have (SQLSTATE 26000 for ever).
		b := s.commitBatch(term, c, &defs, &states, accepted)
		sent := s.cfg.clk.Now()
		err := s.send(b)
		if s.settle(term, sent, err) {
			return s.Fenced()
		}
		if err == nil {
			s.mu.Lock()
			for _, row := range accepted {
				s.forget(row)
				s.accepted[row] = true
			}
			s.mu.Unlock()
			return nil
		}
		if !transient(err) {
			return s.lose(fmt.Errorf("pgstore: store %q: commit: %w", s.name, err))
		}
		if s.cfg.clk.Since(start) >= s.cfg.maxOutage {
			return s.lose(fmt.Errorf("%w (%v): store %q: %w", ErrOutage, s.cfg.maxOutage, s.name, err))
		}
		t := s.cfg.clk.Timer(backoff)
		<-t.C
		backoff = min(2*backoff, time.Second)
	}
}

// lose records a commit that failed for good, and returns err.
func (s *Store) lose(err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loseLocked(err)
	return err
}

// send runs b as one implicit transaction (pgx sends a batch with one
// Sync): all of it or none. Its first error is returned.
func (s *Store) send(b *pgx.Batch) error {
	ctx, cancel := s.cfg.clk.WithTimeout(context.Background(), max(6*s.cfg.lease, 30*time.Second))
	defer cancel()
	return sendBatch(ctx, s.pool, b)
}

// sendBatch runs b on a connection of pool. A connection on which it
// fails (but for a fenced term) is closed, not handed back: after a cut
// pipeline its state is not known. b must not be sent again: build a new
// one.
func sendBatch(ctx context.Context, pool *pgxpool.Pool, b *pgx.Batch) error {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	err = c.SendBatch(ctx, b).Close()
	if err != nil {
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != fencedCode {
			conn := c.Hijack()
			conn.Close(context.Background())
			return err
		}
	}
	c.Release()
	return err
}

// commitBatch builds the statements of one commit.
func (s *Store) commitBatch(term int64, c *coordinator.Changes, d *defRows, st *stateRows, accepted []int64) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(`SELECT baton.fence($1, $2)`, s.name, term)
	if len(c.Deletes) > 0 {
		b.Queue(`DELETE FROM baton.records WHERE store = $1 AND key = ANY($2::bytea[])`, s.name, c.Deletes)
	}
	if len(c.Puts) > 0 {
		keys, values := make([][]byte, len(c.Puts)), make([][]byte, len(c.Puts))
		for i, kv := range c.Puts {
			keys[i], values[i] = kv.Key, kv.Value
			if values[i] == nil {
				values[i] = []byte{}
			}
		}
		b.Queue(`INSERT INTO baton.records (store, key, value)
			SELECT $1, k, v FROM unnest($2::bytea[], $3::bytea[]) AS u(k, v)
			ON CONFLICT (store, key) DO UPDATE SET value = EXCLUDED.value`, s.name, keys, values)
	}
	if len(st.deletedSeq) > 0 {
		b.Queue(`DELETE FROM baton.tasks WHERE store = $1 AND seq = ANY($2::bigint[])`, s.name, st.deletedSeq)
	}
	if len(st.deletedStateOnly) > 0 {
		b.Queue(`UPDATE baton.tasks SET status = NULL, attempts = NULL, runs = NULL, error_kind = NULL, error = NULL,
			cause = NULL, result = NULL, due = NULL, updated_at = NULL, last_attempt = NULL WHERE store = $1 AND seq = ANY($2::bigint[])`, s.name, st.deletedStateOnly)
	}
	if len(st.histDeleted) > 0 {
		b.Queue(`UPDATE baton.tasks SET history = NULL WHERE store = $1 AND seq = ANY($2::bigint[])`, s.name, st.histDeleted)
	}
	if len(d.seq) > 0 {
		b.Queue(`INSERT INTO baton.tasks (store, seq, id, func, pool, parent, deps, priority, max_attempts, key, payload)
			SELECT $1, u.seq, u.id, nullif(u.func, ''), u.pool, nullif(u.parent, ''),
			       ARRAY(SELECT jsonb_array_elements_text(u.deps::jsonb)), u.prio, u.ma, nullif(u.key, ''), u.payload
			  FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::int[], $9::int[], $10::text[], $11::bytea[])
			    AS u(seq, id, func, pool, parent, deps, prio, ma, key, payload)
			ON CONFLICT (store, seq) DO UPDATE SET id = EXCLUDED.id, func = EXCLUDED.func, pool = EXCLUDED.pool,
			       parent = EXCLUDED.parent, deps = EXCLUDED.deps, priority = EXCLUDED.priority,
			       max_attempts = EXCLUDED.max_attempts, key = EXCLUDED.key, payload = EXCLUDED.payload`,
			s.name, d.seq, d.id, d.fn, d.pool, d.parent, d.deps, d.prio, d.maxAttempts, d.key, d.payload)
	}
	if len(st.seq) > 0 {
		b.Queue(`INSERT INTO baton.tasks (store, seq, status, attempts, runs, error_kind, error, cause, result, due, updated_at, last_attempt)
			SELECT $1, u.seq, u.status, u.attempts, u.runs, nullif(u.ek, ''), nullif(u.et, ''), nullif(u.cause, ''), u.result, u.due, u.at,
			       nullif(u.last, '')::jsonb
			  FROM unnest($2::bigint[], $3::text[], $4::int[], $5::int[], $6::text[], $7::text[], $8::text[], $9::bytea[], $10::timestamptz[], $11::timestamptz[], $12::text[])
			    AS u(seq, status, attempts, runs, ek, et, cause, result, due, at, last)
			ON CONFLICT (store, seq) DO UPDATE SET status = EXCLUDED.status, attempts = EXCLUDED.attempts,
			       runs = EXCLUDED.runs, error_kind = EXCLUDED.error_kind, error = EXCLUDED.error, cause = EXCLUDED.cause,
			       result = EXCLUDED.result, due = EXCLUDED.due, updated_at = EXCLUDED.updated_at, last_attempt = EXCLUDED.last_attempt`,
			s.name, st.seq, st.status, st.attempts, st.runs, st.errKind, st.errText, st.cause, st.result, st.due, st.at, st.last)
	}
	if len(st.histSeq) > 0 {
		b.Queue(`INSERT INTO baton.tasks (store, seq, history)
			SELECT $1, u.seq, u.h::jsonb FROM unnest($2::bigint[], $3::text[]) AS u(seq, h)
			ON CONFLICT (store, seq) DO UPDATE SET history = EXCLUDED.history`, s.name, st.histSeq, st.hist)
	}
	if len(accepted) > 0 {
		b.Queue(`UPDATE baton.inbox SET outcome = 'accepted', done_at = now(), term = $2
			WHERE id = ANY($1::bigint[]) AND outcome IS NULL`, accepted, term)
		b.Queue(deletePending, accepted)
	}
	if st.final || len(accepted) > 0 {
		b.Queue(`SELECT pg_notify($1, $2)`, chanCommit, s.name)
	}
	return b
}

// expect registers an inbox batch the leader is about to Submit: the
// commit that stores all its tasks marks it accepted. Tasks that come in
// a commit with another's do not count. Once the store is closed (the lead
// lost while the inbox was read) it registers nothing: that Submit fails,
// and the next leader takes the batch from the inbox.
func (s *Store) expect(row int64, ids []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.expected == nil {
		return
	}
	w := &inboxWant{row: row, left: len(ids)}
	for _, id := range ids {
		s.expected[id] = w
	}
}

// unexpect forgets a batch Submit refused.
func (s *Store) unexpect(row int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forget(row)
}

func (s *Store) forget(row int64) {
	for id, w := range s.expected {
		if w.row == row {
			delete(s.expected, id)
		}
	}
}

// acceptedBy returns the inbox rows all of whose tasks are among ids.
// Called with mu held.
func (s *Store) acceptedBy(ids []string) []int64 {
	if len(s.expected) == 0 {
		return nil
	}
	seen := map[*inboxWant]int{}
	for _, id := range ids {
		if w, ok := s.expected[id]; ok {
			seen[w]++
		}
	}
	var rows []int64
	for w, n := range seen {
		if n == w.left {
			rows = append(rows, w.row)
		}
	}
	slices.Sort(rows)
	return rows
}

// Close stops the heartbeat and gives the lease up (a standby may claim
// at once: it hears so on baton_lead). It waits for a Commit in flight.
// Closing a Store not loaded, or twice, does nothing.
func (s *Store) Close() error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.mu.Lock()
	term, stop, done, fenced := s.term, s.hbStop, s.hbDone, s.fenced
	s.term, s.hbStop, s.hbDone, s.expected = 0, nil, nil, nil
	s.mu.Unlock()
	if term == 0 {
		return nil
	}
	close(stop)
	<-done
	if fenced != nil {
		return nil
	}
	s.resign(context.Background(), term)
	return nil
}

// resign gives up term's lease if it is still the store's. A failure is
// harmless: the lease then lapses.
func (s *Store) resign(ctx context.Context, term int64) {
	ctx, cancel := s.cfg.clk.WithTimeout(ctx, s.cfg.lease)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue(`UPDATE baton.stores SET holder = '', expires = '-infinity' WHERE store = $1 AND term = $2`, s.name, term)
	b.Queue(`SELECT pg_notify($1, $2)`, chanLead, s.name)
	_ = sendBatch(ctx, s.pool, b)
}

// transient reports whether err may go away by itself: the database
// restarting or out of reach, a connection lost, the statement not sent.
// A refusal of the statement (a constraint, a privilege, a fenced term)
// or an error of this side (an argument pgx cannot encode) is not.
func transient(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == fencedCode:
			return false
		case len(pe.Code) == 5 && pe.Code[:2] == "08": // connection exception
			return true
		case pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03", pe.Code == "53300", pe.Code == "40001", pe.Code == "40P01":
			// shutdown, crash shutdown, starting up, too many connections, serialization, deadlock
			return true
		}
		return false
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	switch {
	case errors.As(err, &ce), errors.As(err, &ne), pgconn.SafeToRetry(err), pgconn.Timeout(err),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EPIPE):
		return true
	}
	// pgx's word for a connection it closed after a failure.
	return strings.Contains(err.Error(), "conn closed")
}
