package pgstore_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/pgstore"
)

var (
	crashKills = flag.Int("pgstore.kills", 50, "crash test: SIGKILLs of the scheduler's process in all")
	crashSeed  = flag.Uint64("pgstore.seed", 0, "crash test: seed of the graph and of the kill times (0: a new one each run)")
)

// crashLease is the children's lease in the crash test: after a SIGKILL
// the next child waits for it to lapse.
const crashLease = 300 * time.Millisecond

// TestCrashRestart: a child process runs the service's scheduler and is
// SIGKILLed at a random moment after it leads, again and again, while a
// Client submits a random graph batch by batch through the inbox; a last
// child runs it to the end. Nothing is lost (every batch accepted, every
// task succeeded), nothing is done twice (each batch accepted once, each
// task stored once), and no task started before its dependencies had
// ended.
func TestCrashRestart(t *testing.T) {
	seed := *crashSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (again: go test -run TestCrashRestart -pgstore.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pool := newPool(t)
	name := uniqueName("crash")
	logPath := filepath.Join(t.TempDir(), "log")
	graph := randomGraph(rng, "t", 10, 30)

	cl, err := pgstore.NewClient(pool, name, pgstore.WithPoll(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var wg sync.WaitGroup
	submitErrs := make(chan error, len(graph))
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, b := range graph {
			submitErrs <- cl.Submit(ctx, b...)
		}
	}()

	// Each child leads a term of its own, after the last one's.
	var lastTerm int64
	leads := func(c *child) {
		t.Helper()
		l := c.waitLine(ctx, t, "leader")
		var term int64
		if _, err := fmt.Sscanf(l.text, "leader %d", &term); err != nil || term <= lastTerm {
			t.Fatalf("child %s says %q after term %d", c.inst, l.text, lastTerm)
		}
		lastTerm = term
	}
	for k := range *crashKills {
		c := startChild(t, needDB(t), name, "c"+strconv.Itoa(k), logPath, crashLease)
		leads(c)
		// A random moment of its lead: restoring, committing, running.
		timer := time.NewTimer(time.Duration(rng.Int64N(int64(400 * time.Millisecond))))
		select {
		case <-timer.C:
		case <-c.done:
			t.Fatalf("child %d ended by itself", k)
		}
		c.cmd.Process.Signal(syscall.SIGKILL)
		c.kill()
	}
	last := startChild(t, needDB(t), name, "last", logPath, crashLease)
	leads(last)
	wg.Wait()
	close(submitErrs)
	for err := range submitErrs {
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
	last.stop(t)
	checkRun(ctx, t, pool, name, logPath, graph)
	var term int64
	if err := pool.QueryRow(ctx, `SELECT term FROM baton.stores WHERE store = $1`, name).Scan(&term); err != nil {
		t.Fatal(err)
	}
	if term != lastTerm {
		t.Errorf("the store's term is %d; the last child led %d", term, lastTerm)
	}
	t.Logf("%d kills, %d terms", *crashKills, term)
}

// TestFatalTaskEndsFailed: a task whose function kills its process at
// once (a log.Fatal on a bad payload), submitted to a leader, kills every
// instance that runs it; a new one started each time. It ends Failed
// (ErrInterrupted) after at most MaxAttempts + 2 deaths (the first start
// of a batch the leader takes from the inbox comes before its commit,
// uncounted; docs/durable.md): the next leader must not start it before
// a commit again, or every instance would die of it for ever.
func TestFatalTaskEndsFailed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pool := newPool(t)
	name := uniqueName("fatal")
	logPath := filepath.Join(t.TempDir(), "log")
	cl, err := pgstore.NewClient(pool, name, pgstore.WithPoll(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const bound = 3 // MaxAttempts 1, + 2
	deaths := 0
	ended := make(chan error, 1)
	for k := 0; ; k++ {
		c := startChild(t, needDB(t), name, "f"+strconv.Itoa(k), logPath, crashLease)
		c.waitLine(ctx, t, "leader")
		if k == 0 {
			// Submitted to a leader: read from the inbox as new. Submit
			// returns once the batch is decided, maybe by a later leader.
			go func() {
				if err := cl.Submit(ctx, coordinator.Task{ID: "p", Func: "fatal", Payload: []byte("p")}); err != nil {
					ended <- fmt.Errorf("Submit: %w", err)
					return
				}
				ended <- cl.WaitTasks(ctx, "p")
			}()
		}
		select {
		case <-c.done:
			if deaths++; deaths > bound {
				t.Fatalf("%d instances died of the task; want at most %d, then the task failed", deaths, bound)
			}
			continue
		case err := <-ended:
			if !errors.Is(err, coordinator.ErrInterrupted) {
				t.Fatalf("WaitTasks(p) = %v after %d deaths; want it failed with ErrInterrupted", err, deaths)
			}
			c.stop(t)
		}
		break
	}
	t.Logf("the task failed after %d deaths (bound %d)", deaths, bound)
}
