package coordinator_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/coordinator/storetest"
)

// Through the API: a journaled batch {r, c after k} taken while spawner
// s's success (which joins its child k) waits to be applied, in a report
// or harvested by the same iteration, whichever the loop picks first: r
// never runs while the commit that holds s's success is under way (a
// crash would undo k, and the batch's replay would be refused although r
// ran). Several trials: the loop picks the report or the request at
// random. Found by a review.
func TestJournaledRootWaitsForASpawnersEnd(t *testing.T) {
	for trial := 0; trial < 16; trial++ {
		synctest.Test(t, func(t *testing.T) {
			mem := storetest.NewMemory()
			h := &holdStore{Store: mem.Open(), pass: make(chan struct{})}
			release := make(chan struct{})
			var rRan atomic.Int32
			s, err := coordinator.New(coordinator.WithStore(h), coordinator.WithWorkers(1),
				coordinator.WithFunc("spawner", func(ctx context.Context, _ []byte) error {
					if err := coordinator.Spawn(ctx, coordinator.Task{ID: "k", Func: "f", Delay: time.Hour}); err != nil {
						return err
					}
					<-release
					return nil
				}),
				coordinator.WithFunc("f", func(context.Context, []byte) error { return nil }),
				coordinator.WithFunc("r", func(context.Context, []byte) error { rRan.Add(1); return nil }))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Submit(coordinator.Task{ID: "s", Func: "spawner"}); err != nil {
				t.Fatal(err)
			}
			synctest.Wait() // s has spawned k and waits
			h.hold.Store(true)
			done := make(chan error, 2)
			go func() { done <- s.Submit(coordinator.Task{ID: "z", Func: "f", Delay: time.Hour}) }()
			synctest.Wait() // the loop waits in z's commit
			close(release)  // s returns nil: its end waits in its lane, its report in the channel
			synctest.Wait()
			batch := []coordinator.Task{{ID: "r", Func: "r"}, {ID: "c", Func: "f", Deps: []string{"k"}}}
			go func() { done <- s.SubmitJournaled(context.Background(), batch...) }()
			synctest.Wait()
			h.pass <- struct{}{} // z's commit lands
			synctest.Wait()      // the loop waits in the next commit
			if n := rRan.Load(); n != 0 {
				t.Errorf("trial %d: r ran %d time(s) while the commit of s's success (and k) was under way", trial, n)
			}
			h.hold.Store(false)
			close(h.pass)
			for range 2 {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
			if err := s.WaitTasks(context.Background(), "r"); err != nil {
				t.Fatal(err)
			}
			if err := s.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The careful restart's bound: a function that kills its process within
// microseconds of its start (log.Fatal on a bad payload) ends Failed with
// ErrInterrupted after at most MaxAttempts+1 crashes (docs/durable.md),
// MaxAttempts+2 for a journaled batch (its early start is not counted).
// Each generation here is one process: the function "dies" (the store is
// crashed as it is called) and the next process opens what was left;
// the caller replays what its journal holds undecided (pgstore's inbox:
// the row stays undecided until the commit that accepts the batch), with
// SubmitContext as SubmitJournaled's doc says. A review found the bound
// lost when the replay was journaled too: the function ran before every
// commit, and every process died.
func TestJournaledReplayKeepsTheCrashBound(t *testing.T) {
	for _, journaled := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			mem := storetest.NewMemory()
			calls := 0
			final := "never stored"
			for gen := 0; gen < 6; gen++ {
				cur := mem
				h := &holdStore{Store: cur.Open(), pass: make(chan struct{})}
				died := make(chan *storetest.Memory, 1)
				s, err := coordinator.New(coordinator.WithStore(h), coordinator.WithWorkers(1),
					coordinator.WithFunc("fatal", func(ctx context.Context, _ []byte) error {
						died <- cur.Crash() // the process dies here
						<-ctx.Done()        // (its goroutines are ended below, as the process's death would)
						return ctx.Err()
					}))
				if err != nil {
					t.Fatal(err)
				}
				info, stored := s.Info("p")
				if stored && info.Status.Final() {
					final = info.Status.String() + ": " + info.Err.Error()
					s.Shutdown(context.Background())
					break
				}
				// The fsync of a commit takes longer than the function
				// takes to kill its process.
				h.hold.Store(true)
				ret := make(chan error, 1)
				if journaled && gen == 0 {
					go func() { ret <- s.SubmitJournaled(context.Background(), coordinator.Task{ID: "p", Func: "fatal"}) }()
				} else if journaled && !stored { // the journal's replay
					go func() { ret <- s.SubmitContext(context.Background(), coordinator.Task{ID: "p", Func: "fatal"}) }()
				} else if gen == 0 {
					go func() { ret <- s.Submit(coordinator.Task{ID: "p", Func: "fatal"}) }()
				} else {
					ret <- nil
				}
				for {
					synctest.Wait()
					select {
					case next := <-died:
						calls++
						mem = next
						goto crashed
					default:
					}
					select {
					case h.pass <- struct{}{}: // let one commit land
					default:
						t.Fatalf("gen %d: nothing moves", gen)
					}
				}
			crashed:
				// End the dead process's goroutines: nothing it does from now
				// on reaches the store the next process opens (a copy).
				cur.FailCommits(errors.New("dead"))
				h.hold.Store(false)
				close(h.pass)
				<-ret
				s.Shutdown(context.Background())
			}
			t.Logf("journaled %v: the function was called %d times; the task ended %v", journaled, calls, final)
			// The bound: MaxAttempts + 1 calls, one more for a journaled
			// batch (its first start, before its commit, is not counted).
			bound := 2
			if journaled {
				bound = 3
			}
			if calls > bound || !strings.HasPrefix(final, "failed") {
				t.Errorf("journaled %v: a function that kills its process was called %d times, and the task ended %s; want at most %d calls, then failed (MaxAttempts 1)", journaled, calls, final, bound)
			}
		})
	}
}

// With a prompt subscriber: the events, Info, History and WaitTasks of a
// root that ran before its commit tell one attempt, started then
// succeeded, and so does the store once committed.
func TestJournaledRootEventsInfoHistory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := storetest.NewMemory()
		h := &holdStore{Store: mem.Open(), pass: make(chan struct{})}
		ran := make(chan struct{})
		s, err := coordinator.New(coordinator.WithStore(h), coordinator.WithWorkers(2),
			coordinator.WithFunc("f", func(context.Context, []byte) error { close(ran); return nil }))
		if err != nil {
			t.Fatal(err)
		}
		var evs []string
		done := make(chan struct{})
		s.Subscribe(func(e coordinator.Event) {
			evs = append(evs, e.TaskID+" "+e.Kind.String())
			if e.Kind == coordinator.EventSucceeded {
				close(done)
			}
		})
		h.hold.Store(true)
		ret := make(chan error, 1)
		go func() { ret <- s.SubmitJournaled(context.Background(), coordinator.Task{ID: "r", Func: "f"}) }()
		synctest.Wait()
		select {
		case <-ran:
		default:
			t.Fatal("r did not run during its commit")
		}
		h.hold.Store(false)
		close(h.pass)
		if err := <-ret; err != nil {
			t.Fatal(err)
		}
		if err := s.WaitTasks(context.Background(), "r"); err != nil {
			t.Fatal(err)
		}
		<-done
		ti, _ := s.Info("r")
		hist, _ := s.History("r")
		t.Logf("events %v; info %v attempts %d; history %d attempts", evs, ti.Status, ti.Attempts, len(hist.Attempts))
		if len(evs) != 2 || evs[0] != "r started" || evs[1] != "r succeeded" || ti.Status != coordinator.Succeeded || ti.Attempts != 1 || len(hist.Attempts) != 1 {
			t.Errorf("events %v, Info %v with %d attempts, history of %d; want started then succeeded, one attempt", evs, ti.Status, ti.Attempts, len(hist.Attempts))
		}
		s.Shutdown(context.Background())
		s2, err := coordinator.New(coordinator.WithStore(mem.Crash().Open()), coordinator.WithWorkers(2),
			coordinator.WithFunc("f", func(context.Context, []byte) error { return nil }))
		if err != nil {
			t.Fatal(err)
		}
		ti, _ = s2.Info("r")
		if ti.Status != coordinator.Succeeded || ti.Attempts != 1 {
			t.Errorf("restored: %v with %d attempts; want succeeded, one attempt", ti.Status, ti.Attempts)
		}
		s2.Shutdown(context.Background())
	})
}

