package jetstream

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/worker"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
)

// Payload is the Payload of a task bound for a remote pool (Task.Payload,
// as a Payload, a *Payload, or the []byte of its Encode): which handler
// runs it and its input.
type Payload struct {
	Kind string // the key of the handler that runs it, in the Handlers given to Serve; required
	Data []byte // the handler's input, opaque to Baton; at most the server's max payload less 8 KiB
}

// Encode returns p as bytes, for a durable scheduler (coordinator.WithStore
// keeps only []byte payloads): a Task.Payload of these bytes is the same
// as p. The layout is the Kind's length as a uvarint, the Kind, then Data.
func (p Payload) Encode() []byte {
	b := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen64+len(p.Kind)+len(p.Data)), uint64(len(p.Kind)))
	return append(append(b, p.Kind...), p.Data...)
}

// DecodePayload reverses Payload.Encode; ErrBadPayload for bytes that are
// not its layout.
func DecodePayload(b []byte) (Payload, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return Payload{}, fmt.Errorf("%w: %d bytes that are not an encoded Payload", ErrBadPayload, len(b))
	}
	return Payload{Kind: string(b[k : k+int(n)]), Data: b[k+int(n):]}, nil
}

// Result is what a successful remote attempt sets as its task's result
// (coordinator.SetResult): dependents read it with
// coordinator.Result[jetstream.Result], and TaskInfo.Result reports it.
// On a durable scheduler, which keeps []byte results only, the result is
// Data alone (coordinator.Result[[]byte]).
type Result struct {
	Data     []byte // what the handler returned
	Worker   string // the name of the Serve that ran it (WithWorkerName)
	Delivery int    // which delivery of the attempt ran it: 1, or more after a worker died or lost its lease
}

var errDelivered = errors.New("jetstream: attempt delivered to a worker")

// Stats counts what a Pool has seen since NewPool.
type Stats struct {
	Published    int // attempts published (a publish the stream deduplicated counts too)
	Outcomes     int // outcomes applied: one per attempt at most
	Duplicates   int // outcomes ignored because their attempt already had one
	Redelivered  int // outcomes applied that came from a second or later delivery
	Deduplicated int // publishes the stream found already stored (the same attempt published again, as after a restart)
}

// Defaults of the Pool's options.
const (
	DefaultLease       = 30 * time.Second
	DefaultMaxDeliver  = 5
	DefaultMaxOutage   = time.Minute
	DefaultStopWait    = 5 * time.Second
	DefaultDedupe      = 2 * time.Minute
	DefaultResultsTTL  = 24 * time.Hour
	resultsAckWait     = 5 * time.Minute
	settledMemory      = 1 << 17 // entries of the Pool's memory of settled attempts: two per attempt (settle)
	maxEarly           = 1 << 16 // outcomes kept while no Do waits for them
	payloadHeadroom    = 8 << 10 // room for headers in a NATS message
	maxHeaders         = 4 << 10 // the most bytes of task ID and Kind an attempt carries (in its headers, within payloadHeadroom)
	publishTimeout     = 5 * time.Second
	publishBackoffMin  = 20 * time.Millisecond
	publishBackoffMax  = time.Second
	deleteQueuedBudget = 2 * time.Second
)

// Option configures a Pool in NewPool.
type Option func(*poolConfig) error

type poolConfig struct {
	lease      time.Duration
	maxDeliver int
	instance   string
	maxOutage  time.Duration
	stopWait   time.Duration
	dedupe     time.Duration
	resultsTTL time.Duration
	replicas   int
	kinds      map[string]bool // nil: any kind
	logger     *slog.Logger
	detach     bool                            // WithDetach: Shutdown leaves remote attempts running
	secret     []byte                          // WithSecret, or random for a random instance; nil: outcomes unchecked
	fence      func(ctx context.Context) error // WithFence; nil: none
	gen        generation                      // WithGeneration; zero: none (a random results consumer name)
}

func positive(what string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%w: %s(%v): need a positive duration", ErrInvalidOption, what, d)
	}
	return nil
}

func atLeast(what string, d, least time.Duration) error {
	if d < least {
		return fmt.Errorf("%w: %s(%v): need at least %v", ErrInvalidOption, what, d, least)
	}
	return nil
}

// WithLease sets how long a worker holds an attempt without a sign of
// life (the work consumer's AckWait, default DefaultLease). Serve extends
// the lease every third of it while a handler runs; an attempt whose
// worker died is delivered again once its lease expires. d is at least
// MinLease: a shorter lease could not be extended in time.
func WithLease(d time.Duration) Option {
	return func(c *poolConfig) error { c.lease = d; return atLeast("WithLease", d, MinLease) }
}

// MinLease is the shortest lease WithLease accepts. Serve extends a lease
// every third of it, and each extension is a message that must reach the
// server before the lease runs out: measured on a loaded two-core machine,
// 10 and 20 ms leases lapsed mid-handler (the attempt ran again), 30 and
// 100 ms held. The minimum keeps a margin over what held.
const MinLease = 100 * time.Millisecond

// WithMaxDeliver sets how many times one attempt is delivered to workers
// (default DefaultMaxDeliver); after that, Do returns ErrMaxDeliveries,
// about a lease after the last delivery's lease ran out (its worker died
// or stopped), even if no worker is left.
func WithMaxDeliver(n int) Option {
	return func(c *poolConfig) error {
		if n < 1 {
			return fmt.Errorf("%w: WithMaxDeliver(%d): need at least 1", ErrInvalidOption, n)
		}
		c.maxDeliver = n
		return nil
	}
}

// WithInstance names this Pool instance (default: random). Outcomes are
// addressed to an instance: a Pool created again with the same instance
// name, after its process restarted, receives the outcomes published while
// it was down. Two live Pools must never share an instance name. The name
// is 1-64 letters, digits, '-' or '_'.
func WithInstance(id string) Option {
	return func(c *poolConfig) error {
		if !validName(id) {
			return fmt.Errorf("%w: WithInstance(%q): need 1-64 letters, digits, '-' or '_'", ErrInvalidOption, id)
		}
		c.instance = id
		return nil
	}
}

// WithGeneration orders the Pools of one instance (WithInstance) that
// take over from one another, by a term (from 1) within an epoch (such as
// a leader's term within the life of the log it leads): as it starts, a
// Pool deletes the results consumers of the instance's Pools of lower
// terms of its epoch, of other epochs, and of none (as every Pool
// deletes those of the instance's other Pools), but never one of a
// higher term of its epoch: finding one, NewPool fails with
// ErrSuperseded, deletes the consumer it made, and leaves the newer
// Pool alone. A Pool without a generation takes over from every other
// Pool of its instance, whichever started last (a restarted process).
// Two live Pools of one instance must not share a generation.
func WithGeneration(epoch, term uint64) Option {
	return func(c *poolConfig) error {
		if term == 0 {
			return fmt.Errorf("%w: WithGeneration(%d, 0): need a term from 1", ErrInvalidOption, epoch)
		}
		c.gen = generation{epoch, term}
		return nil
	}
}

