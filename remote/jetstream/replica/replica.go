package replica

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/remote/jetstream"
	"github.com/batonhq/baton/worker"
	"github.com/nats-io/nats.go"
)

// Role is what a replica does for its store.
type Role uint8

const (
	// Standby follows the log and takes the store over when its leader
	// resigns or falls silent for a lease.
	Standby Role = iota
	// Leader runs the store's scheduler: it restored it from the log,
	// appends every commit to it and answers the Clients.
	Leader
)

func (r Role) String() string {
	if r == Leader {
		return "leader"
	}
	return "standby"
}

// Notice tells of a replica's change of role (WithNotify).
type Notice struct {
	Role   Role
	Term   uint64    // Leader: the term it leads; Standby: the term it led until now (0 if none)
	Leader string    // Leader: this replica's name; Standby: the leader last read in the log ("" if none)
	Err    error     // Standby after leading, or after failing to: why (errors.Is(err, ErrFenced): another replica took over)
	At     time.Time // when the change happened
	// Leader only.
	Tasks   int           // tasks restored from the log
	Restore time.Duration // from the term's beginning in the log to the restored scheduler's start
	// Where Restore went, in its order (Leader only): the claim itself,
	// from sending the term message to its append's acknowledgement and
	// the start of the takeover (Claim); the remote pools' streams and
	// consumers on JetStream (Pools); the scheduler's restore from the
	// log, with its first commit (Scheduler); the requests' subscription
	// (Requests). A slow takeover is told where it waited.
	Claim, Pools, Scheduler, Requests time.Duration
	// Quarantined, if not nil, makes this Notice the report of something
	// of the log this replica did not apply (see Quarantined, the type),
	// not a change of role: Role, Term and Leader are then as they were.
	Quarantined *Quarantined
}

// remotePool is a pool WithRemotePool adds.
type remotePool struct {
	name string
	size int
	pool string
	opts []jetstream.Option
}

// WithScheduler gives the options of the scheduler a Replica runs while it
// leads (coordinator.New's, at each takeover): its functions
// (coordinator.WithFunc, the same on every replica), local pools
// (coordinator.WithPool), retention, logger, middleware. The Replica adds
// its own coordinator.WithStore (any other is overridden), its lease's
// middleware (the outermost: an attempt it holds back reaches no other
// middleware) and the pools of WithRemotePool. Options
// given in several calls add up.
func WithScheduler(opts ...coordinator.Option) Option {
	return func(c *config) error {
		c.sched = append(c.sched, opts...)
		return nil
	}
}

// WithRemotePool adds to the scheduler a pool called name, of size
// attempts in flight, whose attempts run on the worker machines serving
// the JetStream pool called pool (jetstream.Serve): the Replica creates
// its jetstream.Pool (with opts) each time it takes the store over, named
// after the store (jetstream.WithInstance: every replica of the store
// shares the instance, so that a new leader receives the outcomes of the
// attempts an old one handed out) and with jetstream.WithDetach (a
// leader that stops leaves its remote attempts running for the next),
// jetstream.WithSecret (the store's), jetstream.WithFence (its lease:
// a leader tries to publish an attempt only while its lease holds, and
// stops none once it has lapsed, so that one deposed while paused
// neither hands out again nor withdraws what the next leader resumed)
// and jetstream.WithGeneration (its term within the log's life: a
// replica fenced during its takeover does not delete the next leader's
// results consumer); these replace the same options in opts. It closes
// the Pool when it stops leading. Two remote pools of one Replica must
// not use one JetStream pool (ErrInvalidOption).
func WithRemotePool(name string, size int, pool string, opts ...jetstream.Option) Option {
	return func(c *config) error {
		if size < 1 {
			return fmt.Errorf("%w: WithRemotePool(%q, %d): need a size of at least 1", ErrInvalidOption, name, size)
		}
		for _, rp := range c.remote {
			if rp.pool == pool {
				// Their Pools would share the instance's results consumer,
				// each taking some of the other's outcomes.
				return fmt.Errorf("%w: WithRemotePool(%q, %d, %q): JetStream pool %q is already pool %q's", ErrInvalidOption, name, size, pool, pool, rp.name)
			}
		}
		c.remote = append(c.remote, remotePool{name: name, size: size, pool: pool, opts: opts})
		return nil
	}
}

