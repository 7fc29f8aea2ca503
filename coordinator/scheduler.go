package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/actor"
	"github.com/batonhq/baton/internal/lane"
	"github.com/batonhq/baton/worker"
	"github.com/benbjohnson/clock"
	"golang.org/x/sync/errgroup"
)

// Scheduler runs a graph of tasks. Create it with New and end it with
// Shutdown. All methods are safe for concurrent use.
type Scheduler struct {
	clk       clock.Clock              // immutable
	workers   map[string]worker.Worker // immutable: pool name -> worker, for validation
	sizes     map[string]int           // immutable: pool name -> its number of workers (PoolSizes)
	lanePools []string                 // immutable: lane ID -> its pool's name (Spawn's children inherit it)
	logLines  int                      // immutable: WithTaskLogs's lines per attempt (0: none kept)
	logBytes  int                      // immutable: WithTaskLogs's bytes per attempt
	hook      func(time.Time)          // immutable; only for testing
	log       *slog.Logger             // immutable
	dcfg      *durableConfig           // immutable: WithStore and WithFunc (nil: neither)
	store     Store                    // immutable: WithStore's (nil: not durable); the loop alone commits to it
	closed    atomic.Bool              // Shutdown has begun
	failed    atomic.Pointer[error]    // a commit failed (ErrStoreFailed, wrapped): set once by the loop
	inStore   storeCalls               // where the loop is in its store's code (Shutdown's error says so rather than wait for it)

	mailbox  *actor.Mailbox[request] // requests to the loop
	reports  chan lane.Report        // from the workers: how far each lane got
	wake     actor.Signal            // from the timer goroutine: something may be due
	unsubbed actor.Signal            // from unsubscribe: a subscriber is gone
	due      actor.Latest[timerCmd]  // to the timer goroutine: the earliest due time
	stopc    chan struct{}           // closed by Shutdown
	stopOnce sync.Once               // guards close(stopc)
	waitSeq  atomic.Uint64           // numbers Wait calls

	g         *errgroup.Group              // the coordinator, the timer and the workers
	detached  lane.Detached                // attempts running on their own goroutine (timeouts)
	loopDone  chan struct{}                // closed when the loop has exited and final is set
	final     *state                       // written by the loop before loopDone closes; then read under finalMu (onFinal)
	finalMu   sync.Mutex                   // taken by each reader of final in turn (onFinal)
	done      chan struct{}                // closed when the group has exited and no detached attempt runs
	subsMu    sync.Mutex                   // guards subs
	subs      []*subscriber                // guarded by subsMu: subscribers whose goroutines may still run
	inside    sync.Map                     // goroutine id -> struct{}: the goroutines that run attempts now (fromTask)
	paused    []atomic.Bool                // by pool index: paused, as the loop last decided (Paused)
	rates     []atomic.Pointer[rateConfig] // by pool index: the rate limit, as the loop last applied it (RateLimit); nil for none
	poolIndex map[string]int               // immutable: pool name -> index in the state's pools
}

// ErrFromTask: Wait or Shutdown was called from inside a task (its
// function, a custom worker's Do, a middleware), which it would wait for.
// Wait returns it at once; Shutdown begins the shutdown (the task's own
// context ends, with the others') and returns it without waiting: call
// Shutdown from outside the tasks to wait for it.
var ErrFromTask = errors.New("coordinator: called from inside a task, which the call would wait for")

// enter registers the calling goroutine as one that runs attempts, until
// the returned function is called (lane.Env.Inside).
func (s *Scheduler) enter() (leave func()) {
	g := goid()
	s.inside.Store(g, struct{}{})
	return func() { s.inside.Delete(g) }
}

// fromTask reports whether a call with ctx comes from inside one of this
// scheduler's tasks: ctx is (or derives from) an attempt's context, or the
// calling goroutine runs attempts.
func (s *Scheduler) fromTask(ctx context.Context) bool {
	if c, ok := lane.Of(ctx); ok {
		if _, owner, ok := c.Attempt(); ok && owner == s {
			return true
		}
	}
	_, in := s.inside.Load(goid())
	return in
}

