package pgstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/pgstore"
	"github.com/jackc/pgx/v5/pgxpool"
)

// failoverLease is the instances' lease in the failover tests: a standby
// must take over within failoverLease + 1 s of the leader's death.
const failoverLease = time.Second

// installAudit adds a trigger that checks, at every write to
// baton.records of a store named fo-*, that the writing session's
// application_name (each child sets its instance's) is the store's holder
// at that moment, and records each write that is not (a commit of a
// deposed term) in audit_violations.
func installAudit(ctx context.Context, t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(ctx, `
		SELECT pg_advisory_lock(42);
		CREATE TABLE IF NOT EXISTS public.audit_violations (store text, writer text, holder text, term bigint, at timestamptz DEFAULT now());
		CREATE TABLE IF NOT EXISTS public.audit_writes (store text, writer text, term bigint, n bigint, PRIMARY KEY (store, writer, term));
		CREATE OR REPLACE FUNCTION public.audit_records() RETURNS trigger LANGUAGE plpgsql AS $$
		DECLARE
			st text := coalesce(NEW.store, OLD.store);
			h text; tm bigint;
		BEGIN
			IF st NOT LIKE 'fo-%' THEN RETURN NULL; END IF;
			SELECT holder, term INTO h, tm FROM baton.stores WHERE store = st;
			IF h IS DISTINCT FROM current_setting('application_name') THEN
				INSERT INTO public.audit_violations (store, writer, holder, term) VALUES (st, current_setting('application_name'), h, tm);
			END IF;
			INSERT INTO public.audit_writes VALUES (st, current_setting('application_name'), tm, 1)
				ON CONFLICT (store, writer, term) DO UPDATE SET n = audit_writes.n + 1;
			RETURN NULL;
		END $$;
		DROP TRIGGER IF EXISTS audit ON baton.records;
		CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON baton.records FOR EACH ROW EXECUTE FUNCTION public.audit_records();
		SELECT pg_advisory_unlock(42);`)
	if err != nil {
		t.Fatal(err)
	}
}

// TestFailover runs 2 and 3 instances as child processes on one store
// while a Client submits a graph batch by batch; it SIGKILLs the leader
// twice (starting a new instance in its place) and SIGSTOPs it once (and
// SIGCONTs it once a standby has taken over). Each time a standby leads
// within the lease + 1 s; the stopped leader, resumed, finds itself
// fenced and commits nothing (every write to baton.records came from the
// holder of the store's lease, by the audit trigger); nothing is lost or
// done twice (checkRun).
func TestFailover(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("instances=%d", n), func(t *testing.T) { failover(t, n) })
	}
}