// WithNotify calls f at each change of the replica's role, on the
// replica's goroutine: f must return soon and must not call Shutdown.
func WithNotify(f func(Notice)) Option {
	return func(c *config) error {
		if f == nil {
			return fmt.Errorf("%w: WithNotify(nil)", ErrInvalidOption)
		}
		c.notify = f
		return nil
	}
}

// WithStopWait sets how long a leader that was fenced waits for its
// running attempts to return before it goes back to standby anyway
// (default 10 s; the attempts still running are then abandoned, as a
// Shutdown whose context ended abandons them).
func WithStopWait(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithStopWait(%v): need a positive duration", ErrInvalidOption, d)
		}
		c.shutdown = d
		return nil
	}
}

// Replica is one replica of a replicated durable scheduler: a process of a
// service that runs several. Every replica of a store follows its log;
// one leads: it restores the scheduler from the log and runs it, every
// commit conditional on its term; the others stand by and take over when
// it resigns or falls silent for a lease. Its Submit, Cancel, Info,
// WaitTasks, Wait and Subscribe reach the leader, whichever replica
// leads, as a Client's do. See the package doc.
//
// All methods are safe for concurrent use. After Shutdown they return
// ErrClosed.
type Replica struct {
	nc     *nats.Conn // owned by the caller
	name   string     // immutable: the store's name
	cfg    config     // immutable
	client *Client    // immutable
	view   *view      // the log as read; shared by the Stores this replica opens in turn
	stop   context.CancelFunc
	done   chan struct{} // closed when run has returned

	mu      sync.Mutex // guards the fields below
	sched   *coordinator.Scheduler
	term    uint64          // the term it leads while it runs the scheduler (0: none)
	closing context.Context // Shutdown's, for the last leader session's end

	handling atomic.Int64  // request handlers running now (only for testing: Handlers)
	handled  chan struct{} // signalled (buffer 1, coalescing) when a handler returns; only for testing
	begun    atomic.Int64  // request handlers started so far (only for testing: HandlerBegun)
	began    chan struct{} // signalled (buffer 1, coalescing) when a handler starts; only for testing
}

// New starts a replica of the store called name (1-64 letters, digits,
// '-' or '_'), on nc, which must reconnect (nats.MaxReconnects(-1)) and
// which the replica never closes. It does not block: the replica follows
// the log, on goroutines of its own, and leads when its turn comes
// (WithNotify tells). Its errors wrap ErrInvalidOption; for the
// scheduler's options (WithScheduler, WithRemotePool's pool names), which
// it checks as coordinator.New would (coordinator.CheckOptions), they
// wrap coordinator.ErrInvalidOption too. Should the scheduler still fail
// to start after a takeover, the replica resigns at once and stands by
// again (its Notice says why). Call Shutdown to stop it.
func New(nc *nats.Conn, name string, opts ...Option) (*Replica, error) {
	cfg := defaults()
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	if err := checkArgs(nc, name); err != nil {
		return nil, err
	}
	if err := cfg.checkScheduler(); err != nil {
		return nil, err
	}
	client, err := NewClient(nc, name)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	r := &Replica{nc: nc, name: name, cfg: cfg, client: client, view: newView(), stop: stop, done: make(chan struct{}),
		handled: make(chan struct{}, 1), began: make(chan struct{}, 1)}
	lead, err := nc.Subscribe(leadSubject(name), r.answerLead)
	if err != nil {
		stop()
		client.Close()
		return nil, err
	}
	r.view.quar.wake = make(chan struct{}, 1)
	told := make(chan struct{})
	go func() {
		defer close(told)
		r.view.quar.tell(func(x Quarantined) {
			term, leader := r.role()
			n := Notice{Role: Standby, Term: term, Leader: leader, Quarantined: &x, At: time.Now()}
			if term != 0 {
				n.Role = Leader
			}
			r.cfg.logger.Warn("replica: quarantined", "store", r.name, "replica", r.cfg.name, "seq", x.Seq, "kind", x.Kind,
				"key", string(x.Key), "reason", x.Reason, "size", x.Size)
			if r.cfg.notify != nil {
				r.cfg.notify(n)
			}
		}, ctx.Done())
	}()
	go func() {
		r.run(ctx)
		_ = lead.Unsubscribe()
		<-told
		close(r.done)
	}()
	return r, nil
}

