package pgstore

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/benbjohnson/clock"
)

// Defaults of the options.
const (
	// DefaultLease is how long a leader's lease lasts after its last
	// renewal (every commit renews it, and a heartbeat a third of a lease
	// after the last): a standby takes over about a lease after the
	// leader's death.
	DefaultLease = 5 * time.Second
	// MinLease is the shortest lease WithLease accepts: shorter ones
	// lapse under a busy database's ordinary pauses.
	MinLease = 200 * time.Millisecond
	// DefaultMaxOutage is how long a Store's Commit waits for an
	// unreachable database before it gives up (ErrOutage).
	DefaultMaxOutage = 5 * time.Minute
	// DefaultPoll is how often waiters look at the database when no
	// notification came: LISTEN/NOTIFY wakes them at once, the poll is
	// the net under it.
	DefaultPoll = time.Second
	// DefaultOutcomeRetention is how long a decided request's row stays
	// in baton.inbox for Outcome to read.
	DefaultOutcomeRetention = 24 * time.Hour
)

// Option configures a Store (NewStore), a Service (New) or a Client
// (NewClient). Each says which it concerns; the others ignore it.
type Option func(*config) error

type config struct {
	clk       clock.Clock
	lease     time.Duration
	instance  string
	lockWait  time.Duration
	maxOutage time.Duration
	poll      time.Duration
	retention time.Duration
	sched     []coordinator.Option
	notify    func(Notice)
}

func newConfig(opts []Option) (*config, error) {
	host, _ := os.Hostname()
	c := &config{
		clk:       clock.New(),
		lease:     DefaultLease,
		instance:  host + "/" + strconv.Itoa(os.Getpid()),
		maxOutage: DefaultMaxOutage,
		poll:      DefaultPoll,
		retention: DefaultOutcomeRetention,
	}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: a nil Option", ErrInvalidOption)
		}
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// WithClock sets the clock every timer of the Store, Service or Client
// runs on (default: the real one). The lease's expiry itself is kept on
// the database's clock (now()), so that the instances' clocks need not
// agree; this clock times the waits between looks at it. A Service gives
// it to its scheduler too (coordinator.WithClock).
func WithClock(c clock.Clock) Option {
	return func(cfg *config) error {
		if c == nil {
			return fmt.Errorf("%w: WithClock(nil)", ErrInvalidOption)
		}
		cfg.clk = c
		return nil
	}
}

// WithLease sets the leader's lease (default DefaultLease, at least
// MinLease), for a Store and a Service: give every instance of a store
// the same one. A standby takes over about a lease after the leader's
// last renewal; a leader cut off from the database for a lease may be
// replaced.
func WithLease(d time.Duration) Option {
	return func(c *config) error {
		if d < MinLease {
			return fmt.Errorf("%w: WithLease(%v): the least is %v", ErrInvalidOption, d, MinLease)
		}
		c.lease = d
		return nil
	}
}

// WithInstance names this instance in baton.stores.holder (default
// host/pid), for a Store and a Service. The name is for people: the term
// decides who leads.
func WithInstance(name string) Option {
	return func(c *config) error {
		if name == "" {
			return fmt.Errorf("%w: WithInstance(\"\")", ErrInvalidOption)
		}
		c.instance = name
		return nil
	}
}

// WithLockWait sets how long a Store's Load waits for a lease held by
// another instance to lapse before it fails with
// coordinator.ErrStoreLocked (default 0: at once). A Service never needs
// it: it waits as a standby.
func WithLockWait(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: WithLockWait(%v)", ErrInvalidOption, d)
		}
		c.lockWait = d
		return nil
	}
}

// WithMaxOutage sets how long a Store's Commit tries again while the
// database cannot be reached (a restart, a failover, a network cut)
// before it fails with ErrOutage (default DefaultMaxOutage). Meanwhile
// the scheduler waits: its commit has not returned.
func WithMaxOutage(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithMaxOutage(%v)", ErrInvalidOption, d)
		}
		c.maxOutage = d
		return nil
	}
}

// WithPoll sets how often a Client's waits (Submit's, Cancel's,
// WaitTasks') and a leader's inbox look at the database when no
// notification came (default DefaultPoll).
func WithPoll(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithPoll(%v)", ErrInvalidOption, d)
		}
		c.poll = d
		return nil
	}
}

// WithOutcomeRetention sets how long a leader keeps a decided request in
// baton.inbox, for Outcome (default DefaultOutcomeRetention).
func WithOutcomeRetention(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithOutcomeRetention(%v)", ErrInvalidOption, d)
		}
		c.retention = d
		return nil
	}
}

// WithScheduler gives a Service the options of the scheduler it runs
// while it leads: its functions (coordinator.WithFunc), pools, workers.
// Give every instance the same. The Service adds its own WithStore,
// WithClock (WithClock's) and WithMiddleware (the lease's gate) after
// these: a WithStore or WithClock given here is replaced.
func WithScheduler(opts ...coordinator.Option) Option {
	return func(c *config) error {
		c.sched = append(c.sched, opts...)
		return nil
	}
}

// WithNotify has a Service call f at each change of its role and at each
// failure to lead (a Notice). f runs on the Service's goroutine: it must
// not block.
func WithNotify(f func(Notice)) Option {
	return func(c *config) error {
		c.notify = f
		return nil
	}
}

// validName reports whether name can name a store.
func validName(name string) bool {
	if len(name) == 0 || len(name) > 63 {
		return false
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return false
		}
	}
	return true
}
