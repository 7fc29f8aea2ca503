package coordinator_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/coordinator/storetest"
	"github.com/batonhq/baton/worker"
)

// A task's own log (Logger): its lines are kept with the attempt that
// logged them, each attempt its own, in History, and reach WithLogger's
// logger with the task's attributes; a durable scheduler keeps them.
func TestTaskLogLinesAreKeptWithTheirAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out logBuffer
		mem := storetest.NewMemory()
		calls := 0
		step := coordinator.WithFunc("step", func(ctx context.Context, p []byte) error {
			calls++
			log := coordinator.Logger(ctx).With("payload", string(p))
			log.Info("fetching", "try", calls)
			if calls == 1 {
				log.Warn("upstream said no", "status", 503)
				return errors.New("503")
			}
			log.WithGroup("db").Info("stored", "rows", 3)
			return nil
		})
		s, err := coordinator.New(coordinator.WithStore(mem.Open()), coordinator.WithWorkers(1), step,
			coordinator.WithLogger(out.logger()))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Submit(coordinator.Task{ID: "fetch", Func: "step", Payload: []byte("p 1"),
			Retry: coordinator.RetryPolicy{MaxAttempts: 2}}); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		check := func(where string, h coordinator.History) {
			t.Helper()
			if len(h.Attempts) != 2 {
				t.Fatalf("%s: %d attempts; want 2", where, len(h.Attempts))
			}
			var got [2][]string
			for i, a := range h.Attempts {
				for _, l := range a.Logs {
					got[i] = append(got[i], fmt.Sprintf("%v %s %s", l.Level, l.Message, l.Attrs))
				}
			}
			want := [2][]string{
				{`INFO fetching payload="p 1" try=1`, `WARN upstream said no payload="p 1" status=503`},
				{`INFO fetching payload="p 1" try=2`, `INFO stored payload="p 1" db.rows=3`},
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: lines %q; want %q", where, got, want)
			}
		}
		h, _ := s.History("fetch")
		check("History", h)
		for _, line := range []string{`msg=fetching task=fetch attempt=1 run=1 payload="p 1" try=1`,
			`level=WARN msg="upstream said no" task=fetch attempt=1 run=1 payload="p 1" status=503`,
			`msg=stored task=fetch attempt=2 run=1 payload="p 1" db.rows=3`} {
			if !out.contains(line) {
				t.Errorf("WithLogger's output lacks %q:\n%s", line, out.String())
			}
		}
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		s2, err := coordinator.New(coordinator.WithStore(mem.Open()), coordinator.WithWorkers(1), step)
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Shutdown(context.Background())
		h, _ = s2.History("fetch")
		check("History after a restart", h)
	})
}

// WithTaskLogs bounds the lines kept of an attempt: the newest stay, the
// others are counted; a line longer than the bytes allowed is cut. A
// custom worker adds lines of its own (AppendLog).
func TestTaskLogIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		custom := workerFunc(func(ctx context.Context, j worker.Job) error {
			return coordinator.AppendLog(ctx, coordinator.LogLine{Level: slog.LevelInfo, Message: "from elsewhere"})
		})
		quiet := slog.New(slog.DiscardHandler)
		s := newScheduler(t, coordinator.WithTaskLogs(3, 64), coordinator.WithPool("remote", 1, custom), coordinator.WithLogger(quiet))
		err := s.Submit(
			coordinator.Task{ID: "chatty", Run: func(ctx context.Context) error {
				for i := range 10 {
					coordinator.Logger(ctx).Info(fmt.Sprint("line ", i))
				}
				return nil
			}},
			coordinator.Task{ID: "long", Run: func(ctx context.Context) error {
				coordinator.Logger(ctx).Info("a long one", "x", strings.Repeat("x", 100))
				return nil
			}},
			coordinator.Task{ID: "elsewhere", Pool: "remote", Payload: []byte("p")},
		)
		if err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		h, _ := s.History("chatty")
		if a := h.Attempts[0]; len(a.Logs) != 3 || a.LogsDropped != 7 || a.Logs[0].Message != "line 7" || a.Logs[2].Message != "line 9" {
			t.Errorf("lines %+v, %d dropped; want lines 7 to 9, 7 dropped", a.Logs, a.LogsDropped)
		}
		h, _ = s.History("long")
		if a := h.Attempts[0]; len(a.Logs) != 1 || len(a.Logs[0].Message)+len(a.Logs[0].Attrs) > 64 || !strings.HasSuffix(a.Logs[0].Attrs, "…") {
			t.Errorf("lines %+v; want the one line, cut to 64 bytes with a mark", a.Logs)
		}
		h, _ = s.History("elsewhere")
		if a := h.Attempts[0]; len(a.Logs) != 1 || a.Logs[0].Message != "from elsewhere" {
			t.Errorf("History(elsewhere) lines %+v; want the custom worker's", a.Logs)
		}
		if err := coordinator.AppendLog(context.Background(), coordinator.LogLine{}); !errors.Is(err, coordinator.ErrNoAttempt) {
			t.Errorf("AppendLog(no attempt) = %v; want ErrNoAttempt", err)
		}
	})
}

