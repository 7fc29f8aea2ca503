package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	bjs "github.com/batonhq/baton/remote/jetstream"
	"github.com/batonhq/baton/worker"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
)

// inFlight is the number of attempts in flight in the pipelined runs.
const inFlight = 256

// BenchmarkThroughput measures attempts per second through the Pool (a
// Serve in this process, file storage) beside a raw JetStream round trip
// measured in the same run: publish to a work-queue stream, a consumer
// publishes a reply to a results stream and acks, the requester consumes
// the reply. Compare pool/* with raw/* of the same run: the target is a
// pipelined ratio of at least 0.8.
//
//	go test ./remote/jetstream -run '^$' -bench Throughput -count 5
func BenchmarkThroughput(b *testing.B) {
	for _, mode := range []string{"sequential", "pipelined"} {
		b.Run("raw/"+mode, func(b *testing.B) { benchRaw(b, mode == "pipelined") })
		b.Run("pool/"+mode, func(b *testing.B) { benchPool(b, mode == "pipelined") })
	}
	b.Run("scheduler/pipelined", benchScheduler)
}

func benchServer(b *testing.B) (coord, work *nats.Conn) {
	b.Helper()
	srv := startServer(b, b.TempDir(), -1)
	var err error
	if coord, err = nats.Connect(srv.ClientURL()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(coord.Close)
	if work, err = nats.Connect(srv.ClientURL()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(work.Close)
	return coord, work
}

// BenchmarkRatio alternates blocks of raw and Pool round trips on one
// server, so that both see the same machine load, and reports the Pool's
// throughput as a fraction of the raw one (pool/raw, the median over
// pairs of adjacent blocks): the figure the target (at least 0.8
// pipelined) is about. Each of the b.N iterations is one block of each.
//
//	go test ./remote/jetstream -run '^$' -bench Ratio -benchtime 20x
func BenchmarkRatio(b *testing.B) {
	for _, mode := range []string{"sequential", "pipelined"} {
		b.Run(mode, func(b *testing.B) {
			pipelined := mode == "pipelined"
			block := 200
			if pipelined {
				block = 4 * inFlight
			}
			coord, work := benchServer(b)
			raw := rawRoundTrip(b, coord, work)
			pool := poolRoundTrip(b, coord, work, "ratio")
			var tRaw, tPool time.Duration
			var ratios []float64 // per pair of adjacent blocks: raw time / pool time
			n := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				// Alternate which goes first.
				var r, p time.Duration
				if i%2 == 0 {
					r = timeBlock(b, pipelined, n, block, raw)
					p = timeBlock(b, pipelined, n, block, pool)
				} else {
					p = timeBlock(b, pipelined, n, block, pool)
					r = timeBlock(b, pipelined, n, block, raw)
				}
				tRaw, tPool = tRaw+r, tPool+p
				ratios = append(ratios, r.Seconds()/p.Seconds())
				n += block
			}
			b.StopTimer()
			slices.Sort(ratios)
			b.ReportMetric(float64(n)/tRaw.Seconds(), "raw-attempts/s")
			b.ReportMetric(float64(n)/tPool.Seconds(), "pool-attempts/s")
			// The median pair: a burst of load from other processes
			// during one block moves it less than it moves the sums.
			b.ReportMetric(ratios[len(ratios)/2], "pool/raw")
		})
	}
}

// timeBlock runs attempts from..from+n and returns how long they took.
func timeBlock(b *testing.B, pipelined bool, from, n int, do func(i int) error) time.Duration {
	start := time.Now()
	var next atomic.Int64
	next.Store(int64(from))
	end := int64(from + n)
	worker := func() error {
		for {
			i := next.Add(1) - 1
			if i >= end {
				return nil
			}
			if err := do(int(i)); err != nil {
				return err
			}
		}
	}
	if !pipelined {
		if err := worker(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	var wg sync.WaitGroup
	errs := make(chan error, inFlight)
	for range inFlight {
		wg.Go(func() {
			if err := worker(); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return time.Since(start)
}

// run calls do b.N times, one at a time or from inFlight goroutines.
func run(b *testing.B, pipelined bool, do func(i int) error) {
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	if !pipelined {
		for i := range b.N {
			if err := do(i); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		var wg sync.WaitGroup
		errs := make(chan error, inFlight)
		for range inFlight {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= b.N {
						return
					}
					if err := do(i); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "attempts/s")
}

func benchPool(b *testing.B, pipelined bool) {
	coord, work := benchServer(b)
	run(b, pipelined, poolRoundTrip(b, coord, work, "bench"))
}

// poolRoundTrip sets up a Pool and a Serve (stopped at cleanup) and
// returns one attempt's round trip.
func poolRoundTrip(b *testing.B, coord, work *nats.Conn, name string) func(i int) error {
	ctx := context.Background()
	p, err := bjs.NewPool(ctx, coord, name)
	if err != nil {
		b.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() {
		served <- bjs.Serve(sctx, work, name, map[string]bjs.Handler{"echo": echo}, bjs.WithConcurrency(inFlight))
	}()
	b.Cleanup(func() { stop(); <-served; p.Close() })
	data := []byte("payload")
	return func(i int) error {
		return p.Do(ctx, worker.Job{ID: strconv.Itoa(i), Round: 1, Attempt: 1, Payload: bjs.Payload{Kind: "echo", Data: data}})
	}
}

// benchScheduler runs b.N independent tasks through a Scheduler whose
// remote pool has inFlight slots.
func benchScheduler(b *testing.B) {
	coord, work := benchServer(b)
	ctx := b.Context()
	p, err := bjs.NewPool(ctx, coord, "sched")
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() {
		served <- bjs.Serve(sctx, work, "sched", map[string]bjs.Handler{"echo": echo}, bjs.WithConcurrency(inFlight))
	}()
	defer func() { stop(); <-served }()
	s, err := coordinator.New(coordinator.WithPool("remote", inFlight, p), coordinator.WithWorkers(1))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Shutdown(ctx)
	tasks := make([]coordinator.Task, b.N)
	for i := range tasks {
		tasks[i] = coordinator.Task{ID: strconv.Itoa(i), Pool: "remote", Payload: bjs.Payload{Kind: "echo"}}
	}
	b.ReportAllocs()
	b.ResetTimer()
	if err := s.Submit(tasks...); err != nil {
		b.Fatal(err)
	}
	if err := s.Wait(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if c := s.Counts(); c.Succeeded != b.N {
		b.Fatalf("Counts = %+v; want %d succeeded", c, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "attempts/s")
}

// benchRaw is the reference: the same round trip written directly
// against JetStream, with the same stream settings.
func benchRaw(b *testing.B, pipelined bool) {
	coord, work := benchServer(b)
	run(b, pipelined, rawRoundTrip(b, coord, work))
}

// rawRoundTrip sets up the raw reference (torn down at cleanup) and
// returns one round trip.
func rawRoundTrip(b *testing.B, coord, work *nats.Conn) func(i int) error {
	ctx := context.Background()
	js, _ := njs.New(coord)
	wjs, _ := njs.New(work)
	ws, err := js.CreateStream(ctx, njs.StreamConfig{Name: "RAW_W", Subjects: []string{"raw.w"},
		Retention: njs.WorkQueuePolicy, Storage: njs.FileStorage})
	if err != nil {
		b.Fatal(err)
	}
	rs, err := js.CreateStream(ctx, njs.StreamConfig{Name: "RAW_R", Subjects: []string{"raw.r"},
		Retention: njs.InterestPolicy, Storage: njs.FileStorage})
	if err != nil {
		b.Fatal(err)
	}
	wc, err := ws.CreateOrUpdateConsumer(ctx, njs.ConsumerConfig{Durable: "w", AckPolicy: njs.AckExplicitPolicy, MaxAckPending: -1})
	if err != nil {
		b.Fatal(err)
	}
	rc, err := rs.CreateOrUpdateConsumer(ctx, njs.ConsumerConfig{Durable: "r", AckPolicy: njs.AckExplicitPolicy, MaxAckPending: -1})
	if err != nil {
		b.Fatal(err)
	}
	// The worker: reply, then ack. Consume calls it serially, so each
	// message gets its own goroutine, as Serve's handlers do.
	var inflight sync.WaitGroup
	wcc, err := wc.Consume(func(m njs.Msg) {
		inflight.Go(func() {
			reply := nats.NewMsg("raw.r")
			reply.Data = m.Data()
			reply.Header.Set(nats.MsgIdHdr, "out/"+m.Headers().Get(nats.MsgIdHdr))
			if _, err := wjs.PublishMsg(ctx, reply); err == nil {
				m.Ack()
			}
		})
	}, njs.PullMaxMessages(inFlight))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { wcc.Stop(); <-wcc.Closed(); inflight.Wait() })
	var mu sync.Mutex
	waiting := map[string]chan struct{}{}
	rcc, err := rc.Consume(func(m njs.Msg) {
		mu.Lock()
		ch := waiting[string(m.Data())]
		delete(waiting, string(m.Data()))
		mu.Unlock()
		if ch != nil {
			close(ch)
		}
		m.Ack()
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rcc.Stop(); <-rcc.Closed() })
	return func(i int) error {
		key := strconv.Itoa(i)
		ch := make(chan struct{})
		mu.Lock()
		waiting[key] = ch
		mu.Unlock()
		msg := nats.NewMsg("raw.w")
		msg.Data = []byte(key)
		msg.Header.Set(nats.MsgIdHdr, key)
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		select {
		case <-ch:
			return nil
		case <-time.After(time.Minute):
			return errors.New("raw round trip: no reply within a minute")
		}
	}
}
