package boltstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/boltstore"
	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/coordinator/storetest"
	"github.com/batonhq/baton/worker"
	"github.com/benbjohnson/clock"
	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		crashChild() // the crash test's child process: never returns
	}
	if os.Getenv(poisonChildEnv) != "" {
		poisonChild() // TestPoisonTaskStopsCrashing's child process: never returns
	}
	goleak.VerifyTestMain(m)
}

func dbPath(t *testing.T) string { return filepath.Join(t.TempDir(), "baton.db") }

func open(t *testing.T, path string, opts ...coordinator.Option) *coordinator.Scheduler {
	t.Helper()
	s, err := coordinator.New(append([]coordinator.Option{coordinator.WithStore(boltstore.New(path))}, opts...)...)
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	return s
}

func shutdown(t *testing.T, s *coordinator.Scheduler) {
	t.Helper()
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
}

func wait(t *testing.T, s *coordinator.Scheduler) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Wait(ctx); err != nil {
		t.Fatalf("Wait = %v", err)
	}
}

func info(t *testing.T, s *coordinator.Scheduler, id string) coordinator.TaskInfo {
	t.Helper()
	ti, ok := s.Info(id)
	if !ok {
		t.Fatalf("Info(%q): unknown", id)
	}
	return ti
}

// counter counts calls per payload.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) add(p []byte) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[string(p)]++
	return c.n[string(p)]
}

func (c *counter) get(p string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[p]
}

// A scheduler shut down mid-graph is finished by the next one on the same
// file: what succeeded keeps its result and does not run again, the task
// whose attempt Shutdown stopped runs again without that attempt counting,
// and the rest runs.
func TestShutdownThenRestartFinishesGraph(t *testing.T) {
	path := dbPath(t)
	var runs counter
	started := make(chan struct{})
	step := func(ctx context.Context, p []byte) error {
		runs.add(p)
		if err := coordinator.SetResult(ctx, append([]byte("out:"), p...)); err != nil {
			return err
		}
		return nil
	}
	block := func(ctx context.Context, p []byte) error {
		runs.add(p)
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}
	s := open(t, path, coordinator.WithFunc("step", step), coordinator.WithFunc("block", block))
	if err := s.Submit(
		coordinator.Task{ID: "a", Func: "step", Payload: []byte("a")},
		coordinator.Task{ID: "b", Func: "block", Payload: []byte("b"), Deps: []string{"a"}},
		coordinator.Task{ID: "c", Func: "step", Payload: []byte("c"), Deps: []string{"b"}},
	); err != nil {
		t.Fatal(err)
	}
	<-started
	shutdown(t, s)

	done := func(ctx context.Context, p []byte) error { runs.add(p); return nil }
	s = open(t, path, coordinator.WithFunc("step", step), coordinator.WithFunc("block", done))
	defer shutdown(t, s)
	wait(t, s)
	for _, id := range []string{"a", "b", "c"} {
		if ti := info(t, s, id); ti.Status != coordinator.Succeeded || ti.Attempts != 1 {
			t.Errorf("%s: %v after %d attempts; want succeeded after 1", id, ti.Status, ti.Attempts)
		}
	}
	if got := runs.get("a"); got != 1 {
		t.Errorf("a ran %d times; want 1", got)
	}
	if got := runs.get("b"); got != 2 {
		t.Errorf("b ran %d times; want 2 (stopped by Shutdown, then again)", got)
	}
	if r, _ := info(t, s, "a").Result.([]byte); string(r) != "out:a" {
		t.Errorf("a's result = %q; want out:a", r)
	}
}

