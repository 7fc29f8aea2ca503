package replica

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/worker"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
)

// Defaults of the options.
const (
	// DefaultLease is how long a leader may be silent before a standby
	// takes the store over (WithLease).
	DefaultLease = 5 * time.Second
	// MinLease is the shortest lease WithLease accepts: the leader writes
	// a sign of life every third of it, and each must reach the servers
	// of a cluster and be replicated in time.
	MinLease = 250 * time.Millisecond
	// DefaultReplicas is how many servers keep the log (WithReplicas).
	DefaultReplicas = 3
	// DefaultMaxOutage is how long an append is retried through an outage
	// before Commit fails (WithMaxOutage).
	DefaultMaxOutage = 30 * time.Second
	// DefaultCompactAfter is how many bytes the log grows by before it is
	// compacted, at least (WithCompactAfter).
	DefaultCompactAfter = 4 << 20
)

// Option configures a Store (NewStore) or a Replica (New).
type Option func(*config) error

type config struct {
	name         string        // this replica's name, in the log and in Notices
	lease        time.Duration // a leader's lease
	lockWait     time.Duration // how long a Store's Load campaigns (0: twice the lease)
	replicas     int           // the log's replicas
	maxOutage    time.Duration // how long an append is retried
	compactAfter int64         // compaction's least growth
	logger       *slog.Logger
	// Replica only.
	logConn  *nats.Conn // the log's connection (nil: New's)
	sched    []coordinator.Option
	remote   []remotePool
	notify   func(Notice)
	shutdown time.Duration
}

func defaults() config {
	host, _ := os.Hostname()
	return config{name: host + ":" + strconv.Itoa(os.Getpid()), lease: DefaultLease, replicas: DefaultReplicas,
		maxOutage: DefaultMaxOutage, compactAfter: DefaultCompactAfter, logger: slog.New(slog.DiscardHandler),
		shutdown: 10 * time.Second}
}

// WithName names this replica in the log, in Notices and in ErrStoreLocked
// messages (default: host name and process ID). Any text without line
// breaks.
func WithName(name string) Option {
	return func(c *config) error {
		if name == "" || !validHeader(name) {
			return fmt.Errorf("%w: WithName(%q): need text without line breaks", ErrInvalidOption, name)
		}
		c.name = name
		return nil
	}
}

// WithLease sets the leader's lease (default DefaultLease): a standby
// takes the store over once it has read nothing from the leader for this
// long, and a leader that could not write a sign of life within it starts
// no attempt until it could, and stops those it runs (ErrLeaseLapsed).
// Every replica of a store should use the same lease. d is at least
// MinLease.
//
// The lease is also how long the log's stream may be without a leader
// before the leader's own attempts are stopped: JetStream elects a new
// stream leader 4 to 9 s after the server leading it dies (its raft
// election timeout; 4.2 to 11.3 s measured on a loaded machine,
// docs/distributed.md). The
// lead itself rides through a server loss with any lease (standbys do not
// claim while the stream cannot answer, nor until a whole lease of
// silence after it answers again); with a lease above about 12 s, the
// leader's local attempts ride through it too, at the price of a
// takeover that long after a leader dies.
func WithLease(d time.Duration) Option {
	return func(c *config) error {
		if d < MinLease {
			return fmt.Errorf("%w: WithLease(%v): need at least %v", ErrInvalidOption, d, MinLease)
		}
		c.lease = d
		return nil
	}
}

// WithLogConnection makes a Replica read and append its store's log
// through lc, and nothing else: its pools, its Client and the requests
// it answers keep New's connection. Give lc a user of a NATS account of
// its own (LogPermissions), which only the store's replicas use, and New's
// connection a user of the account the workers and clients share: no
// requester can then aim an answer at the log, since JetStream and every
// responder answer within the requester's account (docs/distributed.md
// has a ready configuration). Without it, the log shares New's
// connection and account, and a message a requester makes land on the
// log's subjects is quarantined (see Quarantined). lc must reconnect
// (nats.MaxReconnects(-1)); the Replica never closes it. ReadRecords
// needs a connection of the log's account too.
func WithLogConnection(lc *nats.Conn) Option {
	return func(c *config) error {
		if lc == nil {
			return fmt.Errorf("%w: WithLogConnection(nil)", ErrInvalidOption)
		}
		c.logConn = lc
		return nil
	}
}

// WithLockWait sets how long a Store's Load (coordinator.New) waits to
// lead a store another live replica leads before failing with
// coordinator.ErrStoreLocked (default: twice the lease). A Replica waits
// as a standby instead, for as long as it runs.
func WithLockWait(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithLockWait(%v): need a positive duration", ErrInvalidOption, d)
		}
		c.lockWait = d
		return nil
	}
}

// WithReplicas sets how many servers keep the log (default
// DefaultReplicas, 3: the store survives the loss of one server). Use 1
// on a single server.
func WithReplicas(n int) Option {
	return func(c *config) error {
		if n < 1 || n > 5 {
			return fmt.Errorf("%w: WithReplicas(%d): need 1 to 5", ErrInvalidOption, n)
		}
		c.replicas = n
		return nil
	}
}

// WithMaxOutage sets how long an append (a commit, a sign of life) is
// retried while JetStream does not answer before the store gives up
// (default DefaultMaxOutage): Commit then fails and the scheduler stops,
// as after a crash.
func WithMaxOutage(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithMaxOutage(%v): need a positive duration", ErrInvalidOption, d)
		}
		c.maxOutage = d
		return nil
	}
}

