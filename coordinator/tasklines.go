package coordinator

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/batonhq/baton/internal/lane"
)

// A task's own log lines: Logger(ctx) gives a running attempt a
// *slog.Logger whose records are kept with the attempt (History's
// Attempt.Logs, bounded by WithTaskLogs, durable where the scheduler is)
// and passed on to the scheduler's logger (WithLogger) with the task's
// attributes. A custom or remote worker attaches lines of its own with
// AppendLog. The lines live in the attempt's context while it runs
// (lane.Context.Extra) and move to its history record when it ends.

// LogLine is one line of an attempt's log.
type LogLine struct {
	Time    time.Time
	Level   slog.Level
	Message string
	Attrs   string // its attributes as key=value pairs, as slog's text handler writes them
}

// String renders l as one line: time, level, message, attributes. A
// message holding a line break or another character that does not print
// is quoted (strconv.Quote), so that the line stays one.
func (l LogLine) String() string {
	msg := l.Message
	if strings.ContainsFunc(msg, func(r rune) bool { return !unicode.IsPrint(r) }) {
		msg = strconv.Quote(msg)
	}
	s := l.Time.UTC().Format(time.RFC3339Nano) + " " + l.Level.String() + " " + msg
	if l.Attrs != "" {
		s += " " + l.Attrs
	}
	return s
}

// Defaults of WithTaskLogs.
const (
	DefaultTaskLogLines = 100
	DefaultTaskLogBytes = 16 << 10
)

// WithTaskLogs bounds the log lines kept of each attempt (Logger,
// AppendLog): the newest lines, at most lines of them and bytes of
// message and attributes in all (History's Attempt.LogsDropped counts the
// others). Default DefaultTaskLogLines and DefaultTaskLogBytes;
// WithTaskLogs(0, 0) keeps none (Logger's records still reach WithLogger's
// logger). Lines are kept with the attempt's history (WithHistory), so
// WithHistory(0, 0) keeps none either, and the text kept in all is bounded
// by WithHistory's total times bytes: at the defaults (100,000 attempts of
// 16 KiB) up to about 1.6 GB if every attempt logs its fill, so a
// scheduler of many chatty tasks wants a smaller bound of either. A line
// kept is a copy of what was logged, never a part of a larger string.
// (An attempt's error is kept as given, beside these.)
func WithTaskLogs(lines, bytes int) Option {
	return func(c *config) error {
		if lines < 0 || bytes < 0 || (lines == 0) != (bytes == 0) {
			return fmt.Errorf("%w: WithTaskLogs(%d, %d): want both 0, or both positive", ErrInvalidOption, lines, bytes)
		}
		c.logLines, c.logBytes = lines, bytes
		return nil
	}
}

// attemptLog is the lines kept of one attempt: a ring of the newest.
// Safe for concurrent use (a task's goroutines log at once).
type attemptLog struct {
	mu       sync.Mutex
	lines    []LogLine // guarded by mu: a ring of at most maxLines, from start
	start    int       // guarded by mu
	bytes    int       // guarded by mu: of the lines kept
	dropped  int       // guarded by mu: lines no longer kept
	maxLines int       // immutable
	maxBytes int       // immutable
}

func lineSize(l *LogLine) int { return len(l.Message) + len(l.Attrs) }

func (a *attemptLog) add(l LogLine) { a.keep(l, false) }

// addCopy is add for a line whose strings the caller gave (AppendLog): the
// line kept is a copy, so that it keeps no larger string it was cut from
// alive.
func (a *attemptLog) addCopy(l LogLine) { a.keep(l, true) }

// keep adds l, cut to fit; the strings of a line cut are new ones, and
// own makes those of a line kept whole new too.
func (a *attemptLog) keep(l LogLine, own bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.maxLines == 0 {
		a.dropped = min(a.dropped+1, math.MaxInt32)
		return
	}
	if lineSize(&l) > a.maxBytes { // cut to fit, saying so
		const mark = "…"
		room := max(a.maxBytes-len(mark), 0)
		if len(l.Message) > room {
			l.Message, l.Attrs = cutUTF8(l.Message, room)+mark, ""
		} else {
			// Both new strings: the message shares its string with the
			// attributes cut here (attrWriter.write).
			l.Message, l.Attrs = strings.Clone(l.Message), cutUTF8(l.Attrs, room-len(l.Message))+mark
		}
	} else if own {
		l.Message, l.Attrs = strings.Clone(l.Message), strings.Clone(l.Attrs)
	}
	a.lines = append(a.lines, l)
	a.bytes += lineSize(&l)
	for len(a.lines)-a.start > a.maxLines || a.bytes > a.maxBytes {
		a.bytes -= lineSize(&a.lines[a.start])
		a.lines[a.start] = LogLine{}
		a.start++
		a.dropped = min(a.dropped+1, math.MaxInt32)
	}
	if a.start > len(a.lines)/2 && a.start > 16 { // compact now and then
		a.lines = append(a.lines[:0], a.lines[a.start:]...)
		a.start = 0
	}
}

