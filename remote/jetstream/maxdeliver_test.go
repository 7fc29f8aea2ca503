package jetstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	bjs "github.com/batonhq/baton/remote/jetstream"
	"github.com/batonhq/baton/worker"
)

// An attempt whose last delivery (WithMaxDeliver) was taken by a worker
// that then died fails with ErrMaxDeliveries about a lease after that
// delivery's lease ran out, though no worker is left: JetStream's
// max-deliveries advisory comes only when a worker pulls again, and the
// task used to stay Running until its Timeout. Each delivery here goes to
// a worker that dies with it, killed with SIGKILL or stopped (its Serve
// hands the attempt back); after the last, none runs.
func TestMaxDeliveriesFailsWithNoWorkerLeft(t *testing.T) {
	const (
		lease      = 500 * time.Millisecond
		deliveries = 2
		// The last delivery's lease runs out at most a lease after its
		// worker died (it extended the lease just before); the attempt
		// must fail about a lease after that. Half a lease of slack, for
		// a loaded machine.
		bound = 2*lease + lease/2
	)
	for _, how := range []string{"killed", "stopped"} {
		t.Run(how, func(t *testing.T) {
			srv := startServer(t, t.TempDir(), -1)
			nc := connect(t, srv.ClientURL())
			pool := newPool(t, nc, "orphan", bjs.WithLease(lease), bjs.WithMaxDeliver(deliveries))
			s := newScheduler(t, coordinator.WithPool("remote", 1, pool))
			// take waits until a worker has taken delivery d of the
			// attempt, and kills it (its Serve, or its process).
			var take func(d int)
			switch how {
			case "killed":
				reports := subscribe(t, nc, "test.hold")
				procs := startWorkers(t, srv.ClientURL(), "orphan", deliveries)
				take = func(d int) {
					var where struct {
						PID      int `json:"pid"`
						Delivery int `json:"delivery"`
					}
					if err := json.Unmarshal(recv(t, reports, "a worker holding the attempt").Data, &where); err != nil {
						t.Fatal(err)
					}
					if where.Delivery != d {
						t.Fatalf("worker got delivery %d; want %d", where.Delivery, d)
					}
					for _, p := range procs {
						if p.cmd.Process.Pid == where.PID {
							if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
								t.Fatalf("SIGKILL %s: %v", p.name, err)
							}
							return
						}
					}
					t.Fatalf("no worker process has pid %d", where.PID)
				}
			case "stopped":
				took := make(chan int, 1)
				take = func(d int) {
					a := serveStoppable(t, nc, "orphan", map[string]bjs.Handler{"hold": func(ctx context.Context, _ []byte) ([]byte, error) {
						a, _ := bjs.AttemptOf(ctx)
						took <- a.Delivery
						<-ctx.Done()
						return nil, context.Cause(ctx)
					}}, bjs.WithConcurrency(1))
					if got := recv(t, took, "a worker holding the attempt"); got != d {
						t.Fatalf("worker got delivery %d; want %d", got, d)
					}
					a.stop(t)
				}
			}
			if err := s.Submit(task("orphan", "hold")); err != nil {
				t.Fatalf("Submit = %v", err)
			}
			for d := 1; d <= deliveries; d++ {
				take(d)
			}
			died := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), long)
			defer cancel()
			err := s.WaitTasks(ctx, "orphan")
			took := time.Since(died)
			var te *coordinator.TasksError
			if !errors.As(err, &te) {
				t.Fatalf("WaitTasks = %v; want a *TasksError (the task failed)", err)
			}
			ti := info(t, s, "orphan")
			if ti.Status != coordinator.Failed || !errors.Is(ti.Err, bjs.ErrMaxDeliveries) {
				t.Fatalf("Info = %v, %v; want Failed with ErrMaxDeliveries", ti.Status, ti.Err)
			}
			if ti.Attempts != 1 {
				t.Errorf("Attempts = %d; want 1: a redelivery is the same attempt", ti.Attempts)
			}
			t.Logf("failed %v after the last worker died (lease %v)", took, lease)
			if took > bound {
				t.Errorf("failed %v after the last worker died; want within %v", took, bound)
			}
		})
	}
}

// A worker that runs an attempt's last delivery for several leases keeps
// it: the Pool gives up an attempt on its last delivery only once its
// worker stops reporting, not after a lease.
func TestLastDeliveryHeldByLiveWorkerIsKept(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	const lease = 300 * time.Millisecond
	pool := newPool(t, nc, "lastlive", bjs.WithLease(lease), bjs.WithMaxDeliver(1))
	serve(t, nc, "lastlive", map[string]bjs.Handler{"long": func(ctx context.Context, d []byte) ([]byte, error) {
		select {
		case <-time.After(4 * lease): // the work itself, longer than a lease and a half
			return d, nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}})
	if err := pool.Do(context.Background(), worker.Job{ID: "long", Round: 1, Attempt: 1, Payload: bjs.Payload{Kind: "long"}}); err != nil {
		t.Fatalf("Do = %v; want nil", err)
	}
}
