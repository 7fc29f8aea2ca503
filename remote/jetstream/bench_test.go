package jetstream_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

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
	ctx := b.Context()
	p, err := bjs.NewPool(ctx, coord, "bench")
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() {
		served <- bjs.Serve(sctx, work, "bench", map[string]bjs.Handler{"echo": echo}, bjs.WithConcurrency(inFlight))
	}()
	defer func() { stop(); <-served }()
	data := []byte("payload")
	run(b, pipelined, func(i int) error {
		return p.Do(ctx, worker.Job{ID: strconv.Itoa(i), Round: 1, Attempt: 1, Payload: bjs.Payload{Kind: "echo", Data: data}})
	})
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
	ctx := b.Context()
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
	defer func() { wcc.Stop(); <-wcc.Closed(); inflight.Wait() }()
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
	defer func() { rcc.Stop(); <-rcc.Closed() }()
	run(b, pipelined, func(i int) error {
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
		case <-ctx.Done():
			return ctx.Err()
		}
	})
}