// One worker runs l (until its context ends); journaled r goes out early
// behind it; the commit fails. Shutdown does not hang, r never runs, l's
// context ends with ErrClosed, nothing of r is stored.
func TestJournaledEarlyBehindABusyWorkerFailedCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := storetest.NewMemory()
		h := &holdStore{Store: mem.Open(), pass: make(chan struct{})}
		var rRan atomic.Bool
		lCause := make(chan error, 1)
		s, err := coordinator.New(coordinator.WithStore(h), coordinator.WithWorkers(1),
			coordinator.WithFunc("long", func(ctx context.Context, _ []byte) error {
				<-ctx.Done()
				lCause <- context.Cause(ctx)
				return ctx.Err()
			}),
			coordinator.WithFunc("r", func(context.Context, []byte) error { rRan.Store(true); return nil }))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Submit(coordinator.Task{ID: "l", Func: "long"}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		before := mem.Len()
		h.hold.Store(true)
		ret := make(chan error, 1)
		go func() { ret <- s.SubmitJournaled(context.Background(), coordinator.Task{ID: "r", Func: "r"}) }()
		synctest.Wait()
		mem.FailCommits(errors.New("disk full"))
		h.hold.Store(false)
		close(h.pass)
		if err := <-ret; !errors.Is(err, coordinator.ErrStoreFailed) {
			t.Errorf("SubmitJournaled with a failing commit = %v; want ErrStoreFailed", err)
		}
		if err := s.Shutdown(context.Background()); !errors.Is(err, coordinator.ErrStoreFailed) {
			t.Errorf("Shutdown = %v; want ErrStoreFailed", err)
		}
		if c := <-lCause; !errors.Is(c, coordinator.ErrClosed) {
			t.Errorf("l's context ended with cause %v; want ErrClosed", c)
		}
		if rRan.Load() || mem.Len() != before {
			t.Errorf("r ran: %v; records %d, then %d; want r never run, nothing stored", rRan.Load(), before, mem.Len())
		}
	})
}