// Everything a scheduler decided is there after a restart: statuses,
// attempts, errors, results, skip causes, cancels.
func TestRestoreFinalStates(t *testing.T) {
	path := dbPath(t)
	fail := func(ctx context.Context, p []byte) error { return errors.New("boom: " + string(p)) }
	ok := func(ctx context.Context, p []byte) error { return coordinator.SetResult(ctx, p) }
	opts := []coordinator.Option{coordinator.WithFunc("fail", fail), coordinator.WithFunc("ok", ok)}
	s := open(t, path, opts...)
	if err := s.Submit(
		coordinator.Task{ID: "ok", Func: "ok", Payload: []byte("yes")},
		coordinator.Task{ID: "fail", Func: "fail", Payload: []byte("x"), Retry: coordinator.RetryPolicy{MaxAttempts: 2}},
		coordinator.Task{ID: "skipped", Func: "ok", Deps: []string{"fail"}},
		coordinator.Task{ID: "cleanup", Func: "ok", Deps: []string{"fail"}, When: coordinator.AllDone},
		coordinator.Task{ID: "later", Func: "ok", Delay: time.Hour},
		coordinator.Task{ID: "after-later", Func: "ok", Deps: []string{"later"}},
	); err != nil {
		t.Fatal(err)
	}
	if !s.Cancel("later") {
		t.Fatal("Cancel(later) = false")
	}
	wait(t, s)
	shutdown(t, s)

	s = open(t, path, opts...)
	defer shutdown(t, s)
	want := map[string]coordinator.TaskInfo{
		"ok":          {Status: coordinator.Succeeded, Attempts: 1, Runs: 1, Result: []byte("yes")},
		"fail":        {Status: coordinator.Failed, Attempts: 2},
		"skipped":     {Status: coordinator.Skipped, Cause: "fail"},
		"cleanup":     {Status: coordinator.Succeeded, Attempts: 1, Runs: 1},
		"later":       {Status: coordinator.Cancelled},
		"after-later": {Status: coordinator.Skipped, Cause: "later"},
	}
	for id, w := range want {
		ti := info(t, s, id)
		if ti.Status != w.Status || ti.Attempts != w.Attempts || ti.Runs != w.Runs || ti.Cause != w.Cause {
			t.Errorf("%s = %+v; want %+v", id, ti, w)
		}
		if wr, _ := w.Result.([]byte); wr != nil {
			if r, _ := ti.Result.([]byte); string(r) != string(wr) {
				t.Errorf("%s result = %q; want %q", id, r, wr)
			}
		}
	}
	if err := info(t, s, "fail").Err; err == nil || err.Error() != "boom: x" {
		t.Errorf("fail's error = %v; want boom: x", err)
	}
	if err := info(t, s, "later").Err; !errors.Is(err, coordinator.ErrCancelled) {
		t.Errorf("later's error = %v; want ErrCancelled", err)
	}
	// The restored graph takes new tasks that depend on it.
	if err := s.Submit(coordinator.Task{ID: "next", Func: "ok", Deps: []string{"ok"}}); err != nil {
		t.Fatal(err)
	}
	wait(t, s)
	if ti := info(t, s, "next"); ti.Status != coordinator.Succeeded {
		t.Errorf("next = %v", ti.Status)
	}
}

// A delay, a backoff and a series resume at their original due times.
func TestRestoreResumesAtDueTimes(t *testing.T) {
	path := dbPath(t)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	armed := make(chan time.Time, 100)
	newMock := func(at time.Time) *clock.Mock {
		m := clock.NewMock()
		m.Set(at)
		return m
	}
	var runs counter
	fail := func(ctx context.Context, p []byte) error { runs.add(p); return errors.New("again") }
	ok := func(ctx context.Context, p []byte) error { runs.add(p); return nil }
	opts := func(m *clock.Mock) []coordinator.Option {
		return []coordinator.Option{coordinator.WithClock(m), coordinator.WithFunc("fail", fail), coordinator.WithFunc("ok", ok),
			coordinator.WithTimerArmed(func(due time.Time) { armed <- due })}
	}
	m := newMock(start)
	s := open(t, path, opts(m)...)
	if err := s.Submit(
		coordinator.Task{ID: "delayed", Func: "ok", Payload: []byte("delayed"), Delay: 3 * time.Hour},
		coordinator.Task{ID: "backoff", Func: "fail", Payload: []byte("backoff"), Retry: coordinator.RetryPolicy{MaxAttempts: 2, BaseDelay: 2 * time.Hour}},
	); err != nil {
		t.Fatal(err)
	}
	waitArmed(t, armed, start.Add(2*time.Hour)) // backoff's first attempt failed
	shutdown(t, s)
	drain(armed)

	// One hour later: both still wait, each for its original time.
	m = newMock(start.Add(time.Hour))
	s = open(t, path, opts(m)...)
	waitArmed(t, armed, start.Add(2*time.Hour))
	m.Set(start.Add(2 * time.Hour))
	waitArmed(t, armed, start.Add(3*time.Hour))
	m.Set(start.Add(3 * time.Hour))
	wait(t, s)
	if ti := info(t, s, "backoff"); ti.Status != coordinator.Failed || ti.Attempts != 2 {
		t.Errorf("backoff = %v after %d attempts; want failed after 2", ti.Status, ti.Attempts)
	}
	if ti := info(t, s, "delayed"); ti.Status != coordinator.Succeeded {
		t.Errorf("delayed = %v", ti.Status)
	}
	if runs.get("backoff") != 2 || runs.get("delayed") != 1 {
		t.Errorf("runs = %v", runs.n)
	}
	shutdown(t, s)
}

