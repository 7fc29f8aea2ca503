package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/worker"
)

// Traps a user falls into, made safe or clear. Each test states what a
// user can now rely on.

type queryError struct{ table string }

func (e *queryError) Error() string { return "query " + e.table + ": connection reset" }

// WaitTasks' *TasksError unwraps to each listed task's error: errors.Is
// finds a cancel, errors.As a task's own error type.
func TestTasksErrorUnwrapsEachTasksError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		err := s.Submit(
			coordinator.Task{ID: "query", Run: func(context.Context) error { return &queryError{"users"} }},
			coordinator.Task{ID: "later", Run: ok, Delay: time.Hour},
			coordinator.Task{ID: "after", Run: ok, Deps: []string{"query"}},
		)
		if err != nil {
			t.Fatal(err)
		}
		s.Cancel("later")
		err = s.WaitTasks(context.Background(), "query", "later", "after")
		var qe *queryError
		if !errors.As(err, &qe) || qe.table != "users" {
			t.Errorf("errors.As(WaitTasks error, *queryError) = false for %v", err)
		}
		if !errors.Is(err, coordinator.ErrCancelled) {
			t.Errorf("errors.Is(WaitTasks error, ErrCancelled) = false for %v", err)
		}
	})
}

// A timed-out attempt keeps both its timeout and what its function
// returned once its context ended: errors.Is sees ErrTimeout and
// context.DeadlineExceeded, errors.As the function's own error type, and
// the message says all of it.
func TestTimedOutAttemptKeepsItsError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		err := s.Submit(coordinator.Task{ID: "slow", Timeout: time.Second, Run: func(ctx context.Context) error {
			<-ctx.Done()
			return fmt.Errorf("%w (%w)", &queryError{"users"}, ctx.Err())
		}})
		if err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		ti, _ := s.Info("slow")
		var qe *queryError
		var te *worker.TimeoutError
		switch {
		case ti.Status != coordinator.Failed:
			t.Fatalf("slow is %v; want failed", ti.Status)
		case !errors.Is(ti.Err, worker.ErrTimeout), !errors.Is(ti.Err, context.DeadlineExceeded):
			t.Errorf("error %v: want errors.Is ErrTimeout and context.DeadlineExceeded", ti.Err)
		case !errors.As(ti.Err, &qe), !errors.As(ti.Err, &te) || te.After != time.Second:
			t.Errorf("error %v: want the function's *queryError and a *worker.TimeoutError after 1s", ti.Err)
		case !strings.Contains(ti.Err.Error(), "query users") || !strings.Contains(ti.Err.Error(), "timed out after 1s"):
			t.Errorf("message %q: want both the timeout and the function's error", ti.Err)
		}
	})
}

// SubmitBatch then Batch.Wait tells how the batch ended under any
// retention, the tasks that ended (and were forgotten) before Wait was
// called included: Submit then WaitTasks could not tell a task that
// succeeded and was forgotten from one never submitted (ErrUnknownTask).
func TestSubmitBatchWaitsUnderAnyRetention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithRetention(0))
		fail := func(context.Context) error { return errors.New("boom") }
		b, err := s.SubmitBatch(context.Background(),
			coordinator.Task{ID: "a", Run: ok}, coordinator.Task{ID: "b", Run: fail},
			coordinator.Task{ID: "c", Run: ok, Deps: []string{"b"}})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // all ended; retention forgot them at once
		if _, found := s.Info("a"); found {
			t.Fatal("a is still known: the test wants it forgotten before Wait")
		}
		if err := s.WaitTasks(context.Background(), "a"); !errors.Is(err, coordinator.ErrUnknownTask) {
			t.Fatalf("WaitTasks(a) after retention = %v; want ErrUnknownTask (the trap)", err)
		}
		var te *coordinator.TasksError
		if err := b.Wait(context.Background()); !errors.As(err, &te) || len(te.Tasks) != 2 ||
			te.Tasks[0].ID != "b" || te.Tasks[0].Status != coordinator.Failed ||
			te.Tasks[1].ID != "c" || te.Tasks[1].Status != coordinator.Skipped {
			t.Fatalf("Batch.Wait = %v; want b failed and c skipped", err)
		}
		if err := b.Wait(context.Background()); !errors.As(err, &te) {
			t.Fatalf("a second Batch.Wait = %v; want the same answer", err)
		}
		ok2, err := s.SubmitBatch(context.Background(), coordinator.Task{ID: "a", Run: ok})
		if err != nil {
			t.Fatal(err)
		}
		if err := ok2.Wait(context.Background()); err != nil {
			t.Fatalf("Batch.Wait of a success = %v; want nil", err)
		}
		var g coordinator.Graph
		g.Add(coordinator.Task{ID: "g", Run: ok})
		gb, err := s.SubmitGraphBatch(context.Background(), &g)
		if err != nil {
			t.Fatal(err)
		}
		if err := gb.Wait(context.Background()); err != nil {
			t.Fatalf("graph Batch.Wait = %v; want nil", err)
		}
		if _, err := s.SubmitBatch(context.Background(), coordinator.Task{ID: ""}); !errors.Is(err, coordinator.ErrInvalidTask) {
			t.Fatalf("SubmitBatch(bad) = %v; want ErrInvalidTask", err)
		}
	})
}