// WithCompactAfter sets how much the log may grow before the leader
// writes a snapshot of every record and purges what came before it: once
// what was written since the last snapshot passes max(n bytes, twice that
// snapshot) (default DefaultCompactAfter). The log thus stays within
// about three times the records' size, plus n.
func WithCompactAfter(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: WithCompactAfter(%d): need a positive size", ErrInvalidOption, n)
		}
		c.compactAfter = int64(n)
		return nil
	}
}

// WithLogger sets where the store and the replica log (default: nowhere):
// role changes at Info, failed appends and compactions at Warn.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: WithLogger(nil)", ErrInvalidOption)
		}
		c.logger = l
		return nil
	}
}

// Store is a coordinator.Store on a JetStream stream, the log of a
// replicated durable scheduler: give it to coordinator.WithStore. Load
// makes it the store's leader (the replica whose appends the log
// accepts), and Commit appends each group commit to the log, refused
// once another replica has taken the store over. It is what a Replica
// runs on; use it alone for a durable scheduler whose state survives the
// loss of its machine, restarted by hand or by an orchestrator. See the
// package doc.
//
// The scheduler calls Load once, then Commit from one goroutine at a
// time, then Close, as coordinator.Store says; Middleware and Term are
// safe for concurrent use.
type Store struct {
	nc   *nats.Conn    // owned by the caller
	js   njs.JetStream // immutable
	name string        // immutable: the store's name
	cfg  config        // immutable
	view *view         // shared with the Replica that made this Store, if any
	id   string        // immutable: names this Store's appends (Baton-Id)
	err  error         // immutable: an invalid argument of NewStore, returned by Load

	mu      sync.Mutex    // serializes appends (claim, commits, beats, snapshots, resignation); guards the fields below
	stream  njs.Stream    // set by the first campaign
	term    uint64        // the term this Store leads (0: not yet)
	leading bool          // it leads and has not stopped
	closed  bool          // Close was called
	ended   bool          // it led and stopped: it never leads again
	appends uint64        // appends made (Baton-Id)
	claimed time.Time     // when the term message that made it lead was sent
	created time.Time     // the identity of the log's stream it leads (its creation time)
	led     atomic.Uint64 // term, for readers that must not wait for an append (the gate)

	lmu     sync.Mutex                            // guards the lease fields below
	sentAt  time.Time                             // when the last acknowledged append was sent (monotonic)
	renewc  chan struct{}                         // closed at the next renewal
	lapsed  bool                                  // the watch found the lease lapsed, and no renewal came since
	running map[*context.CancelCauseFunc]struct{} // attempts to stop when the lease lapses (track)
	done    chan struct{}                         // closed once the Store stops leading: fenced, failed or closed
	doneAt  error                                 // why done closed

	beats sync.WaitGroup // the beat goroutine
	quit  chan struct{}  // closed by Close: stops the beat goroutine's waits
}

var _ coordinator.Store = (*Store)(nil)

// NewStore returns a Store on the JetStream log of the store called name
// (1-64 letters, digits, '-' or '_'), reached through nc, which must
// reconnect (nats.MaxReconnects(-1)) and which the Store never closes.
// It does no I/O: the stream is created, and the store led, by Load. An
// invalid argument makes Load fail with ErrInvalidOption.
func NewStore(nc *nats.Conn, name string, opts ...Option) *Store {
	cfg := defaults()
	err := cfg.apply(opts)
	s := newStore(nc, name, cfg, newView())
	if err == nil {
		err = checkArgs(nc, name)
	}
	s.err = err
	return s
}

func (c *config) apply(opts []Option) error {
	for _, o := range opts {
		if err := o(c); err != nil {
			return err
		}
	}
	if c.lockWait == 0 {
		c.lockWait = 2 * c.lease
	}
	return nil
}

func checkArgs(nc *nats.Conn, name string) error {
	switch {
	case nc == nil:
		return fmt.Errorf("%w: nil connection", ErrInvalidOption)
	case !validName(name):
		return fmt.Errorf("%w: store name %q: need 1-64 letters, digits, '-' or '_'", ErrInvalidOption, name)
	}
	return nil
}

func newStore(nc *nats.Conn, name string, cfg config, v *view) *Store {
	var b [8]byte
	_, _ = rand.Read(b[:])
	s := &Store{nc: nc, name: name, cfg: cfg, view: v, id: hex.EncodeToString(b[:]),
		renewc: make(chan struct{}), done: make(chan struct{}), quit: make(chan struct{})}
	if nc != nil {
		s.js, _ = njs.New(nc)
	}
	return s
}

// validName reports whether s names a store: 1-64 letters, digits, '-'
// or '_' (a subject token and part of a stream name).
func validName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// validHeader reports whether s can travel in a NATS header value.
func validHeader(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '\r' || s[i] == '\n' || s[i] == 0 {
			return false
		}
	}
	return len(s) > 0 && s[0] != ' ' && s[len(s)-1] != ' ' && s[0] != '\t' && s[len(s)-1] != '\t'
}

