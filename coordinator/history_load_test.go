package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/worker"
)

// A Feed read over and over (small max) while tasks of three pools run:
// the Tasks of every entry add up to the attempts that ended, per pool;
// an entry with an ID names a task of its pool.
func TestFeedCountsEveryEndWhileTasksRun(t *testing.T) {
	s := newScheduler(t, coordinator.WithWorkers(2), coordinator.WithPool("a", 2, worker.Func{}), coordinator.WithPool("b", 3, worker.Func{}))
	f := s.Feed()
	defer f.Close()
	pools := []string{"", "a", "b"}
	const n = 6000
	var ran [3]atomic.Int64
	var tasks []coordinator.Task
	for i := range n {
		p := i % 3
		tk := coordinator.Task{ID: fmt.Sprint(i), Pool: pools[p]}
		if i >= 30 {
			tk.Deps = []string{fmt.Sprint(i % 30)}
		}
		calls := 0
		flaky := i%97 == 0
		tk.Run = func(ctx context.Context) error {
			ran[p].Add(1)
			if flaky {
				calls++
				if calls == 1 {
					return errors.New("once")
				}
			}
			return nil
		}
		if flaky {
			tk.Retry = coordinator.RetryPolicy{MaxAttempts: 2}
		}
		tasks = append(tasks, tk)
	}
	done := make(chan struct{})
	var got [3]int
	var bad []string
	idPool := map[string]string{}
	for _, tk := range tasks {
		idPool[tk.ID] = tk.Pool
	}
	readErr := make(chan error, 1)
	read := func() bool {
		p, err := f.Next(context.Background(), 7)
		if err != nil {
			readErr <- err
			return false
		}
		if p.Dropped != 0 {
			bad = append(bad, fmt.Sprintf("dropped %d", p.Dropped))
		}
		for _, e := range p.Ended {
			k := map[string]int{"": 0, "a": 1, "b": 2}[e.Pool]
			got[k] += e.Tasks
			if e.Tasks < 1 || (e.Tasks > 1 && (e.ID != "" || e.Attempt != 1 || e.Run != 1 || e.Outcome != coordinator.OutcomeSucceeded)) {
				bad = append(bad, fmt.Sprintf("%+v", e))
			}
			if e.ID != "" && idPool[e.ID] != e.Pool {
				bad = append(bad, fmt.Sprintf("ID %s of pool %q told in pool %q", e.ID, idPool[e.ID], e.Pool))
			}
		}
		return p.More
	}
	stop := make(chan struct{})
	reads := 0
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				for read() {
				}
				return
			default:
			}
			read()
			reads++
		}
	}()
	if err := s.Submit(tasks...); err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(stop)
	<-done
	t.Logf("%d reads", reads)
	for k := range 3 {
		if got[k] != int(ran[k].Load()) {
			t.Errorf("pool %q: the feed told %d ends; %d attempts ran", pools[k], got[k], ran[k].Load())
		}
	}
	if len(bad) > 0 {
		t.Errorf("bad entries: %v", bad[:min(len(bad), 10)])
	}
	select {
	case err := <-readErr:
		t.Error(err)
	default:
	}
}