// WithSecret gives the Pool a secret (at least 16 bytes; keep it from the
// workers) from which it derives a token for each attempt it publishes
// (an HMAC of its key, in the attempt's Baton-Token header), which Serve
// returns with the outcome: the Pool applies only outcomes that carry
// their attempt's token, so a worker can settle the attempts it was given
// and no other (it cannot forge the outcome of an attempt that does not
// exist yet: attempt keys are guessable, tokens are not). Pools that take
// over each other's attempts (the same WithInstance: a restarted durable
// coordinator, replica's standbys) need the same secret; package replica
// keeps one in its log. Without WithSecret, a Pool of a random instance
// (no WithInstance) draws a secret of its own, and a Pool of a fixed
// instance checks no token (any outcome of its pool is applied, as from
// a worker of an older version, which returns none).
func WithSecret(secret []byte) Option {
	return func(c *poolConfig) error {
		if len(secret) < 16 {
			return fmt.Errorf("%w: WithSecret: %d bytes, need at least 16", ErrInvalidOption, len(secret))
		}
		c.secret = append([]byte(nil), secret...)
		return nil
	}
}

// WithMaxOutage sets how long Do waits through a lost connection, or a
// JetStream that does not answer, before it fails the attempt with
// ErrUnavailable (default DefaultMaxOutage). While the outage lasts
// longer, new attempts fail at once with ErrUnavailable.
func WithMaxOutage(d time.Duration) Option {
	return func(c *poolConfig) error { c.maxOutage = d; return positive("WithMaxOutage", d) }
}

// WithStopWait sets how long Do waits, after its context ended, for the
// outcome of an attempt a worker had begun (default DefaultStopWait), so
// that the next attempt of the task does not run beside it.
func WithStopWait(d time.Duration) Option {
	return func(c *poolConfig) error { c.stopWait = d; return positive("WithStopWait", d) }
}

// WithDedupeWindow sets the streams' duplicate window (default
// DefaultDedupe): an attempt or outcome published again within it is
// stored once. d is at least MinDedupe, JetStream's own minimum.
func WithDedupeWindow(d time.Duration) Option {
	return func(c *poolConfig) error { c.dedupe = d; return atLeast("WithDedupeWindow", d, MinDedupe) }
}

// MinDedupe is the shortest duplicate window WithDedupeWindow accepts (and
// JetStream stores); WithResultsTTL is at least as long.
const MinDedupe = 100 * time.Millisecond

// WithResultsTTL sets how long outcomes, and a Pool instance's durable
// results consumer, are kept for a Pool that is not running (default
// DefaultResultsTTL): the longest coordinator downtime that loses nothing.
// It may not be shorter than the duplicate window (WithDedupeWindow).
func WithResultsTTL(d time.Duration) Option {
	return func(c *poolConfig) error { c.resultsTTL = d; return atLeast("WithResultsTTL", d, MinDedupe) }
}

// WithReplicas sets the replicas of the pool's streams in a JetStream
// cluster (default 1).
func WithReplicas(n int) Option {
	return func(c *poolConfig) error {
		if n < 1 || n > 5 {
			return fmt.Errorf("%w: WithReplicas(%d): need 1 to 5", ErrInvalidOption, n)
		}
		c.replicas = n
		return nil
	}
}

// WithDetach makes a Do whose context ends because its scheduler stops
// (context.Cause is coordinator.ErrClosed: a Shutdown, or a durable
// scheduler stopped by a failed commit) return at once and leave the
// attempt where it is, queued or running on a worker, instead of
// stopping it: the durable scheduler that comes next on the same store
// (the process restarted, or a standby replica that took over) hands the
// attempt out again as the same attempt (worker.Resumer), and a Pool of
// the same WithInstance picks up its outcome. Give it only to a Pool of a
// durable scheduler with a fixed WithInstance: otherwise nobody collects
// what the attempt does. Cancel and Timeout still stop the attempt.
func WithDetach() Option {
	return func(c *poolConfig) error { c.detach = true; return nil }
}

// WithFence makes Do call check right before each try to publish an
// attempt: its first publication, each retry after an outage or a
// failed publish, and each publication under a new key (an attempt
// withdrawn or stopped before a restart, published again). While check
// blocks, Do waits; when it returns an error, Do publishes nothing more
// and returns that error. check's context ends with Do's, or with the
// cause ErrClosed when the Pool closes (Do then returns ErrClosed); check
// must honour it. Do calls are concurrent, so check must be safe for
// concurrent use.
//
// Do also asks check, without waiting, before it stops an attempt whose
// context ended (a Cancel or a Timeout; not a scheduler's stop with
// WithDetach, which leaves the attempt anyway): it calls check with that
// ended context, and if check returns an error (it may return the
// context's cause), Do leaves the attempt to run, as WithDetach does,
// instead of withdrawing it: the next holder of the fence may have handed
// the same attempt out under the same key.
//
// A replicated scheduler (package replica) passes its lease: a leader
// deposed while one of its attempts was on its way (a process paused
// past its lease, then resumed) must not hand that attempt out once the
// next leader did. Its publication would be deduplicated, or, once the
// next leader's run of the attempt ended and the stream forgot it, found
// dead and published again under a new key: a worker would run a task
// whose end was committed. What remains is a pause between check and
// publication: the publication is then a duplicate of the next leader's
// if it comes within the stream's duplicate window (WithDedupeWindow),
// and its run can overlap the next leader's otherwise.
func WithFence(check func(ctx context.Context) error) Option {
	return func(c *poolConfig) error {
		if check == nil {
			return fmt.Errorf("%w: WithFence(nil)", ErrInvalidOption)
		}
		c.fence = check
		return nil
	}
}

// WithKinds makes Validate refuse a Payload whose Kind is not one of kinds,
// at Submit, instead of the attempt failing on a worker with
// ErrUnknownKind.
func WithKinds(kinds ...string) Option {
	return func(c *poolConfig) error {
		if len(kinds) == 0 {
			return fmt.Errorf("%w: WithKinds(): no kind", ErrInvalidOption)
		}
		c.kinds = make(map[string]bool, len(kinds))
		for _, k := range kinds {
			if k == "" || !validHeader(k) {
				return fmt.Errorf("%w: WithKinds(%q): a kind is non-empty text without line breaks", ErrInvalidOption, k)
			}
			c.kinds[k] = true
		}
		return nil
	}
}

// WithLogger sets where the Pool logs (default: nowhere): duplicate
// outcomes at Info, undecodable messages and consumer errors at Warn.
func WithLogger(l *slog.Logger) Option {
	return func(c *poolConfig) error {
		if l == nil {
			return fmt.Errorf("%w: WithLogger(nil)", ErrInvalidOption)
		}
		c.logger = l
		return nil
	}
}