// A Batch's Wait gives up at its context's end and answers later.
func TestBatchWaitEndsWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		g := newGate()
		b, err := s.SubmitBatch(context.Background(), coordinator.Task{ID: "slow", Run: g.run})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := b.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Batch.Wait = %v; want DeadlineExceeded", err)
		}
		g.release()
		if err := b.Wait(context.Background()); err != nil {
			t.Fatalf("a later Batch.Wait = %v; want nil", err)
		}
	})
}

// Wait and Shutdown called from inside a task would wait for that task:
// they return ErrFromTask at once, whether the call is on the task's
// goroutine (any context) or made with its context (any goroutine), on a
// timed attempt's goroutine too; Shutdown has begun by then, and ends
// once the task returns.
func TestWaitAndShutdownFromATaskFailClearly(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		call    func(s *coordinator.Scheduler, ctx context.Context) error
	}{
		{"Wait", 0, func(s *coordinator.Scheduler, _ context.Context) error { return s.Wait(context.Background()) }},
		{"Wait with the task's context elsewhere", 0, func(s *coordinator.Scheduler, ctx context.Context) error {
			errc := make(chan error, 1)
			go func() { errc <- s.Wait(ctx) }()
			return <-errc
		}},
		{"Wait in a timed attempt", time.Hour, func(s *coordinator.Scheduler, _ context.Context) error {
			return s.Wait(context.Background())
		}},
		{"Shutdown", 0, func(s *coordinator.Scheduler, _ context.Context) error { return s.Shutdown(context.Background()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScheduler(t)
				got := make(chan error, 1)
				err := s.Submit(coordinator.Task{ID: "caller", Timeout: tc.timeout, Run: func(ctx context.Context) error {
					got <- tc.call(s, ctx)
					return nil
				}})
				if err != nil {
					t.Fatal(err)
				}
				if err := <-got; !errors.Is(err, coordinator.ErrFromTask) {
					t.Fatalf("%s from a task = %v; want ErrFromTask", tc.name, err)
				}
				if tc.name == "Shutdown" {
					if err := s.Submit(coordinator.Task{ID: "more", Run: ok}); !errors.Is(err, coordinator.ErrClosed) {
						t.Fatalf("Submit after a Shutdown from a task = %v; want ErrClosed: it has begun", err)
					}
				}
				if err := s.Wait(context.Background()); err != nil {
					t.Fatalf("Wait from outside = %v", err)
				}
			})
		})
	}
}