// checkScheduler checks the scheduler's options (WithScheduler, with a
// pool for each WithRemotePool) as coordinator.New will at each takeover:
// a replica whose scheduler cannot start must not claim the store, where
// it would stand in the way of the replicas that can lead it.
func (c *config) checkScheduler() error {
	opts := append([]coordinator.Option{}, c.sched...)
	for _, rp := range c.remote {
		opts = append(opts, coordinator.WithPool(rp.name, rp.size, worker.Func{}))
	}
	if err := coordinator.CheckOptions(opts...); err != nil {
		return fmt.Errorf("%w: WithScheduler: %w", ErrInvalidOption, err)
	}
	return nil
}

// instanceOf is the jetstream.Pool instance of a store's remote pools:
// the same on every replica.
func instanceOf(store string) string {
	if s := "replica-" + store; len(s) <= 64 {
		return s
	}
	h := fnv.New64a()
	h.Write([]byte(store))
	return "replica-" + strconv.FormatUint(h.Sum64(), 16)
}

func (r *Replica) notify(n Notice) {
	n.At = time.Now()
	attrs := []any{"store", r.name, "replica", r.cfg.name, "term", n.Term, "leader", n.Leader, "error", n.Err}
	if n.Role == Leader {
		attrs = append(attrs, "tasks", n.Tasks, "restore", n.Restore, "claim", n.Claim, "pools", n.Pools,
			"scheduler", n.Scheduler, "requests", n.Requests)
	}
	r.cfg.logger.Info("replica: "+n.Role.String(), attrs...)
	if r.cfg.notify != nil {
		r.cfg.notify(n)
	}
}

// run is the replica: standby, leader, and standby again once fenced,
// until Shutdown.
func (r *Replica) run(ctx context.Context) {
	var led uint64
	var why error
	failed := 0 // takeovers in a row that failed
	for {
		_, _, _, leader, resign := r.view.position()
		if resign {
			leader = ""
		}
		r.notify(Notice{Role: Standby, Term: led, Leader: leader, Err: why})
		lc := r.cfg.logConn
		if lc == nil {
			lc = r.nc
		}
		st := newStore(lc, r.name, r.cfg, r.view)
		if err := st.campaign(ctx); err != nil {
			st.Close()
			return
		}
		end, err := r.lead(ctx, st)
		led = st.Term()
		if err != nil {
			if ctx.Err() != nil {
				return // Shutdown came during the takeover
			}
			why = err
			r.cfg.logger.Warn("replica: could not lead", "store", r.name, "term", led, "error", err)
			// Let another replica try: a lease, doubling with each
			// takeover in a row that failed up to eight, a random part
			// of it (a record its scheduler refused was taken out of the
			// store: the next takeover goes without it).
			failed++
			wait := r.cfg.lease << min(failed-1, 3)
			if !sleep(ctx, wait/2+mrand.N(wait/2+1)) {
				return
			}
			continue
		}
		failed = 0
		done, stopped := st.stopped()
		select {
		case <-done:
			why = stopped()
			end(false)
		case <-ctx.Done():
			end(true)
			return
		}
	}
}

// poolTries are the deadlines of the tries of NewPool in a takeover,
// each drawn a quarter longer at random (two takeovers do not try in
// step); after the last, the takeover fails (another replica may try).
//
// Two takeovers at once (a replica's claim, and another's that fenced it
// a moment later, before the first learnt it at its next beat) make the
// same streams and results consumers: JetStream then may leave a request
// unanswered for good (nats-server 2.15: in 6 of 12 tries on a cluster
// of three, at the creation of a stream or of a consumer), and only a
// deadline ends the wait; a try again is answered at once. nats.go's own
// default deadline (5 s) would add itself to the takeover. The results
// consumers carry the term within the log's life (jetstream.WithGeneration:
// a log made again numbers its terms from 1), so that the fenced
// replica's tries delete none of the newer leader's.
var poolTries = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}