// New starts a scheduler: its coordinator, timer and worker goroutines.
// It returns an error wrapping ErrInvalidOption if an option is invalid.
// Call Shutdown to stop it; until then its goroutines keep running.
//
// With WithStore, New first restores the tasks the store holds (see
// WithStore); it blocks until the store is read and what the restore
// decided is committed. It returns an error wrapping ErrStoreLocked,
// ErrStoreCorrupt or ErrStoreVersion for a store it cannot use, and one
// wrapping ErrInvalidOption when the store names a pool or function that
// New was not given; then it has closed the store (except after
// ErrStoreLocked: a store held elsewhere is left to its holder). The
// restore writes only what it decided (attempts a crash interrupted,
// skips, missed starts of a series): a store whose tasks all resume as
// they were stored opens without a write, on a full disk too, and one
// whose decisions cannot be committed makes New fail with an error
// wrapping ErrStoreFailed and the store's own error, having written
// nothing.
func New(opts ...Option) (*Scheduler, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		if cfg != nil && cfg.dur != nil && cfg.dur.store != nil {
			cfg.dur.store.Close()
		}
		return nil, err
	}
	s := &Scheduler{
		clk:      cfg.clock,
		workers:  map[string]worker.Worker{"": worker.Func{}},
		sizes:    make(map[string]int, 1+len(cfg.pools)),
		hook:     cfg.armed,
		log:      cfg.logger,
		dcfg:     cfg.dur,
		logLines: cfg.logLines,
		logBytes: cfg.logBytes,
		mailbox:  actor.NewMailbox[request](),
		wake:     actor.NewSignal(),
		unsubbed: actor.NewSignal(),
		due:      actor.NewLatest[timerCmd](),
		stopc:    make(chan struct{}),
		loopDone: make(chan struct{}),
		done:     make(chan struct{}),
	}
	all := append([]poolConfig{{name: "", size: cfg.workers}}, cfg.pools...)
	pools := make([]poolState, len(all))
	sizes := make([]int, len(all))
	total := 0
	wrappedWorkers := make([]worker.Worker, len(all))
	for i, p := range all {
		if p.worker != nil {
			s.workers[p.name] = p.worker
		}
		if wrappedWorkers[i], err = wrap(p.name, p.worker, cfg.middleware); err != nil {
			return nil, err
		}
		pools[i] = poolState{name: p.name, size: p.size, maxTarget: cfg.testMaxBatch}
		sizes[i] = p.size
		s.sizes[p.name] = p.size
		total += p.size
	}
	s.reports = make(chan lane.Report, 2*total)
	st := newState(s.clk.Now(), pools, sizes, cfg.rng)
	for _, ls := range st.lanes {
		s.lanePools = append(s.lanePools, pools[ls.pool].name)
	}
	st.retain, st.keep, st.testCheck = cfg.retain, cfg.keep, cfg.testCheck
	if cfg.histPerTask > 0 {
		st.startHistory(cfg.histPerTask, cfg.histTotal)
	} else {
		s.logLines, s.logBytes = 0, 0 // kept with the history: none
	}
	st.stamps = len(cfg.middleware) > 0
	for name, rc := range cfg.rates { // newConfig checked the names
		st.pools[st.byName[name]].rate = newRateLimit(rc.perSecond, rc.burst, s.clk.Now())
	}
	s.paused = make([]atomic.Bool, len(all))
	s.poolIndex = make(map[string]int, len(all))
	for i, p := range all {
		s.poolIndex[p.name] = i
	}
	s.rates = make([]atomic.Pointer[rateConfig], len(all))
	for name, rc := range cfg.rates {
		s.rates[s.poolIndex[name]].Store(&rc)
	}
	if cfg.keys != nil {
		st.policy = *cfg.keys
		st.startKeys()
	}
	// The loop's listeners exist before the restore, so that what it
	// decides is recorded, logged and told to WithSubscriber's
	// subscribers once committed.
	l := &loop{s: s, st: st, waiters: map[uint64]chan<- struct{}{}}
	if cfg.taskLog {
		l.tl = newTaskLog(s.log)
		l.tl.check()
	}
	for _, sub := range cfg.subscribers {
		sub.log, sub.gone = s.log, s.unsubbed
		l.subs = append(l.subs, sub)
	}
	l.observed()
	if cfg.dur != nil && cfg.dur.store != nil {
		s.store = cfg.dur.store
		cfg.dur.resumes = make([]bool, len(all))
		cfg.dur.runs = make([]bool, len(all))
		for i, p := range all {
			r, ok := p.worker.(worker.Resumer)
			cfg.dur.resumes[i] = ok && r.ResumesAttempts()
			_, plain := p.worker.(worker.Func)
			cfg.dur.runs[i] = p.worker == nil || plain
		}
		if err := s.open(st); err != nil {
			if !errors.Is(err, ErrStoreLocked) { // locked: the store is another's to close
				s.store.Close()
			}
			return nil, err
		}
		if events := st.events; len(events) > 0 { // what the restore decided, committed
			st.events = nil
			l.publish(events)
			l.logTasks(events)
		}
	}
	for _, sub := range l.subs {
		s.startSubscriber(sub)
	}
	if l.tl != nil {
		s.startSubscriber(l.tl.sub)
	}

	for i := range st.pools {
		s.paused[i].Store(st.pools[i].paused) // a durable scheduler's, as stored
	}

	workCtx, stopWork := context.WithCancel(context.Background())
	s.g = new(errgroup.Group)
	s.g.Go(func() error {
		defer stopWork()
		return s.run(l)
	})
	s.g.Go(func() error { return s.timer(workCtx) })
	for i := range all {
		env := &lane.Env{Owner: s, Worker: wrappedWorkers[i], Clock: s.clk, Reports: s.reports, Hungry: st.hungry,
			Specs: st.specs, Detached: &s.detached, Grace: cfg.grace, Armed: cfg.armed, Go: s.g.Go,
			ReportStarts: s.store != nil, Inside: s.enter, Returned: s.abandonedReturned}
		for _, ln := range st.poolLanes(i) {
			s.g.Go(func() error { return ln.Run(workCtx, env) })
		}
	}
	go func() {
		s.g.Wait()
		s.detached.Wait()
		close(s.done)
	}()
	if s.store != nil {
		s.wake.Notify() // a first iteration: start what the store holds, arm the timer
	}
	return s, nil
}

