package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/batonhq/baton/actor"
	"github.com/batonhq/baton/worker"
	"github.com/benbjohnson/clock"
	"golang.org/x/sync/errgroup"
)

// Scheduler runs a graph of tasks. Create it with New and end it with
// Shutdown. All methods are safe for concurrent use.
type Scheduler struct {
	clk     clock.Clock              // immutable
	workers map[string]worker.Worker // immutable: pool name -> worker, for validation
	hook    func(time.Time)          // immutable; only for testing

	mailbox  *actor.Mailbox[request] // requests to the loop
	outcomes chan *worker.Batch      // finished batches, from the workers
	// pools: per pool, batches to its workers. Each channel holds the pool's
	// size, yet it is never a second queue (the trap of a buffered dispatch
	// channel: work that priority and Cancel can no longer reach): the loop
	// counts idle workers and sends one batch per idle worker only, so a
	// send never blocks and a batch waits in the buffer only for the worker
	// that is already free to take it. Immutable.
	pools    []chan *worker.Batch
	wake     actor.Signal            // from the timer goroutine: something may be due
	due      actor.Latest[time.Time] // to the timer goroutine: the earliest due time (zero: none)
	stopc    chan struct{}           // closed by Shutdown
	stopOnce sync.Once               // guards close(stopc)

	g        *errgroup.Group
	detached worker.Detached // attempts running on their own goroutine (timeouts)
	loopDone chan struct{}   // closed when the loop has exited and final is set
	final    *state          // written by the loop before loopDone closes; read-only after
	done     chan struct{}   // closed when every goroutine has exited
}

// request is a message to the loop. apply runs on the loop's goroutine.
type request interface {
	apply(l *loop, now time.Time)
}

// New starts a scheduler: its coordinator, timer and worker goroutines.
// It returns an error wrapping ErrInvalidOption if an option is invalid.
// Call Shutdown to stop it; until then its goroutines keep running.
func New(opts ...Option) (*Scheduler, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	s := &Scheduler{
		clk:      cfg.clock,
		workers:  map[string]worker.Worker{"": worker.Func{}},
		hook:     cfg.testHookArmed,
		mailbox:  actor.NewMailbox[request](),
		wake:     actor.NewSignal(),
		due:      actor.NewLatest[time.Time](),
		stopc:    make(chan struct{}),
		loopDone: make(chan struct{}),
		done:     make(chan struct{}),
	}
	all := append([]poolConfig{{name: "", size: cfg.workers, worker: worker.Func{}}}, cfg.pools...)
	total := 0
	pools := make([]poolState, len(all))
	for i, p := range all {
		s.workers[p.name] = p.worker
		s.pools = append(s.pools, make(chan *worker.Batch, p.size))
		pools[i] = poolState{name: p.name, size: p.size, maxBatch: cfg.testMaxBatch}
		total += p.size
	}
	s.outcomes = make(chan *worker.Batch, total)
	st := newState(s.clk.Now(), pools, cfg.rng)
	st.retain, st.keep = cfg.retain, cfg.keep

	workCtx, stopWork := context.WithCancel(context.Background())
	s.g = new(errgroup.Group)
	s.g.Go(func() error {
		defer stopWork()
		return s.run(st)
	})
	s.g.Go(func() error { return s.timer(workCtx) })
	for i, p := range all {
		for range p.size {
			l := &worker.Loop{Worker: p.worker, Clock: s.clk, In: s.pools[i], Out: s.outcomes, Detached: &s.detached}
			s.g.Go(func() error { return l.Run(workCtx) })
		}
	}
	go func() {
		s.g.Wait()
		s.detached.Wait()
		close(s.done)
	}()
	return s, nil
}

// loop is the coordinator goroutine's private state beside the scheduling
// state: who is waiting and who is listening. Owned by run.
type loop struct {
	s       *Scheduler
	st      *state
	waiters []chan<- struct{}
	subs    []*subscriber
}

