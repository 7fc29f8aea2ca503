package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Service is one instance of a service that runs a durable scheduler on
// a store in PostgreSQL. Run one in each instance (process, container) of
// the service, with the same functions and pools (WithScheduler): one of
// them leads, restores the scheduler from the database (coordinator.New
// on a Store) and runs it, every commit conditional on its term; the
// others are standbys and take over a lease after the leader stops
// renewing it (dead, paused, cut off), or at once when it resigns
// (Shutdown). Every instance, leader or not, is a Client: Submit,
// SubmitTx, Cancel, WaitTasks, Info go through the database.
//
// A Service is safe for concurrent use. New starts its goroutine; after
// Shutdown its Client calls return ErrClosed and Scheduler returns nil.
type Service struct {
	*Client

	mu       sync.Mutex
	role     Role                   // guarded by mu
	term     int64                  // guarded by mu: the term led, or last led
	sched    *coordinator.Scheduler // guarded by mu: the scheduler while leading
	stopCtx  context.Context        // guarded by mu: Shutdown's context, for the scheduler's Shutdown
	stopped  bool                   // guarded by mu: Shutdown was called
	stopErr  error                  // written by run before done closes: the scheduler's Shutdown error
	stop     chan struct{}          // closed by Shutdown
	done     chan struct{}          // closed when run has returned
	leading  chan struct{}          // guarded by mu: closed when this instance next leads (LeadingNow)
	standing chan struct{}          // guarded by mu: closed when it next stops leading
}

// New starts an instance of the service of store name on the database
// pool reaches, as a standby: it leads as soon as the store's lease is
// free. Its options: WithScheduler (the scheduler's functions and pools),
// WithLease, WithInstance, WithMaxOutage, WithPoll, WithOutcomeRetention,
// WithNotify, WithClock. The pool's role needs the scheduler's privileges
// (RolesSQL). It does not block: leading, restoring and failing to
// lead are told by WithNotify.
func New(pool *pgxpool.Pool, name string, opts ...Option) (*Service, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: New with a nil pool", ErrInvalidOption)
	}
	if !validName(name) {
		return nil, fmt.Errorf("%w: store name %q: 1-63 bytes of letters, digits, '-', '_' and '.'", ErrInvalidOption, name)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	sv := &Service{Client: newClient(pool, name, cfg), stop: make(chan struct{}), done: make(chan struct{}),
		leading: make(chan struct{}), standing: make(chan struct{})}
	go sv.run()
	return sv, nil
}

// Role returns what the instance does now and the term it leads or last
// led. It does not block.
func (sv *Service) Role() (Role, int64) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.role, sv.term
}

// Scheduler returns the scheduler this instance runs while it leads, nil
// otherwise. Calls on it go to the scheduler directly (no inbox); it
// stops when the lead is lost, and its Submit then fails (ErrClosed or
// coordinator.ErrStoreFailed).
func (sv *Service) Scheduler() *coordinator.Scheduler {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.sched
}

// Leading returns a channel closed when this instance next becomes the
// leader (at once if it leads). For tests and dashboards.
func (sv *Service) Leading() <-chan struct{} {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.leading
}

// Standing returns a channel closed when this instance next stops
// leading (at once if it does not lead).
func (sv *Service) Standing() <-chan struct{} {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.standing
}

func (sv *Service) setRole(r Role, term int64, s *coordinator.Scheduler, why error) {
	sv.mu.Lock()
	prev := sv.role
	sv.role, sv.term, sv.sched = r, term, s
	if r == Leader && prev != Leader {
		close(sv.leading)
		sv.standing = make(chan struct{})
	}
	if r != Leader && prev == Leader {
		close(sv.standing)
		sv.leading = make(chan struct{})
	}
	sv.mu.Unlock()
	if sv.cfg.notify != nil && (r != prev || why != nil) {
		sv.cfg.notify(Notice{Role: r, Term: term, Err: why})
	}
}

