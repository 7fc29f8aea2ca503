package bench_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"net/url"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/pgstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"go.uber.org/goleak"
)

var (
	jobs    = flag.Int("pgbench.n", 100_000, "jobs per insert and run benchmark")
	batch   = flag.Int("pgbench.batch", 1000, "jobs per insert batch")
	samples = flag.Int("pgbench.latency", 300, "transactional inserts timed one at a time by the latency benchmark")
	// River's default FetchCooldown (100 ms) lets a client fetch at most
	// ten times a second: one worker runs 10 jobs a second, 16 at most
	// 160. Its minimum is the fairest setting for a throughput race.
	riverCooldown = flag.Duration("pgbench.river-cooldown", river.FetchCooldownMin, "River's FetchCooldown")
)

func TestMain(m *testing.M) {
	flag.Parse()
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"))
}

// freshDB creates a database for one benchmark on BATON_PG_URL's server
// and returns a pool on it, closed and the database dropped at the end.
func freshDB(b *testing.B) *pgxpool.Pool {
	b.Helper()
	admin := os.Getenv("BATON_PG_URL")
	if admin == "" {
		if os.Getenv("CI") == "true" {
			b.Fatal("BATON_PG_URL is not set (.ci/postgres start DIR)")
		}
		b.Skip("BATON_PG_URL is not set (.ci/postgres start DIR)")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	r := make([]byte, 6)
	rand.Read(r)
	name := "baton_bench_" + hex.EncodeToString(r)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		b.Fatal(err)
	}
	u, _ := url.Parse(admin)
	u.Path = "/" + name
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 40
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		pool.Close()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			b.Error(err)
			return
		}
		defer conn.Close(ctx)
		conn.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)")
	})
	if err := pgstore.Migrate(ctx, pool); err != nil {
		b.Fatal(err)
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		b.Fatal(err)
	}
	return pool
}

// EmptyArgs is River's empty job.
type EmptyArgs struct{}

// Kind names River's empty job.
func (EmptyArgs) Kind() string { return "empty" }

// emptyWorker runs River's empty job: it counts it, and calls started.
type emptyWorker struct {
	river.WorkerDefaults[EmptyArgs]
	done    *atomic.Int64
	all     chan struct{}
	want    int64
	started func()
}

func (w *emptyWorker) Work(ctx context.Context, job *river.Job[EmptyArgs]) error {
	if w.started != nil {
		w.started()
	}
	if w.done.Add(1) == w.want {
		close(w.all)
	}
	return nil
}

func riverClient(b *testing.B, pool *pgxpool.Pool, workers int, w *emptyWorker) *river.Client[pgx.Tx] {
	b.Helper()
	ws := river.NewWorkers()
	river.AddWorker(ws, w)
	cfg := &river.Config{Workers: ws, FetchCooldown: *riverCooldown}
	if workers > 0 {
		cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}}
	}
	c, err := river.NewClient(riverpgxv5.New(pool), cfg)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// batonService starts a Service of store name running "empty" (which
// counts its runs and calls started) with the given workers, and waits
// until it leads.
func batonService(b *testing.B, pool *pgxpool.Pool, workers int, done *atomic.Int64, all chan struct{}, want int64, started func()) *pgstore.Service {
	b.Helper()
	sv, err := pgstore.New(pool, "bench", pgstore.WithScheduler(
		coordinator.WithWorkers(workers),
		coordinator.WithFunc("empty", func(ctx context.Context, p []byte) error {
			if started != nil {
				started()
			}
			if done.Add(1) == want {
				close(all)
			}
			return nil
		})))
	if err != nil {
		b.Fatal(err)
	}
	<-sv.Leading()
	return sv
}

func ids(prefix string, from, n int) []coordinator.Task {
	ts := make([]coordinator.Task, n)
	for i := range ts {
		ts[i] = coordinator.Task{ID: fmt.Sprintf("%s%d", prefix, from+i), Func: "empty"}
	}
	return ts
}