// cutUTF8 cuts s to at most n bytes, on a rune boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// snapshot returns the lines kept, oldest first, and how many were dropped.
func (a *attemptLog) snapshot() ([]LogLine, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]LogLine(nil), a.lines[a.start:]...), a.dropped
}

// attemptLogOf returns the log of the attempt c, made on first use; nil if
// the attempt is over.
func attemptLogOf(c *lane.Context, s *Scheduler) *attemptLog {
	v := c.Extra(func() any { return &attemptLog{maxLines: s.logLines, maxBytes: s.logBytes} })
	l, _ := v.(*attemptLog)
	return l
}

// Logger returns a logger for the running attempt whose context is ctx: its
// records are kept with the attempt (History; WithTaskLogs bounds them;
// a durable scheduler stores them) and passed to the scheduler's logger
// (WithLogger, or slog.Default()) with the attributes LogKeyTask,
// LogKeyPool (if not the default pool), LogKeyAttempt and LogKeyRun. For a
// context that is no running attempt's, it returns the logger
// ContextWithLogger put in ctx, or slog.Default(). A line
// logged after the attempt's function returned reaches the scheduler's
// logger only, if the function had called Logger (or another method of
// ctx) before it returned: a worker reuses the context of an attempt that
// did not touch it, so that a logger first asked for later, from a
// goroutine the function left behind, may belong to whatever attempt runs
// then (the package overview's duty 2). It does not block; the logger is
// safe for concurrent use.
func Logger(ctx context.Context) *slog.Logger {
	c, ok := lane.Of(ctx)
	var s *Scheduler
	var id string
	if ok {
		var owner any
		if id, owner, ok = c.TaskID(); !ok {
			// Over: a function that touched ctx returned, and a goroutine
			// it left behind logs. Its lines go to the scheduler's logger
			// with the task's attributes, and are not kept (keepLines).
			id, owner, ok = c.EndedTaskID()
		}
		s, _ = owner.(*Scheduler)
	}
	if !ok || s == nil {
		if l, _ := ctx.Value(loggerKey{}).(*slog.Logger); l != nil {
			return l
		}
		return slog.Default()
	}
	attempt, run := c.Meta()
	attrs := []slog.Attr{slog.String(LogKeyTask, id)}
	if pool := s.poolOfTask(c); pool != "" {
		attrs = append(attrs, slog.String(LogKeyPool, pool))
	}
	attrs = append(attrs, slog.Int(LogKeyAttempt, attempt), slog.Int(LogKeyRun, run))
	return slog.New(&taskHandler{add: func(line LogLine) { keepLines(c, s, line) }, next: s.log.Handler().WithAttrs(attrs)})
}

// poolOfTask is the pool of the attempt c runs in.
func (s *Scheduler) poolOfTask(c *lane.Context) string {
	laneID, _, ok := c.Item()
	if !ok || laneID >= len(s.lanePools) {
		return ""
	}
	return s.lanePools[laneID]
}

// AppendLog adds lines to the log of the running attempt whose context is
// ctx, as Logger's records are (bounded by WithTaskLogs): a custom or
// remote worker passes on what its handler logged elsewhere. Their times
// are kept as given (a zero time stays zero; a durable scheduler stores a
// time before 1678 or after 2262 as the nearest it can). It returns ErrNoAttempt if ctx is not a running
// attempt's context. It does not block and is safe for concurrent use.
func AppendLog(ctx context.Context, lines ...LogLine) error {
	c, s, err := attemptOfContext(ctx)
	if err != nil {
		return err
	}
	if !keepInLog(c, s, func(l *attemptLog) {
		for _, line := range lines {
			l.addCopy(line)
		}
	}) {
		return ErrNoAttempt
	}
	return nil
}

// attemptOfContext is the context and scheduler of the running attempt whose
// context is ctx, or ErrNoAttempt.
func attemptOfContext(ctx context.Context) (*lane.Context, *Scheduler, error) {
	c, ok := lane.Of(ctx)
	if !ok {
		return nil, nil, ErrNoAttempt
	}
	_, owner, ok := c.Attempt()
	s, _ := owner.(*Scheduler)
	if !ok || s == nil {
		return nil, nil, ErrNoAttempt
	}
	return c, s, nil
}