// open reads the store into st, which is new, and commits what the
// restore decided (New's first commit).
func (s *Scheduler) open(st *state) error {
	ld := &loader{}
	if err := s.store.Load(ld.add); err != nil {
		return err
	}
	c, err := st.openDurable(s.dcfg, ld, s.clk.Now())
	if err != nil {
		return err
	}
	var failed error
	if c != nil {
		if err := s.store.Commit(c); err != nil {
			failed = commitFailure(err)
		}
	}
	return st.committed(failed)
}

// Submit adds a batch of tasks; it is SubmitContext with
// context.Background().
func (s *Scheduler) Submit(tasks ...Task) error {
	return s.SubmitContext(context.Background(), tasks...)
}

// SubmitContext adds a batch of tasks. The batch is accepted whole or
// rejected whole: on error nothing is stored. A task may depend on tasks
// earlier or later in the same batch and on tasks submitted before, never
// on tasks submitted after it. Errors: ErrClosed, unwrapped, once Shutdown
// has begun (before any other check); a *TaskError wrapping
// ErrInvalidTask, ErrDuplicateID, ErrUnknownDependency or ErrUnknownPool;
// a *CycleError; ctx.Err() if ctx ends before the coordinator takes the
// batch (then nothing is stored). A task whose dependency had already
// failed, been cancelled or skipped is accepted and Skipped at once.
//
// The values ctx carries reach the context of every attempt of these
// tasks; its cancellation bounds only this call.
//
// SubmitContext blocks until the coordinator has taken the batch (it does
// not wait for any task to run); on a durable scheduler (WithStore), until
// the batch is committed to the store, and it also refuses, with a
// *TaskError wrapping ErrNotDurable, a task that could not be restored,
// and returns an error wrapping ErrStoreFailed if the commit failed. Safe
// for concurrent use.
func (s *Scheduler) SubmitContext(ctx context.Context, tasks ...Task) error {
	return s.submit(ctx, &submission{tasks: tasks})
}

