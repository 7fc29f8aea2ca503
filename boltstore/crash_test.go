package boltstore_test

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/boltstore"
	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/worker"
)

// The crash test: a child process (this test binary, re-executed with
// crashChildEnv set) runs a durable scheduler on a random graph and is
// killed with SIGKILL at a random moment, then started again on the same
// file, again and again. Between two children the parent opens the file
// itself and reads every task's state (an inspection: New, Info, Shutdown;
// its functions never finish, and Shutdown writes nothing of what it
// stops). What the children did is in a side log they append to.

var (
	crashKills = flag.Int("boltstore.kills", 50, "crash test: SIGKILLs in all")
	crashSeed  = flag.Uint64("boltstore.seed", 1, "crash test: seed of the graphs and of the kill times")
)

const (
	crashChildEnv = "BOLTSTORE_CRASH_CHILD" // "seed generation db log"
	crashBatches  = 8
	crashBatch    = 50
	maxKills      = 8 // per round: then a child runs to the end
)

// crashTask is one task of the random graph, as both processes build it.
type crashTask struct {
	task   coordinator.Task
	batch  int
	cancel bool // the child cancels it once every batch is in
}

// crashGraph builds the graph of a round from its seed: tasks in batches,
// each depending on up to three earlier ones; two pools; retries, delays,
// series and trigger rules.
func crashGraph(seed uint64) []crashTask {
	rng := rand.New(rand.NewPCG(seed, 7))
	var out []crashTask
	for b := range crashBatches {
		for i := range crashBatch {
			id := fmt.Sprintf("b%d-%d", b, i)
			t := coordinator.Task{ID: id, Func: "work", Payload: []byte(id)}
			if rng.IntN(3) == 0 {
				t = coordinator.Task{ID: id, Pool: "io", Payload: []byte(id)}
			}
			if n := len(out); n > 0 {
				for range rng.IntN(4) {
					dep := out[rng.IntN(n)].task.ID
					if !strings.Contains(strings.Join(t.Deps, " ")+" ", dep+" ") {
						t.Deps = append(t.Deps, dep)
					}
				}
			}
			switch rng.IntN(10) {
			case 0:
				t.Delay = time.Duration(rng.IntN(30)) * time.Millisecond
			case 1:
				t.Every, t.Times = 3*time.Millisecond, 2+rng.IntN(3)
			case 2:
				if len(t.Deps) > 0 {
					t.When = coordinator.AllDone
				}
			}
			t.Priority = rng.IntN(3)
			if rng.IntN(2) == 0 {
				t.Retry = coordinator.RetryPolicy{MaxAttempts: 2 + rng.IntN(3), BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, Jitter: 0.5}
			}
			out = append(out, crashTask{task: t, batch: b, cancel: rng.IntN(25) == 0})
		}
	}
	return out
}

// sideLog is the children's append-only record: "run ID gen", "submitted
// batch gen". Appends reach the kernel before the function works; a
// SIGKILL loses none (the machine is not the one crashing).
type sideLog struct {
	mu sync.Mutex
	f  *os.File
}

func (l *sideLog) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := fmt.Fprintf(l.f, format+"\n", args...); err != nil {
		panic(err)
	}
}