// Errors name the task once, and cut a long ID; a task with no function
// says what to do; a nil *Graph and options given twice are refused.
func TestErrorsNameTheTaskOnce(t *testing.T) {
	s := newScheduler(t)
	long := strings.Repeat("x", 5000)
	for _, tc := range []struct {
		task coordinator.Task
		is   error
		want string
	}{
		{coordinator.Task{ID: "c", Run: ok, Deps: []string{"b"}}, coordinator.ErrUnknownDependency, `coordinator: task "c": unknown dependency: "b"`},
		{coordinator.Task{ID: "n"}, worker.ErrNilRun, `coordinator: task "n": invalid task: worker: task has no Run function: set Run, or Func`},
		{coordinator.Task{ID: long, Run: ok, Delay: -1}, coordinator.ErrInvalidTask, `(5000 bytes): invalid task: negative Delay`},
	} {
		err := s.Submit(tc.task)
		msg := fmt.Sprint(err)
		if !errors.Is(err, tc.is) || !strings.Contains(msg, tc.want) || strings.Count(msg, "task ") > 2 || len(msg) > 300 {
			t.Errorf("Submit(%.20s) = %.300s; want it to match %v and contain %q, naming the task once, briefly", tc.task.ID, msg, tc.is, tc.want)
		}
	}
	for _, task := range []coordinator.Task{
		{ID: "f", Func: long},                                      // an unregistered function's long name
		{ID: "c", Run: ok, Cron: long},                             // a long bad cron expression
		{ID: "z", Run: ok, Cron: "CRON_TZ=" + long + " * * * * *"}, // a long zone
		{ID: strings.Repeat("\x80", 5000), Run: ok, Delay: -1},     // not UTF-8
	} {
		err := s.Submit(task)
		if err == nil || len(err.Error()) > 400 || !strings.Contains(err.Error(), "coordinator: task \"") {
			t.Errorf("Submit(%.12q...) = %d bytes of message: %.80s; want a short message", task.ID, len(fmt.Sprint(err)), err)
		}
		if strings.HasPrefix(task.ID, "\x80") && strings.Contains(err.Error(), `task ""`) {
			t.Errorf("an ID that is not UTF-8 shows nothing of itself: %.80s", err)
		}
	}
	cyc := []coordinator.Task{{ID: long + "1", Run: ok, Deps: []string{long + "2"}}, {ID: long + "2", Run: ok, Deps: []string{long + "1"}}}
	if err := s.Submit(cyc...); !errors.Is(err, coordinator.ErrCycle) || len(err.Error()) > 400 {
		t.Errorf("a cycle of long IDs: %d bytes of message; want it cut", len(err.Error()))
	}
	if _, err := coordinator.New(coordinator.WithWorkers(2), coordinator.WithWorkers(3)); !errors.Is(err, coordinator.ErrInvalidOption) {
		t.Errorf("New(WithWorkers twice) = %v; want ErrInvalidOption, as for WithPool twice", err)
	}
}

// A watch reports causes as worse as they got before it answers: c is
// skipped when a is cancelled, and blamed on b once b fails; the batch,
// all of whose tasks are final by then, says so, under any retention.
// (It used to report the cause known when c was skipped.)
func TestBatchWaitReportsTheWorstCause(t *testing.T) {
	for _, retain := range []bool{false, true} {
		t.Run(fmt.Sprint("retention=", retain), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				opts := []coordinator.Option{coordinator.WithWorkers(2)}
				if retain {
					opts = append(opts, coordinator.WithRetention(0))
				}
				s := newScheduler(t, opts...)
				g := newGate()
				b, err := s.SubmitBatch(context.Background(),
					coordinator.Task{ID: "a", Run: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
					coordinator.Task{ID: "b", Run: func(ctx context.Context) error { g.run(ctx); return errors.New("b failed") }},
					coordinator.Task{ID: "c", Run: ok, Deps: []string{"a", "b"}})
				if err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				s.Cancel("a")
				synctest.Wait()
				g.release()
				var te *coordinator.TasksError
				if err := b.Wait(context.Background()); !errors.As(err, &te) {
					t.Fatalf("Batch.Wait = %v; want a *TasksError", err)
				}
				for _, ti := range te.Tasks {
					if ti.ID == "c" && ti.Cause != "b" {
						t.Errorf("Batch.Wait says c was skipped because of %q; want b (a failure outranks a cancel)", ti.Cause)
					}
				}
			})
		})
	}
}
