package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
)

func TestRetentionForgets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithRetention(time.Minute))
		if err := s.Submit(coordinator.Task{ID: "a", Run: ok}); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		time.Sleep(time.Minute - time.Nanosecond)
		synctest.Wait()
		if _, found := s.Info("a"); !found {
			t.Fatalf("Info(a) just before its retention ends: unknown; want known")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if info, found := s.Info("a"); found {
			t.Fatalf("Info(a) after its retention = %+v; want unknown", info)
		}
		if s.Cancel("a") {
			t.Fatalf("Cancel(forgotten) = true; want false")
		}
		err := s.Submit(coordinator.Task{ID: "b", Run: ok, Deps: []string{"a"}})
		if !errors.Is(err, coordinator.ErrUnknownDependency) {
			t.Fatalf("Submit(depends on forgotten) = %v; want ErrUnknownDependency", err)
		}
		if err := s.Submit(coordinator.Task{ID: "a", Run: ok}); err != nil {
			t.Fatalf("Submit(forgotten ID again) = %v; want nil", err)
		}
		settle(t, s)
		if st := status(t, s, "a"); st != coordinator.Succeeded {
			t.Fatalf("status(new a) = %v; want succeeded", st)
		}
	})
}

// A final task is kept while something refers to it: a predecessor that
// still holds an edge to it, or a retained task it caused to be skipped.
func TestRetentionKeepsWhatIsReferred(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithRetention(time.Minute), coordinator.WithWorkers(2))
		g := newGate()
		err := s.Submit(
			coordinator.Task{ID: "bad", Run: func(context.Context) error { return errors.New("no") }},
			coordinator.Task{ID: "slow", Run: g.run},
			coordinator.Task{ID: "child", Run: ok, Deps: []string{"bad", "slow"}},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		synctest.Wait()
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		info, found := s.Info("child")
		if !found || info.Status != coordinator.Skipped || info.Cause != "bad" {
			t.Fatalf("Info(child) = %+v, %v; want kept (slow still holds an edge to it), skipped, cause bad", info, found)
		}
		if _, found := s.Info("bad"); !found {
			t.Fatalf("Info(bad): forgotten while child, kept, names it as its cause")
		}
		g.release()
		settle(t, s)
		// slow is final now: child and then bad are overdue and go at once;
		// slow itself is kept for its own minute.
		for _, id := range []string{"child", "bad"} {
			if _, found := s.Info(id); found {
				t.Fatalf("Info(%s) found; want forgotten once nothing refers to it", id)
			}
		}
		if _, found := s.Info("slow"); !found {
			t.Fatalf("Info(slow): forgotten early")
		}
	})
}

// Waves of tasks through a scheduler with retention: the heap stays flat
// once the attempt history, on by default, holds as many attempts as it
// keeps (DefaultHistoryTotal: five waves).
func TestRetentionKeepsMemoryFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("waves of tasks")
	}
	s := newScheduler(t, coordinator.WithRetention(0), coordinator.WithWorkers(2))
	const waves, perWave, full = 14, 20_000, 6 // the history is full after wave full
	var heap [waves]uint64
	for w := range waves {
		tasks := make([]coordinator.Task, perWave)
		for i := range tasks {
			id := fmt.Sprintf("w%d-%d", w, i)
			tasks[i] = coordinator.Task{ID: id, Run: ok}
			if i > 0 && i%4 != 0 {
				tasks[i].Deps = []string{tasks[i-1].ID}
			}
			if i%10 == 0 {
				tasks[i].Run = func(context.Context) error { return errors.New("planned") }
			}
		}
		if err := s.Submit(tasks...); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		if err := s.Wait(context.Background()); err != nil {
			t.Fatalf("Wait = %v", err)
		}
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		heap[w] = m.HeapAlloc
	}
	if perWave*(full-1) < coordinator.DefaultHistoryTotal {
		t.Fatalf("the history is not full after wave %d", full)
	}
	if early, late := heap[full-1], heap[waves-1]; float64(late) > 1.25*float64(early)+(1<<20) {
		t.Fatalf("heap after wave %d: %d B, after wave %d: %d B; want it flat", full, early, waves, late)
	}
}

// 100,000 recurring tasks at once, each running three times.
func TestManyRecurring(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 recurring tasks")
	}
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(2))
		const n = 100_000
		var runs atomic.Int64
		tasks := make([]coordinator.Task, n)
		for i := range tasks {
			tasks[i] = coordinator.Task{ID: fmt.Sprint("r", i), Every: time.Second, Times: 3,
				Run: func(context.Context) error { runs.Add(1); return nil }}
		}
		if err := s.Submit(tasks...); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		start := time.Now()
		if err := s.Wait(context.Background()); err != nil {
			t.Fatalf("Wait = %v", err)
		}
		if got := runs.Load(); got != 3*n {
			t.Fatalf("%d runs; want %d", got, 3*n)
		}
		if took := time.Since(start); took != 2*time.Second {
			t.Fatalf("the three runs took %v; want 2s (fixed rate, planned from the first start)", took)
		}
		for _, id := range []string{"r0", "r99999"} {
			if info, _ := s.Info(id); info.Status != coordinator.Succeeded || info.Runs != 3 {
				t.Fatalf("Info(%s) = %+v; want succeeded after 3 runs", id, info)
			}
		}
	})
}

// TestRetentionZeroForgetsBeforeWait: under WithRetention(0) a batch whose
// Wait has returned is forgotten already, so that a service may submit the
// same IDs again at once, even while other work keeps the coordinator
// dispatching (which applies ends as it fills lanes: they were settled
// only at the next iteration, after the batch's Wait was answered, and
// the next Submit of the same IDs failed with ErrDuplicateID).
func TestRetentionZeroForgetsBeforeWait(t *testing.T) {
	s := newScheduler(t, coordinator.WithWorkers(2), coordinator.WithRetention(0))
	ctx := context.Background()
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() { // other work, so that the coordinator keeps dispatching
		for n := 0; ; n++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			tasks := make([]coordinator.Task, 64)
			for i := range tasks {
				tasks[i] = coordinator.Task{ID: fmt.Sprintf("bg-%d-%d", n, i), Run: ok}
			}
			b, err := s.SubmitBatch(ctx, tasks...)
			if err == nil {
				err = b.Wait(ctx)
			}
			if err != nil {
				done <- err
				return
			}
		}
	}()
	tasks := make([]coordinator.Task, 8)
	for i := range tasks {
		tasks[i] = coordinator.Task{ID: fmt.Sprintf("fg-%d", i), Run: ok}
	}
	for round := range 3000 {
		b, err := s.SubmitBatch(ctx, tasks...)
		if err != nil {
			close(stop)
			<-done
			t.Fatalf("round %d: SubmitBatch of the IDs a batch waited before = %v; want nil", round, err)
		}
		if err := b.Wait(ctx); err != nil {
			t.Fatalf("round %d: Wait = %v", round, err)
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("other work: %v", err)
	}
}
