package boltstore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/boltstore"
	"github.com/batonhq/baton/coordinator"
)

// countingStore counts the commits and the records written through it.
type countingStore struct {
	*boltstore.Store
	commits, puts, deletes atomic.Int64
}

func (c *countingStore) Commit(ch *coordinator.Changes) error {
	c.commits.Add(1)
	c.puts.Add(int64(len(ch.Puts)))
	c.deletes.Add(int64(len(ch.Deletes)))
	return c.Store.Commit(ch)
}

func noop(context.Context, []byte) error { return nil }

func durableTasks(prefix string, n int) []coordinator.Task {
	tasks := make([]coordinator.Task, n)
	for i := range tasks {
		tasks[i] = coordinator.Task{ID: fmt.Sprintf("%s%d", prefix, i), Func: "noop"}
	}
	return tasks
}

// BenchmarkTransitions measures task transitions through the store: n
// empty tasks, submitted at once, each started and succeeded (two
// transitions), all written in group commits. The timer covers the run
// phase only (from Submit's return to Wait's).
func BenchmarkTransitions(b *testing.B) {
	const n = 50_000
	b.ReportAllocs()
	var commits, puts int64
	var run time.Duration
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		st := &countingStore{Store: boltstore.New(filepath.Join(b.TempDir(), "baton.db"))}
		s, err := coordinator.New(coordinator.WithStore(st), coordinator.WithFunc("noop", noop))
		if err != nil {
			b.Fatal(err)
		}
		tasks := durableTasks("t", n)
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
		b.StartTimer()
	}
	tasks := float64(n) * float64(b.N)
	b.ReportMetric(2*tasks/run.Seconds(), "transitions/s")
	b.ReportMetric(float64(puts)/run.Seconds(), "records/s")
	b.ReportMetric(float64(commits)/run.Seconds(), "commits/s")
	b.ReportMetric(float64(puts)/float64(commits), "records/commit")
}

// BenchmarkSubmit100k measures one Submit of 100,000 durable tasks: it
// returns once they are committed. The tasks are delayed, so the timer
// covers the Submit alone.
func BenchmarkSubmit100k(b *testing.B) {
	const n = 100_000
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		s, err := coordinator.New(coordinator.WithStore(boltstore.New(filepath.Join(b.TempDir(), "baton.db"))),
			coordinator.WithFunc("noop", noop))
		if err != nil {
			b.Fatal(err)
		}
		tasks := durableTasks("t", n)
		for i := range tasks {
			tasks[i].Delay = time.Hour
		}
		b.StartTimer()
		if err := s.Submit(tasks...); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := s.Shutdown(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(n), "tasks/op")
}

// BenchmarkRunPhase runs the same graph (chains of 10 tasks) on an
// in-memory scheduler and on a durable one, alternately in one process,
// and reports both run phases (from Submit's return to Wait's) and their
// ratio: with empty tasks (10,000 of them: the store's cost laid bare) and
// with tasks that wait 1ms, as for I/O (1,000 of them, 8 workers).
func BenchmarkRunPhase(b *testing.B) {
	for _, tc := range []struct {
		name            string
		chains, workers int
		work            time.Duration
	}{{"empty", 1000, 2, 0}, {"io=1ms", 100, 8, time.Millisecond}} {
		b.Run(tc.name, func(b *testing.B) {
			task := noop
			if tc.work > 0 {
				task = func(ctx context.Context, _ []byte) error {
					select { // simulated I/O
					case <-time.After(tc.work):
					case <-ctx.Done():
					}
					return nil
				}
			}
			graph := func() *coordinator.Graph {
				var g coordinator.Graph
				for c := range tc.chains {
					var prev coordinator.Handle
					for k := range 10 {
						t := coordinator.Task{ID: fmt.Sprintf("c%d-%d", c, k), Func: "task"}
						if k == 0 {
							prev = g.Add(t)
						} else {
							prev = g.Add(t, prev)
						}
					}
				}
				return &g
			}
			run := func(durable bool) time.Duration {
				opts := []coordinator.Option{coordinator.WithFunc("task", task), coordinator.WithWorkers(tc.workers)}
				if durable {
					opts = append(opts, coordinator.WithStore(boltstore.New(filepath.Join(b.TempDir(), "baton.db"))))
				}
				s, err := coordinator.New(opts...)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Shutdown(context.Background())
				if err := s.SubmitGraph(context.Background(), graph()); err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				if err := s.Wait(context.Background()); err != nil {
					b.Fatal(err)
				}
				return time.Since(start)
			}
			b.ReportAllocs()
			var mem, dur time.Duration
			for b.Loop() {
				mem += run(false)
				dur += run(true)
			}
			b.ReportMetric(float64(mem.Nanoseconds())/float64(b.N), "memory-ns/op")
			b.ReportMetric(float64(dur.Nanoseconds())/float64(b.N), "durable-ns/op")
			b.ReportMetric(float64(dur)/float64(mem), "durable/memory")
		})
	}
}