// Load makes this Store the leader of the store, waiting up to the lock
// wait (WithLockWait) for a leader that is alive to go (it resigns at its
// Close; one that died is taken over a lease after its last sign of life),
// and calls fn with every record in key order. Its errors wrap
// coordinator.ErrStoreLocked when another replica still leads after the
// lock wait (naming it), ErrInvalidOption for NewStore's arguments, and
// coordinator.ErrStoreCorrupt for a log it cannot read. It blocks for the
// log's reading: from the last snapshot, for a Store that was not
// following it already. An error of fn ends Load and is returned; the
// Store then still leads, until Close. Load after Close fails with
// ErrClosed (wrapped); on a Store that stopped leading, with why it did.
func (s *Store) Load(fn func(key, value []byte) error) error {
	if s.err != nil {
		return s.err
	}
	s.mu.Lock()
	leading, ended, closed := s.leading, s.ended, s.closed
	s.mu.Unlock()
	if closed {
		return fmt.Errorf("store %q: Load after Close: %w", s.name, ErrClosed)
	}
	if ended {
		return fmt.Errorf("replica: store %q: Load after it stopped leading: %w", s.name, s.stoppedLocked())
	}
	if !leading {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.lockWait)
		err := s.campaign(ctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			_, _, term, leader, _ := s.view.position()
			return fmt.Errorf("%w: store %q: replica %q (term %d) still leads after %v", coordinator.ErrStoreLocked, s.name, leader, term, s.cfg.lockWait)
		}
		if err != nil {
			return err
		}
	}
	var key, value []byte
	err := s.view.records(func(k, v []byte) error {
		err := fn(k, v)
		if err != nil {
			key, value = k, v
		}
		return err
	})
	if err != nil && key != nil && errors.Is(err, coordinator.ErrStoreCorrupt) && !errors.Is(err, coordinator.ErrStoreVersion) {
		s.quarantineRecord(key, value, err)
	}
	return err
}

// quarantineRecord takes the record key, which the scheduler refused to
// restore (err), out of the store, while this Store leads: a commit that
// deletes it, its Baton-Quarantine header saying why, so that the next
// restore (this replica's or another's) goes on without it rather than
// every replica failing on it for ever. A record of a later format
// (coordinator.ErrStoreVersion) is never taken out: a newer replica can
// read it. The quarantine is reported (see Quarantined).
func (s *Store) quarantineRecord(key, value []byte, why error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.leading {
		return
	}
	body := encodeChanges(&coordinator.Changes{Deletes: [][]byte{key}})
	reason := strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' || r == 0 {
			return ' '
		}
		return r
	}, why.Error())
	hdr := nats.Header{hdrQuar: []string{strings.TrimSpace(reason)}, hdrQuarKey: []string{strconv.Quote(string(key))}}
	seq, sent, err := s.appendLocked(kindCommit, body, hdr)
	if err != nil {
		s.stopLocked(err)
		s.cfg.logger.Warn("replica: could not take a record the scheduler refused out of the store", "store", s.name, "key", string(key), "error", err)
		return
	}
	s.view.appended(seq, kindCommit, body, int64(len(body))+msgOverhead)
	s.renew(sent)
	s.view.quar.add(Quarantined{Seq: seq, Kind: kindCommit, Reason: reason, Key: bytes.Clone(key), Data: value})
}

// Commit appends c to the log as one record: one message, or an atomic
// batch when it does not fit in one (all of it lands or none does). The
// append expects the log to end where this leader's last append did: it
// is refused once another replica's term has begun, and Commit then
// returns an error wrapping ErrFenced, for good. An append whose answer
// is lost (a timeout, a server lost) is retried, and found out by reading
// the log, until WithMaxOutage; then Commit fails with what it knows. It
// blocks for the append's replication. After Close it fails with
// ErrClosed (wrapped).
func (s *Store) Commit(c *coordinator.Changes) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.leading {
		return s.stoppedLocked()
	}
	body := encodeChanges(c)
	seq, sent, err := s.appendLocked(kindCommit, body, nil)
	if err != nil {
		s.stopLocked(err)
		return err
	}
	s.view.appended(seq, kindCommit, body, int64(len(body))+msgOverhead)
	s.renew(sent)
	s.compactLocked()
	return nil
}

// Close resigns the store if this Store leads it (a term message that
// says so: a standby takes over at once rather than a lease later), and
// stops its signs of life. It blocks for the resignation's append (at
// most a lease). Closing a Store that does not lead, or twice, does
// nothing. It is safe to call concurrently with the Store's other
// methods; Load and Commit fail with ErrClosed (wrapped) after it, and
// its Middleware fails the attempts it is asked to start.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.quit)
	if s.leading {
		hdr := nats.Header{hdrResign: []string{"1"}}
		seq, _, err := s.appendLockedFor(kindTerm, nil, hdr, s.cfg.lease)
		if err == nil {
			s.view.appended(seq, kindTerm, nil, msgOverhead)
			s.view.mu.Lock()
			s.view.resign = true
			s.view.mu.Unlock()
		} else {
			s.cfg.logger.Warn("replica: resigning", "store", s.name, "term", s.term, "error", err)
		}
		s.stopLocked(fmt.Errorf("store %q: %w", s.name, ErrClosed))
	}
	s.mu.Unlock()
	s.beats.Wait()
	return nil
}

// Term returns the term this Store leads (the sequence of the log message
// that began it), 0 before Load made it the leader. It stays what it was
// once the Store stopped leading. It does not block and is safe for
// concurrent use.
func (s *Store) Term() uint64 { return s.led.Load() }

// sentAtClaim returns when the term message that made this Store lead
// was sent.
func (s *Store) sentAtClaim() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claimed
}

// stopped returns the channel closed once the Store stops leading
// (fenced, failed or closed), and why.
func (s *Store) stopped() (<-chan struct{}, func() error) {
	return s.done, func() error {
		s.lmu.Lock()
		defer s.lmu.Unlock()
		return s.doneAt
	}
}

// stopLocked makes the Store stop leading, for err. Guarded by mu.
func (s *Store) stopLocked(err error) {
	if !s.leading {
		return
	}
	s.leading, s.ended = false, true
	s.lmu.Lock()
	s.doneAt = err
	close(s.done)
	s.lmu.Unlock()
	if errors.Is(err, ErrFenced) {
		s.cfg.logger.Warn("replica: fenced", "store", s.name, "term", s.term, "error", err)
	}
}

