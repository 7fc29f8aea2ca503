package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/worker"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
)

// Handler runs one attempt on a worker machine: data is the task's
// Payload.Data, and what it returns is the task's Result.Data on success.
// ctx ends when the coordinator cancels the attempt (Cancel, Timeout,
// Shutdown: context.Cause is ErrStopped), at the task's timeout (its
// deadline is the coordinator's, read on this machine's clock;
// context.Cause is worker.ErrTimeout) and when Serve's context ends. AttemptOf(ctx) tells which attempt it runs.
type Handler func(ctx context.Context, data []byte) ([]byte, error)

// ErrStopped is the context cause of a handler whose attempt the
// coordinator stopped: the task was cancelled, timed out or the scheduler
// shut down.
var ErrStopped = errors.New("jetstream: attempt stopped by the coordinator")

// Attempt describes the attempt a handler runs.
type Attempt struct {
	Task     string // the task's ID
	Kind     string // Payload.Kind
	Round    int    // the run number (worker.Job.Round)
	Attempt  int    // the attempt number (worker.Job.Attempt)
	Delivery int    // 1, or more when a worker died or lost its lease while running it
	Worker   string // this Serve's name
}

type attemptKeyT struct{}

// AttemptOf returns the attempt that a handler's ctx belongs to. It does
// not block and is safe for concurrent use.
func AttemptOf(ctx context.Context) (Attempt, bool) {
	a, ok := ctx.Value(attemptKeyT{}).(Attempt)
	return a, ok
}

// ServeOption configures Serve.
type ServeOption func(*serveConfig) error

type serveConfig struct {
	name        string
	concurrency int
	logger      *slog.Logger
	logLines    int // WithHandlerLogs
	logBytes    int
}

// WithHandlerLogs bounds the log lines of an attempt that Serve sends back
// with its outcome: a handler logs through coordinator.Logger(ctx) as a
// local task does, Serve keeps the newest lines, at most lines of them and
// bytes of message and attributes in all, and the Pool adds them to the
// attempt's history (coordinator.History), counting the others as
// dropped; every record also goes to WithWorkerLogger's logger with the
// attributes pool, task, attempt and worker. Default
// coordinator.DefaultTaskLogLines and DefaultTaskLogBytes; 0, 0 sends
// none. The coordinator's WithTaskLogs bounds them again.
func WithHandlerLogs(lines, bytes int) ServeOption {
	return func(c *serveConfig) error {
		if lines < 0 || bytes < 0 || (lines == 0) != (bytes == 0) {
			return fmt.Errorf("%w: WithHandlerLogs(%d, %d): want both 0, or both positive", ErrInvalidOption, lines, bytes)
		}
		c.logLines, c.logBytes = lines, bytes
		return nil
	}
}

// WithWorkerName names this worker in outcomes, Result.Worker and
// RemoteError.Worker (default: host name and process ID).
func WithWorkerName(name string) ServeOption {
	return func(c *serveConfig) error {
		if name == "" || !validHeader(name) {
			return fmt.Errorf("%w: WithWorkerName(%q)", ErrInvalidOption, name)
		}
		c.name = name
		return nil
	}
}

// WithConcurrency sets how many handlers Serve runs at once (default
// runtime.GOMAXPROCS(0)). Serve asks the stream for no more attempts than
// it has free handlers: no attempt waits here for a handler while its
// lease runs out, and a busy Serve leaves the queued attempts to others.
func WithConcurrency(n int) ServeOption {
	return func(c *serveConfig) error {
		if n < 1 {
			return fmt.Errorf("%w: WithConcurrency(%d): need at least 1", ErrInvalidOption, n)
		}
		c.concurrency = n
		return nil
	}
}

// WithWorkerLogger sets where Serve logs (default: nowhere): transient
// JetStream errors at Warn, malformed attempts at Error.
func WithWorkerLogger(l *slog.Logger) ServeOption {
	return func(c *serveConfig) error {
		if l == nil {
			return fmt.Errorf("%w: WithWorkerLogger(nil)", ErrInvalidOption)
		}
		c.logger = l
		return nil
	}
}