// run is the coordinator: a thin for-select loop around state.
func (s *Scheduler) run(st *state) error {
	l := &loop{s: s, st: st}
	stopc := s.stopc
	var armed bool
	var armedAt time.Time
	for {
		var now time.Time
		select {
		case req := <-s.mailbox.Receive():
			now = s.clk.Now()
			req.apply(l, now)
		case b := <-s.outcomes:
			now = s.clk.Now()
			st.complete(b, now)
			for more := true; more; { // take every batch already back before dispatching
				select {
				case b := <-s.outcomes:
					st.complete(b, now)
				default:
					more = false
				}
			}
		case <-s.wake.C():
			now = s.clk.Now()
			armed = false
			st.advance(now)
		case <-stopc:
			now = s.clk.Now()
			stopc = nil
			st.shutdown(now)
		}

		st.settle(now)
		st.dispatch(now)
		for _, b := range st.out {
			s.pools[b.Pool] <- b // never blocks: one batch per idle worker, and the channel holds the pool's size
		}
		clear(st.out)
		st.out = st.out[:0]

		if due, ok := st.nextDue(); ok && (!armed || !due.Equal(armedAt)) {
			s.due.Set(due)
			armed, armedAt = true, due
		} else if !ok && armed {
			s.due.Set(time.Time{})
			armed = false
		}
		l.publish()
		if st.open == 0 {
			for _, w := range l.waiters {
				close(w)
			}
			l.waiters = l.waiters[:0]
		}
		if st.closing && st.running == 0 {
			break
		}
	}
	// Every task is final now. Hand the state over for Info, then refuse
	// requests.
	s.final = st
	close(s.loopDone)
	s.mailbox.Stop()
	for _, w := range l.waiters {
		close(w)
	}
	for _, sub := range l.subs {
		sub.end()
	}
	return nil
}

// publish hands this iteration's events to every subscriber.
func (l *loop) publish() {
	st := l.st
	if len(st.events) == 0 {
		return
	}
	kept := l.subs[:0]
	for _, sub := range l.subs {
		if sub.publish(st.events) {
			kept = append(kept, sub)
		}
	}
	clear(l.subs[len(kept):])
	l.subs = kept
	st.events = nil // the subscribers share the slice now
	st.observe = len(l.subs) > 0
}

// timer is the one timer goroutine: it sleeps until the earliest due time
// the loop last sent and then wakes the loop. A new due time replaces the
// timer (a fresh one each time, so no stale value can be read from a
// reused channel). Early or stale wakes are harmless: the loop rechecks.
func (s *Scheduler) timer(ctx context.Context) error {
	var t *clock.Timer
	var fire <-chan time.Time
	stop := func() {
		if t != nil {
			t.Stop()
			t, fire = nil, nil
		}
	}
	for {
		select {
		case due := <-s.due.C():
			stop()
			if due.IsZero() {
				continue
			}
			d := due.Sub(s.clk.Now())
			if d <= 0 {
				s.wake.Notify()
				continue
			}
			t = s.clk.Timer(d)
			fire = t.C
			if s.hook != nil {
				s.hook(due)
			}
		case <-fire:
			t, fire = nil, nil
			s.wake.Notify()
		case <-ctx.Done():
			stop()
			return nil
		}
	}
}

type submitReq struct {
	tasks []Task
	reply chan<- error
}

func (r submitReq) apply(l *loop, now time.Time) { r.reply <- l.st.submit(r.tasks, now) }

// Submit adds a batch of tasks. The batch is accepted whole or rejected
// whole: on error nothing is stored. A task may depend on tasks earlier or
// later in the same batch and on tasks submitted before, never on tasks
// submitted after it. Errors: a *TaskError wrapping ErrInvalidTask,
// ErrDuplicateID, ErrUnknownDependency or ErrUnknownPool; a *CycleError;
// ErrClosed once Shutdown has begun. A task whose dependency had already
// failed, been cancelled or skipped is accepted and Skipped at once.
//
// Submit blocks until the coordinator has taken the batch (it does not wait
// for any task to run). Safe for concurrent use.
func (s *Scheduler) Submit(tasks ...Task) error {
	for i := range tasks {
		if err := validateTask(&tasks[i], s.workers); err != nil {
			return err
		}
	}
	if len(tasks) == 0 {
		return nil
	}
	err, sendErr := actor.Call(context.Background(), s.mailbox, func(reply chan<- error) request {
		return submitReq{tasks: tasks, reply: reply}
	})
	if sendErr != nil {
		return ErrClosed
	}
	return err
}

type cancelReq struct {
	id    string
	reply chan<- bool
}

func (r cancelReq) apply(l *loop, now time.Time) { r.reply <- l.st.cancel(r.id, now) }

// Cancel cancels a task. A pending, ready or delayed task ends Cancelled at
// once; a running one has its context ended and ends Cancelled when its
// function returns, whatever it returns. Everything waiting on it is
// Skipped. Cancel returns false if the task is unknown, already final, or
// already being cancelled, and also when its running attempt has already
// returned nil: that task ends Succeeded. It blocks until the coordinator has decided.
// Safe for concurrent use. After Shutdown it returns false.
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

type infoReq struct {
	id    string
	reply chan<- infoReply
}