// A worker that runs a task's function elsewhere gives it a LogCollector's
// logger (ContextWithLogger): the function logs through Logger as in a
// local pool, the collector keeps the newest lines within its bounds and
// passes every record on, and the worker sends back the lines, the count
// of those it left out and its name (AppendLog, AddLogsDropped,
// SetWorker): History shows them as a local attempt's.
func TestLogCollectorCarriesARemoteFunctionsLines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var passed syncBuffer
		remoteFn := func(ctx context.Context) {
			for i := range 5 {
				coordinator.Logger(ctx).Info(fmt.Sprint("step ", i), "n", i)
			}
		}
		remote := workerFunc(func(ctx context.Context, j worker.Job) error {
			col := coordinator.NewLogCollector(2, 1<<10, slog.NewTextHandler(&passed, nil))
			remoteFn(coordinator.ContextWithLogger(context.Background(), col.Logger()))
			lines, dropped := col.Lines()
			if err := coordinator.AppendLog(ctx, lines...); err != nil {
				return err
			}
			if err := coordinator.AddLogsDropped(ctx, dropped); err != nil {
				return err
			}
			return coordinator.SetWorker(ctx, "host-7:41")
		})
		s := newScheduler(t, coordinator.WithPool("remote", 1, remote), coordinator.WithLogger(slog.New(slog.DiscardHandler)))
		if err := s.Submit(coordinator.Task{ID: "far", Pool: "remote", Payload: []byte("p")}); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		h, _ := s.History("far")
		a := h.Attempts[0]
		if len(a.Logs) != 2 || a.Logs[0].Message != "step 3" || a.Logs[1].Attrs != "n=4" || a.LogsDropped != 3 || a.Worker != "host-7:41" {
			t.Errorf("attempt %+v; want steps 3 and 4, 3 dropped, worker host-7:41", a)
		}
		if got := len(passed.lines()); got != 5 {
			t.Errorf("%d lines passed on to the worker's handler; want all 5", got)
		}
		if err := coordinator.AddLogsDropped(context.Background(), 1); !errors.Is(err, coordinator.ErrNoAttempt) {
			t.Errorf("AddLogsDropped(no attempt) = %v; want ErrNoAttempt", err)
		}
		if l := coordinator.Logger(context.Background()); l != slog.Default() {
			t.Error("Logger(a context without one) is not slog.Default()")
		}
		defer func() {
			if recover() == nil {
				t.Error("NewLogCollector(1, 0) did not panic")
			}
		}()
		coordinator.NewLogCollector(1, 0, nil)
	})
}