// newPool is jetstream.NewPool for a takeover (gen: its term): tried again while
// JetStream does not answer (poolTries), given up at once when st stops
// leading (fenced: another replica's takeover goes on alone), when a
// newer term's pool runs (jetstream.ErrSuperseded), or when ctx ends.
func (r *Replica) newPool(ctx context.Context, st *Store, gen uint64, name string, opts []jetstream.Option) (*jetstream.Pool, error) {
	done, stopped := st.stopped()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-done:
			cancel()
		case <-ctx.Done():
		}
	}()
	opts = append(slices.Clip(opts), jetstream.WithGeneration(st.epoch(), gen))
	for i, try := range poolTries {
		tctx, cancelTry := context.WithTimeout(ctx, try+mrand.N(try/4+1))
		p, err := jetstream.NewPool(tctx, r.nc, name, opts...)
		cancelTry()
		switch {
		case err == nil:
			return p, nil
		case ctx.Err() != nil:
			if serr := stopped(); serr != nil {
				return nil, serr
			}
			return nil, err
		case !errors.Is(err, context.DeadlineExceeded) || i == len(poolTries)-1:
			return nil, err
		}
		r.cfg.logger.Warn("replica: JetStream did not answer a takeover's request in time: trying again", "store", r.name, "term", gen, "pool", name, "error", err)
	}
	panic("unreachable")
}

// lead runs the scheduler on st, which leads: its remote pools, the
// scheduler restored from the log, the requests subject and the events.
// end stops all that (shutdown: Replica.Shutdown's, not a fence).
func (r *Replica) lead(ctx context.Context, st *Store) (func(shutdown bool), error) {
	began := st.sentAtClaim()
	n := Notice{Role: Leader, Leader: r.cfg.name}
	phase := time.Now()
	n.Claim = phase.Sub(began)
	lap := func(d *time.Duration) {
		now := time.Now()
		*d, phase = now.Sub(phase), now
	}
	var pools []*jetstream.Pool
	closePools := func() {
		for _, p := range pools {
			p.Close()
		}
	}
	for _, rp := range r.cfg.remote {
		// The store's secret (in its log: every replica has it, no
		// worker does): each attempt's token comes from it, and only an
		// outcome with its attempt's token is applied. The lease fences
		// every publication of an attempt, not only its start (the gate):
		// a Do the gate let through before a pause publishes nothing
		// once it resumes deposed.
		opts := append(slices.Clone(rp.opts), jetstream.WithInstance(instanceOf(r.name)), jetstream.WithDetach(),
			jetstream.WithSecret(r.view.storeSecret()), jetstream.WithFence(st.leased))
		p, err := r.newPool(ctx, st, st.Term(), rp.pool, opts)
		if err != nil {
			closePools()
			st.Close()
			return nil, err
		}
		pools = append(pools, p)
	}
	lap(&n.Pools)
	// The lease's middleware first (the outermost): an attempt it holds
	// back reaches no other middleware.
	remote := map[string]bool{}
	for _, rp := range r.cfg.remote {
		remote[rp.name] = true
	}
	opts := append([]coordinator.Option{coordinator.WithMiddleware(st.middleware(remote))}, r.cfg.sched...)
	opts = append(opts, coordinator.WithStore(st))
	for i, rp := range r.cfg.remote {
		opts = append(opts, coordinator.WithPool(rp.name, rp.size, pools[i]))
	}
	s, err := coordinator.New(opts...)
	lap(&n.Scheduler)
	if err != nil {
		// New closes the store only if it got as far as WithStore: close
		// it here in every case (Close is idempotent), so that this
		// replica resigns rather than leading without a scheduler, its
		// signs of life keeping the replicas that could lead away.
		st.Close()
		closePools()
		return nil, err
	}
	term := st.Term()
	sctx, cancel := context.WithCancel(ctx)
	var handlers sync.WaitGroup
	waits := &waits{m: map[string]context.CancelFunc{}}
	answers := &answers{m: map[string][]byte{}}
	sub, err := r.nc.Subscribe(apiSubject(r.name, term), func(m *nats.Msg) {
		if m.Reply != "" && !validReply(m.Reply) {
			// Answered with this replica's rights, an answer lands where
			// the requester names: never outside an inbox (the log's
			// subjects are a replica's to publish on).
			r.cfg.logger.Warn("replica: a request whose reply subject is not an inbox: refused, unread", "store", r.name, "reply", m.Reply)
			return
		}
		// A request its client sent again (its answer, or the request,
		// may have been lost with a server): answered once, by the
		// handler of the first copy, or again from what that answered.
		if m.Reply != "" {
			if seen, b := answers.first(m.Reply); seen {
				if b != nil {
					_ = r.nc.Publish(m.Reply, b)
				}
				return
			}
		}
		// Decoded here, in the order the requests came: a wait is
		// registered before its caller's word that it gave up is read.
		var req request
		derr := json.Unmarshal(m.Data, &req)
		if derr == nil && req.Age >= answerKeep && onceOnly(req.Op) {
			// A late copy whose first may have been done, its answer
			// forgotten since: it must not be done (again).
			b, _ := json.Marshal(&reply{Err: &wireErr{Code: codeLost,
				Msg: fmt.Sprintf("replica: a copy of a %s sent %v after the first: done or not, its answer is not kept", req.Op, req.Age.Round(time.Second))}})
			answers.answered(m.Reply, b, time.Now(), true)
			_ = r.nc.Publish(m.Reply, b)
			return
		}
		wctx, end := sctx, func() {}
		switch {
		case derr != nil:
		case req.Op == opAbandon:
			waits.abandon(req.Inbox)
			return // no answer: nobody waits for one
		case req.Op == opWaitTasks || req.Op == opWait:
			wctx, end = waits.begin(sctx, m.Reply, req.Timeout)
		}
		r.handling.Add(1)
		r.begun.Add(1)
		select {
		case r.began <- struct{}{}:
		default:
		}
		handlers.Go(func() {
			defer func() {
				end()
				r.handling.Add(-1)
				select {
				case r.handled <- struct{}{}:
				default:
				}
			}()
			r.handle(sctx, wctx, s, st, m, &req, derr, answers)
		})
	})
	if err == nil {
		_ = sub.SetPendingLimits(-1, -1)
		err = r.nc.Flush()
	}
	if err != nil {
		cancel()
		s.Shutdown(context.Background())
		closePools()
		return nil, err
	}
	lap(&n.Requests)
	_ = r.nc.Publish(readySubject(r.name), []byte(strconv.FormatUint(term, 10)))
	events := eventsSubject(r.name)
	unsubscribe := s.Subscribe(func(ev coordinator.Event) {
		if b, err := json.Marshal(eventToWire(ev, term)); err == nil {
			_ = r.nc.Publish(events, b)
		}
	})
	r.mu.Lock()
	r.sched, r.term = s, term
	r.mu.Unlock()
	n.Term, n.Tasks, n.Restore = term, s.Counts().Total(), time.Since(began)
	r.notify(n)
	end := func(shutdown bool) {
		r.mu.Lock()
		r.sched, r.term = nil, 0
		sctx2 := r.closing
		r.mu.Unlock()
		_ = sub.Unsubscribe()
		cancel()
		handlers.Wait()
		unsubscribe()
		if !shutdown || sctx2 == nil {
			var c context.CancelFunc
			sctx2, c = context.WithTimeout(context.Background(), r.cfg.shutdown)
			defer c()
		}
		// A fenced leader's Shutdown commits nothing (the store refuses),
		// and its remote attempts are left to run (WithDetach); a
		// Replica's Shutdown writes none of its cancellations, leaves its
		// remote attempts running too, and resigns (Store.Close).
		if err := s.Shutdown(sctx2); err != nil && !errors.Is(err, coordinator.ErrStoreFailed) {
			r.cfg.logger.Warn("replica: stopping the scheduler", "store", r.name, "term", term, "error", err)
		}
		closePools()
	}
	return end, nil
}

