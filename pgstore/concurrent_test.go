package pgstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/pgstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestSubmitTxConcurrent: 16 goroutines each run 25 transactions that
// write a row of the application's and submit a batch (pgx and
// database/sql alike), and commit two in three, roll back the rest; one
// transaction in four also submits a task whose ID other goroutines
// submit at the same time. Every committed batch is decided once: its
// tasks stored once, or refused whole (only for a contended ID, with
// ErrDuplicateID, in the transaction or as its outcome); nothing of a
// rolled-back one exists; each contended ID is stored once.
func TestSubmitTxConcurrent(t *testing.T) {
	ctx := testCtx(t)
	name := uniqueName("conc")
	sv := startService(t, name)
	pool := newPool(t)
	db := openDB(t)
	table := "app_" + fmt.Sprint(rand.Uint32())
	if _, err := pool.Exec(ctx, "CREATE TABLE "+table+" (tx text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}

	const workers, txs = 16, 25
	type result struct {
		ids       []string
		batch     pgstore.BatchID
		committed bool
		contended string
		refusedTx bool // SubmitTx refused it (ErrDuplicateID)
	}
	var mu sync.Mutex
	var results []result
	var wg sync.WaitGroup
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for i := range txs {
				r := result{committed: rng.IntN(3) < 2}
				var tasks []coordinator.Task
				for k := range 1 + rng.IntN(3) {
					id := fmt.Sprintf("w%d.%d.%d", w, i, k)
					tasks = append(tasks, coordinator.Task{ID: id, Func: "echo"})
					r.ids = append(r.ids, id)
				}
				if rng.IntN(4) == 0 {
					r.contended = fmt.Sprintf("dup%d", rng.IntN(8))
					tasks = append(tasks, coordinator.Task{ID: r.contended, Func: "echo"})
				}
				txName := fmt.Sprintf("%d.%d", w, i)
				var err error
				if rng.IntN(2) == 0 {
					var tx pgx.Tx
					if tx, err = pool.Begin(ctx); err == nil {
						if _, err = tx.Exec(ctx, "INSERT INTO "+table+" VALUES ($1)", txName); err == nil {
							r.batch, err = sv.SubmitTx(ctx, tx, tasks...)
						}
						if err == nil && r.committed {
							err = tx.Commit(ctx)
						} else {
							tx.Rollback(ctx)
						}
					}
				} else {
					var tx *sql.Tx
					if tx, err = db.BeginTx(ctx, nil); err == nil {
						if _, err = tx.ExecContext(ctx, "INSERT INTO "+table+" VALUES ($1)", txName); err == nil {
							r.batch, err = sv.SubmitTx(ctx, tx, tasks...)
						}
						if err == nil && r.committed {
							err = tx.Commit()
						} else {
							tx.Rollback()
						}
					}
				}
				if err != nil {
					if r.contended == "" || !errors.Is(err, coordinator.ErrDuplicateID) {
						t.Errorf("transaction %s: %v", txName, err)
						return
					}
					r.refusedTx, r.committed = true, false
				}
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()

	accepted := map[string]int{}
	committed := 0
	for _, r := range results {
		if !r.committed {
			continue
		}
		committed++
		err := sv.WaitBatch(ctx, r.batch)
		switch {
		case err == nil:
			for _, id := range r.ids {
				accepted[id]++
			}
			if r.contended != "" {
				accepted[r.contended]++
			}
		case r.contended != "" && errors.Is(err, coordinator.ErrDuplicateID):
		default:
			t.Errorf("batch %d (%v): %v", r.batch, r.ids, err)
		}
	}
	stored := map[string]int{}
	rows, err := pool.Query(ctx, `SELECT id, count(*) FROM baton.tasks WHERE store = $1 GROUP BY id`, name)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var n int
		rows.Scan(&id, &n)
		stored[id] = n
	}
	rows.Close()
	for id, n := range accepted {
		if n != 1 || stored[id] != 1 {
			t.Errorf("%s: accepted %d times, stored %d times; want once", id, n, stored[id])
		}
	}
	for id, n := range stored {
		if accepted[id] != 1 {
			t.Errorf("%s stored %d times without an accepted batch", id, n)
		}
	}
	for _, r := range results {
		if r.committed || r.refusedTx {
			continue
		}
		for _, id := range r.ids {
			if stored[id] != 0 {
				t.Errorf("%s of a rolled-back transaction is stored", id)
			}
		}
		if err := sv.Outcome(ctx, r.batch); !errors.Is(err, pgstore.ErrUnknownBatch) {
			t.Errorf("the batch of a rolled-back transaction: Outcome = %v; want ErrUnknownBatch", err)
		}
	}
	var appRows int
	pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&appRows)
	if appRows != committed {
		t.Errorf("%d application rows; want %d (one per committed transaction)", appRows, committed)
	}
	t.Logf("%d transactions, %d committed, %d tasks accepted", len(results), committed, len(accepted))
}