// crashChild is the child: it restores the scheduler, submits the batches
// not yet in, cancels its chosen tasks, waits for everything and exits 0.
func crashChild() {
	f := strings.Fields(os.Getenv(crashChildEnv))
	seed, _ := strconv.ParseUint(f[0], 10, 64)
	gen, dbFile, logFile := f[1], f[2], f[3]
	lf, err := os.OpenFile(logFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		panic(err)
	}
	log := &sideLog{f: lf}
	rng := rand.New(rand.NewPCG(seed, uint64(time.Now().UnixNano())))
	var mu sync.Mutex
	work := func(ctx context.Context, p []byte) error {
		log.printf("run %s %s", p, gen)
		mu.Lock()
		fail, d := rng.IntN(5) == 0, time.Duration(rng.IntN(6000))*time.Microsecond
		mu.Unlock()
		select { // simulated work
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
		if fail {
			return errors.New("unlucky")
		}
		return coordinator.SetResult(ctx, append([]byte("res:"), p...))
	}
	s, err := coordinator.New(coordinator.WithStore(boltstore.New(dbFile)), coordinator.WithWorkers(3),
		coordinator.WithFunc("work", work), coordinator.WithPool("io", 2, workerFunc(work)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: New:", err)
		os.Exit(3)
	}
	fmt.Println("up") // the parent's kill timer starts now
	graph := crashGraph(seed)
	for b := range crashBatches {
		var batch []coordinator.Task
		for _, ct := range graph {
			if ct.batch == b {
				batch = append(batch, ct.task)
			}
		}
		if _, ok := s.Info(batch[0].ID); ok {
			continue // in since an earlier life
		}
		if err := s.Submit(batch...); err != nil {
			fmt.Fprintln(os.Stderr, "child: Submit:", err)
			os.Exit(3)
		}
		log.printf("submitted %d %s", b, gen)
	}
	for _, ct := range graph {
		if ct.cancel {
			s.Cancel(ct.task.ID)
		}
	}
	if err := s.Wait(context.Background()); err != nil {
		os.Exit(3)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		os.Exit(3)
	}
	os.Exit(0)
}

// snapshot is every task's state as the parent read it between children.
type snapshot map[string]coordinator.TaskInfo

// inspect opens the file in the parent and reads every task's state. Its
// functions block until Shutdown, which does not write what it stops.
func inspect(t *testing.T, path string, graph []crashTask) snapshot {
	t.Helper()
	block := func(ctx context.Context, _ []byte) error { <-ctx.Done(); return ctx.Err() }
	s, err := coordinator.New(coordinator.WithStore(boltstore.New(path, boltstore.WithLockTimeout(10*time.Second))),
		coordinator.WithWorkers(1), coordinator.WithFunc("work", block), coordinator.WithPool("io", 1, workerFunc(block)))
	if err != nil {
		t.Fatalf("inspection: New = %v", err)
	}
	snap := snapshot{}
	for _, ct := range graph {
		if ti, ok := s.Info(ct.task.ID); ok {
			if ti.Status == coordinator.Running {
				// The inspection's own attempt (New restores no task
				// running): its Shutdown undoes it.
				ti.Attempts--
			}
			snap[ct.task.ID] = ti
		}
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("inspection: Shutdown = %v", err)
	}
	return snap
}

// readLog returns, per generation, the tasks that ran and the batches
// whose Submit returned.
func readLog(t *testing.T, path string) (runs map[int]map[string]int, submitted map[int][]int) {
	t.Helper()
	runs, submitted = map[int]map[string]int{}, map[int][]int{}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		w := strings.Fields(sc.Text())
		if len(w) != 3 {
			continue // a line cut by the kill
		}
		gen, err := strconv.Atoi(w[2])
		if err != nil {
			continue
		}
		switch w[0] {
		case "run":
			if runs[gen] == nil {
				runs[gen] = map[string]int{}
			}
			runs[gen][w[1]]++
		case "submitted":
			b, _ := strconv.Atoi(w[1])
			submitted[gen] = append(submitted[gen], b)
		}
	}
	return runs, submitted
}

func TestCrashRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: not in -short")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(*crashSeed, 1))
	kills, rounds, gens := 0, 0, 0
	for kills < *crashKills {
		rounds++
		seed := *crashSeed*1000 + uint64(rounds)
		dir := t.TempDir()
		dbFile, logFile := filepath.Join(dir, "baton.db"), filepath.Join(dir, "side.log")
		graph := crashGraph(seed)
		var prev snapshot
		expected := map[string]bool{} // tasks whose Submit returned
		for gen := 1; ; gen++ {
			gens++
			cmd := exec.Command(exe, "-test.run=^$")
			cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %d %s %s", crashChildEnv, seed, gen, dbFile, logFile))
			var stderr strings.Builder
			cmd.Stderr = &stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// The kill comes at a random moment after the child has
			// restored its scheduler (the time to start a process is no
			// part of the test), except that every round's last child,
			// after maxKills, runs to the end.
			up := make(chan struct{})
			go func() {
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					if sc.Text() == "up" {
						close(up)
						break
					}
				}
				for sc.Scan() {
				}
			}()
			exited := make(chan error, 1)
			go func() {
				<-up
				exited <- cmd.Wait()
			}()
			killAt := time.Duration(rng.IntN(150)) * time.Millisecond
			var timer <-chan time.Time
			select {
			case <-up:
				if gen <= maxKills {
					timer = time.After(killAt)
				}
			case <-time.After(time.Minute):
				t.Fatalf("round %d gen %d: the child never came up: %s", rounds, gen, stderr.String())
			}
			var done bool
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("round %d gen %d: child failed: %v\n%s", rounds, gen, err, stderr.String())
				}
				done = true
			case <-timer:
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
					t.Fatal(err)
				}
				err := <-exited
				if err == nil {
					done = true // it finished just before the kill
				} else {
					kills++
				}
			}
			snap := inspect(t, dbFile, graph)
			runs, submitted := readLog(t, logFile)
			for _, b := range submitted[gen] {
				for _, ct := range graph {
					if ct.batch == b {
						expected[ct.task.ID] = true
					}
				}
			}
			checkGeneration(t, fmt.Sprintf("round %d (seed %d) gen %d", rounds, seed, gen), graph, prev, snap, expected, runs[gen])
			prev = snap
			if done {
				for _, ct := range graph {
					if ti, ok := snap[ct.task.ID]; !ok || !ti.Status.Final() {
						t.Errorf("round %d: %s is %v at the end; want final", rounds, ct.task.ID, ti.Status)
					}
				}
				break
			}
			if t.Failed() {
				return
			}
		}
	}
	t.Logf("%d kills, %d rounds, %d children", kills, rounds, gens)
}