// A count of dropped lines too large for the store stops at
// math.MaxInt32 instead of making the store unreadable, and a line
// appended without a time keeps the zero time across a restart (a
// worker's AddLogsDropped of 1<<31 made New fail with ErrStoreCorrupt;
// the zero time came back as 1754).
func TestTaskLogExtremesSurviveARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := storetest.NewMemory()
		f := coordinator.WithFunc("f", func(ctx context.Context, _ []byte) error {
			if err := coordinator.AppendLog(ctx, coordinator.LogLine{Message: "no time"},
				coordinator.LogLine{Time: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), Message: "far"}); err != nil {
				return err
			}
			if err := coordinator.AddLogsDropped(ctx, 1<<31); err != nil {
				return err
			}
			return coordinator.AddLogsDropped(ctx, 1<<40)
		})
		s, err := coordinator.New(coordinator.WithStore(mem.Open()), coordinator.WithWorkers(1), f)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Submit(coordinator.Task{ID: "t", Func: "f"}); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		s2, err := coordinator.New(coordinator.WithStore(mem.Open()), coordinator.WithWorkers(1), f)
		if err != nil {
			t.Fatalf("New after the restart = %v", err)
		}
		defer s2.Shutdown(context.Background())
		h, _ := s2.History("t")
		a := h.Attempts[0]
		if a.LogsDropped != math.MaxInt32 || len(a.Logs) != 2 || !a.Logs[0].Time.IsZero() || a.Logs[1].Time.Year() < 2262 {
			t.Errorf("after a restart: %d dropped, lines %+v; want MaxInt32, the zero time kept, the far one the latest storable", a.LogsDropped, a.Logs)
		}
	})
}

// A remote pool names the worker of every attempt (SetWorker): an attempt
// that succeeded with nothing more to say still costs a durable store no
// history record (its state's last attempt holds the name), and the name
// comes back after a restart.
func TestWorkerNameWritesNoHistoryRecord(t *testing.T) {
	records := map[bool]int{}
	for _, named := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			mem := storetest.NewMemory()
			pool := workerFunc(func(ctx context.Context, j worker.Job) error {
				if named {
					return coordinator.SetWorker(ctx, "host:1")
				}
				return nil
			})
			s, err := coordinator.New(coordinator.WithStore(mem.Open()), coordinator.WithPool("remote", 1, pool))
			if err != nil {
				t.Fatal(err)
			}
			for i := range 50 {
				if err := s.Submit(coordinator.Task{ID: fmt.Sprint(i), Pool: "remote", Payload: []byte("p")}); err != nil {
					t.Fatal(err)
				}
			}
			settle(t, s)
			if err := s.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			records[named] = mem.Len()
			s2, err := coordinator.New(coordinator.WithStore(mem.Open()), coordinator.WithPool("remote", 1, pool))
			if err != nil {
				t.Fatal(err)
			}
			defer s2.Shutdown(context.Background())
			if h, _ := s2.History("7"); named && h.Attempts[0].Worker != "host:1" {
				t.Errorf("History(7) after a restart: worker %q; want host:1", h.Attempts[0].Worker)
			}
		})
	}
	if records[true] != records[false] {
		t.Errorf("%d records with worker names, %d without; want as many", records[true], records[false])
	}
}

