package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/benbjohnson/clock"
)

// ErrReadOnly is the error of an action (such as a cancel) asked of a
// dashboard made WithReadOnly: it answers 403 Forbidden with this text and
// changes nothing.
var ErrReadOnly = errors.New("dashboard: read-only: actions are turned off")

// Dashboard is an http.Handler that shows and steers one scheduler.
// Create it with New and mount it on a mux; Close ends its live streams
// and its subscription. All methods are safe for concurrent use.
type Dashboard struct {
	s   *coordinator.Scheduler // immutable
	cfg config                 // immutable
	rec *recorder
	h   http.Handler // immutable: the routes, wrapped

	subMu    sync.Mutex // guards unsub, watchers, isClosed
	unsub    func()     // ends the subscription; nil while not subscribed
	watchers int        // live streams open
	isClosed bool       // Close was called: subscribe no more

	closed    chan struct{} // closed by Close: live streams end
	closeOnce sync.Once

	ovMu     sync.Mutex // guards ov, ovAt, ovEvents, ovTotals
	ov       *overviewView
	ovAt     time.Time
	ovEvents uint64
	ovTotals uint64 // totalsSum when ov was built
}

// Option configures a Dashboard.
type Option func(*config)

type config struct {
	prefix     string        // "" or "/admin/baton": no trailing slash
	readOnly   bool          // no actions
	clk        clock.Clock   // the dashboard's time: live-update pacing, "running for"
	interval   time.Duration // at least this long between two live updates of a page
	refresh    time.Duration // a live page is updated at least this often, events or not
	graphLimit int           // most tasks a graph draws
	recent     int           // attempts the recorder keeps
	failed     int           // failed attempts it keeps besides
	always     bool          // subscribed from New on, not only while a page is live
}

// WithPrefix serves the dashboard under a path prefix, such as
// "/admin/baton": mount it with mux.Handle("/admin/baton/", d). Every link
// the pages make starts with it. A trailing slash is ignored; the default
// is the root, "/".
func WithPrefix(prefix string) Option {
	return func(c *config) {
		prefix = "/" + strings.Trim(prefix, "/")
		if prefix == "/" {
			prefix = ""
		}
		c.prefix = prefix
	}
}

// WithReadOnly turns every action off: the pages show no buttons, and a
// POST that asks for one answers 403 Forbidden (ErrReadOnly) and changes
// nothing.
func WithReadOnly() Option {
	return func(c *config) { c.readOnly = true }
}

// WithClock sets the clock the dashboard paces its live updates with and
// measures "running for" against (default, and for nil: the real clock).
// Give it the clock the scheduler was given with coordinator.WithClock,
// if any: the attempts' start times are the scheduler's.
func WithClock(c clock.Clock) Option {
	return func(cfg *config) {
		if c != nil {
			cfg.clk = c
		}
	}
}

// WithUpdateInterval sets how long a live page waits at least between two
// updates (default 250ms): however many events the scheduler decides,
// each open page costs at most one update per interval. A page is updated
// at least every 2s, or every interval if that is longer, events or not,
// so that tasks submitted (which send no event) show up. 0 keeps the
// default; New panics on a negative d.
func WithUpdateInterval(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			panic(fmt.Sprintf("dashboard: WithUpdateInterval(%v): the interval must not be negative", d))
		}
		if d > 0 {
			c.interval = d
		}
	}
}

// WithGraphLimit sets the most tasks the graph page draws at once
// (default 300; the browser lays out a few hundred tasks in well under a
// second). A larger graph is cut, and the page says so. 0 keeps the
// default; New panics on a negative n.
func WithGraphLimit(n int) Option {
	return func(c *config) {
		if n < 0 {
			panic(fmt.Sprintf("dashboard: WithGraphLimit(%d): the limit must not be negative", n))
		}
		if n > 0 {
			c.graphLimit = n
		}
	}
}

// WithHistory sets how many ended attempts the dashboard remembers for the
// task pages' attempt lists: recent of every outcome (default 65,536) and,
// besides, failed of those that failed or were cancelled (default 8,192),
// so that failures are remembered longer than successes. Each costs about
// 100 bytes once remembered: the lists grow as attempts end, up to these
// counts. 0 keeps a default; New panics on a negative count.
func WithHistory(recent, failed int) Option {
	return func(c *config) {
		if recent < 0 || failed < 0 {
			panic(fmt.Sprintf("dashboard: WithHistory(%d, %d): the counts must not be negative", recent, failed))
		}
		if recent > 0 {
			c.recent = recent
		}
		if failed > 0 {
			c.failed = failed
		}
	}
}

// WithAlwaysRecord subscribes the dashboard to the scheduler's events
// (failures and the like: see the package doc) from New on, instead of
// only while a live page is open, so that the task pages list the
// failures of attempts made while nobody was looking. Starts and
// successes are learnt from looks at the scheduler made while a page is
// open, so the attempts that started and succeeded while none was are
// counted in the rates (spread over that time) and not listed.
func WithAlwaysRecord() Option {
	return func(c *config) { c.always = true }
}