// An ID another open transaction has submitted makes SubmitTx wait for
// that transaction: refused with ErrDuplicateID if it commits, accepted
// if it rolls back; an ID submitted earlier in the same transaction is
// refused at once. After a refusal the transaction is usable and keeps
// what it did before (its first batch), with pgx and database/sql alike.
func TestSubmitTxContendedID(t *testing.T) {
	ctx := testCtx(t)
	name := uniqueName("contend")
	sv := startService(t, name)
	pool := newPool(t)
	db := openDB(t)

	for _, commitFirst := range []bool{true, false} {
		x := fmt.Sprintf("x-%v", commitFirst)
		first := beginTx(ctx, t, pool)
		firstID, err := sv.SubmitTx(ctx, first, echoTask(x))
		if err != nil {
			t.Fatal(err)
		}
		second, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { second.Rollback() })
		type answer struct {
			id  pgstore.BatchID
			err error
		}
		got := make(chan answer, 1)
		go func() {
			id, err := sv.SubmitTx(ctx, second, echoTask(x+"-other"), echoTask(x))
			got <- answer{id, err}
		}()
		waitingOnPending(ctx, t, pool) // the second waits for the first's pending row
		if commitFirst {
			if err := first.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		} else if err := first.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		a := <-got
		if commitFirst {
			var te *coordinator.TaskError
			if !errors.As(a.err, &te) || !errors.Is(a.err, coordinator.ErrDuplicateID) || te.ID != x {
				t.Fatalf("SubmitTx of an ID a committed transaction submitted = %v; want ErrDuplicateID naming %s", a.err, x)
			}
			if err := sv.WaitBatch(ctx, firstID); err != nil {
				t.Fatalf("the first batch: %v", err)
			}
		} else if a.err != nil {
			t.Fatalf("SubmitTx of an ID a rolled-back transaction submitted = %v; want accepted", a.err)
		}
		// The transaction is usable: an ID it submitted is refused at
		// once; another batch goes in, and commits.
		if _, err := sv.SubmitTx(ctx, second, echoTask(x+"-more")); err != nil {
			t.Fatalf("SubmitTx after a refusal = %v", err)
		}
		if _, err := sv.SubmitTx(ctx, second, echoTask(x+"-more")); !errors.Is(err, coordinator.ErrDuplicateID) {
			t.Fatalf("SubmitTx of an ID submitted earlier in the transaction = %v; want ErrDuplicateID", err)
		}
		if err := second.Commit(); err != nil {
			t.Fatal(err)
		}
		want := []string{x, x + "-more"}
		if !commitFirst {
			want = append(want, x+"-other")
		}
		if err := sv.WaitTasks(ctx, want...); err != nil {
			t.Fatalf("WaitTasks(%v) = %v", want, err)
		}
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM baton.tasks WHERE store = $1 AND id LIKE $2`, name, x+"%").Scan(&n); err != nil || n != len(want) {
			t.Fatalf("baton.tasks holds %d tasks of %s, %v; want %d (%v)", n, x, err, len(want), want)
		}
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM baton.pending WHERE store = $1`, name).Scan(&n); err != nil || n != 0 {
			t.Fatalf("baton.pending holds %d rows, %v; want none once every batch is decided", n, err)
		}
	}
}