// A series resumes after a restart under its missed-run policy: SkipMissed
// drops the starts missed while no process ran, RunEachMissed runs them.
func TestRestoreSeriesMissedRuns(t *testing.T) {
	for _, tc := range []struct {
		cron   string // "": Every hour
		missed coordinator.Missed
		runs   int // runs after the restart, at once
	}{
		{"", coordinator.SkipMissed, 0},
		{"", coordinator.RunEachMissed, 3},
		{"0 * * * *", coordinator.SkipMissed, 0},
		{"0 * * * *", coordinator.RunOnceForMissed, 1},
		{"", coordinator.RunOnceForMissed, 1},
	} {
		t.Run(tc.cron+tc.missed.String(), func(t *testing.T) {
			path := dbPath(t)
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			armed := make(chan time.Time, 100)
			var runs atomic.Int32
			tick := func(ctx context.Context, p []byte) error { runs.Add(1); return nil }
			opts := func(m *clock.Mock) []coordinator.Option {
				return []coordinator.Option{coordinator.WithClock(m), coordinator.WithFunc("tick", tick),
					coordinator.WithTimerArmed(func(due time.Time) { armed <- due })}
			}
			m := clock.NewMock()
			m.Set(start)
			task := coordinator.Task{ID: "series", Func: "tick", Every: time.Hour, Times: 10, Missed: tc.missed}
			if tc.cron != "" {
				// A cron series starts at its first start after submission:
				// submitted a second before start, it runs at start.
				task.Every, task.Cron = 0, tc.cron
				m.Set(start.Add(-time.Second))
			}
			s := open(t, path, opts(m)...)
			if err := s.Submit(task); err != nil {
				t.Fatal(err)
			}
			if tc.cron != "" {
				waitArmed(t, armed, start)
				m.Set(start)
			}
			waitArmed(t, armed, start.Add(time.Hour)) // run 1 done at start
			shutdown(t, s)
			drain(armed)
			// Down from 0:00 to 3:30: starts at 1:00, 2:00 and 3:00 missed.
			m = clock.NewMock()
			m.Set(start.Add(3*time.Hour + 30*time.Minute))
			s = open(t, path, opts(m)...)
			defer shutdown(t, s)
			waitArmed(t, armed, start.Add(4*time.Hour))
			if got := int(runs.Load()) - 1; got != tc.runs {
				t.Errorf("runs after the restart before 4:00 = %d; want %d", got, tc.runs)
			}
			if ti := info(t, s, "series"); ti.Runs != 1+tc.runs {
				t.Errorf("Runs = %d; want %d", ti.Runs, 1+tc.runs)
			}
		})
	}
}

func waitArmed(t *testing.T, armed <-chan time.Time, want time.Time) {
	t.Helper()
	deadline := time.After(3 * time.Second)
	for {
		select {
		case due := <-armed:
			t.Logf("armed %v", due)
			if due.Equal(want) {
				return
			}
		case <-deadline:
			t.Fatalf("the timer was never armed for %v", want)
		}
	}
}

func drain(c chan time.Time) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

// Tasks a store cannot restore are refused by Submit, with a reason.
func TestSubmitRefusesWhatCannotBeStored(t *testing.T) {
	s := open(t, dbPath(t), coordinator.WithFunc("f", func(context.Context, []byte) error { return nil }))
	defer shutdown(t, s)
	for _, tc := range []struct {
		task coordinator.Task
		want error
	}{
		{coordinator.Task{ID: "closure", Run: func(context.Context) error { return nil }}, coordinator.ErrNotDurable},
		{coordinator.Task{ID: "payload", Func: "f", Payload: 42}, coordinator.ErrInvalidTask},
		{coordinator.Task{ID: "retryif", Func: "f", Retry: coordinator.RetryPolicy{MaxAttempts: 2, RetryIf: func(error) bool { return true }}}, coordinator.ErrNotDurable},
		{coordinator.Task{ID: "unknown", Func: "g"}, coordinator.ErrInvalidTask},
		{coordinator.Task{ID: "both", Func: "f", Run: func(context.Context) error { return nil }}, coordinator.ErrInvalidTask},
	} {
		err := s.Submit(tc.task)
		var te *coordinator.TaskError
		if !errors.Is(err, tc.want) || !errors.As(err, &te) || te.ID != tc.task.ID {
			t.Errorf("Submit(%s) = %v; want a *TaskError wrapping %v", tc.task.ID, err, tc.want)
		}
	}
}

// A durable task's result is a []byte; another type is refused.
func TestDurableResultIsBytes(t *testing.T) {
	var got error
	s := open(t, dbPath(t), coordinator.WithFunc("f", func(ctx context.Context, _ []byte) error {
		got = coordinator.SetResult(ctx, 42)
		return nil
	}))
	defer shutdown(t, s)
	if err := s.Submit(coordinator.Task{ID: "t", Func: "f"}); err != nil {
		t.Fatal(err)
	}
	wait(t, s)
	if !errors.Is(got, coordinator.ErrResultType) {
		t.Errorf("SetResult(ctx, 42) = %v; want ErrResultType", got)
	}
}

