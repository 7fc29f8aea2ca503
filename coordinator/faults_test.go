package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	"github.com/benbjohnson/clock"
)

// A task that never returns and ignores its context: its timeout frees the
// slot; Shutdown returns within its own context and names the task.
func TestFaultTaskNeverReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := coordinator.New(coordinator.WithWorkers(1), coordinator.WithAbandonAfter(0))
		if err != nil {
			t.Fatalf("New = %v", err)
		}
		release := make(chan struct{})
		err = s.Submit(
			coordinator.Task{ID: "deaf", Timeout: time.Second, Run: func(context.Context) error { <-release; return nil }},
			coordinator.Task{ID: "after", Run: ok},
			coordinator.Task{ID: "hung", Deps: []string{"after"}, Run: func(context.Context) error { <-release; return nil }},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		synctest.Wait()
		time.Sleep(time.Second)
		synctest.Wait()
		if st := status(t, s, "after"); st != coordinator.Succeeded {
			t.Fatalf("status(after) = %v; want succeeded: the timeout freed the only slot", st)
		}
		if info, _ := s.Info("deaf"); info.Status != coordinator.Failed || !errors.Is(info.Err, worker.ErrTimeout) {
			t.Fatalf("Info(deaf) = %+v; want failed with ErrTimeout", info)
		}
		se, _ := shutdownPastDeadline(t, s, time.Second)
		if want := []string{"deaf", "hung"}; !slices.Equal(se.Running, want) {
			t.Fatalf("ShutdownError.Running = %v; want %v", se.Running, want)
		}
		close(release)
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatalf("Shutdown once they returned = %v; want nil", err)
		}
	})
}

// Shutdown returns when its context ends whatever a subscriber does, and
// its error names what it still waits for: a subscriber whose callback
// does not return (where it was subscribed, the event it is stuck on, how
// many events wait for it) and the tasks still running. A channel that
// fills up is the usual way to get there (examples/dynamic once taught it).
func TestShutdownNamesABlockedSubscriber(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := coordinator.New(coordinator.WithWorkers(2))
		if err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 4)                                // nobody reads it before Shutdown returns
		s.Subscribe(func(e coordinator.Event) { lines <- e.TaskID }) // this line is named
		_, _, line, _ := runtime.Caller(0)
		var tasks []coordinator.Task
		for i := range 20 {
			tasks = append(tasks, coordinator.Task{ID: fmt.Sprint("t", i), Run: ok})
		}
		if err := s.Submit(tasks...); err != nil {
			t.Fatal(err)
		}
		if err := s.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		se, err := shutdownPastDeadline(t, s, time.Minute)
		site := fmt.Sprintf("faults_test.go:%d", line-1)
		if len(se.Running) != 0 || len(se.Subscribers) != 1 || !strings.Contains(se.Subscribers[0], site) ||
			!strings.Contains(se.Subscribers[0], "in its callback for ") || !strings.Contains(err.Error(), "events not yet delivered") {
			t.Fatalf("Shutdown = %q; want no task running and the subscriber of %s named, in its callback", err, site)
		}
		drained := make(chan struct{})
		go func() { // read: the deliveries end, and Shutdown with them
			for range lines {
			}
			close(drained)
		}()
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatalf("Shutdown once the channel is read = %v; want nil", err)
		}
		close(lines) // the subscriber has returned for good
		<-drained
	})
}

// Shutdown returns when its context ends even while the store's Commit
// does not return (a hung disk, a database without a timeout), and its
// error says so instead of listing running tasks it could not learn; once
// the commit returns, Shutdown ends.
func TestShutdownReturnsWhileACommitHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := storetest.NewMemory()
		st := &holdStore{Store: mem.Open(), pass: make(chan struct{})}
		s, err := coordinator.New(coordinator.WithStore(st), coordinator.WithWorkers(1),
			coordinator.WithFunc("ok", func(context.Context, []byte) error { return nil }))
		if err != nil {
			t.Fatal(err)
		}
		st.hold.Store(true)
		submitted := make(chan error, 1)
		go func() { submitted <- s.Submit(coordinator.Task{ID: "a", Func: "ok"}) }()
		synctest.Wait() // the loop is in Commit, which waits for a pass
		se, err := shutdownPastDeadline(t, s, time.Minute)
		if !strings.Contains(se.Coordinator, "Commit") || !strings.Contains(err.Error(), "Commit has not returned") {
			t.Fatalf("Shutdown while a commit hangs = %v; want a *ShutdownError saying the store's Commit has not returned", err)
		}
		st.hold.Store(false)
		close(st.pass)
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatalf("Shutdown once the commit returned = %v; want nil", err)
		}
		if err := <-submitted; err != nil {
			t.Fatalf("Submit = %v; want nil (its commit went through)", err)
		}
	})
}

