package coordinator

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"time"

	"github.com/batonhq/baton/worker"
	"github.com/benbjohnson/clock"
)

// ErrInvalidOption is returned by New for an option it cannot honour.
var ErrInvalidOption = errors.New("coordinator: invalid option")

// Option configures a Scheduler in New.
type Option func(*config) error

type poolConfig struct {
	name   string
	size   int
	worker worker.Worker
}

type config struct {
	workers    int
	workersSet bool // WithWorkers was given
	clock      clock.Clock
	pools      []poolConfig // named pools, in the order given
	rng        *rand.Rand
	retain     bool
	keep       time.Duration
	grace      time.Duration
	logger     *slog.Logger
	taskLog    bool // the logger was given (WithLogger): log task life to it

	histPerTask int // WithHistory
	histTotal   int
	logLines    int // WithTaskLogs
	logBytes    int

	middleware  []Middleware   // WithMiddleware, outermost first
	dur         *durableConfig // WithStore, WithFunc (nil: neither)
	subscribers []*subscriber  // WithSubscriber, in the order given

	rates map[string]rateConfig // WithRateLimit, by pool name
	keys  *KeyPolicy            // WithKeys (nil: not given)

	armed        func(due time.Time) // WithTimerArmed
	testMaxBatch int                 // only for testing: cap on the attempts a lane holds (0: maxTarget)
	testCheck    func(*state)        // only for testing: called with the state at the end of every iteration (export_test.go)
}

// MaxWorkers is the most workers a scheduler may have, every pool
// counted. Each worker is a goroutine with a lane of its own, about 75 kB
// whether it is busy or not: size a pool of I/O-bound or remote work by
// the attempts it should have in flight, not by the tasks it will run.
const MaxWorkers = 1 << 16

// WithWorkers sets the size of the default pool (default
// runtime.GOMAXPROCS(0)); see MaxWorkers. Given twice, it is refused, as
// WithPool is for one name.
func WithWorkers(n int) Option {
	return func(c *config) error {
		switch {
		case n < 1 || n > MaxWorkers:
			return fmt.Errorf("%w: WithWorkers(%d): need 1 to %d", ErrInvalidOption, n, MaxWorkers)
		case c.workersSet:
			return fmt.Errorf("%w: WithWorkers given twice", ErrInvalidOption)
		}
		c.workers, c.workersSet = n, true
		return nil
	}
}

// WithClock sets the clock every time reading and timer comes from
// (default clock.New(), the real clock). Pass a *clock.Mock to drive time in
// tests.
func WithClock(c clock.Clock) Option {
	return func(cfg *config) error {
		if c == nil {
			return fmt.Errorf("%w: WithClock(nil)", ErrInvalidOption)
		}
		cfg.clock = c
		return nil
	}
}

// WithPool adds a named pool of size goroutines that run their tasks with w.
// Tasks choose it with Task.Pool = name. The name "" is the default pool's.
func WithPool(name string, size int, w worker.Worker) Option {
	return func(c *config) error {
		switch {
		case name == "":
			return fmt.Errorf("%w: WithPool: the empty name is the default pool's", ErrInvalidOption)
		case size < 1 || size > MaxWorkers:
			return fmt.Errorf("%w: WithPool(%q, %d): need 1 to %d workers", ErrInvalidOption, name, size, MaxWorkers)
		case w == nil:
			return fmt.Errorf("%w: WithPool(%q): nil worker", ErrInvalidOption, name)
		}
		for _, p := range c.pools {
			if p.name == name {
				return fmt.Errorf("%w: WithPool(%q) given twice", ErrInvalidOption, name)
			}
		}
		c.pools = append(c.pools, poolConfig{name: name, size: size, worker: w})
		return nil
	}
}