// server is one Serve call.
type server struct {
	nc       *nats.Conn         // owned by Serve's caller
	js       njs.JetStream      // immutable
	pool     string             // immutable
	handlers map[string]Handler // immutable (Serve's copy)
	cfg      serveConfig        // immutable

	lease      atomic.Int64 // the work consumer's AckWait as last read (ns): extendLeases paces itself by it
	maxDeliver atomic.Int64 // the work consumer's MaxDeliver as last read: which deliveries are reported held (lastDelivery)

	mu        sync.Mutex            // guards the fields below
	running   map[string][]*running // by attempt key: more than one when a lease lapsed (a stalled process) and the attempt came again
	cancelled *keyRing              // publications cancelled before they ran here (pubID), with when for seq 0
}

// running is an attempt whose handler runs on this worker. Immutable.
type running struct {
	cancel   context.CancelCauseFunc // ends the handler's context
	msg      njs.Msg                 // the attempt's message, whose lease extendLeases extends
	seq      uint64                  // the message's stream sequence (its publication)
	key      string                  // the attempt key
	instance string                  // the Pool instance it comes from (held reports go there)
	delivery int                     // which delivery of the message this is (0: not known)
}

// Serve runs attempts of the pool called pool on this machine until ctx
// ends: it takes them from the pool's work-queue stream, never more than
// it has free handlers (WithConcurrency), runs the handler registered for
// their Payload.Kind, extends their lease while the handler runs (after
// ctx has ended too, until the handler returns), publishes the outcome
// (result, error text, or panic and stack; a handler that calls
// runtime.Goexit counts as a panic) and only then acknowledges the
// attempt. An attempt whose kind has no handler fails with ErrUnknownKind.
// While it runs an attempt's last delivery (WithMaxDeliver), Serve also
// reports so to the attempt's Pool, when it takes it and at each lease
// extension: the Pool gives the attempt up once the reports stop.
//
// Serve waits for the pool's streams if no NewPool created them yet, and
// rides through connection losses and server restarts (nc must reconnect:
// nats.MaxReconnects(-1)). When ctx ends it stops asking for attempts and
// cancels the running handlers' contexts. Its pull requests still waiting
// at the server end within a quarter of a second; attempts they bring
// meanwhile are handed back, for another worker. It waits for the
// handlers: an attempt whose handler returned an error because of the stop
// is handed back to the stream (another worker runs it: it was not the
// task's failure), one that finished anyway is reported. Serve then returns
// ctx.Err(). It returns early with an error for invalid arguments, and
// with the connection's error once nc is closed. Several Serve calls, in
// one process or many, share the pool's attempts.
func Serve(ctx context.Context, nc *nats.Conn, pool string, handlers map[string]Handler, opts ...ServeOption) error {
	if nc == nil {
		return fmt.Errorf("%w: Serve: nil connection", ErrInvalidOption)
	}
	if !validName(pool) {
		return fmt.Errorf("%w: Serve(%q): a pool name is 1-64 letters, digits, '-' or '_'", ErrInvalidOption, pool)
	}
	if len(handlers) == 0 {
		return fmt.Errorf("%w: Serve(%q): no handlers", ErrInvalidOption, pool)
	}
	hs := make(map[string]Handler, len(handlers))
	for k, h := range handlers {
		if k == "" || h == nil || !validHeader(k) {
			return fmt.Errorf("%w: Serve(%q): empty kind, a kind with a line break or white space at an end (no Payload can carry it), or nil handler (%q)", ErrInvalidOption, pool, k)
		}
		hs[k] = h
	}
	host, _ := os.Hostname()
	cfg := serveConfig{name: host + ":" + strconv.Itoa(os.Getpid()), concurrency: runtime.GOMAXPROCS(0),
		logLines: coordinator.DefaultTaskLogLines, logBytes: coordinator.DefaultTaskLogBytes}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return err
		}
	}
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.DiscardHandler)
	}
	js, err := njs.New(nc)
	if err != nil {
		return err
	}
	s := &server{nc: nc, js: js, pool: pool, handlers: hs, cfg: cfg,
		running: make(map[string][]*running), cancelled: newKeyRing(4096)}
	sub, err := nc.Subscribe(cancelSubject(pool), s.onCancel)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	return s.run(ctx)
}