// BenchmarkInsert: n independent jobs inserted in batches, one
// transaction per batch, nobody working them: Baton's SubmitTx (one inbox
// row per batch, checked against the stored IDs), River's InsertManyTx
// (one row per job).
func BenchmarkInsert(b *testing.B) {
	b.Run("baton", func(b *testing.B) {
		for range b.N {
			pool := freshDB(b)
			cl, err := pgstore.NewClient(pool, "bench")
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			start := time.Now()
			for i := 0; i < *jobs; i += *batch {
				if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					_, err := cl.SubmitTx(ctx, tx, ids("j", i, min(*batch, *jobs-i))...)
					return err
				}); err != nil {
					b.Fatal(err)
				}
			}
			report(b, time.Since(start))
			cl.Close()
		}
	})
	b.Run("river", func(b *testing.B) {
		for range b.N {
			pool := freshDB(b)
			c := riverClient(b, pool, 0, &emptyWorker{})
			ctx := context.Background()
			start := time.Now()
			for i := 0; i < *jobs; i += *batch {
				params := make([]river.InsertManyParams, min(*batch, *jobs-i))
				for k := range params {
					params[k] = river.InsertManyParams{Args: EmptyArgs{}}
				}
				if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					_, err := c.InsertManyTx(ctx, tx, params)
					return err
				}); err != nil {
					b.Fatal(err)
				}
			}
			report(b, time.Since(start))
		}
	})
}

// BenchmarkRun: n empty jobs inserted in batches (a transaction each:
// SubmitTx; River's InsertMany) while the workers run them, from the
// first insert to the last completion.
func BenchmarkRun(b *testing.B) {
	for _, workers := range []int{1, 16} {
		b.Run(fmt.Sprintf("baton/workers=%d", workers), func(b *testing.B) {
			for range b.N {
				pool := freshDB(b)
				var done atomic.Int64
				all := make(chan struct{})
				sv := batonService(b, pool, workers, &done, all, int64(*jobs), nil)
				ctx := context.Background()
				start := time.Now()
				for i := 0; i < *jobs; i += *batch {
					// As River's InsertMany: the batch is inserted, not
					// waited for.
					if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						_, err := sv.SubmitTx(ctx, tx, ids("j", i, min(*batch, *jobs-i))...)
						return err
					}); err != nil {
						b.Fatal(err)
					}
				}
				<-all
				report(b, time.Since(start))
				if err := sv.Shutdown(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("river/workers=%d", workers), func(b *testing.B) {
			for range b.N {
				pool := freshDB(b)
				w := &emptyWorker{done: new(atomic.Int64), all: make(chan struct{}), want: int64(*jobs)}
				c := riverClient(b, pool, workers, w)
				ctx := context.Background()
				if err := c.Start(ctx); err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				for i := 0; i < *jobs; i += *batch {
					params := make([]river.InsertManyParams, min(*batch, *jobs-i))
					for k := range params {
						params[k] = river.InsertManyParams{Args: EmptyArgs{}}
					}
					if _, err := c.InsertMany(ctx, params); err != nil {
						b.Fatal(err)
					}
				}
				<-w.all
				report(b, time.Since(start))
				if err := c.Stop(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func report(b *testing.B, d time.Duration) {
	b.ReportMetric(float64(*jobs)/d.Seconds(), "jobs/s")
	b.ReportMetric(d.Seconds(), "s")
}

// BenchmarkLatency: one job at a time inserted in a transaction of its
// own; the time from the commit's return to the job's start.
func BenchmarkLatency(b *testing.B) {
	b.Run("baton", func(b *testing.B) {
		for range b.N {
			pool := freshDB(b)
			started := make(chan time.Time, 1)
			var done atomic.Int64
			sv := batonService(b, pool, 16, &done, make(chan struct{}), -1, func() { started <- time.Now() })
			ctx := context.Background()
			var lat []time.Duration
			for i := range *samples {
				tx, err := pool.Begin(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := sv.SubmitTx(ctx, tx, ids("l", i, 1)...); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(ctx); err != nil {
					b.Fatal(err)
				}
				committed := time.Now()
				lat = append(lat, (<-started).Sub(committed))
			}
			reportLatency(b, lat)
			if err := sv.Shutdown(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("river", func(b *testing.B) {
		for range b.N {
			pool := freshDB(b)
			started := make(chan time.Time, 1)
			w := &emptyWorker{done: new(atomic.Int64), all: make(chan struct{}), want: -1, started: func() { started <- time.Now() }}
			c := riverClient(b, pool, 16, w)
			ctx := context.Background()
			if err := c.Start(ctx); err != nil {
				b.Fatal(err)
			}
			var lat []time.Duration
			for range *samples {
				tx, err := pool.Begin(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.InsertTx(ctx, tx, EmptyArgs{}, nil); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(ctx); err != nil {
					b.Fatal(err)
				}
				committed := time.Now()
				lat = append(lat, (<-started).Sub(committed))
			}
			reportLatency(b, lat)
			if err := c.Stop(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func reportLatency(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "ms-median")
	b.ReportMetric(float64(lat[len(lat)*90/100].Microseconds())/1000, "ms-p90")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "ms-p99")
}