// stoppedLocked is the error of a Commit on a Store that does not lead.
func (s *Store) stoppedLocked() error {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	if s.doneAt != nil {
		return s.doneAt
	}
	if s.closed {
		return fmt.Errorf("store %q: %w", s.name, ErrClosed)
	}
	return fmt.Errorf("replica: store %q: Commit before Load", s.name)
}

// renew extends the lease from sent, the moment an acknowledged append
// was sent (its first try's), and wakes the attempts waiting for it.
func (s *Store) renew(sent time.Time) {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	if sent.After(s.sentAt) {
		s.sentAt, s.lapsed = sent, false
		close(s.renewc)
		s.renewc = make(chan struct{})
	}
}

// leaseMargin is what the leader takes off its lease: it considers its
// lease lapsed a little before a standby may consider it so.
func (s *Store) leaseMargin() time.Duration { return s.cfg.lease / 8 }

// lease reports whether the lease holds now, and the channels that tell
// of its next renewal and of the Store's stop.
func (s *Store) lease() (valid bool, renewed, done <-chan struct{}) {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	valid = !s.sentAt.IsZero() && s.doneAt == nil && time.Since(s.sentAt) < s.cfg.lease-s.leaseMargin()
	return valid, s.renewc, s.done
}

// Middleware returns a coordinator.Middleware that starts an attempt only
// while this Store's lease holds: its last acknowledged append was sent
// less than the lease ago (less a margin), so that no standby can have
// taken over. While it does not hold (the process was paused, the
// servers are out of reach), attempts wait for it to be renewed; once the
// Store has stopped leading (fenced), they fail at once with its error,
// and the failure's commit is refused, which stops the scheduler. A
// Replica installs it; with a Store used alone, give it to
// coordinator.WithMiddleware before any other middleware (the outermost),
// so that an attempt it holds back reaches none of them. It does not
// block; the Worker it returns blocks while the lease does not hold, is
// safe for concurrent use, and fails attempts once the Store is closed.
//
// An attempt it let start has its context cancelled, with the cause
// ErrLeaseLapsed, when the lease lapses before it returns (see
// ErrLeaseLapsed): a leader cut off from the servers stops running its
// attempts before a standby may take over.
func (s *Store) Middleware() coordinator.Middleware {
	return s.middleware(nil)
}

// middleware is Middleware, leaving the attempts of the pools named in
// keep running when the lease lapses (a Replica's remote pools: the next
// leader resumes their attempts, it does not run them again).
func (s *Store) middleware(keep map[string]bool) coordinator.Middleware {
	return func(pool string, next worker.Worker) worker.Worker {
		return gate{s: s, next: next, stop: !keep[pool]}
	}
}

// gate is the Worker Middleware wraps around a pool's.
type gate struct {
	s    *Store
	next worker.Worker
	stop bool // cancel the attempts' contexts when the lease lapses
}

func (g gate) Do(ctx context.Context, j worker.Job) error {
	for {
		if err := g.s.leased(ctx); err != nil {
			return err
		}
		if !g.stop {
			a := Admission{Term: g.s.led.Load(), At: time.Now()}
			return g.next.Do(context.WithValue(ctx, admissionKey{}, a), j)
		}
		actx, untrack, ok := g.s.track(ctx)
		if ok {
			defer untrack()
			a := Admission{Term: g.s.led.Load(), At: time.Now()}
			return g.next.Do(context.WithValue(actx, admissionKey{}, a), j)
		}
		// the lease lapsed meanwhile
	}
}

// epoch identifies the life of the log this Store leads (its stream's
// creation time, in nanoseconds): a log deleted and made again numbers
// its terms from 1 in a new epoch. Zero before Load has led it.
func (s *Store) epoch() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.created.IsZero() {
		return 0
	}
	return uint64(s.created.UnixNano())
}