// onCancel stops the publication a cancel names if it runs here, and
// remembers it otherwise, for a delivery that may come later. A cancel
// that names no sequence (its Do never learned it) stops what runs here
// under that key and is remembered for publications stored before it
// came: a later publication of the key (the attempt handed out again
// after a restart) runs.
func (s *server) onCancel(m *nats.Msg) {
	key, seq := parseCancel(m.Data)
	s.mu.Lock()
	defer s.mu.Unlock()
	stopped := false
	for _, r := range s.running[key] {
		if seq == 0 || r.seq == seq {
			r.cancel(ErrStopped)
			stopped = true
		}
	}
	if stopped {
		return
	}
	s.cancelled.addAt(pubID(key, seq), time.Now())
}

// wasCancelled reports whether a cancel came for the publication of key
// at seq, stored at stored (the server's clock). Guarded by s.mu.
func (s *server) wasCancelled(key string, seq uint64, stored time.Time) bool {
	if s.cancelled.has(pubID(key, seq)) {
		return true
	}
	at, ok := s.cancelled.at(pubID(key, 0))
	return ok && !stored.IsZero() && !stored.After(at)
}

func (s *server) run(ctx context.Context) error {
	// Listen for lease changes before the first lookup of the consumer: a
	// NewPool that changes the lease between the two is then either seen
	// by the lookup or heard by extendLeases.
	changed := make(chan *nats.Msg, 1)
	sub, err := s.nc.ChanSubscribe(configSubject(s.pool), changed)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	fctx, done := context.WithTimeout(ctx, publishTimeout)
	_ = s.nc.FlushWithContext(fctx) // the server has the subscription (unless disconnected: then the lookup waits)
	done()
	cons, err := s.consumer(ctx)
	if err != nil {
		return err
	}
	s.follow(cons.CachedInfo().Config)

	// Leases are extended until the last handler has returned, after ctx
	// has ended too: a handler winding down must not lose its attempt.
	var handlers, leasing sync.WaitGroup
	lctx, stopLeasing := context.WithCancel(context.WithoutCancel(ctx))
	leasing.Go(func() { s.extendLeases(lctx, changed) })
	defer func() {
		handlers.Wait()
		stopLeasing()
		leasing.Wait()
	}()

	p := &puller{s: s, ctx: ctx, slots: make(chan struct{}, s.cfg.concurrency),
		pulls: make(chan struct{}, maxPulls), faults: make(chan error, 1)}
	p.renew()
	up := s.nc.StatusChanged(nats.CONNECTED)
	defer s.nc.RemoveStatusListener(up)
	var watching sync.WaitGroup
	watching.Go(func() {
		for {
			select {
			case _, ok := <-up: // the pulls waiting on the old connection are gone
				if !ok {
					return // the connection is closed
				}
				p.renew()
			case <-ctx.Done():
				return
			}
		}
	})
	defer watching.Wait()
	defer p.stop()
	// Before handlers.Wait, as a pull may still start handlers. The pulls
	// are not cancelled when ctx ends: attempts the server has sent would
	// be dropped with the pull's subscription and wait a lease. Each ends
	// by its expiry (pullWait) or once it got what it asked for, and hands
	// back what it gets meanwhile.
	defer p.fetching.Wait()
	for {
		select {
		case p.pulls <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		k := p.reserve()
		if k == 0 {
			<-p.pulls
			return ctx.Err()
		}
		select {
		case err := <-p.faults:
			// The consumer is gone (deleted, stream recreated) or JetStream
			// refused the pull: look the consumer up again.
			s.warn(ctx, "jetstream: Serve: pull attempts", err)
			p.release(k)
			<-p.pulls
			if !s.pause(ctx, 100*time.Millisecond) {
				return ctx.Err()
			}
			if cons, err = s.consumer(ctx); err != nil {
				return err
			}
			continue
		default:
		}
		gen := p.generation()
		wctx, cancel := context.WithTimeout(gen, pullWait)
		batch, err := cons.Fetch(k, njs.FetchContext(wctx))
		if err != nil {
			cancel()
			p.release(k)
			<-p.pulls
			if ctx.Err() != nil {
				return ctx.Err()
			}
			p.fault(err)
			continue
		}
		p.fetching.Go(func() {
			defer func() { <-p.pulls }()
			defer cancel()
			got := 0
			for m := range batch.Messages() {
				got++
				if ctx.Err() != nil {
					s.handBack(m)
					p.release(1)
					continue
				}
				handlers.Go(func() {
					var once sync.Once
					free := func() { once.Do(func() { p.release(1) }) }
					defer free()
					s.handle(ctx, m, free)
				})
			}
			p.release(k - got)
			if err := batch.Error(); err != nil && gen.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
				p.fault(err)
			}
		})
	}
}