// WithRetention makes the scheduler forget a final task once it has been
// final for d and nothing still refers to it: a dependency that is not
// final yet, a task that depends on it and is not forgotten yet, or a
// retained task it caused to be skipped. Without it, every task is kept
// until Shutdown, which suits batch jobs; a scheduler that runs for months
// needs it. A forgotten task is unknown: Info returns false, Cancel false,
// a Submit that depends on it fails with ErrUnknownDependency, and its ID
// may be submitted again. d may be 0: forget as soon as possible, which is
// before Wait, or a batch's Wait, returns for it, unless something above
// still refers to it: a service may then submit the same IDs again at once.
// On a durable scheduler (WithStore) forgetting a task deletes its records,
// and nothing is forgotten once Shutdown has begun, so that the tasks
// Shutdown ends are resumed by the next scheduler on the store.
func WithRetention(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: WithRetention(%v): negative", ErrInvalidOption, d)
		}
		c.retain, c.keep = true, d
		return nil
	}
}

// WithRandSource sets the source that retry jitter is drawn from (default:
// randomly seeded). A fixed seed makes backoff waits repeatable.
func WithRandSource(src rand.Source) Option {
	return func(c *config) error {
		if src == nil {
			return fmt.Errorf("%w: WithRandSource(nil)", ErrInvalidOption)
		}
		c.rng = rand.New(src)
		return nil
	}
}

// DefaultAbandonAfter is how long a timed-out function may take to return
// before its attempt is abandoned, unless WithAbandonAfter says otherwise.
const DefaultAbandonAfter = 5 * time.Second

// WithTimerArmed calls f each time the scheduler arms a timer, with its
// due time: on the timer goroutine for delays, retry waits, series,
// retention and dispatch (revocations), and on a worker's goroutine for an
// attempt's timeout and its grace period (WithAbandonAfter), armed before
// the attempt's function is called. It calls f with the zero time once
// every task is final (nothing left to do until a Submit; with
// WithRetention, a timer to forget the last ones may come first). It is
// for tests that drive a mock clock (WithClock): wait for the time f
// reports, then move the clock to it, so the advance can never come before
// the timer exists; stop at the zero time. That is exact for what the
// coordinator times (delays, retry waits, series). An attempt's timeout
// is armed when a worker starts the attempt, on the worker's goroutine:
// before moving the clock past a time at which an attempt should be
// running, wait for its EventStarted; and move the clock forward only (a
// grace period is reported when its timeout fires, and a retry wait that
// comes after it may be due sooner). Where timeouts and several workers
// mix, testing/synctest is simpler: its clock moves only once every
// goroutine is blocked. f may be called from several goroutines at once,
// must not block for long (send on a buffered channel) and must not call
// the scheduler. A scheduler that has had no task yet reports nothing.
//
// On a mock clock every time is the mock's, an attempt's ctx.Deadline
// too: code in a task that hands its context to the standard library
// (net.Dialer, for one) sees a deadline on the mock's calendar, which the
// real clock may have passed long ago.
func WithTimerArmed(f func(due time.Time)) Option {
	return func(c *config) error {
		if f == nil {
			return fmt.Errorf("%w: WithTimerArmed(nil)", ErrInvalidOption)
		}
		c.armed = f
		return nil
	}
}

// WithAbandonAfter sets the grace period after an attempt's timeout: its
// context ends at the timeout (context.DeadlineExceeded, cause
// worker.ErrTimeout) and the worker waits up to d more for the function to
// return, so that the next attempt of the task never runs beside it. A
// function still running after that is abandoned: its worker goes on, its
// result is discarded, and Shutdown names it until it returns. Until it
// returns, it keeps everything else its attempt held: its place under its
// key's limit (WithKeys counts functions that run) and, for a task of
// several slots, the other workers of its pool held for it. Default
// DefaultAbandonAfter; 0 abandons at the timeout.
func WithAbandonAfter(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: WithAbandonAfter(%v): negative", ErrInvalidOption, d)
		}
		c.grace = d
		return nil
	}
}