func (s *Scheduler) submit(ctx context.Context, b *submission) error {
	if s.closed.Load() {
		return s.closedErr()
	}
	if err := s.check(b, ""); err != nil {
		return err
	}
	if len(b.tasks) == 0 {
		if b.watch != nil {
			b.watch <- nil // nothing to wait for
		}
		return nil
	}
	if ctx != context.Background() && ctx != context.TODO() {
		b.values = context.WithoutCancel(ctx)
	}
	// ctx bounds the hand-over only: once the coordinator has the batch its
	// answer comes at once, and is waited for, so that a nil error always
	// means stored and ctx.Err() always means not stored.
	if err := ctx.Err(); err != nil {
		return err // ended already: a select would pick at random
	}
	reply := make(chan error, 1)
	if err := s.mailbox.Send(ctx, submitReq{b: b, reply: reply}); err != nil {
		if errors.Is(err, actor.ErrStopped) {
			return s.closedErr()
		}
		return err
	}
	if err := <-reply; err != ErrClosed {
		return err
	}
	return s.closedErr()
}

// check does what can be done of a batch's checks on the caller's
// goroutine (a pool's Validator is user code): it copies the payloads,
// binds named functions and checks durability (prepare), validates each
// task in the pool it will run in (its own, or inherit if it names none
// and inherit is not "": a spawned child) and parses its schedule.
func (s *Scheduler) check(b *submission, inherit string) error {
	b.copyPayloads()
	if err := s.prepare(b); err != nil {
		return err
	}
	var now time.Time // read for the first schedule: most batches have none
	var facts poolFacts
	for i := range b.tasks {
		pool := b.tasks[i].Pool
		if pool == "" {
			pool = inherit
		}
		sched, err := validateTask(&b.tasks[i], len(b.places(i)) > 0, facts.of(pool, s.workers, s.sizes))
		if err != nil {
			return err
		}
		if sched == nil {
			continue
		}
		if b.tasks[i].Schedule != nil {
			sched = safeSchedule{sched}
		}
		if now.IsZero() {
			now = s.clk.Now()
		}
		if sched.Next(now.Add(b.tasks[i].Delay)).IsZero() {
			return &TaskError{ID: b.tasks[i].ID, Err: ErrInvalidTask, Detail: "its schedule has no start after submission"}
		}
		if b.scheds == nil {
			b.scheds = make([]Schedule, len(b.tasks))
		}
		b.scheds[i] = sched
	}
	return nil
}

// onFinal runs f on the state the loop handed over as it ended, for a
// call made after its end. Callers take turns: a scan of every task
// writes the state's scratch (freeze's frontier) as it did on the loop,
// and a Feed's read its marks.
func onFinal[T any](s *Scheduler, f func(*state) T) T {
	s.finalMu.Lock()
	defer s.finalMu.Unlock()
	return f(s.final)
}

// query asks the coordinator with the request build makes and returns its
// answer. Once the loop has ended, before the call or while it waited, it
// answers with local on the final state instead (onFinal). It returns
// ctx's error if ctx has ended, or ends before the coordinator answers.
func query[T any](ctx context.Context, s *Scheduler, build func(reply chan<- T) request, local func(*state) T) (T, error) {
	select {
	case <-s.loopDone:
		return onFinal(s, local), nil
	default:
	}
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, err
	}
	r, err := actor.Call(ctx, s.mailbox, build)
	if errors.Is(err, actor.ErrStopped) {
		<-s.loopDone
		return onFinal(s, local), nil
	}
	return r, err
}

// closedErr is what a call refused after Shutdown returns: ErrClosed,
// and, on a durable scheduler whose commit failed, that failure too
// (errors.Is holds for ErrClosed and ErrStoreFailed).
func (s *Scheduler) closedErr() error {
	if f := s.failure(); f != nil {
		return fmt.Errorf("%w: %w", ErrClosed, f)
	}
	return ErrClosed
}

// failure returns the failed commit that stopped a durable scheduler, or
// nil.
func (s *Scheduler) failure() error {
	if f := s.failed.Load(); f != nil {
		return *f
	}
	return nil
}