func failover(t *testing.T, n int) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pool := newPool(t)
	installAudit(ctx, t, pool)
	name := uniqueName("fo")
	logPath := filepath.Join(t.TempDir(), "log")
	graph := randomGraph(rng, "f", 12, 40)

	var mu sync.Mutex
	children := map[string]*child{}
	next := 0
	spawn := func() *child {
		mu.Lock()
		defer mu.Unlock()
		inst := "i" + strconv.Itoa(next)
		next++
		c := startChild(t, needDB(t), name, inst, logPath, failoverLease)
		children[inst] = c
		return c
	}
	for range n {
		spawn()
	}
	// The leader: whoever holds the lease.
	leader := func() (*child, int64) {
		t.Helper()
		for {
			var holder string
			var term int64
			err := pool.QueryRow(ctx, `SELECT holder, term FROM baton.stores WHERE store = $1 AND expires > now()`, name).Scan(&holder, &term)
			mu.Lock()
			c := children[holder]
			mu.Unlock()
			if err == nil && c != nil {
				return c, term
			}
			// Nobody leads yet: wait for a leader line of any child.
			if ctx.Err() != nil {
				t.Fatal("no leader")
			}
			waitAnyLeader(ctx, t, children, &mu)
		}
	}

	cl, err := pgstore.NewClient(pool, name, pgstore.WithPoll(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	submitted := make(chan error, len(graph))
	go func() {
		for _, b := range graph {
			submitted <- cl.Submit(ctx, b...)
		}
		close(submitted)
	}()

	var takeovers []time.Duration
	for i, ev := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP, syscall.SIGKILL} {
		// Let the leader commit a batch first.
		if err, ok := <-submitted; ok && err != nil {
			t.Fatalf("Submit = %v", err)
		}
		old, term := leader()
		drain(old)
		// The others' lines from now on are about the new term.
		mu.Lock()
		others := map[string]*child{}
		for k, c := range children {
			if c != old {
				drain(c)
				others[k] = c
			}
		}
		mu.Unlock()
		sent := time.Now()
		old.cmd.Process.Signal(ev)
		got := waitNewLeader(ctx, t, others, term)
		takeover := got.Sub(sent)
		takeovers = append(takeovers, takeover)
		t.Logf("event %d: %v of %s (term %d): a standby led %v later", i, ev, old.inst, term, takeover.Round(time.Millisecond))
		if takeover > failoverLease+time.Second {
			t.Errorf("takeover after %v took %v; want at most the lease + 1 s (%v)", ev, takeover, failoverLease+time.Second)
		}
		switch ev {
		case syscall.SIGKILL:
			old.kill()
			mu.Lock()
			delete(children, old.inst)
			mu.Unlock()
			spawn()
		case syscall.SIGSTOP:
			old.cmd.Process.Signal(syscall.SIGCONT)
			l := old.waitLine(ctx, t, "standby")
			if !strings.Contains(l.text, "fenced") {
				t.Errorf("the resumed leader says %q; want a fenced standby", l.text)
			}
		}
	}
	for err := range submitted {
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
	}
	var ids []string
	for _, b := range graph {
		for _, task := range b {
			ids = append(ids, task.ID)
		}
	}
	if err := cl.WaitTasks(ctx, ids...); err != nil {
		t.Fatalf("WaitTasks = %v", err)
	}
	mu.Lock()
	for _, c := range children {
		c.stop(t)
	}
	mu.Unlock()
	checkRun(ctx, t, pool, name, logPath, graph)
	rows, err := pool.Query(ctx, `SELECT writer, holder, term FROM public.audit_violations WHERE store = $1`, name)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var w, h string
		var term int64
		rows.Scan(&w, &h, &term)
		t.Errorf("a commit by %s while %s held term %d", w, h, term)
	}
	rows.Close()
	var writers int
	pool.QueryRow(ctx, `SELECT count(DISTINCT term) FROM public.audit_writes WHERE store = $1`, name).Scan(&writers)
	slices.Sort(takeovers)
	t.Logf("takeovers (lease %v): %v; terms that wrote: %d", failoverLease, takeovers, writers)
}

// drain discards the lines a child has said so far.
func drain(c *child) {
	for {
		select {
		case _, ok := <-c.lines:
			if !ok {
				return
			}
		default:
			return
		}
	}
}

// waitNewLeader returns when one of cs says it leads a term after term.
func waitNewLeader(ctx context.Context, t *testing.T, cs map[string]*child, term int64) time.Time {
	t.Helper()
	lines := make(chan childLine, 16)
	stop := make(chan struct{})
	defer close(stop)
	for _, c := range cs {
		go func() {
			for {
				select {
				case l, ok := <-c.lines:
					if !ok {
						return
					}
					select {
					case lines <- l:
					case <-stop:
						return
					}
				case <-stop:
					return
				}
			}
		}()
	}
	for {
		select {
		case l := <-lines:
			var got int64
			if _, err := fmt.Sscanf(l.text, "leader %d", &got); err == nil && got > term {
				return l.at
			}
		case <-ctx.Done():
			t.Fatalf("no standby led after term %d", term)
		}
	}
}

func waitAnyLeader(ctx context.Context, t *testing.T, cs map[string]*child, mu *sync.Mutex) {
	mu.Lock()
	snapshot := map[string]*child{}
	for k, c := range cs {
		snapshot[k] = c
	}
	mu.Unlock()
	waitNewLeader(ctx, t, snapshot, 0)
}