// A line logged after the attempt's function returned (by a goroutine it
// left running, with the logger it took) reaches the scheduler's logger
// only, never the attempt's kept log, however soon the coordinator reads
// that log; AppendLog and AddLogsDropped then say ErrNoAttempt. The late
// line comes while the next task runs on the same worker, before the
// worker reports the first one's end (which it did in about two runs of
// five before the log was closed with the function's return).
func TestLineLoggedAfterTheFunctionReturnedIsNotKept(t *testing.T) {
	for round := range 20 {
		synctest.Test(t, func(t *testing.T) {
			var out logBuffer
			s, err := coordinator.New(coordinator.WithWorkers(1), coordinator.WithLogger(out.logger()))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Shutdown(context.Background())
			late, logged := make(chan struct{}), make(chan struct{})
			var appendErr, droppedErr error
			if err := s.Submit(
				coordinator.Task{ID: "a", Run: func(ctx context.Context) error {
					log := coordinator.Logger(ctx)
					log.Info("during")
					go func() {
						<-late
						log.Info("after return")
						appendErr = coordinator.AppendLog(ctx, coordinator.LogLine{Message: "appended after return"})
						droppedErr = coordinator.AddLogsDropped(ctx, 3)
						close(logged)
					}()
					return nil
				}},
				coordinator.Task{ID: "b", Run: func(ctx context.Context) error { close(late); <-logged; return nil }},
			); err != nil {
				t.Fatal(err)
			}
			if err := s.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			h, _ := s.History("a")
			if len(h.Attempts) != 1 {
				t.Fatalf("round %d: History(a) = %+v; want one attempt", round, h)
			}
			a := h.Attempts[0]
			if len(a.Logs) != 1 || a.Logs[0].Message != "during" || a.LogsDropped != 0 {
				t.Errorf("round %d: a's kept log = %+v, %d dropped; want only the line logged during its attempt", round, a.Logs, a.LogsDropped)
			}
			if !errors.Is(appendErr, coordinator.ErrNoAttempt) || !errors.Is(droppedErr, coordinator.ErrNoAttempt) {
				t.Errorf("round %d: after a returned, AppendLog = %v, AddLogsDropped = %v; want ErrNoAttempt", round, appendErr, droppedErr)
			}
			if !out.contains("after return") {
				t.Errorf("round %d: the late line did not reach the scheduler's logger:\n%s", round, out.String())
			}
		})
	}
}

// A logger first asked for after the function returned, by a goroutine it
// left running, reaches the scheduler's logger with the task's attributes
// (not slog.Default) if the function had touched its context, even once
// retention forgot the task and another task took its record; the line is
// not kept with the attempt.
func TestLoggerAskedForAfterTheFunctionReturned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out, dflt logBuffer
		old := slog.Default()
		slog.SetDefault(dflt.logger())
		defer slog.SetDefault(old)
		s, err := coordinator.New(coordinator.WithWorkers(1), coordinator.WithLogger(out.logger()), coordinator.WithRetention(0))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Shutdown(context.Background())
		late, logged := make(chan struct{}), make(chan struct{})
		if err := s.Submit(coordinator.Task{ID: "late-a", Run: func(ctx context.Context) error {
			_ = ctx.Err() // touched: its context is never reused
			go func() {
				<-late
				coordinator.Logger(ctx).Info("logged late")
				close(logged)
			}()
			return nil
		}}); err != nil {
			t.Fatal(err)
		}
		if err := s.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		// Forgotten; its record goes to the next task.
		if err := s.Submit(coordinator.Task{ID: "other", Run: func(context.Context) error { return nil }}); err != nil {
			t.Fatal(err)
		}
		if err := s.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		close(late)
		<-logged
		if !out.contains("logged late") || !out.contains("task=late-a") {
			t.Errorf("the scheduler's logger got:\n%s\nwant the late line with task=late-a", out.String())
		}
		if dflt.contains("logged late") {
			t.Errorf("slog.Default got the late line:\n%s", dflt.String())
		}
	})
}