// pullWait is how long one pull request waits at the server for attempts:
// an idle Serve pulls again this often, and a stopping one waits up to
// this long for its pulls to end.
const pullWait = 250 * time.Millisecond

// handBack returns an attempt of a stopping Serve to the stream, for
// another worker: once this Serve's pulls have expired, so that it does
// not come back into one of them (each delivery counts toward
// WithMaxDeliver).
func (s *server) handBack(m njs.Msg) { _ = m.NakWithDelay(pullWait) }

// maxPulls bounds the pull requests a Serve has waiting at once. Slots
// freed while that many wait go into the next pull, asked for once one
// ends: a pull per freed slot would leave the server a waiting request
// per slot (hundreds, with a large WithConcurrency) and cost a round trip
// per attempt.
const maxPulls = 2

// puller takes attempts from the work consumer for one Serve, never more
// than it has free handler slots for: every attempt it holds is running
// (so extendLeases extends it) or about to be. An attempt prefetched into
// a buffer while every slot was busy would lose its lease and be
// delivered again, here or elsewhere, while its first copy ran.
type puller struct {
	s        *server
	ctx      context.Context // Serve's
	slots    chan struct{}   // a token per attempt requested or running
	pulls    chan struct{}   // a token per pull request waiting (maxPulls)
	faults   chan error      // a pull that failed for another reason than its wait (capacity 1)
	fetching sync.WaitGroup  // the goroutines reading a pull's attempts

	mu  sync.Mutex         // guards gen and end
	gen context.Context    // ends when the connection comes back: pulls waiting on the old one are gone
	end context.CancelFunc // ends gen
}

// reserve blocks until at least one slot is free and takes every free
// slot: the attempts the next pull asks for. It returns 0 once Serve's
// ctx has ended.
func (p *puller) reserve() int {
	select {
	case p.slots <- struct{}{}:
	case <-p.ctx.Done():
		return 0
	}
	k := 1
	for k < cap(p.slots) {
		select {
		case p.slots <- struct{}{}:
			k++
		default:
			return k
		}
	}
	return k
}

// release gives back n slots.
func (p *puller) release(n int) {
	for range n {
		<-p.slots
	}
}

// fault records a failed pull for the loop, which looks the consumer up
// again.
func (p *puller) fault(err error) {
	select {
	case p.faults <- err:
	default:
	}
}

// renew ends the pulls made on the connection before and starts a new
// generation.
func (p *puller) renew() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.end != nil {
		p.end()
	}
	p.gen, p.end = context.WithCancel(context.WithoutCancel(p.ctx))
}

// stop ends the last generation (the pulls have all ended by then).
func (p *puller) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.end()
}

func (p *puller) generation() context.Context {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen
}