// Cancel cancels a task. A task whose function is not running (pending,
// ready, delayed, waiting for a retry or its next run, or handed to a
// worker that has not started it) ends Cancelled at once; a running one
// has its context end (context.Cause is ErrCancelled) and ends Cancelled
// when its function returns, whatever it returns. What waits on it reacts
// by its trigger rule (Task.When): under the default rule, AllSucceeded,
// it is Skipped, transitively; an AllDone task counts the cancel as an end
// and may run. A recurring task whose run has just succeeded stops after
// that run. Cancel returns false if the task is unknown, already final or
// already being cancelled, and when its last attempt has returned nil and
// no run follows: that task ends Succeeded. It blocks until the
// coordinator has decided; on a durable scheduler (WithStore), until the
// decision is committed (false if the commit failed). Safe for concurrent
// use. After Shutdown it returns false.
func (s *Scheduler) Cancel(id string) bool {
	ok, err := actor.Call(context.Background(), s.mailbox, func(reply chan<- bool) request {
		return cancelReq{id: id, reply: reply}
	})
	return err == nil && ok
}

type infoReply struct {
	info TaskInfo
	ok   bool
}

// Info reports a task's status, attempts, runs, last error, result and skip
// cause; false if the id is unknown. It blocks until the coordinator
// answers. Safe for concurrent use. After Shutdown it reports the final
// state.
func (s *Scheduler) Info(id string) (TaskInfo, bool) {
	r, _ := query(context.Background(), s, func(reply chan<- infoReply) request {
		return infoReq{id: id, reply: reply}
	}, func(st *state) infoReply {
		info, ok := st.info(id)
		return infoReply{info, ok}
	})
	return r.info, r.ok
}

// callSite is the file:line of the caller skip frames up (2: the caller of
// the function that calls callSite), for ShutdownError.
func callSite(skip int) string {
	if _, file, line, ok := runtime.Caller(skip); ok {
		return fmt.Sprintf("%s:%d", filepath.Base(file), line)
	}
	return "(unknown)"
}

// startSubscriber starts a delivery goroutine and keeps it on the list that
// Shutdown waits for, dropping those that have exited.
func (s *Scheduler) startSubscriber(sub *subscriber) {
	s.subsMu.Lock()
	defer s.subsMu.Unlock()
	s.subs = slices.DeleteFunc(s.subs, func(x *subscriber) bool {
		select {
		case <-x.exited:
			return true
		default:
			return false
		}
	})
	s.subs = append(s.subs, sub)
	go sub.run()
}

// Subscribe calls fn for every event decided from now on, in the order the
// coordinator decided them, on a goroutine of its own: a slow fn never
// stalls the scheduler and loses nothing (events queue for it without
// bound). fn is never called concurrently with itself. Call unsubscribe to
// stop: queued events are dropped, and fn is not called after
// unsubscribe returns, except for one call already under way or just
// beginning (its event was taken before unsubscribe; unsubscribe does not
// wait for it, so that it never blocks). unsubscribe is
// idempotent, never blocks, and may be called from fn. A fn that panics
// is unsubscribed and the panic, with its stack, is logged at Error
// (WithLogger); the scheduler goes on. fn may call every method of the
// scheduler, Wait and Shutdown included (see Shutdown).
//
// Events are decided as soon as they happen while any subscriber wants
// them so, which has a price on short tasks: every attempt is reported by
// its worker as soon as it ends. A subscriber that can take them later
// says so with MaxLag, and then costs the scheduler only the making of
// the events (see MaxLag).
//
// Subscribe blocks until the coordinator has registered fn; it panics if
// fn is nil (a programming error, as a nil func given to sort.Slice).
// Safe for concurrent use. Once Shutdown has begun, a new fn is never
// called and its unsubscribe does nothing. Events decided during Shutdown
// are delivered to earlier subscribers before Shutdown returns: a fn that blocks (on a buffered channel read only after
// Shutdown, once it is full) holds Shutdown up until its context ends,
// and the *ShutdownError names the subscriber, where it was subscribed.
func (s *Scheduler) Subscribe(fn func(Event), opts ...SubscribeOption) (unsubscribe func()) {
	if fn == nil {
		panic("coordinator: Subscribe with a nil function")
	}
	if s.closed.Load() {
		// Shutdown has begun: the loop would still take it while it waits
		// for running functions, and call fn with their ends.
		return func() {}
	}
	sub := newSubscriber(fn, s.log)
	sub.site = callSite(2)
	for _, o := range opts {
		o(sub)
	}
	sub.gone = s.unsubbed
	_, err := actor.Call(context.Background(), s.mailbox, func(reply chan<- bool) request {
		return subscribeReq{sub: sub, reply: reply}
	})
	if err != nil {
		return func() {}
	}
	return sub.unsubscribe
}

