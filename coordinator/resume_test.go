package coordinator_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/coordinator/storetest"
	"github.com/batonhq/baton/worker"
)

// farWorker stands for a pool whose attempts run outside the process
// (remote workers): every Do reports its job and blocks until its context
// ends. resumes is what it answers worker.Resumer.
type farWorker struct {
	resumes bool
	jobs    chan worker.Job
}

func (w *farWorker) Do(ctx context.Context, j worker.Job) error {
	w.jobs <- j
	<-ctx.Done()
	return context.Cause(ctx)
}

func (w *farWorker) ResumesAttempts() bool { return w.resumes }

// plainWorker is a farWorker that does not implement worker.Resumer.
type plainWorker struct{ w *farWorker }

func (p plainWorker) Do(ctx context.Context, j worker.Job) error { return p.w.Do(ctx, j) }

// An attempt a crash left running on a pool whose Worker is a
// worker.Resumer is handed to it again as the same attempt (same Round
// and Attempt, not counted twice, no ErrInterrupted); on any other pool,
// and on a Resumer that says no, it is interrupted and counted.
func TestRestoreResumesAttemptsOfAResumer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		resumer bool // the pool's Worker implements worker.Resumer
		resumes bool // and says yes
	}{{"Resumer", true, true}, {"Resumer saying no", true, false}, {"plain Worker", false, false}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := storetest.NewMemory()
				w := &farWorker{resumes: tc.resumes, jobs: make(chan worker.Job, 4)}
				var pool worker.Worker = w
				if !tc.resumer {
					pool = plainWorker{w}
				}
				s := restored(t, mem, coordinator.WithPool("far", 1, pool))
				task := coordinator.Task{ID: "x", Pool: "far", Payload: []byte("x"),
					Retry: coordinator.RetryPolicy{MaxAttempts: 3}}
				if err := s.Submit(task); err != nil {
					t.Fatal(err)
				}
				if j := <-w.jobs; j.Attempt != 1 || j.Round != 1 {
					t.Fatalf("first Do: attempt %d round %d; want 1 and 1", j.Attempt, j.Round)
				}
				synctest.Wait() // the start is committed
				crashed := mem.Crash()
				if err := s.Shutdown(context.Background()); err != nil {
					t.Fatal(err)
				}

				w2 := &farWorker{resumes: tc.resumes, jobs: make(chan worker.Job, 4)}
				pool = w2
				if !tc.resumer {
					pool = plainWorker{w2}
				}
				s2 := restored(t, crashed, coordinator.WithPool("far", 1, pool))
				j := <-w2.jobs
				ti, _ := s2.Info("x")
				if tc.resumer && tc.resumes {
					if j.Attempt != 1 || j.Round != 1 || ti.Attempts != 1 || ti.Err != nil {
						t.Errorf("after the crash: Do of attempt %d round %d, Info %d attempts, error %v; want the same attempt handed out again (1, 1, 1, nil)",
							j.Attempt, j.Round, ti.Attempts, ti.Err)
					}
					return
				}
				if j.Attempt != 2 || ti.Attempts != 2 || !errors.Is(ti.Err, coordinator.ErrInterrupted) {
					t.Errorf("after the crash: Do of attempt %d, Info %d attempts, error %v; want the interrupted attempt counted and attempt 2 run",
						j.Attempt, ti.Attempts, ti.Err)
				}
			})
		})
	}
}