// BenchmarkRetentionFileSize runs rounds of 1,000 durable tasks on one
// scheduler that forgets final tasks at once (WithRetention(0)), and
// reports the file's size after the first 10 rounds and after all of
// them: retention deletes forgotten tasks from the store, and bbolt reuses
// their pages.
func BenchmarkRetentionFileSize(b *testing.B) {
	const rounds, n = 100, 1000
	for b.Loop() {
		st := boltstore.New(filepath.Join(b.TempDir(), "baton.db"))
		s, err := coordinator.New(coordinator.WithStore(st), coordinator.WithFunc("noop", noop), coordinator.WithRetention(0))
		if err != nil {
			b.Fatal(err)
		}
		var early int64
		for r := range rounds {
			if err := s.Submit(durableTasks(fmt.Sprintf("r%d-", r), n)...); err != nil {
				b.Fatal(err)
			}
			if err := s.Wait(context.Background()); err != nil {
				b.Fatal(err)
			}
			if r == 9 {
				early, _ = st.Size()
			}
		}
		late, _ := st.Size()
		if err := s.Shutdown(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(early), "bytes-after-10k-tasks")
		b.ReportMetric(float64(late), "bytes-after-100k-tasks")
	}
}

// BenchmarkReopen measures New on a store holding n tasks that wait (a
// delay): the restore reads them and writes nothing (they resume as they
// were stored). Each New rewrote every such record before, and grew the
// file by a copy of them.
func BenchmarkReopen(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "baton.db")
			s, err := coordinator.New(coordinator.WithStore(boltstore.New(path)), coordinator.WithFunc("noop", noop))
			if err != nil {
				b.Fatal(err)
			}
			tasks := durableTasks("t", n)
			for i := range tasks {
				tasks[i].Delay = time.Hour
			}
			if err := s.Submit(tasks...); err != nil {
				b.Fatal(err)
			}
			if err := s.Shutdown(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				s, err := coordinator.New(coordinator.WithStore(boltstore.New(path)), coordinator.WithFunc("noop", noop))
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Shutdown(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(n)*1000, "ns/task")
		})
	}
}

// BenchmarkRestartBacklog measures what a restart costs the tasks that
// were ready at the crash: each starts carefully once (its start is
// committed before its function is called: coordinator/careful.go), so
// that a function that kills its process at once is counted. n empty
// tasks wait in a paused pool; "first" runs them from Resume on a new
// scheduler, "restored" from Resume on a scheduler that restored them
// from the file, "restored-not-careful" the same with
// WithCarefulRestart(false). All on 4 workers, in one op, so that they
// share the machine's noise.
func BenchmarkRestartBacklog(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			open := func(path string, opts ...coordinator.Option) *coordinator.Scheduler {
				s, err := coordinator.New(append([]coordinator.Option{coordinator.WithStore(boltstore.New(path)),
					coordinator.WithFunc("noop", noop), coordinator.WithWorkers(4)}, opts...)...)
				if err != nil {
					b.Fatal(err)
				}
				return s
			}
			backlog := func() string { // a file of n tasks waiting in a paused pool
				path := filepath.Join(b.TempDir(), "baton.db")
				s := open(path)
				if err := s.Pause(""); err != nil {
					b.Fatal(err)
				}
				if err := s.Submit(durableTasks("t", n)...); err != nil {
					b.Fatal(err)
				}
				if err := s.Shutdown(context.Background()); err != nil {
					b.Fatal(err)
				}
				return path
			}
			runFrom := func(s *coordinator.Scheduler) time.Duration {
				start := time.Now()
				if err := s.Resume(""); err != nil {
					b.Fatal(err)
				}
				if err := s.Wait(context.Background()); err != nil {
					b.Fatal(err)
				}
				d := time.Since(start)
				if err := s.Shutdown(context.Background()); err != nil {
					b.Fatal(err)
				}
				return d
			}
			var first, careful, rash time.Duration
			for b.Loop() {
				careful += runFrom(open(backlog())) // paused, as stored
				rash += runFrom(open(backlog(), coordinator.WithCarefulRestart(false)))
				s := open(filepath.Join(b.TempDir(), "baton.db"))
				if err := s.Pause(""); err != nil {
					b.Fatal(err)
				}
				if err := s.Submit(durableTasks("t", n)...); err != nil {
					b.Fatal(err)
				}
				first += runFrom(s)
			}
			per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) / float64(n) }
			b.ReportMetric(per(first), "first-ns/task")
			b.ReportMetric(per(careful), "restored-ns/task")
			b.ReportMetric(per(rash), "restored-not-careful-ns/task")
			b.ReportMetric(float64(careful)/float64(first), "restored/first")
		})
	}
}
