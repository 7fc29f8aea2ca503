package coordinator_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/batonhq/baton/coordinator"
	"github.com/benbjohnson/clock"
)

// syncBuffer is a bytes.Buffer safe for the log goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Split(strings.TrimSpace(b.b.String()), "\n")
}

// logGraph runs a graph with a success, a retry, a failure, a skip and a
// cancel on a mock clock, with a logger at level, and returns its lines
// after Shutdown, sorted.
func logGraph(t *testing.T, level slog.Leveler) []string {
	t.Helper()
	var buf syncBuffer
	clk := clock.NewMock()
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level}))
	s, err := coordinator.New(coordinator.WithClock(clk), coordinator.WithWorkers(1), coordinator.WithLogger(logger),
		coordinator.WithPool("io", 1, echo{}))
	if err != nil {
		t.Fatal(err)
	}
	tries := 0
	err = s.Submit(
		coordinator.Task{ID: "fetch", Pool: "io", Run: func(context.Context) error { return nil }},
		coordinator.Task{ID: "flaky", Run: func(context.Context) error {
			if tries++; tries == 1 {
				return errors.New("connection reset")
			}
			return nil
		}, Retry: coordinator.RetryPolicy{MaxAttempts: 2}},
		coordinator.Task{ID: "lint", Run: func(context.Context) error { return errors.New("style") }},
		coordinator.Task{ID: "report", Deps: []string{"lint"}, Run: func(context.Context) error { return nil }},
		coordinator.Task{ID: "nightly", Delay: 1 << 40, Run: func(context.Context) error { return nil }},
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WaitTasks(context.Background(), "fetch", "flaky", "lint", "report"); !errors.As(err, new(*coordinator.TasksError)) {
		t.Fatalf("WaitTasks = %v; want a *TasksError for lint and report", err)
	}
	if !s.Cancel("nightly") {
		t.Fatal("Cancel(nightly) = false")
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	lines := buf.lines()
	if len(lines) == 1 && lines[0] == "" {
		return nil
	}
	slices.Sort(lines)
	return lines
}

// With a logger at Debug, every event of the task's life is a line with
// the documented messages and keys, at the event's (mock clock) time.
func TestTaskLogLines(t *testing.T) {
	got := logGraph(t, slog.LevelDebug)
	want := []string{
		`time=1970-01-01T00:00:00.000Z level=DEBUG msg="task started" task=fetch pool=io attempt=1 run=1`,
		`time=1970-01-01T00:00:00.000Z level=DEBUG msg="task started" task=flaky attempt=1 run=1`,
		`time=1970-01-01T00:00:00.000Z level=DEBUG msg="task started" task=flaky attempt=2 run=1`,
		`time=1970-01-01T00:00:00.000Z level=DEBUG msg="task started" task=lint attempt=1 run=1`,
		`time=1970-01-01T00:00:00.000Z level=DEBUG msg="task succeeded" task=fetch pool=io attempt=1 run=1`,
		`time=1970-01-01T00:00:00.000Z level=DEBUG msg="task succeeded" task=flaky attempt=2 run=1`,
		`time=1970-01-01T00:00:00.000Z level=ERROR msg="task failed" task=lint attempt=1 run=1 error=style`,
		`time=1970-01-01T00:00:00.000Z level=INFO msg="task cancelled" task=nightly cause="coordinator: task cancelled"`,
		`time=1970-01-01T00:00:00.000Z level=INFO msg="task skipped" task=report cause=lint`,
		`time=1970-01-01T00:00:00.000Z level=WARN msg="task retrying" task=flaky attempt=1 run=1 error="connection reset" wait=0s`,
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("log lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// At Warn, only the retry and the failure are logged; with every level
// disabled, nothing.
func TestTaskLogLevels(t *testing.T) {
	got := logGraph(t, slog.LevelWarn)
	if len(got) != 2 || !strings.Contains(got[0], `msg="task failed"`) || !strings.Contains(got[1], `msg="task retrying"`) {
		t.Errorf("at Warn: %q; want the failure and the retry", got)
	}
	if got := logGraph(t, slog.LevelError+1); len(got) != 0 {
		t.Errorf("with every level disabled: %q; want nothing", got)
	}
}

// The level is asked again as the scheduler runs: lowering a LevelVar
// turns the lines on for events decided afterwards.
func TestTaskLogLevelChanges(t *testing.T) {
	var buf syncBuffer
	var level slog.LevelVar
	level.Set(slog.LevelError + 1)
	s := newScheduler(t, coordinator.WithWorkers(1),
		coordinator.WithLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: &level}))))
	fail := func(context.Context) error { return errors.New("no") }
	if err := s.Submit(coordinator.Task{ID: "quiet", Run: fail}); err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	level.Set(slog.LevelError)
	if err := s.Submit(coordinator.Task{ID: "loud", Run: fail}); err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := buf.lines()
	if len(got) != 1 || !strings.Contains(got[0], "task=loud") {
		t.Errorf("lines = %q; want only loud's failure", got)
	}
}

// pickyHandler panics on the lines of failures and records the others.
type pickyHandler struct {
	mu   sync.Mutex
	msgs []string
}

func (h *pickyHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *pickyHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *pickyHandler) WithGroup(string) slog.Handler            { return h }
func (h *pickyHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == coordinator.LogMsgFailed || r.Level >= slog.LevelError {
		panic("handler bug")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, r.Message)
	return nil
}

func (h *pickyHandler) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.msgs)
}

// A handler that panics loses the line it panicked on, never the process
// and never the lines after it; so does the report of a subscriber's panic.
func TestTaskLogHandlerPanics(t *testing.T) {
	h := &pickyHandler{}
	s := newScheduler(t, coordinator.WithLogger(slog.New(h)))
	s.Subscribe(func(coordinator.Event) { panic("subscriber bug") }) // its report, at Error, panics too
	if err := s.Submit(coordinator.Task{ID: "bad", Run: func(context.Context) error { return errors.New("boom") }}); err != nil {
		t.Fatalf("Submit = %v", err)
	}
	if err := s.Wait(context.Background()); err != nil {
		t.Fatalf("Wait = %v", err)
	}
	if err := s.Submit(coordinator.Task{ID: "good", Run: ok}); err != nil {
		t.Fatalf("Submit = %v", err)
	}
	if err := s.Wait(context.Background()); err != nil {
		t.Fatalf("Wait = %v", err)
	}
	if err := s.Shutdown(context.Background()); err != nil { // waits for the last line
		t.Fatalf("Shutdown = %v", err)
	}
	if got := h.seen(); !slices.Contains(got, coordinator.LogMsgSucceeded) {
		t.Fatalf("lines after the panic: %v; want good's success", got)
	}
}