// LogLine.Attrs is what slog's text handler writes for the line's
// attributes (its time, level and message left out): times, durations,
// byte slices, errors, keys that need quoting, groups and inline groups,
// and the attributes and groups of With and WithGroup, in their order.
func TestLogLineAttrsAreTheTextHandlers(t *testing.T) {
	when := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	attrs := []any{"when", when, "err", errors.New("x y"), "d", 1500 * time.Millisecond, "b", []byte("hi"),
		"key with space", 1, "f", 1.5, "q", `say "hi"`, "empty", "", "level", "mine", "msg", "also mine",
		slog.Group("", slog.Int("inl", 2)), slog.Group("g", slog.String("a", "b c"), slog.Group("h", "n", 3)), slog.Group("none")}
	for _, tc := range []struct {
		name  string
		chain func(*slog.Logger) *slog.Logger
	}{
		{"plain", func(l *slog.Logger) *slog.Logger { return l }},
		{"with", func(l *slog.Logger) *slog.Logger { return l.With("req", "r 1", "level", 7) }},
		{"group", func(l *slog.Logger) *slog.Logger { return l.WithGroup("db") }},
		{"with-group-with", func(l *slog.Logger) *slog.Logger {
			return l.With("a", 1).WithGroup("outer").With("b", when).WithGroup("inner")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScheduler(t, coordinator.WithLogger(slog.New(slog.DiscardHandler)))
				err := s.Submit(coordinator.Task{ID: "a", Run: func(ctx context.Context) error {
					tc.chain(coordinator.Logger(ctx)).Info("m", attrs...)
					return nil
				}})
				if err != nil {
					t.Fatal(err)
				}
				settle(t, s)
				h, _ := s.History("a")
				got := h.Attempts[0].Logs[0].Attrs
				var buf strings.Builder
				text := slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(g []string, a slog.Attr) slog.Attr {
					if len(g) == 0 && (a.Key == slog.TimeKey || a.Key == slog.LevelKey || a.Key == slog.MessageKey) && a.Value.String() != "mine" && a.Value.String() != "also mine" && a.Value.String() != "7" {
						return slog.Attr{}
					}
					return a
				}})
				tc.chain(slog.New(text)).Info("m", attrs...)
				if want := strings.TrimSpace(buf.String()); got != want {
					t.Errorf("Attrs:\n got  %s\n want %s", got, want)
				}
			})
		})
	}
}

// Lines logged at once from several goroutines through one logger, with
// and without WithAttrs and WithGroup (whose text writer is made once and
// shared), each keep their own attributes.
func TestLogLinesLoggedAtOnceKeepTheirOwnAttrs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const goroutines, lines = 8, 40
		s := newScheduler(t, coordinator.WithLogger(slog.New(slog.DiscardHandler)), coordinator.WithTaskLogs(4*goroutines*lines, 1<<20))
		err := s.Submit(coordinator.Task{ID: "a", Run: func(ctx context.Context) error {
			plain := coordinator.Logger(ctx)
			with := plain.With("req", "r 1").WithGroup("g")
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for j := range lines {
						plain.Info("p", "g", g, "j", j)
						with.Info("w", "g", g, "j", j)
					}
				})
			}
			wg.Wait()
			return nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		h, _ := s.History("a")
		logs := h.Attempts[0].Logs
		if len(logs) != 2*goroutines*lines {
			t.Fatalf("%d lines kept, want %d", len(logs), 2*goroutines*lines)
		}
		seen := map[string]int{}
		for _, l := range logs {
			var g, j int
			var err error
			switch l.Message {
			case "p":
				_, err = fmt.Sscanf(l.Attrs, "g=%d j=%d", &g, &j)
			case "w":
				_, err = fmt.Sscanf(l.Attrs, "req=\"r 1\" g.g=%d g.j=%d", &g, &j)
			}
			if err != nil || (l.Message == "p" && l.Attrs != fmt.Sprintf("g=%d j=%d", g, j)) ||
				(l.Message == "w" && l.Attrs != fmt.Sprintf("req=\"r 1\" g.g=%d g.j=%d", g, j)) {
				t.Fatalf("line %q: Attrs %q", l.Message, l.Attrs)
			}
			seen[fmt.Sprint(l.Message, g, j)]++
		}
		if len(seen) != 2*goroutines*lines {
			t.Errorf("%d distinct lines, want %d", len(seen), 2*goroutines*lines)
		}
	})
}