// Pool is a worker.Worker (and worker.Validator) whose attempts run on
// other machines: give it to coordinator.WithPool, whose size is then the
// number of attempts in flight remotely. Each attempt is published to the
// pool's work-queue stream; a worker machine running Serve for the pool
// takes it, runs the handler of its Payload's Kind, and publishes the
// outcome to the results stream, where the Pool picks it up.
//
// A Pool is safe for concurrent use. Close it after the coordinator's
// Shutdown.
type Pool struct {
	nc       *nats.Conn                                                                        // owned by the caller; the Pool never closes it
	js       njs.JetStream                                                                     // immutable
	attempts njs.Stream                                                                        // immutable: the work-queue stream, for DeleteMsg
	results  njs.Stream                                                                        // immutable: the results stream, to look up an outcome (dead)
	work     njs.Consumer                                                                      // immutable: its work consumer, for what it delivered
	name     string                                                                            // immutable: the pool's name
	cfg      poolConfig                                                                        // immutable after NewPool
	maxData  int                                                                               // immutable: the largest Payload.Data
	cc       njs.ConsumeContext                                                                // set by NewPool, stopped by Close: the results consumer
	subs     []*nats.Subscription                                                              // set by NewPool, unsubscribed by Close: the advisory and held reports
	status   chan nats.Status                                                                  // connection events, read by monitor
	closing  chan struct{}                                                                     // closed by Close
	life     context.Context                                                                   // ends when closing closes (WithFence's check waits on it)
	endLife  context.CancelFunc                                                                // Close's, after closing
	up       atomic.Pointer[chan struct{}]                                                     // closed while connected; replaced (under mu) when the connection drops
	counts   struct{ published, deduplicated, outcomes, duplicates, redelivered atomic.Int64 } // Stats, updated atomically
	closeErr func() error                                                                      // Close, once
	wg       sync.WaitGroup                                                                    // the monitor goroutine

	mu      sync.Mutex         // guards the fields below
	waiting map[string]*call   // by attempt key: the Do calls waiting for an outcome
	early   map[string]njs.Msg // outcomes no Do waited for yet (a restart)
	settled *keyRing           // attempts whose outcome was applied
	down    bool               // the connection is not up
	lost    chan struct{}      // closed once an outage outlasts cfg.maxOutage; replaced when it ends
	timer   *time.Timer        // fires lost; nil while connected
}

var _ interface {
	worker.Worker
	worker.Validator
	worker.Resumer
} = (*Pool)(nil)

// call is one Do waiting for its outcome.
type call struct {
	key  string        // immutable: the attempt key
	seq  atomic.Uint64 // the attempt message's stream sequence, once published
	dup  bool          // the publish was a duplicate of an earlier Do's; owned by the Do goroutine
	gone bool          // unregistered; owned by the Do goroutine
	got  bool          // a delivery was sent on ch; guarded by Pool.mu
	ch   chan delivery // receives at most one delivery (buffer 1)

	held      chan struct{} // signalled (buffer 1) at each report that a worker holds the attempt's last delivery (onHeld)
	heldSeq   uint64        // the publication the last report named; guarded by Pool.mu
	delivered int           // the delivery the last report named; guarded by Pool.mu
}

type delivery struct {
	o   outcome
	msg njs.Msg // nil for a failure the Pool made up (err set)
	err error
}

// NewPool provisions the JetStream objects of the pool called name (its
// streams and consumers, created or updated, file storage) on nc and
// returns its coordinator side. nc must be a connection that reconnects
// (nats.MaxReconnects(-1) suits it); the Pool uses it and never closes it.
// NewPool blocks for a few round trips to the server, bounded by ctx.
//
// Several coordinators may share a pool name (each Pool instance gets its
// own outcomes), but they must agree on WithLease, WithMaxDeliver and the
// streams' settings: the last NewPool's win. Running Serves follow a
// changed lease (NewPool tells them; they also check every ten seconds).
func NewPool(ctx context.Context, nc *nats.Conn, name string, opts ...Option) (*Pool, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: NewPool: nil connection", ErrInvalidOption)
	}
	if !validName(name) {
		return nil, fmt.Errorf("%w: NewPool(%q): a pool name is 1-64 letters, digits, '-' or '_'", ErrInvalidOption, name)
	}
	cfg := poolConfig{lease: DefaultLease, maxDeliver: DefaultMaxDeliver, maxOutage: DefaultMaxOutage,
		stopWait: DefaultStopWait, dedupe: DefaultDedupe, resultsTTL: DefaultResultsTTL, replicas: 1}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.resultsTTL < cfg.dedupe {
		// JetStream refuses a duplicate window longer than a stream's MaxAge.
		return nil, fmt.Errorf("%w: NewPool(%q): WithResultsTTL(%v) shorter than the duplicate window (%v)", ErrInvalidOption, name, cfg.resultsTTL, cfg.dedupe)
	}
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.DiscardHandler)
	}
	if cfg.instance == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		cfg.instance = hex.EncodeToString(b[:])
		if cfg.secret == nil {
			cfg.secret = make([]byte, 32)
			_, _ = rand.Read(cfg.secret)
		}
	}
	js, err := njs.New(nc)
	if err != nil {
		return nil, err
	}
	p := &Pool{nc: nc, js: js, name: name, cfg: cfg, maxData: int(nc.MaxPayload()) - payloadHeadroom,
		closing: make(chan struct{}), waiting: make(map[string]*call),
		early: make(map[string]njs.Msg), settled: newKeyRing(settledMemory), lost: make(chan struct{})}
	p.life, p.endLife = context.WithCancel(context.Background())
	up := make(chan struct{})
	p.up.Store(&up)
	if err := p.provision(ctx); err != nil {
		return nil, err
	}
	if err := p.start(ctx); err != nil {
		p.stop()
		return nil, err
	}
	p.closeErr = sync.OnceValue(func() error { p.stop(); return nil })
	return p, nil
}

func (p *Pool) provision(ctx context.Context) error {
	c := p.cfg
	s, err := p.js.CreateOrUpdateStream(ctx, njs.StreamConfig{
		Name: attemptsStream(p.name), Subjects: []string{attemptsSubject(p.name)},
		Retention: njs.WorkQueuePolicy, Storage: njs.FileStorage, Replicas: c.replicas, Duplicates: c.dedupe,
		Description: "Baton attempts of pool " + p.name,
	})
	if err != nil {
		return fmt.Errorf("jetstream: NewPool(%q): attempts stream: %w", p.name, err)
	}
	p.attempts = s
	if p.work, err = s.CreateOrUpdateConsumer(ctx, njs.ConsumerConfig{
		Durable: workConsumer, AckPolicy: njs.AckExplicitPolicy, AckWait: c.lease,
		MaxDeliver: c.maxDeliver, MaxAckPending: -1, DeliverPolicy: njs.DeliverAllPolicy,
	}); err != nil {
		return fmt.Errorf("jetstream: NewPool(%q): work consumer: %w", p.name, err)
	}
	// Running Serves pace their lease extensions by the consumer's
	// AckWait: tell them it may have changed.
	_ = p.nc.Publish(configSubject(p.name), nil)
	if p.results, err = p.js.CreateOrUpdateStream(ctx, njs.StreamConfig{
		Name: resultsStream(p.name), Subjects: []string{resultsSubject(p.name, ">")},
		Retention: njs.InterestPolicy, Storage: njs.FileStorage, Replicas: c.replicas, Duplicates: c.dedupe,
		MaxAge: c.resultsTTL, Description: "Baton outcomes of pool " + p.name,
	}); err != nil {
		return fmt.Errorf("jetstream: NewPool(%q): results stream: %w", p.name, err)
	}
	return nil
}

