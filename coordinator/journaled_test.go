package coordinator_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/coordinator/storetest"
)

// holdStore is a Store whose commits each wait for a pass on pass while
// hold is set.
type holdStore struct {
	coordinator.Store
	hold atomic.Bool
	pass chan struct{}
}

func (h *holdStore) Commit(c *coordinator.Changes) error {
	if h.hold.Load() {
		<-h.pass
	}
	return h.Store.Commit(c)
}

// heldStore returns a holdStore on mem that holds every commit.
func heldStore(mem *storetest.Memory) *holdStore {
	h := &holdStore{Store: mem.Open(), pass: make(chan struct{})}
	h.hold.Store(true)
	return h
}

// started reports whether id's function has begun.
func (st *startLog) started(id string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	_, ok := st.at[id]
	return ok
}

// A journaled batch's task that depends on nothing starts while the
// commit that stores it is under way (its caller's journal holds it); a
// task that depends on it starts only once the end that released it is
// committed; a plain Submit's task, only once its own commit is done. A
// crash before the commit leaves nothing of the batch in the store: its
// caller submits it again. No subscriber: the configuration most users
// run.
func TestJournaledRootsStartBeforeTheirCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := storetest.NewMemory()
		g := heldStore(mem)
		log := newStarts()
		s, err := coordinator.New(coordinator.WithStore(g), coordinator.WithWorkers(2),
			coordinator.WithFunc("step", func(_ context.Context, p []byte) error { log.mark(string(p)); return nil }))
		if err != nil {
			t.Fatal(err)
		}
		task := func(id string, deps ...string) coordinator.Task {
			return coordinator.Task{ID: id, Func: "step", Payload: []byte(id), Deps: deps}
		}
		accepted := make(chan error, 1)
		go func() { accepted <- s.SubmitJournaled(context.Background(), task("a"), task("b", "a")) }()
		synctest.Wait() // the loop waits in the commit that stores the batch
		if !log.started("a") || log.started("b") {
			t.Fatalf("during the batch's commit: a started %v, b started %v; want a only", log.started("a"), log.started("b"))
		}
		if crashed := mem.Crash(); crashed.Len() != 0 {
			t.Errorf("a crash now leaves %d records; want none (the journal has the batch)", crashed.Len())
		}
		g.pass <- struct{}{}
		if err := <-accepted; err != nil {
			t.Fatalf("SubmitJournaled = %v", err)
		}
		synctest.Wait() // the loop waits in the commit of a's end
		if log.started("b") {
			t.Fatal("b started before the commit of a's end")
		}
		g.pass <- struct{}{}
		synctest.Wait()
		if !log.started("b") {
			t.Fatal("b did not start once a's end was committed")
		}
		go func() { accepted <- s.Submit(task("c")) }()
		synctest.Wait()
		if log.started("c") {
			t.Fatal("a plain Submit's task started before its commit")
		}
		// Let every later commit through.
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case g.pass <- struct{}{}:
				case <-stop:
					return
				}
			}
		}()
		if err := <-accepted; err != nil {
			t.Fatalf("Submit = %v", err)
		}
		if err := s.WaitTasks(context.Background(), "a", "b", "c"); err != nil {
			t.Fatalf("WaitTasks = %v", err)
		}
		if !log.started("c") {
			t.Fatal("c did not run")
		}
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		close(stop)
	})
}

// Without a store SubmitJournaled is SubmitContext: the same checks, the
// same errors, and the batch runs.
func TestSubmitJournaledWithoutAStore(t *testing.T) {
	s, err := coordinator.New(coordinator.WithWorkers(2))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	ran := make(chan struct{})
	if err := s.SubmitJournaled(context.Background(), coordinator.Task{ID: "a", Run: func(context.Context) error { close(ran); return nil }}); err != nil {
		t.Fatal(err)
	}
	<-ran
	err = s.SubmitJournaled(context.Background(), coordinator.Task{ID: "a", Run: func(context.Context) error { return nil }})
	if _, ok := err.(*coordinator.TaskError); !ok {
		t.Errorf("a duplicate ID = %v; want a *TaskError (ErrDuplicateID)", err)
	}
}

// A journaled root that started before a commit that then failed is
// stopped as a crash stops it: its context ends with cause ErrClosed and
// Shutdown waits for it; the batch is refused with ErrStoreFailed, and
// nothing of it is stored (its caller's journal submits it again).
func TestJournaledRootStoppedByAFailedCommit(t *testing.T) {
	for _, workers := range []int{1, 3} {
		synctest.Test(t, func(t *testing.T) {
			mem := storetest.NewMemory()
			g := heldStore(mem)
			cause := make(chan error, 2)
			s, err := coordinator.New(coordinator.WithStore(g), coordinator.WithWorkers(workers),
				coordinator.WithFunc("step", func(ctx context.Context, _ []byte) error {
					<-ctx.Done()
					cause <- context.Cause(ctx)
					return ctx.Err()
				}))
			if err != nil {
				t.Fatal(err)
			}
			accepted := make(chan error, 1)
			go func() {
				accepted <- s.SubmitJournaled(context.Background(), coordinator.Task{ID: "a", Func: "step"}, coordinator.Task{ID: "b", Func: "step"})
			}()
			synctest.Wait() // the roots run while the commit waits
			mem.FailCommits(errors.New("disk full"))
			close(g.pass)
			if err := <-accepted; !errors.Is(err, coordinator.ErrStoreFailed) {
				t.Errorf("SubmitJournaled with a failing commit = %v; want ErrStoreFailed", err)
			}
			if err := s.Shutdown(context.Background()); !errors.Is(err, coordinator.ErrStoreFailed) {
				t.Errorf("Shutdown = %v; want ErrStoreFailed", err)
			}
			for range min(workers, 2) {
				select {
				case got := <-cause:
					if !errors.Is(got, coordinator.ErrClosed) {
						t.Errorf("a started attempt's context ended with cause %v; want ErrClosed", got)
					}
				default:
					t.Error("a root did not start before the commit, or its context did not end")
				}
			}
			if mem.Len() != 0 {
				t.Errorf("the store holds %d records; want none", mem.Len())
			}
		})
	}
}
