package pgstore_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/pgstore"
	"github.com/jackc/pgx/v5/pgconn"
)

// A leader stopped in the middle of sending a commit (SIGSTOP, a frozen
// VM, a cut network) holds the store's row while the server waits for
// the rest of its pipeline, as long as its connection lives. A standby's
// claim ends that session once the lease is over and the server has
// waited for the client more than a lease, and leads: within the lease
// and the claim's wait for the row (another lease), not never. All of it
// as the scheduler's role of roles.sql, which every instance logs in as.
func TestClaimEndsALeaderStoppedMidCommit(t *testing.T) {
	const lease = time.Second
	ctx := context.Background()
	as := loginAs(t, "baton_scheduler")
	name := uniqueName("stuck")
	admin := poolAs(t, as)
	// Leader a's term, as its claim wrote it; a itself is stopped (no
	// heartbeat renews it), in the middle of a commit: its fence holds the
	// row, and no Sync ever comes.
	const term = 7
	if _, err := admin.Exec(ctx, `INSERT INTO baton.stores (store, term, holder, lease, expires, claimed_at)
		VALUES ($1, $2, 'a', $3 * interval '1 microsecond', now() + $3 * interval '1 microsecond', now())`, name, term, lease.Microseconds()); err != nil {
		t.Fatal(err)
	}
	stuck, err := pgconn.Connect(ctx, as)
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close(ctx)
	pl := stuck.StartPipeline(ctx)
	pl.SendQueryParams(`SELECT baton.fence($1, $2)`, [][]byte{[]byte(name), []byte(strconv.Itoa(term))}, nil, nil, nil)
	if err := pl.Flush(); err != nil {
		t.Fatal(err)
	}
	// The fence ran: the lease row is locked (a NOWAIT lock is refused).
	for {
		_, err := admin.Exec(ctx, `SELECT 1 FROM baton.stores WHERE store = $1 FOR UPDATE NOWAIT`, name)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "55P03" {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	start := time.Now()
	b, err := pgstore.NewStore(poolAs(t, as), name, pgstore.WithLease(lease), pgstore.WithInstance("b"), pgstore.WithLockWait(10*lease))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var loadErr error
	for { // a claim that found the row locked reports it; the Service tries again
		if loadErr = b.Load(func(k, v []byte) error { return nil }); !errors.Is(loadErr, coordinator.ErrStoreLocked) || time.Since(start) > 10*lease {
			break
		}
		t.Logf("b: Load = %v", loadErr)
	}
	took := time.Since(start)
	if loadErr != nil {
		t.Fatalf("b: Load = %v after %v; want b leading once a's lease is over", loadErr, took)
	}
	if b.Term() != term+1 || took > 3*lease+time.Second {
		t.Errorf("b leads in term %d %v after it tried; want term %d within the lease and the claim's wait for the row (%v)", b.Term(), took, term+1, 3*lease+time.Second)
	}
	t.Logf("b leads %v after it tried", took)
	// The stuck session was ended: what it sends next fails.
	pl.SendQueryParams(`SELECT 1`, nil, nil, nil, nil)
	if err := pl.Sync(); err == nil {
		if err := pl.Close(); err == nil {
			t.Error("the stuck session's pipeline went on after b's claim; want its session ended")
		}
	}
}