func (r infoReq) apply(l *loop, now time.Time) {
	ti, ok := l.st.info(r.id)
	r.reply <- infoReply{ti, ok}
}

// Info reports a task's status, attempts, runs, last error and skip cause;
// false if the id is unknown. It blocks until the coordinator answers. Safe
// for concurrent use. After Shutdown it reports the final state.
func (s *Scheduler) Info(id string) (TaskInfo, bool) {
	select {
	case <-s.loopDone:
		return s.final.info(id)
	default:
	}
	r, err := actor.Call(context.Background(), s.mailbox, func(reply chan<- infoReply) request {
		return infoReq{id: id, reply: reply}
	})
	if err != nil {
		<-s.loopDone
		return s.final.info(id)
	}
	return r.info, r.ok
}

type subscribeReq struct {
	sub   *subscriber
	reply chan<- bool
}

func (r subscribeReq) apply(l *loop, now time.Time) {
	l.subs = append(l.subs, r.sub)
	l.st.observe = true
	l.s.g.Go(r.sub.run) // the loop is itself in the group, so the group is not yet waited out
	r.reply <- true
}

// Subscribe calls fn for every event decided from now on, in the order the
// coordinator decided them, on a goroutine of its own: a slow fn never
// stalls the scheduler and loses nothing (events queue for it without
// bound). fn is never called concurrently with itself. Call unsubscribe to
// stop: fn is not called after unsubscribe returns, except for a call
// already under way, and queued events are dropped. unsubscribe is
// idempotent and may be called from fn.
//
// Subscribe blocks until the coordinator has registered fn. Safe for
// concurrent use. After Shutdown, fn is never called and unsubscribe does
// nothing. Events decided during Shutdown are delivered before Shutdown
// returns.
func (s *Scheduler) Subscribe(fn func(Event)) (unsubscribe func()) {
	sub := &subscriber{fn: fn, signal: actor.NewSignal()}
	_, err := actor.Call(context.Background(), s.mailbox, func(reply chan<- bool) request {
		return subscribeReq{sub: sub, reply: reply}
	})
	if err != nil {
		return func() {}
	}
	return sub.unsubscribe
}

type waitReq struct{ reply chan<- struct{} }

func (r waitReq) apply(l *loop, now time.Time) { l.waiters = append(l.waiters, r.reply) }

// Wait blocks until every task submitted so far is final, and returns nil;
// tasks submitted later make it wait again. It returns ctx.Err() if ctx ends
// first. It does not wait for subscribers to receive the final events. Safe
// for concurrent use. After Shutdown it returns nil at once: every task is
// final then.
func (s *Scheduler) Wait(ctx context.Context) error {
	settled := make(chan struct{})
	if err := s.mailbox.Send(ctx, waitReq{reply: settled}); err != nil {
		if errors.Is(err, actor.ErrStopped) {
			<-s.loopDone
			return nil
		}
		return err
	}
	select {
	case <-settled:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown stops the scheduler. Submit returns ErrClosed from then on.
// Tasks not yet running end Cancelled, with events; running tasks have their
// contexts end (context.Cause is ErrClosed) and end Cancelled when they
// return. Shutdown blocks until every goroutine of the scheduler has exited,
// subscriber deliveries and abandoned timed-out attempts included, and
// returns nil; or until ctx ends, returning a *ShutdownError that wraps
// ctx.Err() and names the tasks whose functions have not returned, while
// the shutdown goes on in the background. Calling it again, or
// concurrently, is safe.
func (s *Scheduler) Shutdown(ctx context.Context) error {
	s.stopOnce.Do(func() { close(s.stopc) })
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
	}
	running := s.detached.Running()
	ids, err := actor.Call(context.Background(), s.mailbox, func(reply chan<- []string) request {
		return runningReq{reply: reply}
	})
	if err == nil {
		running = append(running, ids...)
	}
	slices.Sort(running)
	return &ShutdownError{Err: ctx.Err(), Running: slices.Compact(running)}
}

// ShutdownError is Shutdown's error when its context ends first.
// errors.Is(err, context.DeadlineExceeded) (or Canceled) holds for it.
type ShutdownError struct {
	Err     error    // the context's error
	Running []string // tasks whose functions had not returned, sorted
}

func (e *ShutdownError) Error() string {
	return fmt.Sprintf("coordinator: shutdown: %v; still running: %v", e.Err, e.Running)
}

func (e *ShutdownError) Unwrap() error { return e.Err }

type runningReq struct{ reply chan<- []string }

func (r runningReq) apply(l *loop, now time.Time) { r.reply <- l.st.runningIDs() }
