package pgstore_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/pgstore"
	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"
)

// testCtx bounds a test's waits: a real timeout, only to report a
// failure instead of hanging.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// handOver shuts leader from down and waits until to leads, failing the
// test if ctx ends first.
func handOver(ctx context.Context, t *testing.T, from, to *pgstore.Service) {
	t.Helper()
	if err := from.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-to.Leading():
	case <-ctx.Done():
		t.Fatal("the standby never led")
	}
}

// startService starts an instance of store name with a function "echo"
// (its payload becomes its result) and "fail", and shuts it down at the
// end of the test.
func startService(t *testing.T, name string, opts ...pgstore.Option) *pgstore.Service {
	t.Helper()
	pool := newPool(t)
	base := []pgstore.Option{pgstore.WithLease(time.Second), pgstore.WithScheduler(
		coordinator.WithFunc("echo", func(ctx context.Context, p []byte) error {
			return coordinator.SetResult(ctx, p)
		}),
		coordinator.WithFunc("fail", func(ctx context.Context, p []byte) error { return errors.New("failed: " + string(p)) }),
	)}
	sv, err := pgstore.New(pool, name, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := sv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown = %v", err)
		}
	})
	return sv
}

func TestServiceSubmitWaitInfoCancel(t *testing.T) {
	ctx := testCtx(t)
	name := uniqueName("svc")
	sv := startService(t, name)
	<-sv.Leading()
	if err := sv.Submit(ctx,
		coordinator.Task{ID: "a", Func: "echo", Payload: []byte("A")},
		coordinator.Task{ID: "b", Func: "fail", Payload: []byte("B"), Deps: []string{"a"}},
		coordinator.Task{ID: "c", Func: "echo", Deps: []string{"b"}},
		coordinator.Task{ID: "later", Func: "echo", Delay: time.Hour},
	); err != nil {
		t.Fatalf("Submit = %v", err)
	}
	err := sv.WaitTasks(ctx, "a", "b", "c")
	var te *coordinator.TasksError
	if !errors.As(err, &te) || len(te.Tasks) != 2 || te.Tasks[0].ID != "b" || te.Tasks[0].Status != coordinator.Failed ||
		te.Tasks[1].ID != "c" || te.Tasks[1].Status != coordinator.Skipped || te.Tasks[1].Cause != "b" {
		t.Fatalf("WaitTasks = %v; want b failed and c skipped behind b", err)
	}
	if te.Tasks[0].Err == nil || te.Tasks[0].Err.Error() != "failed: B" {
		t.Errorf("b's error = %v; want failed: B", te.Tasks[0].Err)
	}
	ti, ok, err := sv.Info(ctx, "a")
	if err != nil || !ok || ti.Status != coordinator.Succeeded || string(ti.Result.([]byte)) != "A" || ti.Attempts != 1 {
		t.Errorf("Info(a) = %+v, %v, %v; want succeeded with result A", ti, ok, err)
	}
	if _, ok, err := sv.Info(ctx, "nope"); ok || err != nil {
		t.Errorf("Info(nope) = %v, %v; want not found", ok, err)
	}
	if err := sv.WaitTasks(ctx, "nope"); !errors.Is(err, coordinator.ErrUnknownTask) {
		t.Errorf("WaitTasks(nope) = %v; want ErrUnknownTask", err)
	}
	if ok, err := sv.Cancel(ctx, "later"); !ok || err != nil {
		t.Errorf("Cancel(later) = %v, %v; want true", ok, err)
	}
	if ok, err := sv.Cancel(ctx, "later"); ok || err != nil {
		t.Errorf("Cancel(later) again = %v, %v; want false", ok, err)
	}
	if err := sv.WaitTasks(ctx, "later"); !errors.Is(err, coordinator.ErrCancelled) {
		t.Errorf("WaitTasks(later) = %v; want ErrCancelled", err)
	}
	// Refusals come back as Submit's errors.
	if err := sv.Submit(ctx, coordinator.Task{ID: "a", Func: "echo"}); !errors.Is(err, coordinator.ErrDuplicateID) {
		t.Errorf("Submit of a stored ID = %v; want ErrDuplicateID", err)
	}
	if err := sv.Submit(ctx, coordinator.Task{ID: "x", Func: "echo", Deps: []string{"ghost"}}); !errors.Is(err, coordinator.ErrUnknownDependency) {
		t.Errorf("Submit with an unknown dependency = %v; want ErrUnknownDependency", err)
	}
	var ce *coordinator.CycleError
	if err := sv.Submit(ctx, coordinator.Task{ID: "p", Func: "echo", Deps: []string{"q"}}, coordinator.Task{ID: "q", Func: "echo", Deps: []string{"p"}}); !errors.As(err, &ce) {
		t.Errorf("Submit of a cycle = %v; want a *CycleError", err)
	}
	// Checked by the leader only: reported as the batch's outcome.
	if err := sv.Submit(ctx, coordinator.Task{ID: "y", Func: "echo", Pool: "nowhere"}); !errors.Is(err, coordinator.ErrUnknownPool) {
		t.Errorf("Submit to an unknown pool = %v; want ErrUnknownPool", err)
	}
	if err := sv.Submit(ctx, coordinator.Task{ID: "z", Func: "echo", Cron: "not a cron"}); !errors.Is(err, coordinator.ErrInvalidTask) {
		t.Errorf("Submit with a bad Cron = %v; want ErrInvalidTask", err)
	}
	if err := sv.Submit(ctx, coordinator.Task{ID: "r", Run: func(context.Context) error { return nil }}); !errors.Is(err, coordinator.ErrNotDurable) {
		t.Errorf("Submit of a closure = %v; want ErrNotDurable", err)
	}
}