// New fails clearly on a store it cannot use, and never hangs on a lock.
func TestNewRefusesBadStores(t *testing.T) {
	t.Run("locked", func(t *testing.T) {
		path := dbPath(t)
		s := open(t, path)
		defer shutdown(t, s)
		_, err := coordinator.New(coordinator.WithStore(boltstore.New(path, boltstore.WithLockTimeout(50*time.Millisecond))))
		if !errors.Is(err, coordinator.ErrStoreLocked) {
			t.Errorf("New on a locked file = %v; want ErrStoreLocked", err)
		}
	})
	t.Run("one Store value twice", func(t *testing.T) {
		st := boltstore.New(dbPath(t))
		s, err := coordinator.New(coordinator.WithStore(st), coordinator.WithFunc("f", noop))
		if err != nil {
			t.Fatal(err)
		}
		defer shutdown(t, s)
		if _, err := coordinator.New(coordinator.WithStore(st), coordinator.WithFunc("f", noop)); !errors.Is(err, coordinator.ErrStoreLocked) {
			t.Errorf("New on a Store in use = %v; want ErrStoreLocked", err)
		}
		// The failed New left the first scheduler's store open.
		if err := s.Submit(coordinator.Task{ID: "t", Func: "f"}); err != nil {
			t.Errorf("Submit on the first scheduler = %v", err)
		}
	})
	t.Run("truncated", func(t *testing.T) {
		for _, keep := range []float64{0.5, 0.1, 0.02} {
			path := dbPath(t)
			s := open(t, path, coordinator.WithFunc("f", noop))
			var batch []coordinator.Task
			for i := range 5000 {
				batch = append(batch, coordinator.Task{ID: fmt.Sprint(i), Func: "f", Delay: time.Hour, Payload: make([]byte, 100)})
			}
			if err := s.Submit(batch...); err != nil {
				t.Fatal(err)
			}
			shutdown(t, s)
			st := boltstore.New(path)
			used := int64(0) // the pages bbolt uses, not the space it reserved
			if err := st.Load(func(k, v []byte) error { used += int64(len(k) + len(v)); return nil }); err != nil {
				t.Fatal(err)
			}
			st.Close()
			if err := os.Truncate(path, int64(float64(used)*keep)); err != nil {
				t.Fatal(err)
			}
			// Reading past the end of a mapped file is a SIGBUS: the test
			// process would die rather than fail.
			_, err := coordinator.New(coordinator.WithStore(boltstore.New(path)), coordinator.WithFunc("f", noop))
			if !errors.Is(err, coordinator.ErrStoreCorrupt) {
				t.Errorf("New on a file cut to %.0f%% of its records = %v; want ErrStoreCorrupt", keep*100, err)
			}
		}
	})
	t.Run("damaged pages", func(t *testing.T) {
		// One page of records zeroed or overwritten: bbolt's first write
		// would walk the pages on a goroutine of its own and panic there
		// (the process died); Load reads them first.
		path := dbPath(t)
		s := open(t, path, coordinator.WithFunc("f", noop))
		var batch []coordinator.Task
		for i := range 2000 {
			batch = append(batch, coordinator.Task{ID: fmt.Sprint(i), Func: "f", Delay: time.Hour, Payload: make([]byte, 100)})
		}
		if err := s.Submit(batch...); err != nil {
			t.Fatal(err)
		}
		shutdown(t, s)
		orig, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		const page = 4096
		for _, pg := range []int{2, 3, 5, 10, 20, 40} {
			for _, how := range []string{"zeroed", "filled with 0xff", "with a wrong count and flags"} {
				if (pg+1)*page > len(orig) {
					continue
				}
				b := slices.Clone(orig)
				p := b[pg*page : (pg+1)*page]
				switch how {
				case "zeroed":
					clear(p)
				case "filled with 0xff":
					for i := range p {
						p[i] = 0xff
					}
				default: // the page's id kept; its flags and count say a huge leaf (reads outside the mapping)
					p[8], p[9], p[10], p[11] = 0x10, 0, 0xff, 0x7f
				}
				if err := os.WriteFile(path, b, 0o600); err != nil {
					t.Fatal(err)
				}
				s, err := coordinator.New(coordinator.WithStore(boltstore.New(path)), coordinator.WithFunc("f", noop))
				switch {
				case err == nil:
					// The page was free: nothing lost. The scheduler runs.
					shutdown(t, s)
				case !errors.Is(err, coordinator.ErrStoreCorrupt):
					t.Errorf("New with page %d %s = %v; want ErrStoreCorrupt", pg, how, err)
				}
			}
		}
	})
	t.Run("another application's file", func(t *testing.T) {
		path := dbPath(t)
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucket([]byte("users"))
			if err != nil {
				return err
			}
			return b.Put([]byte("alice"), []byte("admin"))
		}); err != nil {
			t.Fatal(err)
		}
		db.Close()
		if _, err := coordinator.New(coordinator.WithStore(boltstore.New(path))); !errors.Is(err, coordinator.ErrStoreCorrupt) {
			t.Errorf("New on a bbolt file of another application = %v; want ErrStoreCorrupt", err)
		}
		db, err = bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		_ = db.View(func(tx *bolt.Tx) error {
			if tx.Bucket([]byte("baton")) != nil {
				t.Error("the refused file was given a baton bucket")
			}
			return nil
		})
	})
	t.Run("not a bbolt file", func(t *testing.T) {
		path := dbPath(t)
		if err := os.WriteFile(path, []byte("this is not a database, but it is long enough to look like a header of one........"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := coordinator.New(coordinator.WithStore(boltstore.New(path)))
		if !errors.Is(err, coordinator.ErrStoreCorrupt) {
			t.Errorf("New on garbage = %v; want ErrStoreCorrupt", err)
		}
	})
	raw := func(t *testing.T, path string, puts map[string][]byte) {
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("baton"))
			if err != nil {
				return err
			}
			for k, v := range puts {
				if err := b.Put([]byte(k), v); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("newer format", func(t *testing.T) {
		path := dbPath(t)
		raw(t, path, map[string][]byte{"m": {99}})
		_, err := coordinator.New(coordinator.WithStore(boltstore.New(path)))
		if !errors.Is(err, coordinator.ErrStoreVersion) {
			t.Errorf("New on format 99 = %v; want ErrStoreVersion", err)
		}
	})
	t.Run("corrupt record", func(t *testing.T) {
		path := dbPath(t)
		raw(t, path, map[string][]byte{"m": {1}, "t\x00\x00\x00\x00\x00\x00\x00\x01d": {5, 'a'}})
		_, err := coordinator.New(coordinator.WithStore(boltstore.New(path)))
		if !errors.Is(err, coordinator.ErrStoreCorrupt) {
			t.Errorf("New on a truncated record = %v; want ErrStoreCorrupt", err)
		}
	})
	t.Run("unregistered function", func(t *testing.T) {
		path := dbPath(t)
		s := open(t, path, coordinator.WithFunc("f", func(context.Context, []byte) error { return nil }))
		if err := s.Submit(coordinator.Task{ID: "t", Func: "f", Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
		shutdown(t, s)
		_, err := coordinator.New(coordinator.WithStore(boltstore.New(path)))
		if !errors.Is(err, coordinator.ErrInvalidOption) {
			t.Errorf("New without the store's function = %v; want ErrInvalidOption", err)
		}
		// The failed New released the file.
		s = open(t, path, coordinator.WithFunc("f", func(context.Context, []byte) error { return nil }))
		shutdown(t, s)
	})
}

// A custom worker pool takes durable tasks: the payload is the []byte
// submitted, after a restart too.
func TestCustomPoolPayload(t *testing.T) {
	path := dbPath(t)
	got := make(chan string, 10)
	w := workerFunc(func(ctx context.Context, j []byte) error { got <- string(j); return nil })
	s := open(t, path, coordinator.WithPool("gpu", 1, w))
	if err := s.Submit(coordinator.Task{ID: "k", Pool: "gpu", Payload: []byte("kernel"), Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	shutdown(t, s)
	m := clock.NewMock()
	m.Set(time.Now().Add(2 * time.Hour))
	s = open(t, path, coordinator.WithPool("gpu", 1, w), coordinator.WithClock(m))
	defer shutdown(t, s)
	wait(t, s)
	if p := <-got; p != "kernel" {
		t.Errorf("payload = %q", p)
	}
}

type workerFunc func(ctx context.Context, payload []byte) error

func (f workerFunc) Do(ctx context.Context, j worker.Job) error {
	p, _ := j.Payload.([]byte)
	return f(ctx, p)
}

// Retention deletes forgotten tasks from the file: after they are gone,
// only the version record is left.
func TestRetentionDeletesRecords(t *testing.T) {
	path := dbPath(t)
	s := open(t, path, coordinator.WithRetention(0), coordinator.WithFunc("f", func(context.Context, []byte) error { return nil }))
	for r := range 5 {
		var batch []coordinator.Task
		for i := range 100 {
			batch = append(batch, coordinator.Task{ID: fmt.Sprintf("r%d-%d", r, i), Func: "f"})
		}
		batch = append(batch, coordinator.Task{ID: fmt.Sprintf("r%d-last", r), Func: "f", Deps: []string{batch[0].ID, batch[99].ID}})
		if err := s.Submit(batch...); err != nil {
			t.Fatal(err)
		}
		wait(t, s)
	}
	shutdown(t, s)
	var keys []string
	st := boltstore.New(path)
	defer st.Close()
	if err := st.Load(func(k, _ []byte) error { keys = append(keys, string(k)); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0] != "m" {
		t.Errorf("keys left = %d (%q...); want only the version record", len(keys), keys[:min(3, len(keys))])
	}
}

// frozenStore simulates a process that dies: once frozen, its commits
// report success and write nothing, so the file keeps the state of the
// moment of the freeze. failing makes commits fail instead.
type frozenStore struct {
	*boltstore.Store
	frozen, failing atomic.Bool
}

func (f *frozenStore) Commit(c *coordinator.Changes) error {
	switch {
	case f.failing.Load():
		return errors.New("disk on fire")
	case f.frozen.Load():
		return nil
	}
	return f.Store.Commit(c)
}

// startedTasks subscribes and reports each EventStarted: published after
// its commit.
func startedTasks(s *coordinator.Scheduler) <-chan string {
	c := make(chan string, 100)
	s.Subscribe(func(e coordinator.Event) {
		if e.Kind == coordinator.EventStarted {
			c <- e.TaskID
		}
	})
	return c
}

// An attempt running when the process died counts: it is retried under
// its policy, or fails with ErrInterrupted when none is left (and what
// depends on it is skipped). A task Cancel reached while it ran stays
// cancelled.
func TestInterruptedAttempts(t *testing.T) {
	path := dbPath(t)
	block := func(ctx context.Context, _ []byte) error { <-ctx.Done(); return ctx.Err() }
	release := make(chan struct{})
	hold := func(ctx context.Context, _ []byte) error { <-release; return ctx.Err() } // returns after the freeze
	st := &frozenStore{Store: boltstore.New(path)}
	s, err := coordinator.New(coordinator.WithStore(st), coordinator.WithWorkers(4),
		coordinator.WithFunc("block", block), coordinator.WithFunc("hold", hold))
	if err != nil {
		t.Fatal(err)
	}
	started := startedTasks(s)
	if err := s.Submit(
		coordinator.Task{ID: "retry", Func: "block", Retry: coordinator.RetryPolicy{MaxAttempts: 2}},
		coordinator.Task{ID: "once", Func: "block"},
		coordinator.Task{ID: "after-once", Func: "block", Deps: []string{"once"}},
		coordinator.Task{ID: "cancelled", Func: "hold"},
	); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		<-started
	}
	if !s.Cancel("cancelled") { // returns once the request is committed
		t.Fatal("Cancel = false")
	}
	st.frozen.Store(true) // the process dies here
	close(release)
	shutdown(t, s)

	var ran counter
	done := func(_ context.Context, p []byte) error { ran.add([]byte("x")); return nil }
	s = open(t, path, coordinator.WithFunc("block", done), coordinator.WithFunc("hold", done))
	defer shutdown(t, s)
	wait(t, s)
	if ti := info(t, s, "retry"); ti.Status != coordinator.Succeeded || ti.Attempts != 2 {
		t.Errorf("retry = %v after %d attempts; want succeeded after 2 (1 interrupted)", ti.Status, ti.Attempts)
	}
	if ti := info(t, s, "once"); ti.Status != coordinator.Failed || !errors.Is(ti.Err, coordinator.ErrInterrupted) || ti.Attempts != 1 {
		t.Errorf("once = %v (%v) after %d attempts; want failed with ErrInterrupted after 1", ti.Status, ti.Err, ti.Attempts)
	}
	if ti := info(t, s, "after-once"); ti.Status != coordinator.Skipped || ti.Cause != "once" {
		t.Errorf("after-once = %v (cause %q); want skipped because of once", ti.Status, ti.Cause)
	}
	if ti := info(t, s, "cancelled"); ti.Status != coordinator.Cancelled || !errors.Is(ti.Err, coordinator.ErrCancelled) {
		t.Errorf("cancelled = %v (%v); want cancelled", ti.Status, ti.Err)
	}
	if got := ran.get("x"); got != 1 {
		t.Errorf("%d functions ran after the restart; want 1 (retry's second attempt)", got)
	}
}

// A commit that fails stops the scheduler: the Submit waiting for it
// fails with ErrStoreFailed, and the next New resumes from the last
// commit.
func TestCommitFailureStops(t *testing.T) {
	path := dbPath(t)
	st := &frozenStore{Store: boltstore.New(path)}
	s, err := coordinator.New(coordinator.WithStore(st), coordinator.WithFunc("f", noop),
		coordinator.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Submit(coordinator.Task{ID: "kept", Func: "f", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	st.failing.Store(true)
	if err := s.Submit(coordinator.Task{ID: "lost", Func: "f", Delay: time.Hour}); !errors.Is(err, coordinator.ErrStoreFailed) {
		t.Fatalf("Submit during a failing commit = %v; want ErrStoreFailed", err)
	}
	// The failure is no secret afterwards: Wait and Shutdown return it
	// (nil would say the tasks were done), Submit says closed and why.
	if err := s.Wait(context.Background()); !errors.Is(err, coordinator.ErrStoreFailed) {
		t.Errorf("Wait after a failed commit = %v; want ErrStoreFailed", err)
	}
	if err := s.Shutdown(context.Background()); !errors.Is(err, coordinator.ErrStoreFailed) {
		t.Errorf("Shutdown after a failed commit = %v; want ErrStoreFailed", err)
	}
	if err := s.Submit(coordinator.Task{ID: "late", Func: "f"}); !errors.Is(err, coordinator.ErrClosed) || !errors.Is(err, coordinator.ErrStoreFailed) {
		t.Errorf("Submit after = %v; want ErrClosed and ErrStoreFailed", err)
	}
	s = open(t, path, coordinator.WithFunc("f", noop))
	defer shutdown(t, s)
	if ti := info(t, s, "kept"); ti.Status != coordinator.Pending {
		t.Errorf("kept = %v; want pending", ti.Status)
	}
	if _, ok := s.Info("lost"); ok {
		t.Error("lost is in the store: its commit failed")
	}
}

// The bbolt store passes the Store conformance suite.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, dir string) coordinator.Store {
		return boltstore.New(filepath.Join(dir, "baton.db"), boltstore.WithLockTimeout(50*time.Millisecond))
	})
}

// Retention forgets nothing once Shutdown has begun: the tasks Shutdown
// stops keep their records, and the next scheduler on the file runs them.
func TestShutdownWithRetentionKeepsStoppedTasks(t *testing.T) {
	path := dbPath(t)
	started := make(chan struct{})
	block := func(ctx context.Context, _ []byte) error { close(started); <-ctx.Done(); return ctx.Err() }
	s := open(t, path, coordinator.WithRetention(0), coordinator.WithWorkers(3),
		coordinator.WithFunc("f", noop), coordinator.WithFunc("block", block))
	if err := s.Submit(
		coordinator.Task{ID: "done", Func: "f"},
		coordinator.Task{ID: "slow", Func: "block"},
		coordinator.Task{ID: "after", Func: "f", Deps: []string{"slow"}},
		coordinator.Task{ID: "later", Func: "f", Delay: time.Hour},
	); err != nil {
		t.Fatal(err)
	}
	<-started
	if err := s.WaitTasks(context.Background(), "done"); err != nil && !errors.Is(err, coordinator.ErrUnknownTask) {
		t.Fatalf("WaitTasks(done) = %v", err)
	}
	shutdown(t, s)

	var ran counter
	count := func(_ context.Context, p []byte) error { ran.add([]byte("x")); return nil }
	s = open(t, path, coordinator.WithFunc("f", count), coordinator.WithFunc("block", count))
	defer shutdown(t, s)
	for _, id := range []string{"slow", "after", "later"} {
		if _, ok := s.Info(id); !ok {
			t.Errorf("%s: lost after a Shutdown with retention on", id)
		}
	}
	if ti, ok := s.Info("later"); ok && ti.Status != coordinator.Pending {
		t.Errorf("later = %v; want pending (due in an hour)", ti.Status)
	}
	if err := s.WaitTasks(context.Background(), "slow", "after"); err != nil {
		t.Fatalf("WaitTasks after restart = %v", err)
	}
	if got := ran.get("x"); got != 2 {
		t.Errorf("%d functions ran after the restart; want 2 (slow, after)", got)
	}
}

// WaitTasks after Shutdown answers at once on a durable scheduler too,
// from several goroutines.
func TestWaitTasksAfterShutdown(t *testing.T) {
	s := open(t, dbPath(t), coordinator.WithFunc("f", noop), coordinator.WithFunc("fail", func(context.Context, []byte) error {
		return errors.New("boom")
	}))
	if err := s.Submit(coordinator.Task{ID: "ok", Func: "f"}, coordinator.Task{ID: "bad", Func: "fail"},
		coordinator.Task{ID: "later", Func: "f", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitTasks(context.Background(), "ok", "bad"); err == nil {
		t.Fatal("WaitTasks(ok, bad) = nil; want bad's failure")
	}
	shutdown(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.WaitTasks(ctx, "ok"); err != nil {
				t.Errorf("WaitTasks(ok) after Shutdown = %v; want nil", err)
			}
			var te *coordinator.TasksError
			if err := s.WaitTasks(ctx, "ok", "bad", "later"); !errors.As(err, &te) || len(te.Tasks) != 2 {
				t.Errorf("WaitTasks(ok, bad, later) after Shutdown = %v; want bad and later", err)
			}
			if err := s.WaitTasks(ctx, "nope"); !errors.Is(err, coordinator.ErrUnknownTask) {
				t.Errorf("WaitTasks(nope) after Shutdown = %v; want ErrUnknownTask", err)
			}
		}()
	}
	wg.Wait()
}

// What is decided in an iteration whose commit fails is not reported as
// done: WaitTasks gets ErrStoreFailed and subscribers hear nothing more.
func TestCommitFailureReportsNothing(t *testing.T) {
	path := dbPath(t)
	st := &frozenStore{Store: boltstore.New(path)}
	release := make(chan struct{})
	gate := func(context.Context, []byte) error { <-release; return nil }
	s, err := coordinator.New(coordinator.WithStore(st), coordinator.WithFunc("gate", gate),
		coordinator.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var heard []coordinator.EventKind
	s.Subscribe(func(e coordinator.Event) {
		mu.Lock()
		heard = append(heard, e.Kind)
		mu.Unlock()
	})
	started := startedTasks(s)
	if err := s.Submit(coordinator.Task{ID: "g", Func: "gate"}); err != nil {
		t.Fatal(err)
	}
	<-started
	waited := make(chan error, 1)
	go func() { waited <- s.WaitTasks(context.Background(), "g") }()
	st.failing.Store(true)
	close(release)
	if err := <-waited; !errors.Is(err, coordinator.ErrStoreFailed) {
		t.Errorf("WaitTasks(g) = %v; want ErrStoreFailed (g's success was not committed)", err)
	}
	if err := s.Shutdown(context.Background()); !errors.Is(err, coordinator.ErrStoreFailed) {
		t.Errorf("Shutdown = %v; want ErrStoreFailed", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(heard) != 1 || heard[0] != coordinator.EventStarted {
		t.Errorf("subscriber heard %v; want only g's start (committed)", heard)
	}
}

// A task's function is called only once the ends that released it are
// committed: a crash never undoes a dependency whose dependent already ran
// (it would run again after it). The process "dies" (its store freezes)
// inside the function of the k-th task to run; nothing run after the
// freeze counts. After the restart, no task that runs again may have a
// dependent that ran before the crash.
func TestDependentsRunOnCommittedEnds(t *testing.T) {
	const chains, length = 3, 12
	var tasks []coordinator.Task
	deps := map[string][]string{}
	for c := range chains {
		for i := range length {
			id := fmt.Sprintf("c%d-%d", c, i)
			task := coordinator.Task{ID: id, Func: "f", Payload: []byte(id)}
			if i > 0 {
				task.Deps = []string{fmt.Sprintf("c%d-%d", c, i-1)}
			}
			if i == length/2 && c > 0 { // a join across chains
				task.Deps = append(task.Deps, fmt.Sprintf("c%d-%d", c-1, i-1))
			}
			deps[id] = task.Deps
			tasks = append(tasks, task)
		}
	}
	for _, k := range []int{1, 2, 5, 9, 17, 30} {
		t.Run(fmt.Sprintf("crash at run %d", k), func(t *testing.T) {
			path := dbPath(t)
			st := &frozenStore{Store: boltstore.New(path)}
			var mu sync.Mutex
			before := map[string]bool{} // ran before the crash
			died := make(chan struct{})
			f := func(ctx context.Context, p []byte) error {
				mu.Lock()
				if st.frozen.Load() {
					mu.Unlock()
					<-ctx.Done() // the process is dead: nothing runs any more
					return ctx.Err()
				}
				before[string(p)] = true
				if len(before) == k {
					st.frozen.Store(true)
					close(died)
				}
				mu.Unlock()
				return nil
			}
			s, err := coordinator.New(coordinator.WithStore(st), coordinator.WithWorkers(2), coordinator.WithFunc("f", f))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Submit(tasks...); err != nil {
				t.Fatal(err)
			}
			ended := make(chan error, 1)
			go func() { ended <- s.Wait(context.Background()) }()
			select {
			case <-died:
			case err := <-ended:
				t.Fatalf("Wait = %v before the crash at run %d", err, k)
			}
			shutdown(t, s)
			<-ended

			var again []string
			rerun := func(_ context.Context, p []byte) error {
				mu.Lock()
				again = append(again, string(p))
				mu.Unlock()
				return nil
			}
			s = open(t, path, coordinator.WithWorkers(2), coordinator.WithFunc("f", rerun))
			defer shutdown(t, s)
			wait(t, s)
			mu.Lock()
			defer mu.Unlock()
			for _, id := range again {
				for dependent, ds := range deps {
					if before[dependent] && slices.Contains(ds, id) {
						t.Errorf("%s ran again after the crash, but %s, which depends on it, ran before", id, dependent)
					}
				}
			}
		})
	}
}

// Restarts write nothing and do not grow the file: the records of tasks
// that wait (a delay, a retry's backoff, a series' next run) resume as
// stored. Each New used to rewrite them all: 100k such tasks grew a file
// by 27 MB per restart.
func TestRestartsDoNotGrowTheFile(t *testing.T) {
	path := dbPath(t)
	fail := func(context.Context, []byte) error { return errors.New("not yet") }
	opts := []coordinator.Option{coordinator.WithFunc("noop", func(context.Context, []byte) error { return nil }),
		coordinator.WithFunc("fail", fail)}
	s := open(t, path, opts...)
	var tasks []coordinator.Task
	for i := range 20_000 {
		task := coordinator.Task{ID: fmt.Sprint("d", i), Func: "noop", Delay: time.Hour}
		switch i % 3 {
		case 1:
			task = coordinator.Task{ID: fmt.Sprint("r", i), Func: "fail", Retry: coordinator.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Hour}}
		case 2:
			task = coordinator.Task{ID: fmt.Sprint("s", i), Func: "noop", Every: time.Hour}
		}
		tasks = append(tasks, task)
	}
	waiting := make(chan struct{})
	var n atomic.Int32
	s.Subscribe(func(e coordinator.Event) { // every retry and series waits for its next hour
		if (e.Kind == coordinator.EventRetrying || e.Kind == coordinator.EventRecurred) && n.Add(1) == int32(2*len(tasks)/3) {
			close(waiting)
		}
	})
	if err := s.Submit(tasks...); err != nil {
		t.Fatal(err)
	}
	<-waiting
	shutdown(t, s)
	size := func() int64 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	before := size()
	for restart := range 3 {
		st := &countingStore{Store: boltstore.New(path)}
		s, err := coordinator.New(append(opts, coordinator.WithStore(st))...)
		if err != nil {
			t.Fatal(err)
		}
		shutdown(t, s)
		if got := size(); got != before || st.puts.Load() != 0 {
			t.Fatalf("restart %d: %d records written, the file from %d to %d bytes; want nothing written", restart, st.puts.Load(), before, got)
		}
	}
}