type unwaitReq struct{ id uint64 }

// Wait blocks until every task submitted so far is final, and returns nil;
// tasks submitted later make it wait again. A nil error says nothing about
// how the tasks ended: Info tells each task's status, and a subscriber
// sees every failure as it happens. Wait returns ctx.Err() if ctx ends
// first, and then forgets the call. It does not wait for subscribers to
// receive the final events. Safe for concurrent use, from a subscriber
// callback too. Called from inside a task, which it would wait for, it
// returns ErrFromTask at once (a call on the task's goroutine, or with its
// context). After
// Shutdown it returns nil as soon as every task is final (at once, unless
// a function still runs). On a durable scheduler stopped by a failed
// commit, it returns that failure (wrapping ErrStoreFailed) instead of
// nil: the tasks are not done, they are as the last commit left them.
func (s *Scheduler) Wait(ctx context.Context) error {
	if s.fromTask(ctx) {
		return ErrFromTask
	}
	id := s.waitSeq.Add(1)
	settled := make(chan struct{})
	if err := s.mailbox.Send(ctx, waitReq{id: id, reply: settled}); err != nil {
		if errors.Is(err, actor.ErrStopped) {
			<-s.loopDone
			return s.failure()
		}
		return err
	}
	select {
	case <-settled:
		return s.failure()
	case <-ctx.Done():
		s.mailbox.Send(context.Background(), unwaitReq{id: id}) // ErrStopped: nothing to forget
		return ctx.Err()
	}
}

// Shutdown stops the scheduler. From the moment it is called, Submit
// returns ErrClosed; once the coordinator takes it, no attempt starts:
// tasks whose functions are not running end Cancelled (with events and
// ErrClosed as their error); running tasks have their contexts end
// (context.Cause is ErrClosed) and end Cancelled when they return, unless
// their attempt had already succeeded. Shutdown blocks until every
// goroutine of the scheduler has exited, subscriber deliveries and
// abandoned timed-out attempts included, and returns nil; or until ctx
// ends, returning a *ShutdownError that wraps ctx.Err() and names the
// tasks whose functions have not returned, while the shutdown goes on in
// the background (a subscriber's callback that has not returned is named
// there too, as is how many events wait for it; a coordinator held in its
// store's Commit or Close cannot say which tasks run, and the error says
// so instead: it returns at once, or after 100 ms of the scheduler's clock
// of a coordinator busy elsewhere). Called from a subscriber callback, it waits for
// everything but the subscribers' deliveries (another callback may be in
// Shutdown too, waiting for this one): they deliver the rest of their
// events once their callbacks return, and a later Shutdown from outside
// waits for them. A callback must not wait for a Shutdown it started on
// another goroutine: that Shutdown waits for the callback. Called from
// inside a task (on its goroutine, or with its context), it begins the
// shutdown and returns ErrFromTask without waiting, since the shutdown
// waits for that task. Calling it
// again, or concurrently, is safe.
//
// On a durable scheduler (WithStore), the cancellations Shutdown makes are
// not written: the store keeps the tasks as they were, a scheduler created
// on it later resumes them, and an attempt Shutdown stopped runs again
// there without counting. Shutdown closes the store. If a commit failed
// (which stops the scheduler by itself), Shutdown returns that failure,
// wrapping ErrStoreFailed, where it would return nil.
func (s *Scheduler) Shutdown(ctx context.Context) error {
	s.closed.Store(true)
	s.stopOnce.Do(func() { close(s.stopc) })
	if s.fromTask(ctx) {
		return ErrFromTask // begun; it ends once this task returns
	}
	select {
	case <-s.done:
	case <-ctx.Done():
		return s.shutdownError(ctx)
	}
	me := goid()
	s.subsMu.Lock()
	subs := slices.Clone(s.subs)
	s.subsMu.Unlock()
	for _, sub := range subs {
		if sub.goid.Load() == me {
			// Called from a callback: another subscriber's callback may be
			// in Shutdown too, waiting for this one; wait for none.
			return s.failure()
		}
	}
	for _, sub := range subs {
		select {
		case <-sub.exited:
		case <-ctx.Done():
			return s.shutdownError(ctx)
		}
	}
	return s.failure()
}