// validReply reports whether a replica may answer a request on reply:
// an inbox, whose first token begins with _INBOX (nats.go's inbox prefix,
// or a custom one such as _INBOX_client: nats.CustomInboxPrefix), and
// nothing else. A replica publishes its answers with its own rights,
// which include the log's subjects, and a requester names the reply
// subject freely: an answer on baton.S.log.commit would be stored as a
// commit.
func validReply(s string) bool {
	tok, _, _ := strings.Cut(s, ".")
	return strings.HasPrefix(tok, "_INBOX") && len(s) > len(tok)+1 && !strings.ContainsAny(s, " \t\r\n*>")
}

// waits are the WaitTasks and Wait requests a leader is answering, by
// their reply subject: a Client whose caller gave up says so (opAbandon),
// and the wait ends.
type waits struct {
	mu sync.Mutex // guards m
	m  map[string]context.CancelFunc
}

// begin returns the context of a wait: ctx, bounded by timeout (the
// time its caller had left; 0: none) and by its caller's word that it
// gave up, and the function that ends it.
func (w *waits) begin(ctx context.Context, reply string, timeout time.Duration) (context.Context, func()) {
	wctx, cancel := context.WithCancel(ctx)
	if timeout > 0 {
		var cancelT context.CancelFunc
		wctx, cancelT = context.WithTimeout(wctx, timeout)
		cancelC := cancel
		cancel = func() { cancelT(); cancelC() }
	}
	if reply == "" {
		return wctx, cancel
	}
	w.mu.Lock()
	w.m[reply] = cancel
	w.mu.Unlock()
	return wctx, func() {
		w.mu.Lock()
		delete(w.m, reply)
		w.mu.Unlock()
		cancel()
	}
}