// consumer finds the pool's work consumer, waiting for a NewPool to create
// it and for JetStream to answer.
func (s *server) consumer(ctx context.Context) (njs.Consumer, error) {
	created := make(chan *nats.Msg, 1)
	sub, err := s.nc.ChanSubscribe(consumerCreatedSubject(s.pool), created)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	backoff := 50 * time.Millisecond
	for {
		c, err := s.js.Consumer(ctx, attemptsStream(s.pool), workConsumer)
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !errors.Is(err, njs.ErrStreamNotFound) && !errors.Is(err, njs.ErrConsumerNotFound) {
			s.warn(ctx, "jetstream: Serve: looking up the pool", err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-created:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		backoff = min(2*backoff, 2*time.Second)
	}
}

// leaseCheck is how often extendLeases reads the work consumer's AckWait
// again, besides when a NewPool announces a change (leaseChanged): a
// coordinator restarted with another WithLease must not leave the
// workers pacing their InProgress by the old one.
const leaseCheck = 10 * time.Second

// follow records the work consumer's lease and delivery limit, as read
// from its configuration.
func (s *server) follow(c njs.ConsumerConfig) {
	s.lease.Store(int64(c.AckWait))
	s.maxDeliver.Store(int64(c.MaxDeliver))
}

// lastDelivery reports whether delivery is the last one the work consumer
// allows (never, for an unlimited consumer or an unknown delivery).
func (s *server) lastDelivery(delivery int) bool {
	md := s.maxDeliver.Load()
	return md > 0 && delivery > 0 && int64(delivery) >= md
}

// reportHeld tells the Pool instances that this worker holds the last
// delivery of the attempts rs (see held): one message per instance.
// JetStream may give such an attempt up only when a worker pulls again
// after its lease ran out; these reports let the Pool fail it without one.
func (s *server) reportHeld(rs []*running) {
	var by map[string][]held
	for _, r := range rs {
		if !s.lastDelivery(r.delivery) {
			continue
		}
		if by == nil {
			by = make(map[string][]held)
		}
		by[r.instance] = append(by[r.instance], held{key: r.key, seq: r.seq, delivery: r.delivery})
	}
	for instance, hs := range by {
		_ = s.nc.Publish(heldSubject(s.pool, instance), encodeHeld(hs))
	}
}

// extendLeases tells JetStream, every third of the lease, that the
// attempts running here are still in progress (one timer for all of them,
// rather than one per attempt), and reports those on their last delivery
// to their Pool (reportHeld), until ctx ends. It follows changes of the
// lease: NewPool announces one on the pool's config subject (changed
// receives them), and every leaseCheck it reads the consumer's AckWait
// and MaxDeliver anyway.
func (s *server) extendLeases(ctx context.Context, changed <-chan *nats.Msg) {
	lease := time.Duration(s.lease.Load())
	t := time.NewTicker(max(lease/3, time.Millisecond)) // a consumer made elsewhere may have any AckWait
	defer t.Stop()
	checked := time.Now()
	var rs []*running
	for {
		refresh := false
		select {
		case <-t.C:
			refresh = time.Since(checked) >= leaseCheck
		case <-changed:
			refresh = true
		case <-ctx.Done():
			return
		}
		if refresh {
			checked = time.Now()
			qctx, done := context.WithTimeout(ctx, publishTimeout)
			if c, err := s.js.Consumer(qctx, attemptsStream(s.pool), workConsumer); err == nil {
				s.follow(c.CachedInfo().Config)
			}
			done()
		}
		if l := time.Duration(s.lease.Load()); l != lease {
			lease = l
			t.Reset(max(lease/3, time.Millisecond))
		}
		rs = rs[:0]
		s.mu.Lock()
		for _, runs := range s.running {
			rs = append(rs, runs...)
		}
		s.mu.Unlock()
		for _, r := range rs {
			_ = r.msg.InProgress()
		}
		s.reportHeld(rs)
		clear(rs) // let the messages go
	}
}

// pause waits d unless ctx ends first; it reports whether ctx is alive.
func (s *server) pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s *server) warn(ctx context.Context, msg string, err error) {
	s.cfg.logger.LogAttrs(ctx, slog.LevelWarn, msg, slog.String("pool", s.pool), slog.String("worker", s.cfg.name), slog.Any("err", err))
}

// handle runs one attempt message to its end: outcome published, then
// acknowledged; or handed back (Nak) when this worker is shutting down.
// It calls free once the handler's slot is free, before the outcome is
// published: the next pull then overlaps that publish, so that the next
// attempt does not wait for it.
func (s *server) handle(ctx context.Context, m njs.Msg, free func()) {
	h := m.Headers()
	key, kind := h.Get(nats.MsgIdHdr), h.Get(hdrKind)
	instance, id, ok := parseKey(key)
	if !ok {
		s.cfg.logger.LogAttrs(ctx, slog.LevelError, "jetstream: Serve: dropping a malformed attempt",
			slog.String("pool", s.pool), slog.String("attempt", key))
		_ = m.Term()
		return
	}
	a := Attempt{Task: id.task, Kind: kind, Round: id.round, Attempt: id.attempt, Worker: s.cfg.name}
	var seq uint64
	var stored time.Time
	if md, err := m.Metadata(); err == nil {
		a.Delivery, seq, stored = int(md.NumDelivered), md.Sequence.Stream, md.Timestamp
	}
	o := outcome{Key: key, Seq: seq, Worker: s.cfg.name, Delivery: a.Delivery, Token: h.Get(hdrToken)}
	if a.Delivery > 1 && seq != 0 {
		// While it is looked up, extendLeases extends its lease (and
		// reports it held, if it is the last delivery), and a cancel of it
		// ends the look.
		lctx, stop := context.WithCancelCause(ctx)
		r := &running{cancel: stop, msg: m, seq: seq, key: key, instance: instance, delivery: a.Delivery}
		s.track(r)
		look := s.withdrawn(lctx, seq)
		s.untrack(r)
		stop(nil)
		switch {
		case look != lookGone && errors.Is(context.Cause(lctx), ErrStopped):
			// Cancelled while it was looked up: say so, as for a cancel
			// that came before the delivery.
			o.Status = statusCancelled
			free()
			s.settle(ctx, m, instance, o)
			return
		case look == lookGone:
			// A delivery again (a lease lapsed, or an acknowledgement was
			// lost) of an attempt the Pool has taken out of the work
			// stream since: its end was applied, and it must not run again.
			s.cfg.logger.LogAttrs(ctx, slog.LevelDebug, "jetstream: Serve: dropping a delivery of an attempt already ended",
				slog.String("pool", s.pool), slog.String("attempt", key), slog.Int("delivery", a.Delivery))
			free()
			_ = m.Term()
			return
		case look == lookUnknown:
			// Its end may have been applied: handed back, not run.
			s.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "jetstream: Serve: handing back a delivery again: the work stream did not say whether its attempt ended",
				slog.String("pool", s.pool), slog.String("attempt", key), slog.Int("delivery", a.Delivery),
				slog.String("why", "an outage, or a worker without the permission to look (ServePermissions)"))
			free()
			s.handBack(m)
			return
		}
	}

	logs := coordinator.NewLogCollector(s.cfg.logLines, s.cfg.logBytes, s.cfg.logger.Handler().WithAttrs([]slog.Attr{
		slog.String("pool", s.pool), slog.String(coordinator.LogKeyTask, id.task), slog.Int(coordinator.LogKeyAttempt, id.attempt), slog.String("worker", s.cfg.name)}))
	hctx, cancel := context.WithCancelCause(coordinator.ContextWithLogger(context.WithValue(ctx, attemptKeyT{}, a), logs.Logger()))
	defer cancel(nil)
	if ns, err := strconv.ParseInt(h.Get(hdrDeadline), 10, 64); err == nil {
		var done context.CancelFunc
		hctx, done = context.WithDeadlineCause(hctx, time.Unix(0, ns), worker.ErrTimeout)
		defer done()
	}
	s.mu.Lock()
	if s.wasCancelled(key, seq, stored) {
		s.mu.Unlock()
		// Cancelled before it ran: say so, so that a Do waiting for the
		// stop hears it now rather than after WithStopWait.
		o.Status = statusCancelled
		free()
		s.settle(ctx, m, instance, o)
		return
	}
	// extendLeases sends InProgress for it until it is gone.
	r := &running{cancel: cancel, msg: m, seq: seq, key: key, instance: instance, delivery: a.Delivery}
	s.trackLocked(r) // with the cancel check, under one hold of s.mu
	s.mu.Unlock()
	s.reportHeld([]*running{r})
	defer s.untrack(r)

	exited := true
	defer func() {
		if exited {
			o.Logs, o.LogsDropped = logs.Lines()
			// The handler called runtime.Goexit (this goroutine ends
			// after): the attempt failed like a panic, unless this worker
			// is stopping, as with an error.
			free()
			if stopping(ctx, hctx) {
				s.handBack(m)
				return
			}
			o.Status, o.Error, o.Stack = statusPanic, worker.ErrGoexit.Error(), string(debug.Stack())
			s.settle(ctx, m, instance, o)
		}
	}()
	handler := s.handlers[kind]
	if handler == nil {
		o.Status, o.Code, o.Error = statusError, codeUnknownKind, fmt.Sprintf("no handler for kind %q on this worker", kind)
	} else {
		s.call(hctx, handler, m.Data(), &o)
	}
	exited = false
	o.Logs, o.LogsDropped = logs.Lines()
	free()
	if o.Status != statusOK && stopping(ctx, hctx) {
		s.handBack(m)
		return
	}
	switch cause := context.Cause(hctx); {
	case o.Status == statusOK:
	case errors.Is(cause, ErrStopped):
		o.Status = statusCancelled
	case errors.Is(cause, worker.ErrTimeout):
		o.Code = codeTimeout
	}
	s.settle(ctx, m, instance, o)
}