// start subscribes to outcomes, max-delivery advisories
// and connection events, in this order of importance.
func (p *Pool) start(ctx context.Context) error {
	name, filter := resultsConsumer(p.cfg.instance, p.cfg.gen.suffix()), resultsSubject(p.name, p.cfg.instance)+".>"
	cons, err := p.js.CreateOrUpdateConsumer(ctx, resultsStream(p.name), njs.ConsumerConfig{
		Durable: name, FilterSubject: filter,
		AckPolicy: njs.AckExplicitPolicy, AckWait: resultsAckWait, MaxAckPending: -1,
		DeliverPolicy: njs.DeliverAllPolicy, InactiveThreshold: p.cfg.resultsTTL,
	})
	if err != nil {
		p.dropConsumer(name) // JetStream may have made it, and not answered
		return fmt.Errorf("jetstream: NewPool(%q): results consumer: %w", p.name, err)
	}
	if deleted, err := p.takeOver(ctx, name); err != nil {
		if deleted == 0 {
			p.dropConsumer(name)
		}
		return fmt.Errorf("jetstream: NewPool(%q): results consumer: %w", p.name, err)
	}
	for _, s := range []struct {
		subject string
		f       nats.MsgHandler
	}{
		{maxDeliveriesSubject(p.name), p.onMaxDeliveries},
		{heldSubject(p.name, p.cfg.instance), p.onHeld},
	} {
		sub, err := p.nc.Subscribe(s.subject, s.f)
		if err != nil {
			return fmt.Errorf("jetstream: NewPool(%q): %w", p.name, err)
		}
		p.subs = append(p.subs, sub)
	}
	p.status = p.nc.StatusChanged()
	p.mu.Lock()
	p.down = !p.nc.IsConnected()
	if p.down {
		p.timer = time.AfterFunc(p.cfg.maxOutage, p.outageTooLong)
	} else {
		close(*p.up.Load())
	}
	p.mu.Unlock()
	p.wg.Go(p.monitor)
	cc, err := cons.Consume(p.onOutcome, njs.ConsumeErrHandler(func(_ njs.ConsumeContext, err error) {
		p.cfg.logger.LogAttrs(context.Background(), slog.LevelWarn, "jetstream: results consumer",
			slog.String("pool", p.name), slog.Any("err", err))
	}))
	if err != nil {
		return fmt.Errorf("jetstream: NewPool(%q): consume results: %w", p.name, err)
	}
	p.cc = cc
	return nil
}

// dropConsumer deletes the results consumer name of a NewPool that
// failed before it deleted another of its instance's (which keep the
// outcomes meanwhile: the results stream keeps an outcome only for a
// consumer there), so that it does not keep them for nobody until its
// InactiveThreshold, if JetStream answers within a second. One that
// failed later is left to the next Pool of the instance.
func (p *Pool) dropConsumer(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = p.results.DeleteConsumer(ctx, name)
}

// takeOver deletes the results consumers of this instance other than
// mine (name): those of earlier Pools of the instance, dead or alive (a
// process paused while a standby took its place). Mine was created first
// and delivers every outcome they had not acknowledged, at once: an
// outcome delivered to a Pool that died before acknowledging it would
// otherwise wait resultsAckWait for its redelivery, and one delivered to
// a Pool that still runs would be applied there. With a generation
// (WithGeneration), not one of a higher term of its epoch: finding one,
// it fails with ErrSuperseded, having deleted none of them.
//
// They are found by name (ownConsumer), from the consumers' names alone:
// a list of their configurations asks each consumer's leader, and on a
// cluster a consumer without one (in an election) holds the answer for
// nats-server's 4 s and is left out of it.
//
// It returns how many it deleted, or may have.
func (p *Pool) takeOver(ctx context.Context, name string) (int, error) {
	var old []string
	names := p.results.ConsumerNames(ctx)
	for c := range names.Name() {
		if c == name || !ownConsumer(c, p.cfg.instance) {
			continue
		}
		if g, ordered := generationOf(c, p.cfg.instance); p.cfg.gen.term > 0 && ordered && g.epoch == p.cfg.gen.epoch && g.term > p.cfg.gen.term {
			return 0, fmt.Errorf("%w: the results consumer %s of term %d is there (this Pool's: %d)", ErrSuperseded, c, g.term, p.cfg.gen.term)
		}
		old = append(old, c)
	}
	if err := names.Err(); err != nil {
		return 0, err
	}
	for i, c := range old {
		if err := p.results.DeleteConsumer(ctx, c); err != nil && !errors.Is(err, njs.ErrConsumerNotFound) {
			return i + 1, err // the last one too, perhaps: JetStream may have deleted it without an answer
		}
	}
	return len(old), nil
}

func (p *Pool) stop() {
	close(p.closing)
	p.endLife()
	if p.cc != nil {
		p.cc.Stop()
		<-p.cc.Closed()
	}
	for _, s := range p.subs {
		_ = s.Unsubscribe()
	}
	if p.status != nil {
		p.nc.RemoveStatusListener(p.status) // closes p.status: monitor returns
	}
	p.wg.Wait()
	p.mu.Lock()
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Unlock()
}

// Close stops the Pool: Do calls waiting for an outcome return ErrClosed,
// and so do later ones. It does not cancel attempts on the workers and
// does not delete the Pool's durable consumer: a Pool created again with
// the same WithInstance receives the outcomes published meanwhile. Close
// blocks until the Pool's goroutines and subscriptions are gone; it is
// idempotent and safe for concurrent use. It does not close the connection.
func (p *Pool) Close() error { return p.closeErr() }

// ResumesAttempts returns true: the Pool is a worker.Resumer. An attempt
// a durable scheduler's crash left running runs on, or has ended, on a
// worker machine; the restored scheduler hands it to Do again as the same
// attempt, and Do picks it up (see the package doc, Coordinator
// restarts). It does not block and works after Close.
func (p *Pool) ResumesAttempts() bool { return true }

// Instance returns the Pool's instance name (WithInstance, or the random
// one NewPool chose). A coordinator that restarts passes it to WithInstance
// to receive the outcomes published while it was down. It does not block,
// is safe for concurrent use and works after Close.
func (p *Pool) Instance() string { return p.cfg.instance }

// Stats returns the Pool's counters. It is safe for concurrent use and
// works after Close.
func (p *Pool) Stats() Stats {
	return Stats{Published: int(p.counts.published.Load()), Deduplicated: int(p.counts.deduplicated.Load()),
		Outcomes: int(p.counts.outcomes.Load()), Duplicates: int(p.counts.duplicates.Load()),
		Redelivered: int(p.counts.redelivered.Load())}
}

// Validate refuses, before anything is published, a job whose Payload is
// not a Payload or *Payload with a Kind (one of WithKinds' if given), whose
// Data does not fit in one message, whose ID and Kind together pass 4 KiB,
// or whose ID or Kind contains a line break or NUL or begins or ends with
// white space (NATS trims header values): ErrBadPayload or ErrUnknownKind,
// wrapped with the reason. It does not block, is safe for concurrent use,
// and works after Close.
func (p *Pool) Validate(j worker.Job) error {
	_, err := p.payload(j)
	return err
}

// payload reads j's Payload. Its errors do not name the task: the
// scheduler's error for the task (a *coordinator.TaskError at Submit, the
// task's own error at run time) does.
func (p *Pool) payload(j worker.Job) (Payload, error) {
	var pl Payload
	switch v := j.Payload.(type) {
	case Payload:
		pl = v
	case *Payload:
		if v == nil {
			return pl, fmt.Errorf("%w: nil *Payload", ErrBadPayload)
		}
		pl = *v
	case []byte:
		var err error
		if pl, err = DecodePayload(v); err != nil {
			return pl, err
		}
	default:
		return pl, fmt.Errorf("%w: Payload is a %T, not a jetstream.Payload", ErrBadPayload, j.Payload)
	}
	switch {
	case pl.Kind == "":
		return pl, fmt.Errorf("%w: Payload without a Kind", ErrBadPayload)
	case !validHeader(pl.Kind) || !validHeader(j.ID):
		return pl, fmt.Errorf("%w: line break, NUL, or white space at an end of the ID or Kind", ErrBadPayload)
	case len(j.ID)+len(pl.Kind) > maxHeaders:
		return pl, fmt.Errorf("%w: ID and Kind of %d bytes, more than the %d a message's headers hold", ErrBadPayload, len(j.ID)+len(pl.Kind), maxHeaders)
	case len(pl.Data) > p.maxData:
		return pl, fmt.Errorf("%w: %d bytes of Data, more than the %d a message holds", ErrBadPayload, len(pl.Data), p.maxData)
	case p.cfg.kinds != nil && !p.cfg.kinds[pl.Kind]:
		return pl, fmt.Errorf("%w: kind %q", ErrUnknownKind, pl.Kind)
	}
	return pl, nil
}