// gateSource is a random source whose first draw waits for gate to close
// (in says it began): it holds the coordinator busy outside its store.
type gateSource struct {
	in, gate chan struct{}
	n        int
}

func (g *gateSource) Uint64() uint64 {
	if g.n++; g.n == 1 {
		close(g.in)
		<-g.gate
	}
	return 42
}

// A Shutdown whose context ends while the coordinator is busy, and which
// then goes into a store's Commit that hangs, returns then (it does not
// wait out a timer of the scheduler's clock, which a mock clock would
// never fire), saying the Commit has not returned.
func TestShutdownReturnsWhenTheCoordinatorGoesIntoAHungCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &gateSource{in: make(chan struct{}), gate: make(chan struct{})}
		st := &holdStore{Store: storetest.NewMemory().Open(), pass: make(chan struct{})}
		s, err := coordinator.New(coordinator.WithStore(st), coordinator.WithWorkers(1), coordinator.WithRandSource(src),
			coordinator.WithClock(clock.NewMock()),
			coordinator.WithFunc("fail", func(context.Context, []byte) error { return errors.New("boom") }))
		if err != nil {
			t.Fatal(err)
		}
		err = s.Submit(coordinator.Task{ID: "a", Func: "fail", Retry: coordinator.RetryPolicy{MaxAttempts: 2, BaseDelay: time.Second, Jitter: 0.5}})
		if err != nil {
			t.Fatal(err)
		}
		<-src.in // the loop draws the retry's jitter: busy, not in its store
		st.hold.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res := make(chan error, 1)
		go func() { res <- s.Shutdown(ctx) }()
		synctest.Wait() // ctx ended; Shutdown asks the busy coordinator
		close(src.gate) // the loop goes on, into a Commit that hangs
		err = <-res
		var se *coordinator.ShutdownError
		if !errors.As(err, &se) || !strings.Contains(se.Coordinator, "Commit has not returned") || strings.Contains(err.Error(), "still running: []") {
			t.Fatalf("Shutdown = %v; want a *ShutdownError saying the Commit has not returned, and no empty list of running tasks", err)
		}
		close(st.pass)
		st.hold.Store(false)
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// closeHangStore is a Store whose Close waits for pass.
type closeHangStore struct {
	coordinator.Store
	pass chan struct{}
}

func (c *closeHangStore) Close() error {
	<-c.pass
	return c.Store.Close()
}