func (w *waits) abandon(reply string) {
	w.mu.Lock()
	cancel := w.m[reply]
	delete(w.m, reply)
	w.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// handle answers one request of a Client while this replica leads (req,
// decoded from m, or derr): in ctx, the leader's, and for a wait in
// wctx, bounded by its caller (waits.begin). A wait that ends so is
// answered all the same; nobody listens.
func (r *Replica) handle(ctx, wctx context.Context, s *coordinator.Scheduler, st *Store, m *nats.Msg, req *request, derr error, ans *answers) {
	var rep reply
	done, _ := st.stopped()
	gone := func() bool {
		select {
		case <-done:
			return true
		default:
			return ctx.Err() != nil
		}
	}
	notLeader := &wireErr{Code: codeNotLeader, Msg: "replica " + r.cfg.name + " no longer leads store " + r.name}
	switch {
	case derr != nil:
		rep.Err = &wireErr{Code: codeOther, Msg: "replica: undecodable request: " + derr.Error()}
	case req.Op == opSubmit:
		tasks := make([]coordinator.Task, len(req.Tasks))
		for i, w := range req.Tasks {
			tasks[i] = w.task()
		}
		err := s.SubmitContext(ctx, tasks...)
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			rep.Err = notLeader // not taken: nothing stored
		} else {
			rep.Err = errToWire(err)
		}
	case req.Op == opCancel && len(req.IDs) == 1:
		rep.OK = s.Cancel(req.IDs[0])
		if !rep.OK && gone() {
			rep.Err = notLeader // refused by a fenced store, or not asked
		}
	case req.Op == opRerun:
		res, err := s.Rerun(ctx, coordinator.RerunRequest{IDs: req.IDs, Downstream: req.Downstream, By: req.By})
		switch {
		case ctx.Err() != nil && errors.Is(err, ctx.Err()):
			rep.Err = notLeader // not taken: nothing stored
		case err != nil:
			rep.Err = errToWire(err)
		default:
			rep.Reopened = res.Reopened
		}
	case req.Op == opHistory && len(req.IDs) == 1:
		h, ok := s.History(req.IDs[0])
		if gone() {
			rep.Err = notLeader // a stopped scheduler's memory is stale
			break
		}
		if rep.Known = ok; ok {
			rep.History = historyToWire(h)
		}
	case req.Op == opInfo && len(req.IDs) == 1:
		ti, ok := s.Info(req.IDs[0])
		if gone() {
			rep.Err = notLeader // a stopped scheduler's memory is stale
			break
		}
		if rep.Known = ok; ok {
			w := infoToWire(ti)
			rep.Info = &w
		}
	case req.Op == opWaitTasks:
		err := s.WaitTasks(wctx, req.IDs...)
		rep.Err = waitErr(err, wctx, gone(), notLeader)
	case req.Op == opWait:
		err := s.Wait(wctx)
		rep.Err = waitErr(err, wctx, gone(), notLeader)
	case req.Op == opPause || req.Op == opResume:
		f := s.Pause
		if req.Op == opResume {
			f = s.Resume
		}
		err := f(req.Pool)
		if err != nil && gone() {
			rep.Err = notLeader // refused by a fenced store, or not asked
		} else {
			rep.Err = errToWire(err)
		}
	default:
		rep.Err = &wireErr{Code: codeOther, Msg: fmt.Sprintf("replica: unknown request %q", req.Op)}
	}
	if m.Reply == "" {
		return
	}
	b, err := marshalAnswer(&rep)
	if err != nil {
		b, _ = json.Marshal(&reply{Err: &wireErr{Code: codeOther, Msg: "replica: encoding the answer: " + err.Error()}})
	}
	if rep.History != nil {
		b = fitHistory(&rep, b, int(r.nc.MaxPayload()-answerHeadroom))
	}
	if limit := r.nc.MaxPayload(); int64(len(b)) > limit-answerHeadroom {
		// Too large to send: say so, rather than leave the caller
		// waiting for an answer that the connection refused.
		b, _ = json.Marshal(&reply{Err: &wireErr{Code: codeTooLarge,
			Msg: fmt.Sprintf("%s of %d bytes, the server's max payload is %d", req.Op, len(b), limit)}})
	}
	ans.answered(m.Reply, b, time.Now(), onceOnly(req.Op))
	if err := r.nc.Publish(m.Reply, b); err != nil {
		r.cfg.logger.Warn("replica: answering a request", "store", r.name, "op", req.Op, "error", err)
	}
}