// Do runs one attempt remotely: it publishes the attempt (deduplicated by
// its ID, instance/round/attempt/task, so a repeated Do of the same
// attempt does not queue it twice) and blocks until its outcome arrives,
// ctx ends, the outage limit passes or the Pool is closed.
//
// A success sets a Result with coordinator.SetResult and returns nil; a
// handler error returns a *RemoteError; a remote panic a
// *worker.PanicError holding a *RemoteError. When ctx ends (Cancel,
// Timeout, Shutdown), Do tells the workers to stop the attempt: a queued
// attempt is deleted from the stream and Do returns context.Cause(ctx) at
// once; a running one has its handler's context cancelled, and Do waits up
// to WithStopWait for its outcome before it returns. Do returns
// ErrUnavailable when JetStream stayed out of reach for WithMaxOutage,
// ErrMaxDeliveries when workers kept dying, ErrClosed after Close (also
// while it waits in WithFence's check), WithFence's error when the check
// refuses a publication, and ErrInFlight while another Do runs the same
// attempt. It is safe for concurrent use.
func (p *Pool) Do(ctx context.Context, j worker.Job) error {
	pl, err := p.payload(j)
	if err != nil {
		return err
	}
	key := attemptKey(p.cfg.instance, jobID{j.ID, j.Round, j.Attempt})
	for range maxRekeys {
		next, err := p.do(ctx, j, pl, key)
		if next == "" {
			return err
		}
		key = next
	}
	return fmt.Errorf("%w: task %q: attempt %s withdrawn %d times", ErrUnavailable, j.ID, key, maxRekeys)
}

// maxRekeys bounds how many times one Do publishes an attempt again under
// a new key (rekey): once per Shutdown it outlived, in practice.
const maxRekeys = 16

// do publishes the attempt under key and waits for its outcome. A next key
// other than "" says that the publication under key is dead, withdrawn or
// stopped by an earlier Do's cancel (a Shutdown, before a durable
// coordinator restarted and handed the attempt out again): publish it
// again under next.
func (p *Pool) do(ctx context.Context, j worker.Job, pl Payload, key string) (next string, err error) {
	c := &call{key: key, ch: make(chan delivery, 1), held: make(chan struct{}, 1)}
	lost, arrived, err := p.register(c)
	if err != nil {
		return "", err
	}
	defer p.unregister(c)
	// An outcome that came while no Do waited (a restart) is not published
	// again: once the duplicate window has passed, that would run it again.
	if !arrived {
		deadline, _ := ctx.Deadline()
		if err := p.publish(ctx, c, attemptMsg(p.name, c.key, pl.Kind, pl.Data, deadline, p.token(c.key)), lost); err != nil {
			if ctx.Err() != nil {
				if p.detached(ctx) {
					p.forget(c)
				} else {
					// It may have been stored: tell the workers, who remember it.
					_ = p.nc.Publish(cancelSubject(p.name), cancelBody(c.key, c.seq.Load()))
				}
				return "", context.Cause(ctx)
			}
			return "", err
		}
		if c.dup && p.dead(ctx, c) {
			return rekey(c.key, c.seq.Load()), nil
		}
	}
	// Once a worker reports that it holds the attempt's last delivery
	// (held), lapse fires if reports stop for heldLapse: that worker died
	// or lost its lease, and JetStream will deliver the attempt to no one
	// else. JetStream's own verdict, the max-deliveries advisory, may come
	// only when some worker pulls again (see the package doc), and none
	// may be left. The reports come over this Pool's connection: one lost
	// since the last report (since) only re-arms lapse once the
	// connection is back (back).
	var (
		lapse *time.Timer
		fire  <-chan time.Time // lapse's channel while armed
		since *chan struct{}   // p.up when lapse was armed
		back  <-chan struct{}  // closes when the connection is back, while lapse waits for it
		rearm = func() {
			since = p.up.Load()
			if lapse == nil {
				lapse = time.NewTimer(p.heldLapse())
			} else {
				lapse.Reset(p.heldLapse())
			}
			fire, back = lapse.C, nil
		}
	)
	defer func() {
		if lapse != nil {
			lapse.Stop()
		}
	}()
	for {
		select {
		case d := <-c.ch:
			if d.err == nil && d.o.Status == statusCancelled && ctx.Err() == nil && c.seq.Load() != 0 {
				// Stopped by the cancel of an earlier Do of this attempt,
				// yet this one's context is alive: run it again.
				_ = d.msg.Ack()
				return rekey(c.key, c.seq.Load()), nil
			}
			return "", p.apply(ctx, c, d)
		case <-c.held:
			rearm()
		case <-fire:
			fire = nil
			if up := p.up.Load(); up != since || !closed(*up) {
				back = *up // the connection dropped since the last report
				continue
			}
			p.lapsed(c) // the outcome, or ErrMaxDeliveries, is then on c.ch
		case <-back:
			rearm()
		case <-ctx.Done():
			if p.detached(ctx) {
				// Left to run, for the next scheduler on the store: its
				// outcome is not this Do's, nor a duplicate (settle).
				p.forget(c)
				return "", context.Cause(ctx)
			}
			return "", p.cancel(ctx, c)
		case <-lost:
			return "", fmt.Errorf("%w: no outcome for task %q after an outage of %v", ErrUnavailable, j.ID, p.cfg.maxOutage)
		case <-p.closing:
			return "", ErrClosed
		}
	}
}

// sleep waits d, and returns nil; or ctx's error, ErrUnavailable (the
// outage limit passed: lost) or ErrClosed when that comes first.
func (p *Pool) sleep(ctx context.Context, d time.Duration, lost <-chan struct{}) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-lost:
		return fmt.Errorf("%w: not connected for %v", ErrUnavailable, p.cfg.maxOutage)
	case <-p.closing:
		return ErrClosed
	}
}

// detached reports whether Do, whose ctx has ended, leaves its attempt
// to run: WithDetach, and its scheduler stops (coordinator.ErrClosed); or
// the fence does not hold now (WithFence: its check, asked with ctx,
// ended, does not wait), so that the attempt, which the next holder of
// the fence may have handed out under the same key, is not stopped by
// this Do's cancel.
func (p *Pool) detached(ctx context.Context) bool {
	if p.cfg.detach && errors.Is(context.Cause(ctx), coordinator.ErrClosed) {
		return true
	}
	return p.cfg.fence != nil && p.cfg.fence(ctx) != nil
}