// echoTask is a task of the services' function "echo".
func echoTask(id string) coordinator.Task { return coordinator.Task{ID: id, Func: "echo"} }

// beginTx begins a transaction on pool, rolled back at the test's end if
// it is still open (before the pool closes).
func beginTx(ctx context.Context, t *testing.T, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) })
	return tx
}

// waitsOnPending reports whether a session waits for a transaction's
// lock in a statement on baton.pending.
func waitsOnPending(ctx context.Context, t *testing.T, pool *pgxpool.Pool) bool {
	t.Helper()
	var waiting bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
		WHERE wait_event_type = 'Lock' AND wait_event = 'transactionid' AND query LIKE '%baton.pending%')`).Scan(&waiting); err != nil {
		t.Fatal(err)
	}
	return waiting
}

// waitingOnPending waits until a session waits for a transaction's lock
// in a statement on baton.pending.
func waitingOnPending(ctx context.Context, t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	for !waitsOnPending(ctx, t, pool) {
	}
}

// SubmitTx checks what is stored after its insert: a batch accepted while
// the insert waited for a concurrent transaction (which holds another ID
// of the batch) is seen, and its ID refused in the transaction. The check
// came first, and the batch was told good in the transaction and refused
// by the leader later. Found by a review.
func TestSubmitTxSeesABatchAcceptedWhileItWaited(t *testing.T) {
	ctx := testCtx(t)
	name := uniqueName("late")
	sv := startService(t, name)
	pool := newPool(t)
	holder := beginTx(ctx, t, pool)
	if _, err := sv.SubmitTx(ctx, holder, echoTask("a")); err != nil {
		t.Fatal(err)
	}
	tx := beginTx(ctx, t, pool)
	got := make(chan error, 1)
	go func() {
		_, err := sv.SubmitTx(ctx, tx, echoTask("x"), echoTask("a"))
		got <- err
	}()
	waitingOnPending(ctx, t, pool)                        // its insert waits for the holder's a (IDs go in in order: a, then x)
	if err := sv.Submit(ctx, echoTask("x")); err != nil { // accepted, x stored
		t.Fatal(err)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var te *coordinator.TaskError
	if err := <-got; !errors.As(err, &te) || !errors.Is(err, coordinator.ErrDuplicateID) || te.ID != "x" {
		t.Fatalf("SubmitTx(x, a) after x was accepted meanwhile = %v; want ErrDuplicateID naming x", err)
	}
	if _, err := sv.SubmitTx(ctx, tx, echoTask("z")); err != nil { // usable
		t.Fatalf("SubmitTx after the refusal = %v", err)
	}
}

// Two transactions whose batches share IDs, submitted in opposite orders,
// wait for each other in one order (pending rows are inserted in ID
// order), never in a deadlock: t1 holds a; t2's {b, a} waits for a; t1
// then submits b, which t2 has not taken; t1 commits, and t2 is refused
// for a. A review saw PostgreSQL's deadlock error instead.
func TestSubmitTxSharedIDsDoNotDeadlock(t *testing.T) {
	ctx := testCtx(t)
	name := uniqueName("order")
	sv := startService(t, name)
	pool := newPool(t)
	t1 := beginTx(ctx, t, pool)
	if _, err := sv.SubmitTx(ctx, t1, echoTask("a")); err != nil {
		t.Fatal(err)
	}
	t2 := beginTx(ctx, t, pool)
	got := make(chan error, 1)
	go func() {
		_, err := sv.SubmitTx(ctx, t2, echoTask("b"), echoTask("a"))
		got <- err
	}()
	waitingOnPending(ctx, t, pool)
	if _, err := sv.SubmitTx(ctx, t1, echoTask("b")); err != nil {
		t.Fatalf("t1's SubmitTx(b) while t2 waits for a = %v; want it through", err)
	}
	if !waitsOnPending(ctx, t, pool) {
		t.Fatal("t2 no longer waits for t1: a deadlock ended it")
	}
	if err := t1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var te *coordinator.TaskError
	if err := <-got; !errors.As(err, &te) || !errors.Is(err, coordinator.ErrDuplicateID) || te.ID != "a" {
		t.Fatalf("t2's SubmitTx(b, a) = %v; want ErrDuplicateID naming a", err)
	}
}

// A transaction under REPEATABLE READ or SERIALIZABLE cannot see a batch
// that committed after its snapshot was taken. SubmitTx of an ID that
// batch took while it waits for the leader (its pending row holds the
// ID) is refused with ErrDuplicateID naming the ID, never with the
// driver's unique violation: in the transaction (SERIALIZABLE may
// refuse it as a serialization failure instead, which its caller
// retries), or, if the leader stored that batch before SubmitTx tried
// its insert again, by the leader. Once the leader stored that batch,
// the snapshot sees neither it nor its pending rows: the batch is
// accepted in the transaction and refused by the leader, its outcome
// ErrDuplicateID (docs/postgres.md).
func TestSubmitTxUnderSnapshotIsolation(t *testing.T) {
	ctx := testCtx(t)
	name := uniqueName("snapshot")
	sv := startService(t, name)
	pool := newPool(t)
	db := openDB(t)
	for _, iso := range []sql.IsolationLevel{sql.LevelRepeatableRead, sql.LevelSerializable} {
		for _, stored := range []bool{false, true} {
			x := fmt.Sprintf("x-%d-%v", iso, stored)
			snap, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: iso})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { snap.Rollback() })
			if _, err := snap.ExecContext(ctx, `SELECT count(*) FROM baton.pending`); err != nil { // the snapshot is taken
				t.Fatal(err)
			}
			first := beginTx(ctx, t, pool)
			firstID, err := sv.SubmitTx(ctx, first, echoTask(x))
			if err != nil {
				t.Fatal(err)
			}
			if stored {
				if err := first.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				if err := sv.WaitBatch(ctx, firstID); err != nil {
					t.Fatal(err)
				}
				id, err := sv.SubmitTx(ctx, snap, echoTask(x+"-other"), echoTask(x))
				if err != nil {
					t.Fatalf("%v: SubmitTx of an ID stored after the snapshot = %v; want accepted in the transaction", iso, err)
				}
				if err := snap.Commit(); err != nil {
					t.Fatal(err)
				}
				var te *coordinator.TaskError
				if err := sv.WaitBatch(ctx, id); !errors.As(err, &te) || !errors.Is(err, coordinator.ErrDuplicateID) || te.ID != x {
					t.Fatalf("%v: the outcome of a batch naming an ID stored after its snapshot = %v; want ErrDuplicateID naming %s", iso, err, x)
				}
				continue
			}
			type answer struct {
				id  pgstore.BatchID
				err error
			}
			got := make(chan answer, 1)
			go func() {
				id, err := sv.SubmitTx(ctx, snap, echoTask(x+"-other"), echoTask(x))
				got <- answer{id, err}
			}()
			waitingOnPending(ctx, t, pool) // it waits for the first's pending row
			if err := first.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			a := <-got
			var te *coordinator.TaskError
			var st interface{ SQLState() string }
			switch {
			case errors.As(a.err, &te) && errors.Is(a.err, coordinator.ErrDuplicateID) && te.ID == x:
			case iso == sql.LevelSerializable && errors.As(a.err, &st) && st.SQLState() == "40001":
				t.Logf("%v: a serialization failure: %v", iso, a.err)
			case a.err == nil:
				// Its insert was tried again (the row that held the ID may
				// have been a refused batch's), and the leader had stored
				// the first batch by then: its refusal is the outcome.
				if err := snap.Commit(); err != nil {
					t.Fatal(err)
				}
				if err := sv.WaitBatch(ctx, a.id); !errors.As(err, &te) || !errors.Is(err, coordinator.ErrDuplicateID) || te.ID != x {
					t.Fatalf("%v: the outcome of a batch accepted in a transaction whose snapshot predates a batch taking its ID = %v; want ErrDuplicateID naming %s", iso, err, x)
				}
			default:
				t.Fatalf("%v: SubmitTx of an ID a batch waiting for the leader took after the snapshot = %v; want ErrDuplicateID naming %s", iso, a.err, x)
			}
			snap.Rollback()
		}
	}
}

// The race SubmitTx tries its insert again for: the batch that held an
// ID (its pending row made the insert fail) is refused by the leader, its
// pending rows deleted, before SubmitTx looks for the ID: the ID is free,
// and the batch is accepted at every isolation level. Made deterministic
// by a lock on baton.tasks that the lookup waits for while the "leader"
// deletes the row. Found by a review: snapshot levels, and READ
// UNCOMMITTED (READ COMMITTED in PostgreSQL), refused it.
func TestSubmitTxTakesAnIDFreedMeanwhile(t *testing.T) {
	ctx := testCtx(t)
	name := uniqueName("freed")
	c, err := pgstore.NewClient(newPool(t), name) // no leader: the test decides the batches
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pool := newPool(t)
	db := openDB(t)
	for _, iso := range []sql.IsolationLevel{sql.LevelReadUncommitted, sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSerializable} {
		x := fmt.Sprintf("x-%d", iso)
		holder := beginTx(ctx, t, pool)
		if _, err := c.SubmitTx(ctx, holder, echoTask(x)); err != nil {
			t.Fatal(err)
		}
		tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: iso})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback() })
		got := make(chan error, 1)
		go func() {
			_, err := c.SubmitTx(ctx, tx, echoTask(x))
			got <- err
		}()
		waitingOnPending(ctx, t, pool) // its insert waits for the holder's pending row
		locker := beginTx(ctx, t, pool)
		locked := make(chan error, 1)
		go func() {
			_, err := locker.Exec(ctx, `LOCK TABLE baton.tasks IN ACCESS EXCLUSIVE MODE`)
			locked <- err
		}()
		waitingOnRelation(ctx, t, pool) // the lock waits for the holder (which read baton.tasks)
		if err := holder.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-locked; err != nil {
			t.Fatal(err)
		}
		waitingOnRelation(ctx, t, pool) // the insert failed; the lookup waits for the lock
		// The leader refuses the holder's batch: its pending rows go.
		if _, err := locker.Exec(ctx, `DELETE FROM baton.pending WHERE store = $1 AND id = $2`, name, x); err != nil {
			t.Fatal(err)
		}
		if err := locker.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("%v: SubmitTx of an ID freed by a refusal while it looked = %v; want accepted", iso, err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
	}
}

// openDB opens the test server through database/sql (pgx's driver),
// closed when the test ends.
func openDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", needDB(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// waitingOnRelation waits until a session waits for a lock on a table.
func waitingOnRelation(ctx context.Context, t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	for {
		var waiting bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND wait_event = 'relation')`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
	}
}

// SubmitTx on a transaction that already failed refuses with the error
// that says so (SQLSTATE 25P02, in failed transaction), not only with the
// missing savepoint its undo then met. Found by a review.
func TestSubmitTxOnAFailedTransaction(t *testing.T) {
	ctx := testCtx(t)
	c, err := pgstore.NewClient(newPool(t), uniqueName("failedtx"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tx := beginTx(ctx, t, newPool(t))
	if _, err := tx.Exec(ctx, `SELECT 1/0`); err == nil {
		t.Fatal("SELECT 1/0 succeeded")
	}
	_, err = c.SubmitTx(ctx, tx, echoTask("x"))
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "25P02" {
		t.Fatalf("SubmitTx on a failed transaction = %v; want SQLSTATE 25P02 first", err)
	}
}