// TestSubmitTxCommitAndRollback: a batch added in a transaction exists
// once the transaction commits and never if it rolls back, for pgx and
// database/sql transactions alike.
func TestSubmitTxCommitAndRollback(t *testing.T) {
	ctx := testCtx(t)
	name := uniqueName("tx")
	sv := startService(t, name)
	pool := newPool(t)
	db := openDB(t)

	// pgx, committed.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id, err := sv.SubmitTx(ctx, tx, coordinator.Task{ID: "pgx-1", Func: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sv.Outcome(ctx, id); !errors.Is(err, pgstore.ErrUnknownBatch) {
		t.Errorf("Outcome before the commit = %v; want ErrUnknownBatch (not visible)", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sv.WaitBatch(ctx, id); err != nil {
		t.Fatalf("WaitBatch = %v", err)
	}
	if err := sv.WaitTasks(ctx, "pgx-1"); err != nil {
		t.Fatal(err)
	}

	// pgx, rolled back.
	tx, err = pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id, err = sv.SubmitTx(ctx, tx, coordinator.Task{ID: "pgx-2", Func: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	tx.Rollback(ctx)
	if err := sv.Outcome(ctx, id); !errors.Is(err, pgstore.ErrUnknownBatch) {
		t.Errorf("Outcome after a rollback = %v; want ErrUnknownBatch", err)
	}

	// database/sql, committed, then the same ID again in a new
	// transaction: refused there, and the transaction stays usable.
	stx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err = sv.SubmitTx(ctx, stx, coordinator.Task{ID: "sql-1", Func: "echo", Payload: []byte("s")})
	if err != nil {
		t.Fatal(err)
	}
	if err := stx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := sv.WaitBatch(ctx, id); err != nil {
		t.Fatalf("WaitBatch(sql) = %v", err)
	}
	stx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sv.SubmitTx(ctx, stx, coordinator.Task{ID: "sql-1", Func: "echo"}); !errors.Is(err, coordinator.ErrDuplicateID) {
		t.Errorf("SubmitTx of a stored ID = %v; want ErrDuplicateID", err)
	}
	if _, err := sv.SubmitTx(ctx, stx, coordinator.Task{ID: "sql-2", Func: "echo", Deps: []string{"ghost"}}); !errors.Is(err, coordinator.ErrUnknownDependency) {
		t.Errorf("SubmitTx with an unknown dependency = %v; want ErrUnknownDependency", err)
	}
	var one int
	if err := stx.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Errorf("the transaction after a refusal: %v", err)
	}
	stx.Rollback()

	if _, err := sv.SubmitTx(ctx, nil, coordinator.Task{ID: "n"}); !errors.Is(err, pgstore.ErrInvalidTx) {
		t.Errorf("SubmitTx(nil) = %v; want ErrInvalidTx", err)
	}
	if _, err := sv.SubmitTx(ctx, pool, coordinator.Task{ID: "n"}); !errors.Is(err, pgstore.ErrInvalidTx) {
		t.Errorf("SubmitTx(a pool) = %v; want ErrInvalidTx", err)
	}
	var nilTx pgx.Tx
	if _, err := sv.SubmitTx(ctx, nilTx, coordinator.Task{ID: "n"}); !errors.Is(err, pgstore.ErrInvalidTx) {
		t.Errorf("SubmitTx(nil pgx.Tx) = %v; want ErrInvalidTx", err)
	}
}

// TestStandbyTakesOverAtShutdown: two instances, one leads; at its
// Shutdown the other leads at once, with the tasks the first stored.
func TestStandbyTakesOverAtShutdown(t *testing.T) {
	ctx := testCtx(t)
	name := uniqueName("two")
	var leads atomic.Int32
	notify := pgstore.WithNotify(func(n pgstore.Notice) {
		if n.Role == pgstore.Leader {
			leads.Add(1)
		}
	})
	a := startService(t, name, notify, pgstore.WithInstance("a"))
	<-a.Leading()
	b := startService(t, name, notify, pgstore.WithInstance("b"))
	if err := b.Submit(ctx, coordinator.Task{ID: "t1", Func: "echo", Payload: []byte("1")}, coordinator.Task{ID: "t2", Func: "echo", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitTasks(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	if r, _ := b.Role(); r != pgstore.Standby {
		t.Fatalf("b is %v; want standby", r)
	}
	handOver(ctx, t, a, b)
	if ok, err := b.Cancel(ctx, "t2"); !ok || err != nil {
		t.Errorf("Cancel(t2) through the new leader = %v, %v; want true (restored)", ok, err)
	}
	if got := leads.Load(); got != 2 {
		t.Errorf("%d leads; want 2", got)
	}
}

// TestWaitTasksRightAfterCommit: a wait that starts as the leader
// accepts the batch sees the task (it read the tasks, then the inbox, and
// found it in neither: ErrUnknownTask; examples/postgres caught it).
func TestWaitTasksRightAfterCommit(t *testing.T) {
	ctx := testCtx(t)
	name := uniqueName("race")
	sv := startService(t, name)
	pool := newPool(t)
	cl, err := pgstore.NewClient(pool, name)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 200 {
		id := "r" + strconv.Itoa(i)
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := sv.SubmitTx(ctx, tx, coordinator.Task{ID: id, Func: "echo"})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if err := cl.WaitTasks(ctx, id); err != nil {
			t.Fatalf("WaitTasks(%s) right after its commit = %v", id, err)
		}
	}
}
