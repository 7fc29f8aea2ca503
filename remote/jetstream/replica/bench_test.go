package replica_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/remote/jetstream/replica"
)

// countingStore counts the commits and the records written through it.
type countingStore struct {
	*replica.Store
	commits, puts atomic.Int64
}

func (c *countingStore) Commit(ch *coordinator.Changes) error {
	c.commits.Add(1)
	c.puts.Add(int64(len(ch.Puts)))
	return c.Store.Commit(ch)
}

func noop(context.Context, []byte) error { return nil }

// BenchmarkTransitions is boltstore's BenchmarkTransitions on the
// replicated store: n empty tasks, submitted at once, each started and
// succeeded (two transitions), all written in group commits, to an R3 log
// in a three-server cluster on loopback (the servers run in this process,
// and share its cores). The timer covers the run phase only (from
// Submit's return to Wait's). Beside boltstore's, in one run:
//
//	go test ./boltstore/ ./remote/jetstream/replica/ -run '^$' -bench Transitions -benchtime 3x
func BenchmarkTransitions(b *testing.B) {
	const n = 50_000
	c := startCluster(b, 3, nil)
	nc := c.connect(b)
	waitReady(b, nc)
	b.ReportAllocs()
	var commits, puts int64
	var run time.Duration
	for i := range b.N {
		b.StopTimer()
		st := &countingStore{Store: replica.NewStore(nc, fmt.Sprintf("bench%d", i), replica.WithLockWait(long))}
		s, err := coordinator.New(coordinator.WithStore(st), coordinator.WithFunc("noop", noop))
		if err != nil {
			b.Fatal(err)
		}
		tasks := make([]coordinator.Task, n)
		for j := range tasks {
			tasks[j] = coordinator.Task{ID: fmt.Sprintf("t%d", j), Func: "noop"}
		}
		if err := s.Submit(tasks...); err != nil {
			b.Fatal(err)
		}
		c0, p0 := st.commits.Load(), st.puts.Load()
		b.StartTimer()
		start := time.Now()
		if err := s.Wait(context.Background()); err != nil {
			b.Fatal(err)
		}
		run += time.Since(start)
		b.StopTimer()
		commits += st.commits.Load() - c0
		puts += st.puts.Load() - p0
		if err := s.Shutdown(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	tasks := float64(n) * float64(b.N)
	b.ReportMetric(2*tasks/run.Seconds(), "transitions/s")
	b.ReportMetric(float64(puts)/run.Seconds(), "records/s")
	b.ReportMetric(float64(commits)/run.Seconds(), "commits/s")
	b.ReportMetric(float64(puts)/float64(commits), "records/commit")
}