// Shutdown stops the instance: a leader shuts its scheduler down (with
// ctx: see coordinator.Scheduler.Shutdown) and gives the lease up, so a
// standby takes over at once; a standby just stops. It returns the
// scheduler's Shutdown error, or ctx.Err() if ctx ends first. Idempotent.
func (sv *Service) Shutdown(ctx context.Context) error {
	sv.mu.Lock()
	if !sv.stopped {
		sv.stopped, sv.stopCtx = true, ctx
		close(sv.stop)
	}
	sv.mu.Unlock()
	select {
	case <-sv.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	sv.Client.Close()
	return sv.stopErr
}

func (sv *Service) shutdownCtx() context.Context {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.stopCtx
}

func (sv *Service) run() {
	defer close(sv.done)
	var last int64
	for {
		select {
		case <-sv.stop:
			sv.setRole(Stopped, last, nil, nil)
			return
		default:
		}
		woken := sv.l.wake(chanLead)
		st := &Store{pool: sv.pool, name: sv.name, cfg: sv.cfg}
		opts := append(slices.Clone(sv.cfg.sched), coordinator.WithClock(sv.cfg.clk), coordinator.WithStore(st),
			coordinator.WithMiddleware(st.Middleware()))
		s, err := coordinator.New(opts...)
		if err != nil {
			if !errors.Is(err, coordinator.ErrStoreLocked) {
				// Not the lease: wait a lease whoever resigns meanwhile
				// (others may fail as this one did, and resign).
				sv.setRole(Standby, last, nil, fmt.Errorf("pgstore: could not lead store %q: %w", sv.name, err))
				sv.pause(nil, sv.cfg.lease)
				continue
			}
			sv.pause(woken, sv.leaseLeft())
			continue
		}
		last = st.Term()
		sv.setRole(Leader, last, s, nil)
		why := sv.lead(s, st)
		if why == nil { // Shutdown
			sv.setRole(Stopped, last, nil, nil)
			return
		}
		sv.setRole(Standby, last, nil, why)
	}
}

// lead serves the inbox while the lead lasts. It returns nil after a
// Shutdown (the scheduler shut down and the lease given up), and why the
// lead was lost otherwise (the scheduler stopped).
func (sv *Service) lead(s *coordinator.Scheduler, st *Store) error {
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- sv.serveInbox(ctx, s, st) }()
	var why error
	select {
	case <-sv.stop:
		cancel()
		<-errc
		sv.stopErr = s.Shutdown(sv.shutdownCtx())
		return nil
	case why = <-errc:
	case <-st.lost:
		why = st.lostErr()
		cancel()
		<-errc
	}
	cancel()
	// The scheduler stopped committing (a failed commit stops it) or
	// will at its next commit: its Shutdown writes nothing. Its running
	// functions get a lease to return.
	sctx, scancel := sv.cfg.clk.WithTimeout(context.Background(), sv.cfg.lease)
	s.Shutdown(sctx)
	scancel()
	if why == nil {
		why = errors.New("pgstore: the lead ended")
	}
	return why
}

// pause waits up to d, less if the lease is given up (woken) or Shutdown
// is called.
func (sv *Service) pause(woken <-chan struct{}, d time.Duration) {
	t := sv.cfg.clk.Timer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-woken:
	case <-sv.stop:
	}
}

// leaseLeft returns how long the current leader's lease runs on the
// database's clock, a little more (claims need it lapsed), at most a
// lease; a poll if it cannot tell.
func (sv *Service) leaseLeft() time.Duration {
	ctx, cancel := sv.cfg.clk.WithTimeout(context.Background(), sv.cfg.lease)
	defer cancel()
	var us int64
	err := sv.pool.QueryRow(ctx, `SELECT CASE WHEN expires <= now() THEN 0
		ELSE (extract(epoch FROM expires - now()) * 1e6)::bigint END FROM baton.stores WHERE store = $1`, sv.name).Scan(&us)
	if err != nil {
		return min(sv.cfg.poll, sv.cfg.lease)
	}
	return min(time.Duration(us)*time.Microsecond+2*time.Millisecond, sv.cfg.lease)
}