// marshalAnswer encodes an answer as JSON without escaping <, > and &
// (a log line of HTML would take six times its size).
func marshalAnswer(rep *reply) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(rep); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// fitHistory makes a History's answer b fit in max bytes, as the
// scheduler's own bounds do: the oldest attempts go first (counted in
// Dropped), then the oldest log lines of the newest attempt (counted in
// its LogsDropped). It returns b as it is if it fits.
func fitHistory(rep *reply, b []byte, max int) []byte {
	h := rep.History
	for len(b) > max && (len(h.Attempts) > 1 || len(h.Attempts) == 1 && len(h.Attempts[0].Logs) > 0) {
		if len(h.Attempts) > 1 {
			h.Attempts, h.Dropped = h.Attempts[1:], h.Dropped+1
		} else {
			a := &h.Attempts[0]
			cut := (len(a.Logs) + 1) / 2
			a.Logs, a.LogsDropped = a.Logs[cut:], a.LogsDropped+cut
		}
		nb, err := marshalAnswer(rep)
		if err != nil {
			return b
		}
		b = nb
	}
	return b
}

// onceOnly reports whether a request of kind op changes the state and
// must not be done twice: its answer is kept whatever its size (a
// Rerun's lists every task it re-opened), and a copy too late for it is
// refused.
func onceOnly(op string) bool { return op == opSubmit || op == opCancel || op == opRerun }

// answers are the requests a leader has taken, by reply subject (each
// call of a Client has its own), with their answers once given, so that a
// request sent again is done once: a Client sends a request again while
// it has no answer (resendFirst), since core NATS loses a message in
// flight through a server that stops. Answers are kept answerKeep.
type answers struct {
	mu    sync.Mutex
	m     map[string][]byte // guarded by mu: nil while the first copy is handled
	given []givenAnswer     // guarded by mu: the answered, oldest first
}

type givenAnswer struct {
	reply string
	at    time.Time
}

// answerKeep is how long a leader answers a copy of a request it has
// answered: longer than a Client's longest wait between two copies
// (resendMax), and than a lease, past which a leader cut off from its
// Clients has lost the lead. answerKept is the largest answer kept of a
// request that may be done again, harmlessly (an Info's result, a
// History): a copy of it is done again. The answers of a request that
// must be done once (onceOnly: Submit, Cancel, Rerun) are kept whatever
// their size; those of Pause and Resume are far smaller.
const (
	answerKeep = time.Minute
	answerKept = 1 << 10
)

// first reports whether a request to reply was taken before (seen), and
// its answer if it was given; if not, it takes this one.
func (a *answers) first(reply string) (seen bool, answer []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if b, ok := a.m[reply]; ok {
		return true, b
	}
	a.m[reply] = nil
	return false, nil
}

// answered keeps the answer b to reply, given at now, and forgets those
// given answerKeep ago.
func (a *answers) answered(reply string, b []byte, now time.Time, once bool) {
	if reply == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(b) > answerKept && !once {
		delete(a.m, reply) // a copy to come is done again
	} else {
		a.m[reply] = b
		a.given = append(a.given, givenAnswer{reply, now})
	}
	n := 0
	for n < len(a.given) && now.Sub(a.given[n].at) > answerKeep {
		delete(a.m, a.given[n].reply)
		n++
	}
	a.given = a.given[n:]
}

