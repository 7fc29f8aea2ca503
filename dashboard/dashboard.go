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
// and its copy of the tasks. All methods are safe for concurrent use.
type Dashboard struct {
	s   *coordinator.Scheduler // immutable
	cfg config                 // immutable
	mir *mirror                // the copy of the tasks every table reads (mirror.go)
	h   http.Handler           // immutable: the routes, wrapped

	wall clock.Clock // immutable: the real clock, for connection deadlines (a network deadline is a wall-clock time whatever WithClock says)

	streamMu  sync.Mutex                // guards streams, hooked, isClosed
	streams   map[*stream]struct{}      // live streams open
	hooked    map[*http.Server]struct{} // servers whose Shutdown ends the streams (RegisterOnShutdown)
	isClosed  bool
	closed    chan struct{} // closed by Close: live streams end
	closeOnce sync.Once
	stop      context.CancelFunc // ends the mirror's goroutine
	done      chan struct{}      // closed when it has returned

	ovMu sync.Mutex // guards ov, ovAt, ovVersion
	ov   *overviewView
	ovAt time.Time
	ovV  uint64 // the mirror's version when ov was built
}

// Option configures a Dashboard.
type Option func(*config)

type config struct {
	prefix       string        // "" or "/admin/baton": no trailing slash
	readOnly     bool          // no actions
	clk          clock.Clock   // the dashboard's time: live-update pacing, "running for"
	interval     time.Duration // at least this long between two live updates of a page
	refresh      time.Duration // a live page is updated at least this often, events or not
	graphLimit   int           // most tasks a graph draws
	writeTimeout time.Duration // a live stream's write must be done within this
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

// WithGraphLimit sets the most tasks the graph page reads at once
// (default 2,000), the nearest to the tasks it centres on: the
// coordinator visits what it returns. The page draws spawned families and
// runs of tasks of one shape as groups a click opens, and lays the
// drawing out in a Web Worker, so that 2,000 tasks stay readable and the
// page responsive. A larger neighbourhood is cut, and the page says so.
// 0 keeps the default; New panics on a negative n.
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

// WithWriteTimeout sets how long a live stream's write may take before
// the dashboard gives the client up (default 10s): a client that stops
// reading holds a goroutine and a connection no longer than that. 0
// keeps the default; New panics on a negative d.
func WithWriteTimeout(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			panic(fmt.Sprintf("dashboard: WithWriteTimeout(%v): the timeout must not be negative", d))
		}
		if d > 0 {
			c.writeTimeout = d
		}
	}
}

// New returns a dashboard of s. It opens a change feed on s
// (coordinator.Scheduler.Feed) and starts one goroutine that keeps a copy
// of every task's row from it, with the indexes the pages need: every
// page is answered from that copy, so that no request holds the
// coordinator for more than a feed read (well under a millisecond), and
// the feed's reads cost the coordinator what changed. The goroutine
// reads the feed once per update interval, and at once while more
// waits, within a bound per interval. Close ends it. On a scheduler
// already shut down, the pages show its final state.
//
// Mount it where its prefix says (WithPrefix), wrapped in your own
// authentication middleware: the dashboard has no users of its own, and
// anyone who reaches it can cancel and re-run tasks unless it is
// WithReadOnly. It refuses a state-changing request that a browser says
// comes from another site (http.CrossOriginProtection).
//
// New blocks for a round trip to s's coordinator. It panics if s is nil,
// or if an option was given a negative value: a mistake in the program,
// as a bad pattern is to http.ServeMux.
func New(s *coordinator.Scheduler, opts ...Option) *Dashboard {
	if s == nil {
		panic("dashboard: New with a nil scheduler")
	}
	cfg := config{
		clk:          clock.New(),
		interval:     250 * time.Millisecond,
		graphLimit:   2000,
		writeTimeout: 10 * time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	cfg.refresh = max(2*time.Second, cfg.interval)
	d := &Dashboard{s: s, cfg: cfg, wall: clock.New(), closed: make(chan struct{}), done: make(chan struct{}),
		streams: map[*stream]struct{}{}, hooked: map[*http.Server]struct{}{}}
	d.mir = newMirror(s, cfg.clk.Now)
	feed := s.Feed()
	ctx, stop := context.WithCancel(context.Background())
	d.stop = stop
	go func() {
		defer close(d.done)
		defer feed.Close()
		d.mir.follow(ctx, feed, func(ctx context.Context, atLeast time.Duration) bool {
			t := d.cfg.clk.Timer(max(d.cfg.interval, atLeast))
			defer t.Stop()
			select {
			case <-t.C:
				return true
			case <-ctx.Done():
				return false
			}
		})
	}()
	d.h = d.routes()
	return d
}

// ServeHTTP serves the dashboard's pages, its live stream and its
// actions. Requests outside its prefix get 404. A live stream
// (text/event-stream) lasts until the client goes, Close, or the
// Shutdown of the http.Server that serves it.
// After Close, pages still answer, from the copy as Close left it, and
// live streams end at once.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.h.ServeHTTP(w, r)
}

// Close ends the dashboard's live streams at once (a stream blocked in a
// write to a client that does not read is cut), and its goroutine and
// change feed; a stream opened later ends after its first update, and
// the pages still answer. http.Server.Shutdown ends the streams of the
// dashboard it serves by itself (the dashboard registers with it), so
// calling Close before or after it both work. Close blocks until the
// goroutine has returned (a round trip to the coordinator at most), is
// idempotent and safe for concurrent use, before or after the
// scheduler's Shutdown.
func (d *Dashboard) Close() {
	d.closeOnce.Do(func() {
		d.endStreams(true)
		d.stop()
		<-d.done
	})
}