// stopping reports whether Serve's ctx (ctx) has ended while the
// coordinator had not stopped the attempt (hctx): a failure then is this
// worker's, not the task's, and the attempt is handed back.
func stopping(ctx, hctx context.Context) bool {
	return ctx.Err() != nil && context.Cause(hctx) != ErrStopped
}

// settle publishes the outcome of the attempt m, then acknowledges m.
func (s *server) settle(ctx context.Context, m njs.Msg, instance string, o outcome) {
	fit(&o, int(s.nc.MaxPayload())-payloadHeadroom)
	if err := s.report(ctx, instance, o, time.Duration(s.lease.Load())); err != nil {
		// Not acknowledged: the attempt is delivered again after its
		// lease, and run again (at least once).
		s.warn(ctx, "jetstream: Serve: outcome not published", err)
		return
	}
	_ = m.Ack()
}

// fit makes an outcome that a message cannot hold (a handler's result, or
// an error text or stack, past the server's max_payload) a failure that
// says so: published as it is, it would fail every time, and the attempt
// would run again until WithMaxDeliver. Then it drops the oldest log
// lines, counted, until the outcome fits.
func fit(o *outcome, max int) {
	n := len(o.Result) + len(o.Error) + len(o.Stack) + len(o.Key) + len(o.Worker)
	if n > max {
		what := "result"
		if o.Status != statusOK {
			what = "error text and stack"
		}
		o.Status, o.Result, o.Stack = statusError, nil, ""
		o.Error = fmt.Sprintf("jetstream: the handler's %s came to %d bytes, more than a message holds (%d)", what, n, max)
		n = len(o.Error) + len(o.Key) + len(o.Worker)
	}
	// The log gives way to the rest, the oldest lines first, counted: the
	// newest explain the end best.
	logs := logSize(o.Logs)
	for len(o.Logs) > 0 && n+logs > max {
		logs -= logSize(o.Logs[:1])
		o.Logs, o.LogsDropped = o.Logs[1:], o.LogsDropped+1
	}
}