// leased returns nil once the lease holds (at once if it does now); an
// error once the Store stopped leading (fenced, closed) or ctx ended
// first. A Replica's remote pools check it again before each publication
// of an attempt (jetstream.WithFence): an attempt the gate let through
// just before the process was paused is not handed out when it resumes
// deposed.
func (s *Store) leased(ctx context.Context) error {
	for {
		valid, renewed, done := s.lease()
		if valid {
			return nil
		}
		select {
		case <-renewed:
		case <-done:
			_, why := s.stopped()
			return fmt.Errorf("replica: attempt not started: %w", why())
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// Admission is what the lease's gate (Store.Middleware) knew when it let
// an attempt start.
type Admission struct {
	Term uint64    // the term of the leader that let it start
	At   time.Time // when (this machine's clock)
}

type admissionKey struct{}

// AdmissionOf returns the Admission of the attempt whose context ctx is
// (or derives from); false outside an attempt a Store's Middleware let
// start. It does not block and is safe for concurrent use.
//
// The gate starts no attempt once its lease has lapsed, but an attempt it
// let start a moment before its process was paused starts when the
// process resumes, after a standby may have taken over: the window
// between the lease's check and the call. A handler whose effects must
// never come from a deposed leader checks Term where it writes, as a
// fencing token: a resource that has seen a higher term refuses a lower
// one.
func AdmissionOf(ctx context.Context) (Admission, bool) {
	a, ok := ctx.Value(admissionKey{}).(Admission)
	return a, ok
}

// ensureStream creates or updates the log's stream, retrying while the
// cluster cannot take it yet (it is forming: a cluster takes seconds to
// accept its first replicated stream) until ctx ends.
func (s *Store) ensureStream(ctx context.Context) error {
	s.mu.Lock()
	st := s.stream
	s.mu.Unlock()
	if st != nil {
		return nil
	}
	cfg := njs.StreamConfig{Name: streamName(s.name), Subjects: logStreamSubjects(s.name),
		Description: "Baton replicated store " + s.name, Storage: njs.FileStorage, Replicas: s.cfg.replicas,
		Retention: njs.LimitsPolicy, Discard: njs.DiscardOld, AllowAtomicPublish: true, DenyDelete: true}
	backoff := 50 * time.Millisecond
	for {
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := s.js.CreateOrUpdateStream(tctx, cfg)
		cancel()
		if err == nil {
			s.mu.Lock()
			s.stream = st
			s.mu.Unlock()
			s.adopt(st.CachedInfo().Created)
			return nil
		}
		if ctx.Err() == nil {
			s.cfg.logger.Debug("replica: creating the log stream, retrying", "store", s.name, "error", err)
		}
		if ctx.Err() != nil || !sleep(ctx, backoff) {
			// Not ctx.Err() itself: Load tells a store held by another
			// replica by it.
			return fmt.Errorf("replica: store %q: creating its log stream: %v (last error: %v)", s.name, ctx.Err(), err)
		}
		backoff = min(2*backoff, time.Second)
	}
}

// adopt makes the view one of the log's stream as created at created
// (view.adopt), and says so if the stream was replaced under it.
func (s *Store) adopt(created time.Time) bool {
	was := s.view.identity()
	if !s.view.adopt(created) {
		return false
	}
	s.cfg.logger.Warn("replica: the log's stream was deleted and created again: reading the new one from its start, alone",
		"store", s.name, "created", created, "was", was)
	return true
}

// sleep waits d or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// campaign follows the log until it is this Store's turn to lead, and
// takes it: a term message appended where the log ends. It is the
// standby's loop: it returns nil once leading, or ctx.Err().
func (s *Store) campaign(ctx context.Context) error {
	if err := s.ensureStream(ctx); err != nil {
		return err
	}
	var backoff time.Duration
	for {
		at, err := s.follow(ctx)
		if err != nil {
			return err
		}
		won, err := s.claim(ctx, at)
		if won || err != nil {
			return err
		}
		// A claim that did not land: another's came first, or this
		// replica could not reach the log, or read it late. It follows
		// again after a pause that grows with each claim in a row that
		// fails (a quarter of a lease, doubling up to four leases, a
		// random part of it), so that replicas that cannot reach one
		// another do not claim in a storm.
		backoff = min(max(2*backoff, s.cfg.lease/4), 4*s.cfg.lease)
		if !sleep(ctx, backoff/2+mrand.N(backoff/2+1)) {
			return ctx.Err()
		}
	}
}

// follow reads the log into the view until this Store should claim the
// store: it has read the whole log and nobody leads (the log is empty,
// or its last message is a resignation), or nothing came for a lease. It
// returns where the log ended when it decided so.
func (s *Store) follow(ctx context.Context) (uint64, error) {
	for {
		applied, synced, _, _, _ := s.view.position()
		if !synced {
			s.view.reset() // a gap with no snapshot after it: read it all again
			applied = 0
		}
		info, err := s.stream.Info(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			if !sleep(ctx, 100*time.Millisecond) {
				return 0, ctx.Err()
			}
			continue
		}
		if s.adopt(info.Created) {
			applied = 0
		}
		s.cfg.logger.Debug("replica: following the log", "store", s.name, "from", applied+1, "last", info.State.LastSeq)
		at, claim, err := s.read(ctx, applied, info.State.LastSeq)
		if claim || err != nil {
			return at, err
		}
	}
}

// read follows the log from after applied (the stream's last sequence
// was last when it began) and returns true when it is time to claim,
// with the last sign of life read then (view.lastLife: the claim is not
// made if another comes meanwhile), or false to start again (the view
// lost its footing).
func (s *Store) read(ctx context.Context, applied, last uint64) (at uint64, claim bool, err error) {
	cfg := njs.OrderedConsumerConfig{}
	if applied > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = njs.DeliverByStartSequencePolicy, applied+1
	}
	oc, err := s.stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		s.cfg.logger.Debug("replica: following the log: no consumer", "store", s.name, "error", err)
		return 0, false, ctx.Err()
	}
	type note struct {
		caughtUp bool
		broken   bool
		life     bool // a replica's message came (not only quarantined ones)
	}
	notes := make(chan note, 1)
	var (
		nmu    sync.Mutex
		latest note
	)
	cc, err := oc.Consume(func(m njs.Msg) {
		md, err := m.Metadata()
		if err != nil {
			return
		}
		rerr := s.view.read(logMsg{seq: md.Sequence.Stream, kind: kindOf(m.Subject()), header: m.Headers(), data: m.Data()})
		if rerr != nil {
			s.cfg.logger.Warn("replica: reading the log", "store", s.name, "error", rerr)
		}
		junk := errors.Is(rerr, errJunk)
		if junk || errors.Is(rerr, errStray) {
			rerr = nil // skipped: the view reads on
		}
		nmu.Lock()
		latest = note{caughtUp: md.NumPending == 0, broken: latest.broken || rerr != nil, life: latest.life || !junk}
		n := latest
		latest.life = false
		nmu.Unlock()
		select {
		case notes <- n:
		default:
			select { // replace the older note
			case <-notes:
			default:
			}
			select {
			case notes <- n:
			default:
			}
		}
	})
	if err != nil {
		return 0, false, ctx.Err()
	}
	defer func() {
		cc.Stop()
		<-cc.Closed()
	}()
	caughtUp := applied >= last
	silence := time.NewTimer(s.cfg.lease)
	defer silence.Stop()
	// The last sign of life when silence was last armed: messages that
	// were quarantined do not count, so that answers aimed at the log
	// cannot keep a dead leader's store from being taken over.
	seen := s.view.lastLife()
	seenAt := applied // where the view was when silence was last armed, for a stalled consumer
	rearm := func() {
		if !silence.Stop() {
			select {
			case <-silence.C:
			default:
			}
		}
		silence.Reset(s.cfg.lease)
		seen = s.view.lastLife()
		seenAt, _, _, _, _ = s.view.position()
	}
	for {
		if caughtUp {
			_, synced, _, _, resign := s.view.position()
			if !synced {
				return 0, false, nil
			}
			if s.view.lastLife() == 0 || resign {
				return s.view.lastLife(), true, nil // nobody leads
			}
		}
		select {
		case n := <-notes:
			if n.broken {
				return 0, false, nil
			}
			caughtUp = n.caughtUp
			if n.life {
				rearm()
			}
		case <-silence.C:
			applied, synced, _, _, _ := s.view.position()
			life := s.view.lastLife()
			if caughtUp && life == seen {
				return life, synced, nil
			}
			s.cfg.logger.Debug("replica: a lease of silence", "store", s.name, "caught_up", caughtUp, "applied", applied, "life", life, "seen", seen)
			if !caughtUp && applied == seenAt {
				// Behind, and nothing came for a lease: the consumer
				// stalled (its server was lost, say). Follow again, with
				// a new one.
				return 0, false, nil
			}
			seenAt = applied
			// Not caught up, or something came in that the silence did
			// not cover yet (its note is on its way): a lease more.
			silence.Reset(s.cfg.lease)
			seen = life
		case <-ctx.Done():
			return 0, false, ctx.Err()
		}
	}
}

// claim appends a term message where the log ends, follow having
// decided to claim when the last sign of life it had read was at, and
// returns true if it landed: this Store leads, from then on. If the view
// read a sign of life since (a message came in between the decision and
// the follower's stop: another replica's claim, say), it does not claim:
// the leader, if any, has just shown life.
func (s *Store) claim(ctx context.Context, at uint64) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.ended {
		return false, fmt.Errorf("store %q: %w", s.name, ErrClosed)
	}
	if s.view.lastLife() != at {
		return false, nil
	}
	// The log itself, not this replica's reading of it, must be silent:
	// a follower that fell behind (its consumer stalled, its connection
	// held) has read nothing for a lease while the leader wrote on. One
	// that cannot reach the stream does not claim.
	if !s.nc.IsConnected() {
		return false, nil
	}
	ictx, cancel := context.WithTimeout(ctx, max(s.cfg.lease/2, time.Second))
	info, err := s.stream.Info(ictx)
	cancel()
	if applied, _, _, _, _ := s.view.position(); err != nil || info.State.LastSeq != applied || !info.Created.Equal(s.view.identity()) {
		var last uint64
		if err == nil {
			last = info.State.LastSeq
		}
		s.cfg.logger.Debug("replica: not claiming: the log is not where this replica read it", "store", s.name, "applied", applied, "last", last, "error", err)
		return false, nil
	}
	// One try: a claim that cannot be confirmed at once is given up, and
	// made again, if still due, after the next lease of silence.
	secret := hex.EncodeToString(s.view.storeSecret())
	seq, sent, err := s.appendLockedFor(kindTerm, nil, nats.Header{hdrSecret: []string{secret}}, 0)
	switch {
	case errors.Is(err, ErrFenced):
		return false, nil // another got there first
	case err != nil:
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		s.cfg.logger.Warn("replica: claiming the store", "store", s.name, "error", err)
		return false, nil
	}
	s.term, s.leading, s.claimed, s.created = seq, true, sent, info.Created
	s.led.Store(seq)
	s.view.mu.Lock()
	s.view.applied, s.view.term, s.view.leader, s.view.resign = seq, seq, s.cfg.name, false
	s.view.bytes += msgOverhead
	s.view.mu.Unlock()
	s.renew(sent)
	s.beats.Go(s.beat)
	s.beats.Go(s.watch)
	s.cfg.logger.Info("replica: leading", "store", s.name, "term", seq, "replica", s.cfg.name)
	return true, nil
}