// fenced calls WithFence's check, if any, with a context that also ends
// (cause ErrClosed) when the Pool closes, and returns its error, or
// ErrClosed if the Pool closed meanwhile.
func (p *Pool) fenced(ctx context.Context) error {
	if p.cfg.fence == nil {
		return nil
	}
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(p.life, func() { cancel(ErrClosed) })
	defer stop()
	if err := p.cfg.fence(fctx); err != nil {
		if closed(p.closing) {
			return ErrClosed
		}
		return err
	}
	return nil
}

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// heldLapse is how long a Do waits, after a worker last reported that it
// holds the attempt's last delivery, before it gives the attempt up: a
// lease and a half. The worker reports every third of a lease, each time
// right after it extended the lease, so by then JetStream's lease has run
// out for at least half a lease, and a live worker has missed four
// reports in a row.
func (p *Pool) heldLapse() time.Duration { return p.cfg.lease + p.cfg.lease/2 }

// dead reports whether the publication c's publish found (a duplicate of
// an earlier Do's) can no longer bring an outcome: its message is gone
// from the work queue (run, stopped or withdrawn), and the outcome stored
// for it, if any, was applied already or is a stop. A worker publishes
// the outcome before it acknowledges the message, so a message that is
// gone has its outcome stored, unless it was withdrawn. When it cannot
// tell (JetStream does not answer), it says alive: Do waits as before.
func (p *Pool) dead(ctx context.Context, c *call) bool {
	qctx, done := context.WithTimeout(context.WithoutCancel(ctx), deleteQueuedBudget)
	defer done()
	if _, err := p.attempts.GetMsg(qctx, c.seq.Load()); !errors.Is(err, njs.ErrMsgNotFound) {
		return false // queued or running (or unknown)
	}
	p.mu.Lock()
	applied := p.settled.has(pubID(c.key, c.seq.Load()))
	p.mu.Unlock()
	if applied {
		// This Pool applied its outcome already (the task ID was used
		// again within the window): that outcome's ack may not have
		// reached the stream yet, and it will not come again.
		return true
	}
	m, err := p.results.GetLastMsgForSubject(qctx, outcomeSubject(p.name, p.cfg.instance, c.key))
	switch {
	case errors.Is(err, njs.ErrMsgNotFound):
		return true // withdrawn, or its outcome was applied and acknowledged
	case err != nil:
		return false
	}
	o, err := decodeOutcome(m.Data)
	if err == nil && !p.genuine(o) {
		return false // not this attempt's: on its way to this Do, or to none (it runs)
	}
	if err == nil && o.Seq != 0 && o.Seq != c.seq.Load() {
		return true // the last outcome of this key answers another publication: none for this one
	}
	return err == nil && o.Status == statusCancelled // else: it is on its way to this Do
}

// register records c as waiting and hands it an outcome that came early
// (arrived). It returns the channel that closes if an outage outlasts the
// limit.
//
// An early outcome that says the attempt was stopped (by the cancel of an
// earlier Do, before a restart) is dropped: this Do runs it again.
func (p *Pool) register(c *call) (lost <-chan struct{}, arrived bool, err error) {
	var stopped njs.Msg
	defer func() {
		if stopped != nil {
			_ = stopped.Ack()
		}
	}()
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.closing:
		return nil, false, ErrClosed
	default:
	}
	if _, dup := p.waiting[c.key]; dup {
		return nil, false, fmt.Errorf("%w: %s", ErrInFlight, c.key)
	}
	p.waiting[c.key] = c
	if m, ok := p.early[c.key]; ok {
		delete(p.early, c.key)
		if o, err := decodeOutcome(m.Data()); err == nil && o.Status == statusCancelled {
			stopped = m
		} else if err == nil {
			c.got = true
			c.ch <- delivery{o: o, msg: m}
		}
	}
	return p.lost, c.got, nil
}

// unregister ends c's wait and remembers its attempt as settled: an
// outcome that arrives later for it is a duplicate.
func (p *Pool) unregister(c *call) {
	if c.gone {
		return
	}
	c.gone = true
	p.mu.Lock()
	delete(p.waiting, c.key)
	p.settle(c)
	p.mu.Unlock()
}

// forget ends c's wait without remembering its attempt as settled: a
// detached attempt's outcome, when it comes, is kept unacknowledged (as
// one that came while no Do waited) for the Pool that takes the
// instance over.
func (p *Pool) forget(c *call) {
	if c.gone {
		return
	}
	c.gone = true
	p.mu.Lock()
	delete(p.waiting, c.key)
	p.mu.Unlock()
}

// settle remembers c's publication as settled: a later outcome for it is
// a duplicate. The key alone is remembered too (sequence 0), for an
// outcome that names no publication (an older Serve's). Guarded by mu.
func (p *Pool) settle(c *call) {
	if seq := c.seq.Load(); seq != 0 {
		p.settled.add(pubID(c.key, seq))
	}
	p.settled.add(pubID(c.key, 0))
}