// call runs the handler, recovering a panic into the outcome.
func (s *server) call(ctx context.Context, h Handler, data []byte, o *outcome) {
	defer func() {
		if v := recover(); v != nil {
			o.Status, o.Error, o.Stack = statusPanic, fmt.Sprint(v), string(debug.Stack())
		}
	}()
	res, err := h(ctx, data)
	if err != nil {
		o.Status, o.Error = statusError, err.Error()
		return
	}
	o.Status, o.Result = statusOK, res
}

// report publishes the outcome, retrying for up to a lease (the attempt is
// redelivered after that anyway), even while Serve's ctx ends.
func (s *server) report(ctx context.Context, instance string, o outcome, lease time.Duration) error {
	m := nats.NewMsg(outcomeSubject(s.pool, instance, o.Key))
	m.Data = o.encode()
	m.Header.Set(nats.MsgIdHdr, outcomeMsgID(o.Key, o.Seq))
	pctx, done := context.WithTimeout(context.WithoutCancel(ctx), lease)
	defer done()
	backoff := publishBackoffMin
	for {
		// Each try waits at most publishTimeout for its PubAck: one lost
		// in a server restart must not hold the outcome back for the whole
		// lease (the attempt would then run again).
		tctx, tdone := context.WithTimeout(pctx, publishTimeout)
		_, err := s.js.PublishMsg(tctx, m)
		tdone()
		if err == nil || pctx.Err() != nil || s.nc.IsClosed() {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-pctx.Done():
			t.Stop()
			return err
		}
		backoff = min(2*backoff, publishBackoffMax)
	}
}