// beat appends a sign of life whenever the leader has appended nothing
// for a third of its lease, until the Store stops leading.
func (s *Store) beat() {
	every := s.cfg.lease / 3
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.quit:
			return
		case <-s.done:
			return
		}
		s.lmu.Lock()
		since := time.Since(s.sentAt)
		s.lmu.Unlock()
		if since < every {
			t.Reset(every - since)
			continue
		}
		s.mu.Lock()
		if !s.leading {
			s.mu.Unlock()
			return
		}
		seq, sent, err := s.appendLocked(kindBeat, nil, nil)
		if err != nil {
			s.stopLocked(err)
			s.mu.Unlock()
			return
		}
		s.view.appended(seq, kindBeat, nil, msgOverhead)
		s.renew(sent)
		s.compactLocked()
		s.mu.Unlock()
		t.Reset(every)
	}
}

// compactLocked writes a snapshot of every record and purges the log
// before it, once the log has grown enough since the last one
// (WithCompactAfter). A snapshot refused stops the Store (fenced); a
// purge that fails is retried at the next snapshot.
func (s *Store) compactLocked() {
	if !s.leading || !s.view.compactionDue(s.cfg.compactAfter) {
		return
	}
	body := s.view.encodeAll()
	seq, sent, err := s.appendLocked(kindSnap, body, nats.Header{hdrSecret: []string{hex.EncodeToString(s.view.storeSecret())}})
	if errors.Is(err, ErrCommitTooLarge) {
		s.cfg.logger.Warn("replica: records too large for a snapshot: the log is not compacted", "store", s.name, "bytes", len(body))
		s.view.mu.Lock()
		s.view.bytes = 0 // try again after as much growth
		s.view.mu.Unlock()
		return
	}
	if err != nil {
		s.stopLocked(err)
		return
	}
	parts := len(split(body, s.partSize()))
	s.view.appended(seq, kindSnap, nil, int64(len(body)))
	s.renew(sent)
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.lease)
	defer cancel()
	if err := s.stream.Purge(ctx, njs.WithPurgeSequence(seq-uint64(parts)+1)); err != nil {
		s.cfg.logger.Warn("replica: purging the log before a snapshot", "store", s.name, "error", err)
	}
}