// BenchmarkLogLine: one line through a task's logger (the handler
// Logger(ctx) and LogCollector.Logger share), without and with WithAttrs
// and WithGroup, beside the same line through slog's text handler alone.
func BenchmarkLogLine(b *testing.B) {
	for _, tc := range []struct {
		name   string
		logger func() *slog.Logger
	}{
		{"task", func() *slog.Logger { return coordinator.NewLogCollector(100, 1<<20, nil).Logger() }},
		{"task-with", func() *slog.Logger {
			return coordinator.NewLogCollector(100, 1<<20, nil).Logger().With("req", 42, "user", "alice").WithGroup("g")
		}},
		{"text", func() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }},
		{"text-with", func() *slog.Logger {
			return slog.New(slog.NewTextHandler(io.Discard, nil)).With("req", 42, "user", "alice").WithGroup("g")
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			l := tc.logger()
			b.ReportAllocs()
			for b.Loop() {
				l.Info("processed a row", "k", 1, "s", "some string", "ok", true)
			}
		})
	}
}

// LogLine.String is one line, whatever the message holds; a message that
// prints as it is stays as it is.
func TestLogLineStringIsOneLine(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for msg, want := range map[string]string{
		"fetched 3 rows": "2026-01-02T03:04:05Z INFO fetched 3 rows k=v",
		"two\nlines":     `2026-01-02T03:04:05Z INFO "two\nlines" k=v`,
		"tab\there":      `2026-01-02T03:04:05Z INFO "tab\there" k=v`,
		"héllo wörld":    "2026-01-02T03:04:05Z INFO héllo wörld k=v",
	} {
		if got := (coordinator.LogLine{Time: at, Level: slog.LevelInfo, Message: msg, Attrs: "k=v"}).String(); got != want {
			t.Errorf("String of %q = %q, want %q", msg, got, want)
		}
	}
}

// logCounter is a LogValuer whose value changes.
type logCounter struct{ n *atomic.Int32 }

func (c logCounter) LogValue() slog.Value { return slog.IntValue(int(c.n.Load())) }

// logAsked is a LogValuer whose value is how often it was resolved.
type logAsked struct{ n *atomic.Int32 }

func (c logAsked) LogValue() slog.Value { return slog.IntValue(int(c.n.Add(1))) }

// reentrant is a LogValuer that logs through the logger it is logged by,
// as a value computed on demand may (a cache miss, say).
type reentrant struct{ l *slog.Logger }

func (z reentrant) LogValue() slog.Value {
	z.l.Debug("computing v")
	return slog.StringValue("computed")
}

// A With attribute's LogValuer is resolved at With, as slog's text handler
// resolves it: every line through that logger says the value it had then,
// in the task's lines as in the scheduler's logger, resolved once for
// both. A LogValuer that logs through the same derived logger while its
// line is written does not deadlock (the writer of a derived logger was
// once held under a lock across the line).
func TestTaskLoggerLogValuers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		s := newScheduler(t, coordinator.WithLogger(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))))
		var n atomic.Int32
		if err := s.Submit(coordinator.Task{ID: "t", Run: func(ctx context.Context) error {
			l := coordinator.Logger(ctx).With("n", logCounter{&n})
			n.Store(1)
			l.Info("a")
			n.Store(2)
			l.Info("b")
			d := coordinator.Logger(ctx).With("job", "j1")
			d.Info("outer", "v", reentrant{d})
			var resolves atomic.Int32 // a LogValuer whose value is how often it was asked
			coordinator.Logger(ctx).With("asked", logAsked{&resolves}).Info("c")
			return nil
		}}); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		h, _ := s.History("t")
		var got []string
		for _, l := range h.Attempts[0].Logs {
			got = append(got, l.Message+" "+l.Attrs)
		}
		// The task's handler and the scheduler's each resolve v: it logs
		// twice, once as the line's Attrs are written, once after.
		want := []string{"a n=0", "b n=0", "computing v job=j1", "outer job=j1 v=computed", "computing v job=j1", "c asked=1"}
		if !slices.Equal(got, want) {
			t.Errorf("lines kept: %q, want %q", got, want)
		}
		for _, line := range []string{`msg=a task=t attempt=1 run=1 n=0`, `msg=b task=t attempt=1 run=1 n=0`, `msg=outer task=t attempt=1 run=1 job=j1 v=computed`, `msg=c task=t attempt=1 run=1 asked=1`} {
			if !strings.Contains(out.String(), line) {
				t.Errorf("the scheduler's logger lacks %q:\n%s", line, out.String())
			}
		}
	})
}

