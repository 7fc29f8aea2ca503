package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
)

// Submit, Cancel, Info, Subscribe and Wait from many goroutines while tasks
// run. Every task ends in exactly one final state, every subscriber sees
// exactly one final event per task it saw start, and dependencies hold.
// Run with -race -count=20.
func TestConcurrentSubmitCancelSubscribe(t *testing.T) {
	s := newScheduler(t, coordinator.WithWorkers(4))
	const producers, perProducer = 8, 60
	var finals sync.Map // task id -> count of final events seen by the first subscriber
	s.Subscribe(func(e coordinator.Event) {
		switch e.Kind {
		case coordinator.EventSucceeded, coordinator.EventFailed, coordinator.EventCancelled, coordinator.EventSkipped:
			n, _ := finals.LoadOrStore(e.TaskID, new(atomic.Int32))
			n.(*atomic.Int32).Add(1)
		}
	})
	var ran sync.Map // id -> true once its Run started
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			var prev string
			for i := range perProducer {
				id := fmt.Sprintf("p%d-%d", p, i)
				var deps []string
				if prev != "" {
					deps = []string{prev}
				}
				depOf := prev
				task := coordinator.Task{ID: id, Deps: deps, Priority: i % 3, Run: func(ctx context.Context) error {
					if depOf != "" {
						if _, ok := ran.Load(depOf + "/done"); !ok {
							return fmt.Errorf("%s ran before its dependency %s finished", id, depOf)
						}
					}
					ran.Store(id, true)
					if i%7 == 0 {
						return errors.New("planned failure")
					}
					ran.Store(id+"/done", true)
					return nil
				}}
				if err := s.Submit(task); err != nil {
					t.Errorf("Submit(%s) = %v", id, err)
					return
				}
				if i%5 == 0 {
					s.Cancel(id)
				}
				if i%11 == 0 {
					unsub := s.Subscribe(func(coordinator.Event) {})
					defer unsub()
				}
				s.Info(prev)
				prev = id
			}
		})
	}
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		s.Wait(ctx)
	})
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Wait(ctx); err != nil {
		t.Fatalf("Wait = %v", err)
	}
	for p := range producers {
		for i := range perProducer {
			id := fmt.Sprintf("p%d-%d", p, i)
			info, found := s.Info(id)
			if !found || !info.Status.Final() {
				t.Fatalf("Info(%s) = %+v, %v; want a final status", id, info, found)
			}
			if info.Status == coordinator.Failed && info.Err.Error() != "planned failure" {
				t.Fatalf("%s failed with %v", id, info.Err)
			}
		}
	}
	// The subscriber may still be delivering: shut down, which waits for it.
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	count := 0
	finals.Range(func(k, v any) bool {
		if n := v.(*atomic.Int32).Load(); n != 1 {
			t.Errorf("%v: %d final events; want exactly 1", k, n)
		}
		count++
		return true
	})
	if count != producers*perProducer {
		t.Fatalf("final events for %d tasks; want %d", count, producers*perProducer)
	}
}