// checkGeneration compares what the parent read before a child (prev) and
// after it (snap), with what the child ran.
func checkGeneration(t *testing.T, where string, graph []crashTask, prev, snap snapshot, expected map[string]bool, ran map[string]int) {
	t.Helper()
	for id := range expected {
		if _, ok := snap[id]; !ok {
			t.Errorf("%s: %s: its Submit returned, and the store has lost it", where, id)
		}
	}
	for _, ct := range graph {
		id := ct.task.ID
		now, ok := snap[id]
		if !ok {
			continue
		}
		if now.Status == coordinator.Succeeded {
			if r, _ := now.Result.([]byte); string(r) != "res:"+id {
				t.Errorf("%s: %s succeeded with result %q; want res:%s", where, id, r, id)
			}
		}
		before, ok := prev[id]
		if !ok {
			continue
		}
		if before.Status.Final() {
			if ran[id] > 0 {
				t.Errorf("%s: %s was %v before this child and ran %d times in it", where, id, before.Status, ran[id])
			}
			if now.Status != before.Status || now.Attempts != before.Attempts || now.Runs != before.Runs ||
				fmt.Sprint(now.Result) != fmt.Sprint(before.Result) {
				t.Errorf("%s: %s was final %+v and is now %+v", where, id, before, now)
			}
			continue
		}
		if now.Runs < before.Runs || (now.Runs == before.Runs && now.Attempts < before.Attempts) {
			t.Errorf("%s: %s went back from run %d attempt %d to run %d attempt %d", where, id,
				before.Runs, before.Attempts, now.Runs, now.Attempts)
		}
	}
}

var _ worker.Worker = workerFunc(nil)