// WithLogger sets where the scheduler logs (default: slog.Default()). It
// logs at Error a subscriber callback that panicked. A logger given with
// WithLogger also receives the task-life log lines (see LogKeyTask): a
// retry at Warn, a failure at Error, a cancel or skip at Info, starts and
// successes at Debug. They cost nothing while the handler enables none of
// these levels: the scheduler asks it (Handler.Enabled, for each of the
// four levels, on the coordinator's goroutine once per loop iteration, so
// Enabled must be quick and must not wait for Handle) and records nothing
// for them until it does. While one is enabled, the events of the
// enabled levels are recorded and handed to the log's goroutine (the
// kinds of Debug, starts and successes, cost as much as empty tasks
// do; a log at Warn or Error records failures only, and makes no
// attempt report itself at once: see Kinds). The lines are written on a goroutine of their own, in the
// order the events were decided, and Shutdown waits until the last is
// written; a Handle that panics loses its line only. The default logger
// never receives them.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: WithLogger(nil)", ErrInvalidOption)
		}
		c.logger, c.taskLog = l, true
		return nil
	}
}

// WithSubscriber subscribes fn as Subscribe does (with opts), from before
// New returns: it is told every event, those of what New decides while
// it restores a durable scheduler's store too (WithStore: an attempt a
// crash interrupted, retried or failed, and what that skips or cancels),
// which a Subscribe after New cannot see. The subscription lasts until
// Shutdown (a callback that wants no more events returns at once); if
// New fails, fn is never called. WithLogger's lines tell the same
// decisions. It panics if fn is nil, as Subscribe does.
func WithSubscriber(fn func(Event), opts ...SubscribeOption) Option {
	if fn == nil {
		panic("coordinator: WithSubscriber with a nil function")
	}
	site := callSite(2)
	return func(c *config) error {
		sub := newSubscriber(fn, nil)
		sub.site = site
		for _, o := range opts {
			o(sub)
		}
		c.subscribers = append(c.subscribers, sub)
		return nil
	}
}

// CheckOptions reports the error New would return for opts because of
// an option itself (wrapping ErrInvalidOption: a bad size, a pool given
// twice, a nil worker, a rate limit of no pool, too many workers), without
// starting anything, opening a store or calling a middleware: what a
// caller that builds a Scheduler later (replica.New, at each takeover)
// checks first. New may still fail for what only it does: the store's
// Load, a middleware that returns a nil Worker. It does not block.
func CheckOptions(opts ...Option) error {
	_, err := newConfig(opts)
	return err
}