// partSize is the most body bytes one message of the log carries.
func (s *Store) partSize() int {
	return int(s.nc.MaxPayload()) - partHeadroom
}

// appendLocked appends a record of kind (body, in parts if needed; extra
// headers on its first message) where the view says the log ends, and
// returns the sequence of its last message and when the try that landed
// was sent (the first try's time, if it cannot tell which did).
// Retried through outages until WithMaxOutage. Errors: ErrFenced
// (wrapped) if another replica appended there first; ErrCommitTooLarge;
// otherwise an outage that outlasted the limit. Guarded by mu.
func (s *Store) appendLockedFor(kind string, body []byte, extra nats.Header, limit time.Duration) (uint64, time.Time, error) {
	parts := split(body, s.partSize())
	if len(parts) > maxParts {
		return 0, time.Time{}, fmt.Errorf("%w: %d bytes in %d messages, at most %d", ErrCommitTooLarge, len(body), len(parts), maxParts)
	}
	expected, _, _, _, _ := s.view.position()
	s.appends++
	id := s.id + "." + strconv.FormatUint(s.appends, 10)
	sent := time.Now()
	deadline := sent.Add(limit)
	backoff := 20 * time.Millisecond
	var last error
	// A try waits for its answer half a lease (at least 500 ms, at most
	// 2 s): an answer lost with a connection reset or a stream
	// leader is then found out (landed) and the append sent again well
	// within the lease, rather than the lease lapsing while it waits.
	tryTimeout := min(max(s.cfg.lease/2, 500*time.Millisecond), 2*time.Second)
	once := limit == 0 // a claim: sent once, its fate read from the log
	tried := false
	for {
		trySent := time.Now()
		if once && tried {
			// Not sent again: a try that is slow to land must not be
			// taken for a failure and land unnoticed (a term nobody
			// runs). Only the log is read again, for up to a lease.
			if trySent.Sub(sent) > s.cfg.lease {
				return 0, sent, fmt.Errorf("replica: store %q: claim not confirmed after %v: %w", s.name, s.cfg.lease, last)
			}
			t := time.NewTimer(50 * time.Millisecond)
			<-t.C
			at, ours, found, rerr := s.landed(expected, id, tryTimeout)
			switch {
			case rerr == nil && found && ours:
				return expected + uint64(len(parts)), sent, nil
			case rerr == nil && found && at == nil, rerr == nil && found && !s.skipJunk(at):
				return 0, sent, fmt.Errorf("%w: store %q: a claim expecting the log to end at %d: another append came first", ErrFenced, s.name, expected)
			case rerr == nil && found:
				return 0, sent, fmt.Errorf("replica: store %q: a claim expecting the log to end at %d: a quarantined message came first", s.name, expected)
			}
			continue
		}
		tried = true
		seq, err := s.publish(kind, parts, expected, id, extra, tryTimeout)
		if err == nil {
			// This try landed, not an earlier one (that would have made
			// this one's expectation stale): the lease runs from its
			// send, not from the first try's.
			return seq, trySent, nil
		}
		last = err
		// Whatever the error, this append (or an earlier try of it) may
		// have landed: the log says.
		at, ours, found, rerr := s.landed(expected, id, tryTimeout)
		switch {
		case errors.Is(rerr, errReplaced):
			return 0, sent, fmt.Errorf("%w: %w", ErrFenced, rerr)
		case rerr == nil && found && ours:
			return expected + uint64(len(parts)), sent, nil
		case rerr == nil && found && at == nil:
			return 0, sent, fmt.Errorf("%w: store %q: term %d's append %s expected the log to end at %d; the log has moved on since, and a compaction purged what came after it",
				ErrFenced, s.name, s.term, kind, expected)
		case rerr == nil && found && s.skipJunk(at):
			// No replica wrote what took this append's place: an answer
			// aimed at the log. Quarantined; append after it, at once.
			expected = at.Sequence
			continue
		case rerr == nil && found:
			return 0, sent, fmt.Errorf("%w: store %q: term %d's append %s expected the log to end at %d; %s (term %s) appended there",
				ErrFenced, s.name, s.term, kind, expected, at.Header.Get(hdrLeader), termOf(at))
		}
		if once {
			continue // read the log again, do not send again
		}
		if time.Now().After(deadline) {
			return 0, sent, fmt.Errorf("replica: store %q: append (%s) not confirmed after %v: %w", s.name, kind, limit, last)
		}
		s.cfg.logger.Warn("replica: append failed, retrying", "store", s.name, "kind", kind, "error", err)
		t := time.NewTimer(backoff)
		<-t.C
		backoff = min(2*backoff, 250*time.Millisecond)
	}
}

func (s *Store) appendLocked(kind string, body []byte, extra nats.Header) (uint64, time.Time, error) {
	return s.appendLockedFor(kind, body, extra, s.cfg.maxOutage)
}

// skipJunk reads m, the message after the end this Store's append
// expected, into the view if no replica wrote it in the log's current
// term (view.junkLocked): it is quarantined, and the append goes after
// it. It returns false, reading nothing, for a replica's message.
// Guarded by mu.
func (s *Store) skipJunk(m *njs.RawStreamMsg) bool {
	lm := logMsg{seq: m.Sequence, kind: kindOf(m.Subject), header: m.Header, data: m.Data}
	s.view.mu.Lock()
	defer s.view.mu.Unlock()
	if lm.kind != kindTerm && lm.kind != kindBeat && lm.kind != kindCommit && lm.kind != kindSnap {
		lm.kind = "?" + lm.kind // a stray (an older stream's subjects): not a replica's either
	} else if s.view.junkLocked(lm) == "" {
		return false
	}
	if err := s.view.readLocked(lm); err != nil {
		s.cfg.logger.Warn("replica: quarantined", "store", s.name, "term", s.term, "error", err)
	}
	return true
}