// New returns a dashboard of s. While a live page is open (or from New
// on, WithAlwaysRecord), it subscribes to s's events of failures, and
// looks at s on each update, to learn when each attempt started and how
// each ended; it starts no goroutine of its own
// (the subscription's callback runs on s's goroutine for it, and each open
// live page on its request's goroutine). On a scheduler already shut
// down, the pages show its final state. New blocks for a round trip to
// s's coordinator only WithAlwaysRecord.
//
// Mount it where its prefix says (WithPrefix), wrapped in your own
// authentication middleware: the dashboard has no users of its own, and
// anyone who reaches it can cancel tasks unless it is WithReadOnly.
// It refuses a state-changing request that a browser says comes from
// another site (http.CrossOriginProtection).
//
// New panics if s is nil, or if an option was given a negative value: a
// mistake in the program, as a bad pattern is to http.ServeMux.
func New(s *coordinator.Scheduler, opts ...Option) *Dashboard {
	if s == nil {
		panic("dashboard: New with a nil scheduler")
	}
	cfg := config{
		clk:        clock.New(),
		interval:   250 * time.Millisecond,
		graphLimit: 300,
		recent:     defaultRecent,
		failed:     defaultFailed,
	}
	for _, o := range opts {
		o(&cfg)
	}
	cfg.refresh = max(2*time.Second, cfg.interval)
	d := &Dashboard{s: s, cfg: cfg, rec: newRecorder(cfg.recent, cfg.failed, cfg.interval), closed: make(chan struct{})}
	if cfg.always {
		d.unsub = d.subscribe()
	}
	d.h = d.routes()
	return d
}

// ServeHTTP serves the dashboard's pages, its live stream and its
// actions. Requests outside its prefix get 404. A live stream
// (text/event-stream) lasts until the client goes, or Close.
// After Close, pages still answer, from what the scheduler says, and live
// streams end at once.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.h.ServeHTTP(w, r)
}

// Close ends the dashboard's open live streams and its subscription to the
// scheduler's events; a stream opened later ends after its first update, and the pages
// still answer. Call it before http.Server.Shutdown, which waits for open
// streams. Close blocks only for the scheduler's unsubscribe, is
// idempotent and safe for concurrent use, before or after the scheduler's
// Shutdown.
func (d *Dashboard) Close() {
	d.closeOnce.Do(func() {
		d.subMu.Lock()
		d.isClosed = true
		if d.unsub != nil {
			d.unsub()
			d.unsub = nil
		}
		d.subMu.Unlock()
		close(d.closed)
	})
}

// subscribe subscribes the recorder to the scheduler's events of the
// kinds it cannot learn otherwise (failures, retries, cancellations,
// skips, pauses: coordinator.Kinds), lagged by half an update interval
// (coordinator.MaxLag): a page shows nothing more often than that. The
// two kinds every attempt makes, starts and successes, it learns from
// looks at the scheduler on each update (recorder.sample), so that an
// open page costs the scheduler no event per attempt.
func (d *Dashboard) subscribe() (unsubscribe func()) {
	unsubscribe = d.s.Subscribe(d.rec.record, coordinator.Kinds(recordedKinds...), coordinator.MaxLag(d.cfg.interval/2))
	d.sample(d.cfg.clk.Now(), nil) // what runs now started unseen; what starts later, the next look sees
	return unsubscribe
}

// sample looks at the scheduler for the recorder (its Totals, and its
// running tasks unless totals is given: nil, it asks for them), and
// reports whether anything changed since the last look. Only while the
// dashboard is subscribed: the recorder's running attempts are told
// apart from failed ones by the events.
func (d *Dashboard) sample(now time.Time, totals map[string]coordinator.Totals) bool {
	if totals == nil {
		totals = d.s.Totals()
	}
	snap, err := d.s.Snapshot(context.Background(), coordinator.SnapshotFilter{Statuses: []coordinator.Status{coordinator.Running}, Limit: runningLooked})
	if err != nil {
		return false
	}
	return d.rec.sample(now, totals, snap.Tasks)
}

// subscribed reports whether the dashboard listens to the scheduler's
// events now.
func (d *Dashboard) subscribed() bool {
	d.subMu.Lock()
	defer d.subMu.Unlock()
	return d.unsub != nil
}

// watch counts a live page open and subscribes if nobody did; it blocks
// for a round trip to the coordinator then. The function it returns
// counts the page gone and ends the subscription with the last one
// (unless WithAlwaysRecord). The running attempts the dashboard knew of
// are forgotten whenever the subscription starts or ends, since their
// ends may come while nobody listens.
func (d *Dashboard) watch() (unwatch func()) {
	d.subMu.Lock()
	defer d.subMu.Unlock()
	d.watchers++
	if d.unsub == nil && !d.isClosed {
		d.rec.forgetRunning()
		d.unsub = d.subscribe()
	}
	return func() {
		d.subMu.Lock()
		defer d.subMu.Unlock()
		d.watchers--
		if d.watchers == 0 && !d.cfg.always && d.unsub != nil {
			d.unsub()
			d.unsub = nil
			d.rec.forgetRunning()
		}
	}
}