// A store's Close that hangs (the loop closes its store before it exits)
// is named too, on a mock clock as on the real one.
func TestShutdownNamesAHungClose(t *testing.T) {
	for _, mock := range []bool{false, true} {
		t.Run(fmt.Sprint("mock=", mock), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := &closeHangStore{Store: storetest.NewMemory().Open(), pass: make(chan struct{})}
				opts := []coordinator.Option{coordinator.WithStore(st), coordinator.WithWorkers(1)}
				if mock {
					opts = append(opts, coordinator.WithClock(clock.NewMock()))
				}
				s, err := coordinator.New(opts...)
				if err != nil {
					t.Fatal(err)
				}
				se, err := shutdownPastDeadline(t, s, time.Minute)
				if !strings.Contains(se.Coordinator, "Close has not returned") {
					t.Fatalf("Shutdown = %v; want a *ShutdownError saying the store's Close has not returned", err)
				}
				close(st.pass)
				if err := s.Shutdown(context.Background()); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// A logger's handler that blocks is named as what it is in Shutdown's
// error, not as a subscriber without a site.
func TestShutdownNamesABlockedLogger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		block := make(chan struct{})
		h := &blockingHandler{block: block}
		s, err := coordinator.New(coordinator.WithWorkers(1), coordinator.WithLogger(slog.New(h)))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Submit(coordinator.Task{ID: "a", Run: ok}); err != nil {
			t.Fatal(err)
		}
		if err := s.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		se, err := shutdownPastDeadline(t, s, time.Minute)
		if len(se.Subscribers) != 1 || !strings.HasPrefix(se.Subscribers[0], "WithLogger's handler in its callback for ") {
			t.Fatalf("Shutdown with a blocked logger = %v; want the logger's handler named", err)
		}
		close(block)
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// shutdownPastDeadline calls Shutdown with a context that ends after d
// and fails the test unless it returns a *ShutdownError wrapping
// DeadlineExceeded, which it returns with the error.
func shutdownPastDeadline(t *testing.T, s *coordinator.Scheduler, d time.Duration) (*coordinator.ShutdownError, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	err := s.Shutdown(ctx)
	var se *coordinator.ShutdownError
	if !errors.As(err, &se) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v; want a *ShutdownError wrapping DeadlineExceeded", err)
	}
	return se, err
}

// blockingHandler is a slog.Handler whose Handle waits for block to close.
type blockingHandler struct{ block chan struct{} }

func (h *blockingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *blockingHandler) Handle(context.Context, slog.Record) error {
	<-h.block
	return nil
}
func (h *blockingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *blockingHandler) WithGroup(string) slog.Handler      { return h }

// A subscriber that blocks forever stalls nothing; unsubscribe drops what
// was queued for it.
func TestFaultBlockedSubscriber(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		block := make(chan struct{})
		var calls atomic.Int32
		unsubscribe := s.Subscribe(func(coordinator.Event) {
			calls.Add(1)
			<-block
		})
		var tasks []coordinator.Task
		for i := range 5000 {
			tasks = append(tasks, coordinator.Task{ID: fmt.Sprint(i), Run: ok})
		}
		if err := s.Submit(tasks...); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s) // all 5,000 tasks ran while the subscriber sat in its first call
		if n := calls.Load(); n != 1 {
			t.Fatalf("subscriber called %d times; want 1 (blocked in the first)", n)
		}
		unsubscribe()
		close(block)
		synctest.Wait()
		if n := calls.Load(); n != 1 {
			t.Fatalf("subscriber called %d times after unsubscribe; want no more: its queue is dropped", n)
		}
	})
}

// Shutdown racing Submit, Cancel, Info and Wait from many goroutines: every
// call returns a documented result and every task ends final.
func TestConcurrentShutdownRace(t *testing.T) {
	s, err := coordinator.New(coordinator.WithWorkers(4))
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	var wg sync.WaitGroup
	var accepted sync.Map
	start := make(chan struct{})
	for g := range 8 {
		wg.Go(func() {
			<-start
			for i := range 200 {
				id := fmt.Sprintf("g%d-%d", g, i)
				switch err := s.Submit(coordinator.Task{ID: id, Run: func(ctx context.Context) error {
					select {
					case <-ctx.Done():
					default:
					}
					return nil
				}}); {
				case err == nil:
					accepted.Store(id, true)
				case !errors.Is(err, coordinator.ErrClosed):
					t.Errorf("Submit = %v; want nil or ErrClosed", err)
				}
				s.Cancel(fmt.Sprintf("g%d-%d", g, i/2))
				s.Info(id)
				ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
				if err := s.Wait(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("Wait = %v", err)
				}
				cancel()
			}
		})
	}
	wg.Go(func() {
		<-start
		if err := s.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown = %v", err)
		}
	})
	close(start)
	wg.Wait()
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	accepted.Range(func(k, _ any) bool {
		if info, found := s.Info(k.(string)); !found || !info.Status.Final() {
			t.Errorf("Info(%v) = %+v, %v after Shutdown; want final", k, info, found)
		}
		return true
	})
}

// misbehaving is a custom worker whose Do panics, or keeps running after
// its context ended and then returns nil.
type misbehaving struct{ returned chan string }

func (m misbehaving) Do(ctx context.Context, j worker.Job) error {
	switch j.Payload {
	case "panic":
		panic(errors.New("driver crashed"))
	case "late":
		<-ctx.Done()
		time.Sleep(time.Second) // fake time: keeps going after its context ended
		m.returned <- j.ID
	}
	return nil
}

func TestFaultCustomWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := misbehaving{returned: make(chan string, 1)}
		s := newScheduler(t, coordinator.WithPool("device", 1, m))
		err := s.Submit(
			coordinator.Task{ID: "crash", Pool: "device", Payload: "panic"},
			coordinator.Task{ID: "late", Pool: "device", Payload: "late"},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		synctest.Wait()
		var pe *worker.PanicError
		if info, _ := s.Info("crash"); info.Status != coordinator.Failed || !errors.As(info.Err, &pe) {
			t.Fatalf("Info(crash) = %+v; want failed with a *PanicError", info)
		}
		if !s.Cancel("late") {
			t.Fatalf("Cancel(late) = false; want true")
		}
		settle(t, s)
		if id := <-m.returned; id != "late" {
			t.Fatalf("returned %q", id)
		}
		if st := status(t, s, "late"); st != coordinator.Cancelled {
			t.Fatalf("status(late) = %v; want cancelled though Do returned nil after its context ended", st)
		}
		if err := s.Submit(coordinator.Task{ID: "again", Pool: "device", Payload: "ok"}); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		if st := status(t, s, "again"); st != coordinator.Succeeded {
			t.Fatalf("status(again) = %v; want succeeded: the pool survived", st)
		}
	})
}

// An attempt abandoned at its timeout (WithAbandonAfter) frees its worker
// and nothing else until its function returns: a key's limit counts the
// function (the next attempt of the key waits for it), and the workers a
// task of several slots keeps beside its own stay held; once it returns,
// they are free again. (They were freed with the attempt's end: two
// functions of a key of limit 1 ran at once.)
func TestAbandonedAttemptHoldsItsKeyAndSlots(t *testing.T) {
	for _, k := range []int{1, 3} {
		t.Run(fmt.Sprintf("slots=%d", k), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScheduler(t, coordinator.WithWorkers(4), coordinator.WithAbandonAfter(10*time.Millisecond),
					coordinator.WithKeys(coordinator.KeyPolicy{Limit: 1}))
				run := newRunning()
				release := make(chan struct{})
				deaf := func(ctx context.Context) error {
					run.enter("k", k)
					defer run.leave("k", k)
					<-release // ignores its context
					return nil
				}
				quick := func(key string) func(context.Context) error {
					return func(context.Context) error {
						run.enter(key, 1)
						defer run.leave(key, 1)
						time.Sleep(time.Millisecond)
						return nil
					}
				}
				tasks := []coordinator.Task{{ID: "deaf", Key: "k", Slots: k, Timeout: time.Second, Run: deaf}}
				for i := range 3 {
					tasks = append(tasks, coordinator.Task{ID: fmt.Sprint("next", i), Key: "k", Run: quick("k")})
				}
				if err := s.Submit(tasks...); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				time.Sleep(time.Second + 10*time.Millisecond) // the timeout, the grace: abandoned
				synctest.Wait()
				if info, _ := s.Info("deaf"); info.Status != coordinator.Failed || !errors.Is(info.Err, worker.ErrTimeout) {
					t.Fatalf("Info(deaf) = %v %v; want failed, ErrTimeout", info.Status, info.Err)
				}
				var others []coordinator.Task
				for i := range 8 {
					others = append(others, coordinator.Task{ID: fmt.Sprint("other", i), Run: quick("")})
				}
				if err := s.Submit(others...); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Minute) // the deaf function still runs
				synctest.Wait()
				if st := status(t, s, "next0"); st.Final() || st == coordinator.Running {
					t.Errorf("status(next0) = %v while the abandoned function of its key runs; want it waiting (key limit 1)", st)
				}
				run.mu.Lock()
				peakK, most := run.peak["k"], run.most
				run.mu.Unlock()
				if peakK != 1 {
					t.Errorf("key k ran %d functions at once; limit 1", peakK)
				}
				if most > 4+1 { // its own worker went on: 4 workers, plus the abandoned function's one slot
					t.Errorf("%d slots in use at once on 4 workers, the abandoned function's %d included; want at most 5", most, k)
				}
				close(release)
				settle(t, s)
				if c := s.Counts(); c.Succeeded != 11 {
					t.Errorf("Counts = %+v; want the 3 of key k and the 8 others succeeded once it returned", c)
				}
			})
		})
	}
}