// shutdownAsk is how long a Shutdown whose context ended waits for the
// coordinator to say which tasks still run, on the scheduler's clock (it
// answers in microseconds unless its store holds it, which it tells at
// once: storeCalls).
const shutdownAsk = 100 * time.Millisecond

func (s *Scheduler) shutdownError(ctx context.Context) error {
	e := &ShutdownError{Err: ctx.Err(), Running: s.detached.Running()}
	select {
	case <-s.loopDone:
	default:
		ids, why := s.askRunning()
		e.Running = append(e.Running, ids...)
		e.Coordinator = why
	}
	slices.Sort(e.Running)
	e.Running = slices.Compact(e.Running)
	s.subsMu.Lock()
	subs := slices.Clone(s.subs)
	s.subsMu.Unlock()
	for _, sub := range subs {
		select {
		case <-sub.exited:
		default:
			e.Subscribers = append(e.Subscribers, sub.describe())
		}
	}
	return e
}

// ShutdownError is Shutdown's error when its context ends first.
// errors.Is(err, context.DeadlineExceeded) (or Canceled) holds for it.
type ShutdownError struct {
	Err     error    // the context's error
	Running []string // tasks whose functions had not returned, sorted (only some of them if Coordinator is set)
	// Subscribers describes each subscriber whose deliveries had not
	// ended: where Subscribe was called, the event its callback was
	// called with and has not returned from (a callback that blocks
	// holds Shutdown up), and how many events still wait for it.
	Subscribers []string
	// Coordinator says why Running may be incomplete: the coordinator
	// did not answer (its store's Commit or Close had not returned, or
	// it was busy); empty when it answered.
	Coordinator string
}

func (e *ShutdownError) Error() string {
	msg := fmt.Sprintf("coordinator: shutdown: %v", e.Err)
	switch {
	case e.Coordinator != "" && len(e.Running) > 0:
		msg += fmt.Sprintf("; still running: %v and perhaps more", e.Running)
	case e.Coordinator != "":
	case len(e.Running) > 0 || len(e.Subscribers) == 0:
		msg += fmt.Sprintf("; still running: %v", e.Running)
	}
	if len(e.Subscribers) > 0 {
		msg += "; still delivering events: " + strings.Join(e.Subscribers, "; ")
	}
	if e.Coordinator != "" {
		msg += "; the coordinator: " + e.Coordinator
	}
	return msg
}

func (e *ShutdownError) Unwrap() error { return e.Err }

// askRunning asks the coordinator which tasks run. It returns at once,
// saying why, if the loop is in its store's code or enters it before it
// answers, and gives up after shutdownAsk.
func (s *Scheduler) askRunning() (ids []string, why string) {
	entered := s.inStore.entered()
	if in := s.inStore.inside(); in != "" {
		return nil, "it did not answer: its store's " + in + " has not returned"
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t := s.clk.Timer(shutdownAsk)
	defer t.Stop()
	var in atomic.Pointer[string] // what the loop entered, if that ended the wait
	go func() {
		defer cancel()
		for {
			select {
			case <-t.C:
				return
			case <-entered:
				// A call that has returned already holds nothing up:
				// wait for the answer, or the next call.
				entered = s.inStore.entered()
				if what := s.inStore.inside(); what != "" {
					in.Store(&what)
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	ids, err := actor.Call(ctx, s.mailbox, func(reply chan<- []string) request {
		return runningReq{reply: reply}
	})
	switch w := in.Load(); {
	case err == nil:
		return ids, ""
	case w != nil:
		return nil, "it did not answer: its store's " + *w + " has not returned"
	default:
		return nil, fmt.Sprintf("it did not answer: busy for %v", shutdownAsk)
	}
}

type runningReq struct{ reply chan<- []string }