// keepLines adds lines to the log of the attempt c runs, unless the
// attempt is over: its function returned (or was abandoned at its
// timeout), which closes it to them as one step with the worker's
// Finish, so that a line logged later (by a goroutine the function left
// running) is never kept, whether or not the coordinator has read the
// log yet. It reports whether they were kept.
func keepLines(c *lane.Context, s *Scheduler, lines ...LogLine) bool {
	return keepInLog(c, s, func(l *attemptLog) {
		for _, line := range lines {
			l.add(line)
		}
	})
}

// keepInLog runs f on the log of the attempt c runs unless the attempt is
// over (keepLines), and reports whether it ran.
func keepInLog(c *lane.Context, s *Scheduler, f func(*attemptLog)) bool {
	l := attemptLogOf(c, s)
	return l != nil && c.Keep(func() { f(l) })
}

// AddLogsDropped counts n lines that the running attempt whose context is
// ctx logged and that its worker did not keep (History's
// Attempt.LogsDropped, which stops at math.MaxInt32): a remote worker
// bounds what it sends back (LogCollector) and says how many it left
// out. It returns ErrNoAttempt if
// ctx is not a running attempt's context. It does not block and is safe
// for concurrent use.
func AddLogsDropped(ctx context.Context, n int) error {
	c, s, err := attemptOfContext(ctx)
	if err != nil {
		return err
	}
	if !keepInLog(c, s, func(l *attemptLog) {
		if n > 0 {
			l.mu.Lock()
			l.dropped = min(l.dropped+min(n, math.MaxInt32), math.MaxInt32)
			l.mu.Unlock()
		}
	}) {
		return ErrNoAttempt
	}
	return nil
}

type loggerKey struct{}

// ContextWithLogger returns a copy of ctx for which Logger returns l, where
// ctx is no running attempt's context: a worker that runs a task's
// function outside the scheduler (a remote worker) gives the function the
// logger of a LogCollector, so that the function logs through Logger as it
// would in a local pool. It does not block.
func ContextWithLogger(ctx context.Context, l *slog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey{}, l)
}

// LogCollector keeps the log lines of one attempt that runs outside the
// scheduler (on a remote worker), bounded as WithTaskLogs bounds an
// attempt's lines, for its worker to send back to the scheduler's pool
// (AppendLog, AddLogsDropped). Its zero value is not usable: see
// NewLogCollector. Safe for concurrent use.
type LogCollector struct {
	log  attemptLog   // its own lock guards it
	next slog.Handler // immutable: where records go on too (the worker's log); nil for none
}

// NewLogCollector returns a collector that keeps the newest lines, at
// most lines of them and bytes of message and attributes in all (both 0:
// none), and passes every record on to next (nil: to no one). It panics
// if lines or bytes is negative, or only one of them is 0.
func NewLogCollector(lines, bytes int, next slog.Handler) *LogCollector {
	if lines < 0 || bytes < 0 || (lines == 0) != (bytes == 0) {
		panic(fmt.Sprintf("coordinator: NewLogCollector(%d, %d): want both 0, or both positive", lines, bytes))
	}
	return &LogCollector{log: attemptLog{maxLines: lines, maxBytes: bytes}, next: next}
}

// Logger returns a logger whose records the collector keeps (and passes on
// to its next handler). It does not block; the logger is safe for
// concurrent use.
func (c *LogCollector) Logger() *slog.Logger {
	next := c.next
	if next == nil {
		next = slog.DiscardHandler
	}
	return slog.New(&taskHandler{add: c.log.add, next: next})
}

// Lines returns the lines kept, oldest first, and how many lines were
// logged and not kept, so far: a line logged after the call (by a
// goroutine the function left running) is in neither. It does not block.
func (c *LogCollector) Lines() (lines []LogLine, dropped int) { return c.log.snapshot() }

// taskHandler is Logger's handler: it keeps each record with the attempt
// and passes it on to next.
type taskHandler struct {
	add     func(LogLine) // keeps a line with the attempt (once the attempt is over: not)
	next    slog.Handler  // the scheduler's, with the task's attributes and WithAttrs's
	ops     []handlerOp   // WithAttrs's (resolved) and WithGroup's, in order: replayed on the text handler that writes a line's Attrs
	writers *sync.Pool    // of *attrWriter with ops replayed; nil without ops (plainWriters)
}