// waitErr is the answer's error of a wait that ended with err: notLeader
// if the leader stopped leading (gone), codeGaveUp if its caller's time
// ran out or it gave up (wctx ended).
func waitErr(err error, wctx context.Context, gone bool, notLeader *wireErr) *wireErr {
	switch {
	case gone:
		return notLeader
	case err != nil && wctx.Err() != nil && errors.Is(err, wctx.Err()):
		return &wireErr{Code: codeGaveUp, Msg: err.Error()}
	}
	return errToWire(err)
}

// answerHeadroom is what an answer leaves of the server's max payload
// for its subject and headers.
const answerHeadroom = 1 << 10

// Shutdown stops the replica. A leader stops its scheduler as
// coordinator's Shutdown does (none of its cancellations is written; its
// remote attempts are left running) and resigns, so that a standby takes
// over at once; a standby stops following. Shutdown blocks until the
// replica's goroutines have returned, or ctx ends (ctx.Err(); the
// shutdown goes on). It is idempotent; the replica's calls return
// ErrClosed from then on.
func (r *Replica) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	if r.closing == nil {
		r.closing = ctx
	}
	r.mu.Unlock()
	r.stop()
	r.client.Close()
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// answerLead answers a Client's question: who leads? From the log as
// this replica has read it (or, leading, written it).
func (r *Replica) answerLead(m *nats.Msg) {
	if !validReply(m.Reply) {
		r.cfg.logger.Warn("replica: a request whose reply subject is not an inbox: refused, unread", "store", r.name, "reply", m.Reply)
		return
	}
	_, _, term, leader, resign := r.view.position()
	b, err := json.Marshal(leadAnswer{Term: term, Leader: leader, Resigned: resign})
	if err == nil {
		_ = r.nc.Publish(m.Reply, b)
	}
}

// role returns the term this replica leads and its name, or 0 and the
// leader last read in the log.
func (r *Replica) role() (uint64, string) {
	r.mu.Lock()
	term := r.term
	r.mu.Unlock()
	if term != 0 {
		return term, r.cfg.name
	}
	_, _, _, leader, _ := r.view.position()
	return 0, leader
}

// Scheduler returns the scheduler this replica runs while it leads, nil
// while it stands by: for what only the local scheduler offers
// (Snapshot, Counts). It may be fenced, and stopped, at any moment: a
// stopped scheduler answers from its last state. It does not block.
func (r *Replica) Scheduler() *coordinator.Scheduler {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sched
}

// Submit is Client.Submit, through this replica's connection.
func (r *Replica) Submit(ctx context.Context, tasks ...coordinator.Task) error {
	return r.client.Submit(ctx, tasks...)
}

// Cancel is Client.Cancel.
func (r *Replica) Cancel(ctx context.Context, id string) (bool, error) {
	return r.client.Cancel(ctx, id)
}

// Rerun is Client.Rerun.
func (r *Replica) Rerun(ctx context.Context, req coordinator.RerunRequest) (coordinator.RerunResult, error) {
	return r.client.Rerun(ctx, req)
}

// History is Client.History.
func (r *Replica) History(ctx context.Context, id string) (coordinator.History, bool, error) {
	return r.client.History(ctx, id)
}

// Info is Client.Info.
func (r *Replica) Info(ctx context.Context, id string) (coordinator.TaskInfo, bool, error) {
	return r.client.Info(ctx, id)
}

// WaitTasks is Client.WaitTasks.
func (r *Replica) WaitTasks(ctx context.Context, ids ...string) error {
	return r.client.WaitTasks(ctx, ids...)
}

// Wait is Client.Wait.
func (r *Replica) Wait(ctx context.Context) error { return r.client.Wait(ctx) }

// Pause is Client.Pause.
func (r *Replica) Pause(ctx context.Context, pool string) error { return r.client.Pause(ctx, pool) }

// Resume is Client.Resume.
func (r *Replica) Resume(ctx context.Context, pool string) error { return r.client.Resume(ctx, pool) }

// Subscribe is Client.Subscribe: the leader's events, whichever replica
// leads.
func (r *Replica) Subscribe(fn func(coordinator.Event)) (unsubscribe func(), err error) {
	return r.client.Subscribe(fn)
}

// Leader is Client.Leader.
func (r *Replica) Leader(ctx context.Context) (name string, term uint64, err error) {
	return r.client.Leader(ctx)
}