// publish stores the attempt, retrying through outages until ctx ends or
// the outage outlasts the limit; the message ID makes retries harmless.
func (p *Pool) publish(ctx context.Context, c *call, msg *nats.Msg, lost <-chan struct{}) error {
	backoff := publishBackoffMin
	var failing time.Time // when the first failed publish began (zero: none failed)
	for {
		// While disconnected, wait for the connection rather than buffer
		// a request that would only time out.
		select {
		case <-*p.up.Load():
		case <-lost:
			return fmt.Errorf("%w: not connected for %v", ErrUnavailable, p.cfg.maxOutage)
		case <-ctx.Done():
			return ctx.Err()
		case <-p.closing:
			return ErrClosed
		}
		// The fence, before every try: an outage may have outlasted the
		// lease that let the last one through.
		if err := p.fenced(ctx); err != nil {
			return err
		}
		if closed(p.closing) { // the select above chose at random
			return ErrClosed
		}
		if !p.nc.IsConnected() {
			// Dropped, and the monitor has not replaced up yet (or the
			// fence waited out an outage): a publish now would be
			// buffered and sent once the connection is back, long after
			// the check. Wait for it, and check again.
			if err := p.sleep(ctx, publishBackoffMin, lost); err != nil {
				return err
			}
			continue
		}
		// Not bounded by ctx: once sent, the attempt may be stored, and
		// only its sequence lets a cancel take it out again.
		// A publish waits no longer than the outage limit: time spent
		// waiting for an answer counts toward it too.
		began := time.Now()
		pctx, done := context.WithTimeout(context.WithoutCancel(ctx), min(publishTimeout, p.cfg.maxOutage))
		ack, err := p.js.PublishMsg(pctx, msg)
		done()
		if err == nil {
			c.seq.Store(ack.Sequence)
			p.counts.published.Add(1)
			if ack.Duplicate {
				c.dup = true
				p.counts.deduplicated.Add(1)
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if failing.IsZero() {
			failing = began
		}
		if time.Since(failing) >= p.cfg.maxOutage {
			return fmt.Errorf("%w: publish: %w", ErrUnavailable, err)
		}
		p.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "jetstream: publish failed, retrying",
			slog.String("pool", p.name), slog.String("attempt", c.key), slog.Any("err", err))
		if serr := p.sleep(ctx, backoff, lost); serr != nil {
			if errors.Is(serr, ErrUnavailable) {
				return fmt.Errorf("%w: publish: %w", ErrUnavailable, err)
			}
			return serr
		}
		// Connected, but JetStream does not answer (it is recovering its
		// streams after a restart, or lost its quorum): once that has
		// lasted as long as the outage limit, give up.
		if time.Since(failing) >= p.cfg.maxOutage {
			return fmt.Errorf("%w: publish: %w", ErrUnavailable, err)
		}
		backoff = min(2*backoff, publishBackoffMax)
	}
}

// apply turns an outcome into Do's result, remembers its attempt as
// settled and acknowledges the message.
func (p *Pool) apply(ctx context.Context, c *call, d delivery) error {
	p.unregister(c)
	if d.err != nil {
		if errors.Is(d.err, ErrMaxDeliveries) {
			// A work queue keeps a message that reached MaxDeliver:
			// remove it, on Do's goroutine (the advisory's callback must
			// not block, and a goroutine of its own would have no owner).
			dctx, done := context.WithTimeout(context.WithoutCancel(ctx), deleteQueuedBudget)
			_ = p.attempts.DeleteMsg(dctx, c.seq.Load())
			done()
		}
		return d.err
	}
	o := d.o
	p.counts.outcomes.Add(1)
	if o.Delivery > 1 {
		p.counts.redelivered.Add(1)
	}
	seq := o.Seq
	if seq == 0 {
		seq = c.seq.Load()
	}
	p.retire(ctx, seq)
	_ = d.msg.Ack()
	// The attempt's history names the worker and keeps the handler's
	// lines. Outside a coordinator (a direct Do) there is no attempt:
	// ErrNoAttempt is expected then.
	_ = coordinator.SetWorker(ctx, o.Worker)
	_ = coordinator.AppendLog(ctx, o.Logs...)
	_ = coordinator.AddLogsDropped(ctx, o.LogsDropped)
	if o.Status == statusOK {
		// Outside a coordinator (a direct Do) there is no attempt to set
		// a result on: ErrNoAttempt is expected then.
		if err := coordinator.SetResult(ctx, Result{Data: o.Result, Worker: o.Worker, Delivery: o.Delivery}); errors.Is(err, coordinator.ErrResultType) {
			_ = coordinator.SetResult(ctx, o.Result) // a durable scheduler keeps []byte results only: the handler's bytes
		}
		return nil
	}
	if ctx.Err() != nil {
		// The attempt's context ended (Cancel, Timeout, Shutdown): that,
		// not how the handler reacted to it, is the attempt's end.
		return context.Cause(ctx)
	}
	_, id, _ := parseKey(o.Key)
	re := &RemoteError{Task: id.task, Round: id.round, Attempt: id.attempt, Worker: o.Worker, Delivery: o.Delivery,
		Message: o.Error, unknownKind: o.Code == codeUnknownKind, timedOut: o.Code == codeTimeout}
	switch o.Status {
	case statusPanic:
		re.Panic = true
		return &worker.PanicError{Value: re, Stack: []byte(o.Stack)}
	case statusCancelled:
		re.Message = "stopped by a cancel: " + o.Error
	}
	return re
}

// retire takes the attempt message seq, whose outcome is being applied,
// out of the work stream before Do returns that outcome. Serve
// acknowledges an attempt only after publishing its outcome, and without
// waiting for an answer: an ack that is lost (the worker's connection, or
// the server leading the work consumer, lost meanwhile) leaves the
// attempt pending, and JetStream would deliver it again once its lease
// expired, to run again after the coordinator had committed its end and
// started what waits for it. A work queue has dropped an acknowledged
// message already: the server then says it has no such message, which is
// as good. Retried while the stream does not answer (an outage, a stream
// leader being elected) until WithMaxOutage; after that, or if the server
// refuses, the outcome is returned all the same (failing the attempt
// would run it again too), and a warning says that it may run again.
func (p *Pool) retire(ctx context.Context, seq uint64) {
	if seq == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	began := time.Now()
	backoff := publishBackoffMin
	for {
		gone, err := p.deleteAttempt(ctx, seq)
		if gone {
			return
		}
		if errors.Is(err, errDeleteRefused) || time.Since(began) >= p.cfg.maxOutage {
			p.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "jetstream: an attempt whose outcome is applied could not be taken out of the work stream: it may run again",
				slog.String("pool", p.name), slog.Uint64("seq", seq), slog.Any("err", err))
			return
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-p.closing:
			t.Stop()
			return
		}
		backoff = min(2*backoff, publishBackoffMax)
	}
}

// errDeleteRefused is a delete of an attempt message the stream answered
// with an error other than its absence (deletes not permitted, say).
var errDeleteRefused = errors.New("jetstream: delete refused")

// JetStream's error codes for a message delete of a sequence the stream
// does not hold: 10043 (sequence not found), and 10057 (message delete
// failed), which the clustered path gives with "no message found".
const (
	errCodeSequenceNotFound = 10043
	errCodeNoMessageFound   = 10037 // a get of a message the stream does not hold
	errCodeMsgDeleteFailed  = 10057
)