func newConfig(opts []Option) (*config, error) {
	c := &config{workers: runtime.GOMAXPROCS(0), grace: DefaultAbandonAfter,
		histPerTask: DefaultHistoryPerTask, histTotal: DefaultHistoryTotal,
		logLines: DefaultTaskLogLines, logBytes: DefaultTaskLogBytes}
	for i, o := range opts {
		if o == nil {
			return c, fmt.Errorf("%w: option %d is nil", ErrInvalidOption, i)
		}
		if err := o(c); err != nil {
			return c, err // New closes a store given before the bad option
		}
	}
	total := c.workers
	for _, p := range c.pools {
		total += p.size
	}
	if total > MaxWorkers {
		return c, fmt.Errorf("%w: %d workers in all; at most %d", ErrInvalidOption, total, MaxWorkers)
	}
	for name := range c.rates {
		if name != "" && !slices.ContainsFunc(c.pools, func(p poolConfig) bool { return p.name == name }) {
			return c, fmt.Errorf("%w: WithRateLimit(%q): no such pool", ErrInvalidOption, name)
		}
	}
	if c.clock == nil {
		c.clock = clock.New()
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if c.rng == nil {
		c.rng = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	return c, nil
}

type rateConfig struct {
	perSecond float64
	burst     int
}

// WithRateLimit limits the attempts pool starts to perSecond a second,
// with bursts of up to burst: a token bucket on the scheduler's clock
// (exact on a mock clock and in testing/synctest), whose next token wakes
// the coordinator when ready work waits for it. Over any window of time T
// the pool starts at most perSecond·T + burst attempts; with enough ready
// work and idle workers, at least perSecond·T − 1. A retry waits for a
// token like any start. A rate-limited pool hands each idle worker one
// attempt at a time (a worker never holds work it could not start at
// once), so its throughput is bounded by the round trip to the coordinator
// too: hundreds of thousands of starts a second, per pool. On a real clock
// a start due at a token's time happens when the coordinator wakes, a
// little later; the bucket goes on from the token's time, not from the
// late wake, so that no time is lost to the rate whatever the burst (up
// to 10 ms of lateness: a pool whose workers, not its rate, held work
// back longer is owed nothing). The starts that catch up on a late wake
// come together, so over a window T the upper bound holds on the
// tokens' times; on the starts' own times it may be passed by what came
// late, perSecond·10ms at most. pool is a pool's
// name ("" is the default pool); perSecond must be positive and finite,
// burst at least 1. SetRateLimit changes it while the scheduler runs.
func WithRateLimit(pool string, perSecond float64, burst int) Option {
	return func(c *config) error {
		if err := checkRate(pool, perSecond, burst, false); err != nil {
			return err
		}
		if _, dup := c.rates[pool]; dup {
			return fmt.Errorf("%w: WithRateLimit(%q) given twice", ErrInvalidOption, pool)
		}
		if c.rates == nil {
			c.rates = map[string]rateConfig{}
		}
		c.rates[pool] = rateConfig{perSecond, burst}
		return nil
	}
}

// checkRate validates a rate limit; with off, a perSecond of 0 (no limit)
// is valid too.
func checkRate(pool string, perSecond float64, burst int, off bool) error {
	switch {
	case off && perSecond == 0:
		return nil
	case !(perSecond > 0) || math.IsInf(perSecond, 0) || perSecond > 1e9:
		return fmt.Errorf("%w: rate limit of pool %q: %v a second, need a positive number up to 1e9", ErrInvalidOption, pool, perSecond)
	case burst < 1:
		return fmt.Errorf("%w: rate limit of pool %q: burst %d, need at least 1", ErrInvalidOption, pool, burst)
	case float64(burst)*1e9/perSecond > 1e18:
		// The bucket's times are durations: a burst's worth of tokens must
		// take less than about 30 years to come.
		return fmt.Errorf("%w: rate limit of pool %q: %v a second with a burst of %d: a burst takes over 30 years to fill", ErrInvalidOption, pool, perSecond, burst)
	}
	return nil
}

// KeyPolicy is the flow control of keys (Task.Key), given to WithKeys.
type KeyPolicy struct {
	// Limit caps the attempts of one key running at once, all pools
	// counted (0: no cap). A task without a key is never capped.
	Limit int
	// Limits overrides Limit for the keys it names (0: no cap for that
	// key).
	Limits map[string]int
	// Weights gives the keys it names that many tasks per turn, instead
	// of 1 ("" names the tasks without a key).
	Weights map[string]int
}

// maxKeyValue bounds KeyPolicy's limits and weights (far above any
// number of workers).
const maxKeyValue = 1 << 30

// WithKeys sets the flow control of keys: caps on the attempts of a key
// running at once, across pools, and weights of their turns. Keys take
// turns without it too, once a task has a Key. An attempt counts against
// its key from its hand-out to a worker (whose start follows at once, or
// after the attempts that worker runs) until its end is applied.
func WithKeys(p KeyPolicy) Option {
	return func(c *config) error {
		if c.keys != nil {
			return fmt.Errorf("%w: WithKeys given twice", ErrInvalidOption)
		}
		if p.Limit < 0 || p.Limit > maxKeyValue {
			return fmt.Errorf("%w: WithKeys: Limit %d: need 0 to %d", ErrInvalidOption, p.Limit, maxKeyValue)
		}
		for k, l := range p.Limits {
			if k == "" || l < 0 || l > maxKeyValue {
				return fmt.Errorf("%w: WithKeys: Limits[%q] = %d: need a key and a limit of 0 to %d", ErrInvalidOption, k, l, maxKeyValue)
			}
		}
		for k, w := range p.Weights {
			if w < 1 || w > maxKeyValue {
				return fmt.Errorf("%w: WithKeys: Weights[%q] = %d: need 1 to %d", ErrInvalidOption, k, w, maxKeyValue)
			}
		}
		p.Limits, p.Weights = maps.Clone(p.Limits), maps.Clone(p.Weights)
		c.keys = &p
		return nil
	}
}