// termOf reads the term a log message names (its own sequence for a term
// message that begins one).
func termOf(m *njs.RawStreamMsg) string {
	if t := m.Header.Get(hdrTerm); t != "" {
		return t
	}
	return strconv.FormatUint(m.Sequence, 10)
}

// publish sends one try of an append: one message, or an atomic batch,
// the first expecting the log to end at expected; it returns the
// sequence of the last message, or why it did not (errRefused when the
// log had moved on).
func (s *Store) publish(kind string, parts [][]byte, expected uint64, id string, extra nats.Header, timeout time.Duration) (uint64, error) {
	subject := logSubject(s.name, kind)
	n := len(parts)
	var term string
	if s.term != 0 {
		term = strconv.FormatUint(s.term, 10)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for i, part := range parts {
		m := &nats.Msg{Subject: subject, Data: part, Header: nats.Header{}}
		if term != "" {
			m.Header[hdrTerm] = []string{term}
		}
		m.Header[hdrLeader] = []string{s.cfg.name}
		if i == 0 {
			m.Header[hdrID] = []string{id}
			m.Header[hdrExpected] = []string{strconv.FormatUint(expected, 10)}
			for k, v := range extra {
				m.Header[k] = v
			}
		}
		if n > 1 {
			m.Header[hdrPart] = []string{strconv.Itoa(i+1) + "/" + strconv.Itoa(n)}
			m.Header[hdrBatchID] = []string{id}
			m.Header[hdrBatchSeq] = []string{strconv.Itoa(i + 1)}
			if i < n-1 {
				if err := s.nc.PublishMsg(m); err != nil {
					return 0, err
				}
				continue
			}
			m.Header[hdrCommit] = []string{"1"}
		}
		r, err := s.nc.RequestMsgWithContext(ctx, m)
		if err != nil {
			return 0, err
		}
		return readAck(r)
	}
	panic("replica: publish of no part")
}

// landed looks at the message after expected: found, and whether it is
// the first message of the append named id. Found with no message: the
// log ends past expected, and what came after it was purged (a
// compaction of another leader's: not this append).
func (s *Store) landed(expected uint64, id string, timeout time.Duration) (*njs.RawStreamMsg, bool, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	info, err := s.stream.Info(ctx)
	switch {
	case err != nil:
		// Deleted (JetStream may also say so of a stream it is still
		// recovering): retried, until WithMaxOutage.
		return nil, false, false, err
	case !s.created.IsZero() && !info.Created.Equal(s.created):
		return nil, false, false, fmt.Errorf("%w: store %q: its log's stream was deleted and created again (at %v; this term's at %v)",
			errReplaced, s.name, info.Created, s.created)
	}
	m, err := s.stream.GetMsg(ctx, expected+1)
	switch {
	case errors.Is(err, njs.ErrMsgNotFound):
		// Nothing there yet, or something that a compaction purged since:
		// the log then ends past it.
		return nil, false, info.State.LastSeq > expected, nil
	case err != nil:
		return nil, false, false, err
	}
	return m, m.Header.Get(hdrID) == id, true, nil
}

// errReplaced: the log's stream this Store led was deleted and created
// again: its term is over. landed's error, made an ErrFenced by
// appendLockedFor.
var errReplaced = errors.New("replica: the log's stream was replaced")

// ReadRecords calls fn with every record the store called name holds now,
// in key order, as its log says (from the last snapshot on), without
// leading it or disturbing its leader: to inspect or back up a store.
// It blocks until it has read the log to its end, or ctx ends. Its errors
// are ctx's, JetStream's (no such store: njs.ErrStreamNotFound, wrapped),
// fn's, and one wrapping coordinator.ErrStoreCorrupt for a log it cannot
// read. It is safe for concurrent use, and beside a leader's Store.
func ReadRecords(ctx context.Context, nc *nats.Conn, name string, fn func(key, value []byte) error) error {
	if err := checkArgs(nc, name); err != nil {
		return err
	}
	js, err := njs.New(nc)
	if err != nil {
		return err
	}
	st, err := js.Stream(ctx, streamName(name))
	if err != nil {
		return fmt.Errorf("replica: store %q: %w", name, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return err
	}
	v := newView()
	if last := info.State.LastSeq; last > 0 && info.State.Msgs > 0 {
		oc, err := st.OrderedConsumer(ctx, njs.OrderedConsumerConfig{})
		if err != nil {
			return err
		}
		it, err := oc.Messages()
		if err != nil {
			return err
		}
		defer it.Stop()
		for v.applied < last {
			m, err := it.Next(njs.NextContext(ctx))
			if err != nil {
				return err
			}
			md, err := m.Metadata()
			if err != nil {
				return err
			}
			if err := v.read(logMsg{seq: md.Sequence.Stream, kind: kindOf(m.Subject()), header: m.Headers(), data: m.Data()}); err != nil &&
				!errors.Is(err, errStray) && !errors.Is(err, errJunk) {
				return fmt.Errorf("%w: store %q: %v", coordinator.ErrStoreCorrupt, name, err)
			}
		}
	}
	if !v.synced {
		return fmt.Errorf("%w: store %q: its log does not begin with a snapshot or its first record", coordinator.ErrStoreCorrupt, name)
	}
	return v.records(fn)
}