// A line kept is a copy of what was logged: a short line cut from a large
// string (a file read whole, then split), by Logger or AppendLog, or a
// line whose large attribute is cut to fit, keeps no more than its own
// bytes alive.
func TestKeptLinesHoldNoLargerString(t *testing.T) {
	const tasks, size = 8, 4 << 20
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	for _, how := range []string{"Logger", "AppendLog", "cut attribute"} {
		t.Run(how, func(t *testing.T) {
			s := newScheduler(t, coordinator.WithWorkers(1), coordinator.WithLogger(slog.New(slog.DiscardHandler)))
			before := heap()
			for i := range tasks {
				err := s.Submit(coordinator.Task{ID: fmt.Sprint(how, i), Run: func(ctx context.Context) error {
					big := strings.Repeat("x", size)
					switch how {
					case "Logger":
						coordinator.Logger(ctx).Info(big[:10])
					case "AppendLog":
						return coordinator.AppendLog(ctx, coordinator.LogLine{Message: big[:10], Attrs: big[size-10:]})
					default:
						coordinator.Logger(ctx).Info("m", "k", big)
					}
					return nil
				}})
				if err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			if h, _ := s.History(fmt.Sprint(how, 0)); len(h.Attempts) != 1 || len(h.Attempts[0].Logs) != 1 {
				t.Fatalf("History = %+v; want one attempt with its line", h)
			}
			if grown := int64(heap()) - int64(before); grown > tasks*size/4 {
				t.Errorf("the heap grew %d bytes for %d kept lines of at most 16 KiB; want no %d-byte string kept alive by each", grown, tasks, size)
			}
		})
	}
}

// History's lines are the caller's own: changing them changes neither a
// later History nor what a durable scheduler writes.
func TestHistoryLinesAreACopy(t *testing.T) {
	s := newScheduler(t, coordinator.WithWorkers(1))
	if err := s.Submit(coordinator.Task{ID: "a", Run: func(ctx context.Context) error {
		coordinator.Logger(ctx).Info("secret=hunter2")
		return errors.New("failed")
	}}); err != nil {
		t.Fatal(err)
	}
	_ = s.Wait(context.Background())
	h, _ := s.History("a")
	if len(h.Attempts) != 1 || len(h.Attempts[0].Logs) != 1 {
		t.Fatalf("History(a) = %+v; want one attempt with one line", h)
	}
	h.Attempts[0].Logs[0].Message = "changed by the caller"
	again, _ := s.History("a")
	if got := again.Attempts[0].Logs[0].Message; got != "secret=hunter2" {
		t.Errorf("History(a) after the caller changed its copy: line %q; want %q", got, "secret=hunter2")
	}
}

// Goroutines a function left behind may ask for Logger while the function
// returns and retention gives the task's record to another task: the
// logger reads the task's ID only while the attempt runs (the race
// detector found it reading the spec the coordinator was writing).
func TestLoggerFromGoroutinesLeftBehindWhileRecordsAreReused(t *testing.T) {
	s := newScheduler(t, coordinator.WithWorkers(2), coordinator.WithRetention(0), coordinator.WithLogger(slog.New(slog.DiscardHandler)))
	ctx := context.Background()
	var left sync.WaitGroup
	for round := range 200 {
		tasks := make([]coordinator.Task, 4)
		for i := range tasks {
			tasks[i] = coordinator.Task{ID: fmt.Sprintf("r%d-%d", round, i), Run: func(ctx context.Context) error {
				_ = ctx.Err() // touched: its context outlives the attempt
				if i == 0 {
					left.Go(func() {
						for range 200 {
							_ = coordinator.Logger(ctx)
						}
					})
				}
				return nil
			}}
		}
		b, err := s.SubmitBatch(ctx, tasks...)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	left.Wait()
}