// deleteAttempt asks the work stream to delete the message seq once, and
// reports whether it is gone: deleted now, or not there. It asks the API
// itself rather than through njs's DeleteMsg, whose error does not tell
// an absent message (gone) from a stream that could not answer (try
// again).
func (p *Pool) deleteAttempt(ctx context.Context, seq uint64) (gone bool, err error) {
	ctx, done := context.WithTimeout(ctx, min(deleteQueuedBudget, p.cfg.maxOutage))
	defer done()
	// no_erase: removed, not overwritten (as njs's DeleteMsg, not its
	// SecureDeleteMsg): it costs a write less.
	req, _ := json.Marshal(struct {
		Seq     uint64 `json:"seq"`
		NoErase bool   `json:"no_erase"`
	}{seq, true})
	m, err := p.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.DELETE."+attemptsStream(p.name), req)
	if err != nil {
		return false, err
	}
	var resp struct {
		Success bool `json:"success"`
		Error   *struct {
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return false, fmt.Errorf("jetstream: undecodable answer to a delete: %w", err)
	}
	switch e := resp.Error; {
	case resp.Success:
		return true, nil
	case e == nil:
		return false, errors.New("jetstream: a delete answered neither success nor error")
	case e.ErrCode == errCodeSequenceNotFound, e.ErrCode == errCodeMsgDeleteFailed && strings.Contains(e.Description, "no message found"):
		return true, nil
	case e.ErrCode == errCodeMsgDeleteFailed:
		return false, fmt.Errorf("%w: %s (code %d)", errDeleteRefused, e.Description, e.ErrCode)
	default:
		return false, fmt.Errorf("jetstream: delete: %s (code %d)", e.Description, e.ErrCode)
	}
}

// cancel stops an attempt whose Do's context ended.
func (p *Pool) cancel(ctx context.Context, c *call) error {
	cause := context.Cause(ctx)
	seq := c.seq.Load()
	_ = p.nc.Publish(cancelSubject(p.name), cancelBody(c.key, seq))
	// The one work consumer delivers in stream order (redeliveries
	// aside): an attempt past the last delivered sequence is still
	// queued. Take it out of the stream and return at once; a worker that
	// took it meanwhile sees the cancel published above.
	dctx, done := context.WithTimeout(context.WithoutCancel(ctx), deleteQueuedBudget)
	info, err := p.work.Info(dctx)
	if err == nil && seq > info.Delivered.Stream {
		err = p.attempts.DeleteMsg(dctx, seq)
	} else if err == nil {
		err = errDelivered
	}
	done()
	if err == nil {
		return cause
	}
	t := time.NewTimer(p.cfg.stopWait)
	defer t.Stop()
	select {
	case d := <-c.ch:
		if err := p.apply(ctx, c, d); err == nil {
			return nil // it succeeded before the cancel reached it
		}
	case <-t.C:
		// No outcome: the worker that took it may have died, and the
		// cancel with it; once its lease expired another worker would run
		// it. Take it out of the stream (a live worker's ack then fails,
		// and its outcome comes as a duplicate, ignored).
		dctx, done := context.WithTimeout(context.WithoutCancel(ctx), deleteQueuedBudget)
		_ = p.attempts.DeleteMsg(dctx, seq)
		done()
	case <-p.closing:
	}
	return cause
}

// token is the token of the attempt key (WithSecret): an HMAC of the key
// under the Pool's secret; "" without a secret.
func (p *Pool) token(key string) string {
	if p.cfg.secret == nil {
		return ""
	}
	h := hmac.New(sha256.New, p.cfg.secret)
	h.Write([]byte(key))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// genuine reports whether o answers an attempt this Pool (or one with its
// secret) published: it carries that attempt's token.
func (p *Pool) genuine(o outcome) bool {
	want := p.token(o.Key)
	return want == "" || hmac.Equal([]byte(o.Token), []byte(want))
}

// onOutcome receives every outcome addressed to this instance.
func (p *Pool) onOutcome(m njs.Msg) {
	o, err := decodeOutcome(m.Data())
	if err == nil && !p.genuine(o) {
		err = fmt.Errorf("%w: attempt %q: its token is not the attempt's (an outcome of an attempt this Pool never published, or a worker of an older version)", errBadOutcome, o.Key)
	}
	if err != nil {
		p.cfg.logger.LogAttrs(context.Background(), slog.LevelWarn, "jetstream: dropping a bad outcome",
			slog.String("pool", p.name), slog.Any("err", err))
		_ = m.Term()
		return
	}
	p.mu.Lock()
	c := p.waiting[o.Key]
	// The outcome of another publication of this key (an earlier one: the
	// key was handed out again after a restart, or the task ID used
	// again), not of the one this Do waits for.
	stale := c != nil && o.Seq != 0 && c.seq.Load() != 0 && o.Seq != c.seq.Load()
	if stale {
		p.settled.add(pubID(o.Key, o.Seq))
	}
	if stale || (c == nil && p.settled.has(pubID(o.Key, o.Seq))) || (c != nil && c.got) {
		p.counts.duplicates.Add(1)
		p.mu.Unlock()
		p.duplicate(o)
		_ = m.Ack()
		return
	}
	if c != nil {
		c.got = true
		c.ch <- delivery{o: o, msg: m}
		p.mu.Unlock()
		return
	}
	// No Do waits for it: it was published while this instance was
	// down, or before a Do that is about to ask. Keep it unacknowledged
	// (a crash before it is applied gets it delivered again).
	if old, ok := p.early[o.Key]; ok && sameMsg(old, m) {
		p.early[o.Key] = m // a redelivery of the message already kept
		p.mu.Unlock()
		return
	} else if ok {
		p.counts.duplicates.Add(1)
		p.mu.Unlock()
		p.duplicate(o)
		_ = m.Ack()
		return
	}
	var dropped njs.Msg
	if len(p.early) >= maxEarly {
		for k, v := range p.early {
			delete(p.early, k)
			dropped = v
			break
		}
	}
	p.early[o.Key] = m
	p.mu.Unlock()
	if dropped != nil {
		// Not acknowledged: delivered again after resultsAckWait.
		p.cfg.logger.LogAttrs(context.Background(), slog.LevelWarn, "jetstream: too many outcomes waiting for their Do; one set aside",
			slog.String("pool", p.name))
	}
}

func sameMsg(a, b njs.Msg) bool {
	ma, err1 := a.Metadata()
	mb, err2 := b.Metadata()
	return err1 == nil && err2 == nil && ma.Sequence.Stream == mb.Sequence.Stream
}

func (p *Pool) duplicate(o outcome) {
	p.cfg.logger.LogAttrs(context.Background(), slog.LevelInfo, "jetstream: duplicate outcome ignored",
		slog.String("pool", p.name), slog.String("attempt", o.Key), slog.String("worker", o.Worker),
		slog.Int("delivery", o.Delivery))
}

// onMaxDeliveries fails the attempt the server gave up delivering.
func (p *Pool) onMaxDeliveries(m *nats.Msg) {
	var adv struct {
		StreamSeq uint64 `json:"stream_seq"`
	}
	if err := json.Unmarshal(m.Data, &adv); err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.waiting { // rare: a scan beats an index kept on every attempt
		if c.seq.Load() == adv.StreamSeq {
			p.exhausted(c, fmt.Errorf("%w: attempt %s, %d deliveries", ErrMaxDeliveries, c.key, p.cfg.maxDeliver))
			return
		}
	}
}

// onHeld receives the reports of workers that hold the last delivery of
// one of this instance's attempts (see held), and signals the Do waiting
// for it, which gives the attempt up once they stop.
func (p *Pool) onHeld(m *nats.Msg) {
	hs, err := decodeHeld(m.Data)
	if err != nil {
		p.cfg.logger.LogAttrs(context.Background(), slog.LevelWarn, "jetstream: dropping a bad held report",
			slog.String("pool", p.name), slog.Any("err", err))
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, h := range hs {
		c := p.waiting[h.key]
		if c == nil || c.got || h.delivery < p.cfg.maxDeliver {
			continue
		}
		if seq := c.seq.Load(); seq != 0 && h.seq != seq {
			continue // another publication of the key
		}
		c.heldSeq, c.delivered = h.seq, h.delivery
		select {
		case c.held <- struct{}{}:
		default:
		}
	}
}

// lapsed fails c's attempt with ErrMaxDeliveries: the worker that
// reported it held its last delivery stopped reporting (Pool.do). It does
// nothing if the reports named another publication than c's (the one c
// published was not known yet when they came).
func (p *Pool) lapsed(c *call) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if seq := c.seq.Load(); seq == 0 || c.heldSeq != seq {
		return
	}
	p.exhausted(c, fmt.Errorf("%w: attempt %s: the lease of delivery %d of %d ran out, and no worker reported it for %v",
		ErrMaxDeliveries, c.key, c.delivered, p.cfg.maxDeliver, p.heldLapse()))
}

// exhausted fails c, unless it has its outcome already. Guarded by mu.
func (p *Pool) exhausted(c *call, err error) {
	if c.got {
		return
	}
	c.got = true
	c.ch <- delivery{err: err}
	p.settle(c)
}

// monitor follows the connection: an outage that lasts longer than
// maxOutage closes lost, failing the Do calls that wait.
func (p *Pool) monitor() {
	for range p.status {
		up := p.nc.IsConnected()
		p.mu.Lock()
		switch {
		case up && p.down:
			p.down = false
			if p.timer != nil {
				p.timer.Stop()
				p.timer = nil
			}
			select {
			case <-p.lost:
				p.lost = make(chan struct{})
			default:
			}
			close(*p.up.Load())
		case !up && !p.down:
			p.down = true
			ch := make(chan struct{})
			p.up.Store(&ch)
			p.timer = time.AfterFunc(p.cfg.maxOutage, p.outageTooLong)
		}
		p.mu.Unlock()
	}
}

func (p *Pool) outageTooLong() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.down {
		return
	}
	select {
	case <-p.lost:
	default:
		close(p.lost)
	}
}