// handlerOp is one WithAttrs (attrs) or WithGroup (group) call.
type handlerOp struct {
	group string
	attrs []slog.Attr
}

func (h *taskHandler) Enabled(context.Context, slog.Level) bool { return true } // kept whatever the scheduler's logger enables

func (h *taskHandler) Handle(ctx context.Context, r slog.Record) error {
	msg, attrs := h.attrs(ctx, r)
	h.add(LogLine{Time: r.Time, Level: r.Level, Message: msg, Attrs: attrs})
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

// attrs writes r's attributes, and those of WithAttrs and WithGroup, as
// slog's text handler writes them (LogLine.Attrs): by that handler, its
// time, level and message left out. Writers come from a pool, one per
// line being written (a LogValuer may log through the same logger while
// its line is written): the plain handlers' pool, or the handler's own,
// whose writers have its WithAttrs and WithGroup replayed once.
func (h *taskHandler) attrs(ctx context.Context, r slog.Record) (msg, attrs string) {
	pool := &plainWriters
	if h.writers != nil {
		pool = h.writers
	}
	w := pool.Get().(*attrWriter)
	defer pool.Put(w)
	return w.write(ctx, r)
}

// plainWriters are the attrWriters of handlers without WithAttrs or
// WithGroup.
var plainWriters = sync.Pool{New: func() any { return newAttrWriter(nil) }}

// derive returns a handler with h's ops and op after them.
func (h *taskHandler) derive(next slog.Handler, op handlerOp) *taskHandler {
	ops := append(slices.Clip(h.ops), op)
	return &taskHandler{add: h.add, next: next, ops: ops, writers: &sync.Pool{New: func() any { return newAttrWriter(ops) }}}
}

// attrWriter is a text handler writing into a buffer of its own, with
// what a line's Attrs leave out (its level and message) dropped. One line
// at a time: its pool's.
type attrWriter struct {
	th       slog.Handler
	buf      []byte
	handling bool // in write; else WithAttrs is replaying (ReplaceAttr applies to its attributes too)
	builtins int  // level and message, still to drop from the line being written
}

func newAttrWriter(ops []handlerOp) *attrWriter {
	w := &attrWriter{}
	w.th = slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.Level(math.MinInt), ReplaceAttr: w.replace})
	for _, op := range ops {
		if op.attrs != nil {
			w.th = w.th.WithAttrs(op.attrs)
		} else {
			w.th = w.th.WithGroup(op.group)
		}
	}
	return w
}

// replace drops the level and the message that Handle writes first (a
// record without a time has none).
func (w *attrWriter) replace(groups []string, a slog.Attr) slog.Attr {
	if w.handling && w.builtins > 0 && len(groups) == 0 {
		w.builtins--
		return slog.Attr{}
	}
	return a
}

// Write is the text handler's output: it takes every write.
func (w *attrWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	return len(p), nil
}

// write returns r's line as the text handler writes it, without its time,
// level and message.
//
// It returns r's message and the attributes in one new string: the line
// kept is its own, whatever string the message was cut from (a kept
// substring of a large string would keep all of it).
func (w *attrWriter) write(ctx context.Context, r slog.Record) (msg, attrs string) {
	w.buf, w.handling, w.builtins = w.buf[:0], true, 2
	r.Time, r.PC = time.Time{}, 0 // r is a copy: its attributes are shared, not changed
	_ = w.th.Handle(ctx, r)
	w.handling = false
	a := bytes.TrimSuffix(w.buf, []byte("\n"))
	var b strings.Builder
	b.Grow(len(r.Message) + len(a))
	b.WriteString(r.Message)
	b.Write(a)
	line := b.String()
	if cap(w.buf) > 64<<10 {
		w.buf = nil // a pooled writer keeps no large buffer
	}
	return line[:len(r.Message)], line[len(r.Message):]
}

func (h *taskHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	// Resolved now, as slog's text handler resolves them in WithAttrs: a
	// LogValuer's value is the one it had at With.
	r := resolved(attrs) // the same values for the kept line and the scheduler's logger
	return h.derive(h.next.WithAttrs(r), handlerOp{attrs: r})
}

// resolved is a copy of attrs with every LogValuer resolved, in groups too.
func resolved(attrs []slog.Attr) []slog.Attr {
	out := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		a.Value = a.Value.Resolve()
		if a.Value.Kind() == slog.KindGroup {
			a.Value = slog.GroupValue(resolved(a.Value.Group())...)
		}
		out[i] = a
	}
	return out
}

func (h *taskHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return h.derive(h.next.WithGroup(name), handlerOp{group: name})
}