// withdrawnBudget bounds one look of lookUp; withdrawnPatience (or the
// lease, if longer) bounds withdrawn's looks in all. A variable for tests.
const withdrawnBudget = 2 * time.Second

var withdrawnPatience = 10 * time.Second

// track adds r to what runs here (extendLeases extends its lease; a cancel
// of it ends r's context) and reports it held if it is a last delivery.
func (s *server) track(r *running) {
	s.mu.Lock()
	s.trackLocked(r)
	s.mu.Unlock()
	s.reportHeld([]*running{r})
}

// trackLocked adds r to what runs here. Guarded by s.mu.
func (s *server) trackLocked(r *running) { s.running[r.key] = append(s.running[r.key], r) }

// untrack removes r from what runs here.
func (s *server) untrack(r *running) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rs := slices.DeleteFunc(s.running[r.key], func(x *running) bool { return x == r })
	if len(rs) == 0 {
		delete(s.running, r.key)
	} else {
		s.running[r.key] = rs
	}
}

// look is what the work stream says of a delivery again (lookUp).
type look uint8

const (
	lookHeld    look = iota // it holds the attempt: its end is not applied, it may run
	lookGone                // it no longer does: the Pool took it out as it applied its end
	lookUnknown             // no answer (an outage, a leader's election, a timeout, a refusal)
)

// lookUp asks the work stream, once, whether it still holds message seq:
// the Pool takes an attempt out before it returns its outcome, so a
// delivery that was on its way before that finds it gone.
func (s *server) lookUp(ctx context.Context, seq uint64) look {
	ctx, done := context.WithTimeout(ctx, withdrawnBudget)
	defer done()
	req, _ := json.Marshal(struct {
		Seq uint64 `json:"seq"`
	}{seq})
	m, err := s.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+attemptsStream(s.pool), req)
	if err != nil {
		return lookUnknown
	}
	var resp struct {
		Error *struct {
			ErrCode int `json:"err_code"`
		} `json:"error"`
		Message *struct {
			Seq uint64 `json:"seq"`
		} `json:"message"`
	}
	switch {
	case json.Unmarshal(m.Data, &resp) != nil:
		return lookUnknown
	case resp.Error != nil && resp.Error.ErrCode == errCodeNoMessageFound:
		return lookGone
	case resp.Error == nil && resp.Message != nil && resp.Message.Seq == seq:
		return lookHeld
	}
	return lookUnknown
}

// withdrawn looks up a delivery again (message seq of the work stream)
// until the stream answers: asked only of a delivery again (rare), so a
// first delivery costs nothing. The caller tracks the delivery meanwhile
// (its lease is extended, a last delivery reported held). While the
// stream cannot answer (its leader lost with a server, an election, a
// worker without the permission ServePermissions gives) it asks again,
// each look waiting up to withdrawnBudget for an answer, until
// withdrawnPatience (10 s) or the lease, if longer, has passed, or ctx
// ends; then it gives up with lookUnknown, and the caller hands the
// delivery back rather than run an attempt whose end may have been
// applied (one ran after that end, and after the tasks waiting for it
// began, in a test that stopped the stream's leader). The attempt is not
// lost: it is delivered again, and after WithMaxDeliver deliveries Do
// ends it with ErrMaxDeliveries, which RetryPolicy may retry.
func (s *server) withdrawn(ctx context.Context, seq uint64) look {
	lease := time.Duration(s.lease.Load())
	if lease <= 0 {
		lease = DefaultLease
	}
	pctx, done := context.WithTimeout(ctx, max(lease, withdrawnPatience))
	defer done()
	wait := min(withdrawnBudget, max(lease/4, 50*time.Millisecond)) // between looks that got no answer
	for {
		if l := s.lookUp(pctx, seq); l != lookUnknown {
			return l
		}
		if !s.pause(pctx, wait) {
			return lookUnknown
		}
	}
}
