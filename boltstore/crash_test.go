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
	"slices"
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
	crashSeed  = flag.Uint64("boltstore.seed", 0, "crash test: seed of the graphs and of the kill times (0: a new one each run, logged)")
)

// A start that had run this long when its child was killed, without
// returning, must be counted as an attempt after the restart: it is
// committed within a commit of its claim, whoever listens (nobody does
// here: the children run the default configuration).
const countedAfter = 150 * time.Millisecond

const (
	crashChildEnv = "BOLTSTORE_CRASH_CHILD" // "seed generation db log retain lose"
	crashBatches  = 8
	crashBatch    = 50
	maxKills      = 8 // per round: then a child runs to the end
)

// crashTask is one task of the random graph, as both processes build it.
type crashTask struct {
	task   coordinator.Task
	batch  int    // -1: spawned, not submitted
	cancel bool   // the child cancels it once every batch is in
	parent string // the task whose attempt spawns it ("": submitted)
	branch bool   // its function chooses among its direct dependents of its batch (Choose)
	pool   string // the pool it runs in: its own, or its spawner's
	prio   int    // the priority it runs at: its own, or its spawner's
}

// Growth: of the submitted tasks that run once, a spawner (Func "grow" in
// the default pool; in pool io, a custom pool, the worker grows what the
// graph says) spawns 2 to 4 children in two Spawns (a child depends on an
// earlier one at random, a few are spawners of their own, one level
// deeper); the children name no pool and most no priority: they inherit
// their spawner's (io's are data-only: no Func, the pool runs them). A
// branch ("grow" too) chooses at random, on every attempt, among its
// direct dependents of its own batch (the next two tasks of its batch
// depend on it; the last of a batch has none, and chooses none); a few do
// both.
const (
	crashSpawnIn  = 16 // one submitted task in crashSpawnIn spawns
	crashBranchIn = 24 // one in crashBranchIn branches
	crashDepth    = 2  // children of children, no deeper
)

// crashGraph builds the graph of a round from its seed: tasks in batches,
// each depending on up to three earlier ones; two pools; retries, delays,
// series and trigger rules; spawners and their children, and branches
// (growth, above: from a generator of their own, so that the rest is the
// graph it always was).
func crashGraph(seed uint64) []crashTask {
	rng := rand.New(rand.NewPCG(seed, 7))
	grow := rand.New(rand.NewPCG(seed, 11))
	var out, kids []crashTask
	for b := range crashBatches {
		var branches []string // of this batch, each taking the next two tasks as dependents
		var owed []int
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
			case 2, 3:
				if len(t.Deps) > 0 { // every rule but the default, as often as each other
					t.When = []coordinator.Trigger{coordinator.AllDone, coordinator.AnyFailed, coordinator.NoneFailed}[rng.IntN(3)]
				}
			}
			t.Priority = rng.IntN(3)
			if rng.IntN(2) == 0 {
				t.Retry = coordinator.RetryPolicy{MaxAttempts: 2 + rng.IntN(3), BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, Jitter: 0.5}
			}
			for k, br := range branches {
				if owed[k] > 0 && !slices.Contains(t.Deps, br) {
					t.Deps, owed[k] = append(t.Deps, br), owed[k]-1
				}
			}
			ct := crashTask{task: t, batch: b, cancel: rng.IntN(25) == 0, pool: t.Pool, prio: t.Priority}
			if t.Every == 0 {
				growing := t.Func
				if growing != "" {
					growing = "grow" // an io task grows by what its worker finds in the graph
				}
				if grow.IntN(crashSpawnIn) == 0 {
					ct.task.Func = growing
					kids = append(kids, crashKids(grow, ct, 1)...)
				}
				if grow.IntN(crashBranchIn) == 0 {
					ct.task.Func, ct.branch = growing, true
					branches, owed = append(branches, id), append(owed, 2)
				}
			}
			out = append(out, ct)
		}
	}
	return append(out, kids...)
}

// crashKids returns the children the spawner sp spawns, and theirs,
// named after it: Func tasks in the default pool, data-only ones in io;
// they name no pool, and one in four sets a priority of its own.
func crashKids(grow *rand.Rand, sp crashTask, depth int) []crashTask {
	var out, nested []crashTask
	id := sp.task.ID
	n := 2 + grow.IntN(3)
	for k := range n {
		c := coordinator.Task{ID: fmt.Sprintf("%s/%d", id, k)}
		if sp.pool == "" {
			c.Func = "work"
		}
		c.Payload = []byte(c.ID)
		prio := sp.prio
		if grow.IntN(4) == 0 {
			c.Priority, prio = 3, 3
		}
		if k > 0 && grow.IntN(2) == 0 {
			c.Deps = []string{out[grow.IntN(k)].task.ID}
			if grow.IntN(4) == 0 {
				c.When = coordinator.AllDone
			}
		}
		if grow.IntN(2) == 0 {
			c.Retry = coordinator.RetryPolicy{MaxAttempts: 2 + grow.IntN(2), BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}
		}
		ct := crashTask{task: c, batch: -1, parent: id, pool: sp.pool, prio: prio}
		if depth < crashDepth && grow.IntN(4) == 0 {
			if c.Func != "" {
				ct.task.Func = "grow"
			}
			nested = append(nested, crashKids(grow, ct, depth+1)...)
		}
		out = append(out, ct)
	}
	return append(out, nested...)
}

// crashGrowth is what a child's "grow" function reads of the graph: the
// children of each spawner, and the candidates of each branch.
type crashGrowth struct {
	kids  map[string][]coordinator.Task
	cands map[string][]string
}

func growthOf(graph []crashTask) crashGrowth {
	g := crashGrowth{kids: map[string][]coordinator.Task{}, cands: map[string][]string{}}
	branchOf := map[string]int{} // a branch's batch
	for _, ct := range graph {
		if ct.branch {
			branchOf[ct.task.ID] = ct.batch
			g.cands[ct.task.ID] = nil // a branch with no candidate (last of its batch) chooses none
		}
		if ct.parent != "" {
			g.kids[ct.parent] = append(g.kids[ct.parent], ct.task)
		}
	}
	for _, ct := range graph {
		for _, d := range ct.task.Deps {
			if b, ok := branchOf[d]; ok && b == ct.batch {
				g.cands[d] = append(g.cands[d], ct.task.ID)
			}
		}
	}
	return g
}

// sideLog is the children's append-only record: "run ID gen at pool",
// "end ID gen at", "submitting batch gen" (before its Submit), "submitted
// batch gen" (once it returned, or once a later child found it in),
// "chose", "rerun" and "reran". Appends reach the kernel before the function works; a
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
// It runs the configuration most users run: no subscriber, no logger, no
// middleware; with retention (WithRetention(0)) every other round.
func crashChild() {
	f := strings.Fields(os.Getenv(crashChildEnv))
	seed, _ := strconv.ParseUint(f[0], 10, 64)
	gen, dbFile, logFile := f[1], f[2], f[3]
	retain := f[4] == "1"
	lose := f[5] == "1" // write no "submitted" line, as if killed before each
	lf, err := os.OpenFile(logFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		panic(err)
	}
	log := &sideLog{f: lf}
	rng := rand.New(rand.NewPCG(seed, uint64(time.Now().UnixNano())))
	var mu sync.Mutex
	var simulate func(ctx context.Context, p []byte) error
	// Each start is logged with the pool it ran in ("-": the default).
	work := func(pool string) func(ctx context.Context, p []byte) error {
		return func(ctx context.Context, p []byte) error {
			log.printf("run %s %s %d %s", p, gen, time.Now().UnixNano(), pool)
			return simulate(ctx, p)
		}
	}
	graph := crashGraph(seed)
	growth := growthOf(graph)
	// grow spawns the children its task has (in two Spawns), chooses
	// among its candidates if it is a branch ("chose ID gen a,b,...", "-"
	// for none: its attempt's choice, logged before it can be committed),
	// then works as work does.
	grow := func(pool string, ctx context.Context, p []byte) error {
		id := string(p)
		log.printf("run %s %s %d %s", id, gen, time.Now().UnixNano(), pool)
		kids := growth.kids[id]
		for _, part := range [][]coordinator.Task{kids[:len(kids)/2], kids[len(kids)/2:]} {
			if len(part) == 0 {
				continue
			}
			if err := coordinator.Spawn(ctx, part...); err != nil {
				if ctx.Err() == nil {
					fmt.Fprintln(os.Stderr, "child: Spawn:", id, err)
					os.Exit(3)
				}
				log.printf("end %s %s %d", id, gen, time.Now().UnixNano())
				return err
			}
		}
		if cands, ok := growth.cands[id]; ok {
			mu.Lock()
			var chosen []string
			for _, c := range cands {
				if rng.IntN(2) == 0 {
					chosen = append(chosen, c)
				}
			}
			mu.Unlock()
			err := coordinator.Choose(ctx, chosen...)
			if errors.Is(err, coordinator.ErrNotDependent) {
				// A candidate ended before it and was forgotten (retention):
				// choose among those still known.
				var known []string
				for _, c := range chosen {
					if coordinator.Choose(ctx, c) == nil {
						known = append(known, c)
					}
				}
				chosen, err = known, coordinator.Choose(ctx, known...)
			}
			if err != nil {
				if ctx.Err() == nil {
					fmt.Fprintln(os.Stderr, "child: Choose:", id, err)
					os.Exit(3)
				}
				log.printf("end %s %s %d", id, gen, time.Now().UnixNano())
				return err
			}
			list := strings.Join(chosen, ",")
			if list == "" {
				list = "-"
			}
			log.printf("chose %s %s %s", id, gen, list)
		}
		return simulate(ctx, p)
	}
	simulate = func(ctx context.Context, p []byte) error {
		mu.Lock()
		fail, d := rng.IntN(5) == 0, time.Duration(rng.IntN(6000))*time.Microsecond
		if rng.IntN(20) == 0 {
			d = countedAfter + time.Duration(rng.IntN(300))*time.Millisecond // a slow one among tiny ones
		}
		mu.Unlock()
		select { // simulated work
		case <-time.After(d):
		case <-ctx.Done():
			log.printf("end %s %s %d", p, gen, time.Now().UnixNano())
			return ctx.Err()
		}
		log.printf("end %s %s %d", p, gen, time.Now().UnixNano())
		if fail {
			return errors.New("unlucky")
		}
		return coordinator.SetResult(ctx, append([]byte("res:"), p...))
	}
	// The io pool's worker runs data: what the graph says spawns or
	// branches grows, the rest works.
	io := func(ctx context.Context, p []byte) error {
		_, spawns := growth.kids[string(p)]
		if _, branches := growth.cands[string(p)]; spawns || branches {
			return grow("io", ctx, p)
		}
		return work("io")(ctx, p)
	}
	opts := []coordinator.Option{coordinator.WithStore(boltstore.New(dbFile)), coordinator.WithWorkers(3),
		coordinator.WithFunc("work", work("-")), coordinator.WithFunc("grow", func(ctx context.Context, p []byte) error { return grow("-", ctx, p) }),
		coordinator.WithPool("io", 2, workerFunc(io))}
	if retain {
		opts = append(opts, coordinator.WithRetention(0))
	}
	s, err := coordinator.New(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: New:", err)
		os.Exit(3)
	}
	fmt.Println("up")                          // the parent's kill timer starts now
	in, tried, ran := submittedBefore(logFile) // what earlier lives submitted and ran (retention may have forgotten it)
	for b := range crashBatches {
		var batch []coordinator.Task
		for _, ct := range graph {
			if ct.batch == b {
				batch = append(batch, ct.task)
			}
		}
		if in[b] {
			continue // in since an earlier life
		}
		if tried[b] && slices.ContainsFunc(batch, func(t coordinator.Task) bool {
			_, known := s.Info(t.ID)
			return known || ran[t.ID]
		}) {
			// An earlier life's Submit was committed, and a kill came
			// before its "submitted" line. A task of it is known, or ran:
			// with retention the rest may be forgotten, and would be
			// accepted again (a forgotten ID may be reused).
			if !lose {
				log.printf("submitted %d %s", b, gen)
			}
			continue
		}
		log.printf("submitting %d %s", b, gen)
		if err := s.Submit(batch...); err != nil {
			if retain && errors.Is(err, coordinator.ErrUnknownDependency) {
				continue // a dependency ended and was forgotten: the batch is refused, as documented
			}
			fmt.Fprintln(os.Stderr, "child: Submit:", err) // ErrDuplicateID included: a batch in is never submitted again
			os.Exit(3)
		}
		if !lose {
			log.printf("submitted %d %s", b, gen)
		}
	}
	for _, ct := range graph {
		if ct.cancel {
			s.Cancel(ct.task.ID)
		}
	}
	// Re-runs, in the first generations (so that a round ends): a task
	// that did not succeed is re-opened now and then, alone or with its
	// downstream; the side log says so before the call and once it has
	// returned (committed).
	if g, _ := strconv.Atoi(gen); g <= 3 {
		for _, ct := range graph {
			info, ok := s.Info(ct.task.ID)
			if !ok || !info.Status.Final() || info.Status == coordinator.Succeeded || rng.IntN(4) != 0 {
				continue
			}
			log.printf("rerun %s %s", ct.task.ID, gen)
			if _, err := s.Rerun(context.Background(), coordinator.RerunRequest{IDs: []string{ct.task.ID}, Downstream: rng.IntN(2) == 0, By: "crash test"}); err == nil {
				log.printf("reran %s %s", ct.task.ID, gen)
			}
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

// submittedBefore reads, in a child, what earlier children did, from the
// side log: the batches whose Submit returned (in), those whose Submit
// was called (tried: committed or not, the kill may have come before the
// call returned), and the tasks that started (ran).
func submittedBefore(path string) (in, tried map[int]bool, ran map[string]bool) {
	in, tried, ran = map[int]bool{}, map[int]bool{}, map[string]bool{}
	data, _ := os.ReadFile(path)
	for line := range strings.Lines(string(data)) {
		w := strings.Fields(line)
		switch {
		case len(w) == 3 && (w[0] == "submitted" || w[0] == "submitting"):
			b, _ := strconv.Atoi(w[1])
			tried[b] = true
			in[b] = in[b] || w[0] == "submitted"
		case len(w) == 5 && w[0] == "run":
			ran[w[1]] = true
		}
	}
	return in, tried, ran
}

// snapshot is every task's state as the parent read it between children.
type snapshot map[string]coordinator.TaskInfo

// histories is every task's history as the parent read it between
// children.
type histories map[string]coordinator.History

// inspectAll opens the file in the parent and reads every task's state
// and history. Its functions block until Shutdown, which does not write
// what it stops.
func inspectAll(t *testing.T, path string, graph []crashTask) (snapshot, histories) {
	t.Helper()
	block := func(ctx context.Context, _ []byte) error { <-ctx.Done(); return ctx.Err() }
	s, err := coordinator.New(coordinator.WithStore(boltstore.New(path, boltstore.WithLockTimeout(10*time.Second))),
		coordinator.WithWorkers(1), coordinator.WithFunc("work", block), coordinator.WithFunc("grow", block),
		coordinator.WithPool("io", 1, workerFunc(block)))
	if err != nil {
		t.Fatalf("inspection: New = %v", err)
	}
	snap, hists := snapshot{}, histories{}
	for _, ct := range graph {
		if ti, ok := s.Info(ct.task.ID); ok {
			h, _ := s.History(ct.task.ID)
			if ti.Status == coordinator.Running {
				// The inspection's own attempt (New restores no task
				// running): its Shutdown undoes it.
				ti.Attempts--
			}
			if n := len(h.Attempts); n > 0 && h.Attempts[n-1].Outcome == coordinator.OutcomeRunning {
				h.Attempts = h.Attempts[:n-1] // the inspection's own, handed out if not started
			}
			snap[ct.task.ID], hists[ct.task.ID] = ti, h
		}
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("inspection: Shutdown = %v", err)
	}
	return snap, hists
}

// logEntry is one line of the side log: a function's start or end, a
// branch's choice, or a batch submitted.
type logEntry struct {
	kind string // "run", "end", "chose", "submitted"
	id   string // the task; for "submitted", the batch
	gen  int
	at   int64  // UnixNano, for run and end
	arg  string // for chose, the tasks chosen: a,b,... or - for none; for run, the pool it ran in
}

// readLog returns the side log's entries, in order.
func readLog(t *testing.T, path string) []logEntry {
	t.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []logEntry
	for line := range strings.Lines(string(data)) {
		w := strings.Fields(line)
		if len(w) < 3 {
			continue // a line cut by the kill
		}
		gen, err := strconv.Atoi(w[2])
		if err != nil {
			continue
		}
		e := logEntry{kind: w[0], id: w[1], gen: gen}
		if e.kind == "chose" {
			if len(w) != 4 {
				continue
			}
			e.arg = w[3]
		}
		if e.kind == "run" || e.kind == "end" {
			if (e.kind == "end" && len(w) != 4) || (e.kind == "run" && len(w) != 5) {
				continue
			}
			if e.at, err = strconv.ParseInt(w[3], 10, 64); err != nil {
				continue
			}
			if e.kind == "run" {
				e.arg = strings.TrimPrefix(w[4], "-") // "": the default pool
			}
		}
		out = append(out, e)
	}
	return out
}

// ranIn counts, per task, the functions started in generation gen.
func ranIn(log []logEntry, gen int) map[string]int {
	ran := map[string]int{}
	for _, e := range log {
		if e.kind == "run" && e.gen == gen {
			ran[e.id]++
		}
	}
	return ran
}

func TestCrashRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: not in -short")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	first := *crashSeed
	if first == 0 {
		first = rand.Uint64N(1 << 40) // room for the rounds' seeds below
	}
	t.Logf("seed %d (again: go test -run TestCrashRestart -boltstore.seed=%d -boltstore.kills=%d)", first, first, *crashKills)
	rng := rand.New(rand.NewPCG(first, 1))
	kills, rounds, gens := 0, 0, 0
	for kills < *crashKills {
		rounds++
		seed := first*1000 + uint64(rounds)
		retain := rounds % 2 // every other round forgets final tasks at once (WithRetention(0))
		// Every other retention round, the first child writes no
		// "submitted" line, as if each Submit were committed and the kill
		// came before its line: a later child must still not submit a
		// batch twice once retention has forgotten it.
		lose := rounds%4 == 1
		dir := t.TempDir()
		dbFile, logFile := filepath.Join(dir, "baton.db"), filepath.Join(dir, "side.log")
		graph := crashGraph(seed)
		var prev snapshot
		var prevHist histories
		expected := map[string]bool{} // tasks whose Submit returned
		for gen := 1; ; gen++ {
			gens++
			cmd := exec.Command(exe, "-test.run=^$")
			cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %d %s %s %d %d", crashChildEnv, seed, gen, dbFile, logFile, retain, b2i(lose && gen == 1)))
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
			killAt := time.Duration(rng.IntN(600)) * time.Millisecond // slow tasks run 150-450ms
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
			var killedAt int64
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("round %d gen %d: child failed: %v\n%s", rounds, gen, err, stderr.String())
				}
				done = true
			case <-timer:
				killedAt = time.Now().UnixNano()
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
			snap, hist := inspectAll(t, dbFile, graph)
			log := readLog(t, logFile)
			for _, e := range log {
				if e.kind == "submitted" && e.gen == gen {
					b, _ := strconv.Atoi(e.id)
					for _, ct := range graph {
						if ct.batch == b {
							expected[ct.task.ID] = true
						}
					}
				}
			}
			where := fmt.Sprintf("round %d (seed %d, retention %v) gen %d", rounds, seed, retain == 1, gen)
			ex := rerunAffected(graph, log)
			checkGeneration(t, where, graph, prev, snap, expected, ranIn(log, gen), retain == 1, ex)
			checkOrder(t, where, graph, log, snap, ex)
			checkGrowth(t, where, graph, snap, log, gen, retain == 1, ex)
			checkInherited(t, where, graph, snap, log)
			checkReruns(t, where, graph, snap, prevHist, hist, log, ex)
			prevHist = hist
			if killedAt != 0 && !done {
				checkCounted(t, where, graph, prev, snap, log, gen, killedAt, ex)
			}
			if retain == 1 {
				for id, ti := range prev { // a task seen final may be forgotten since: keep it as it was
					if _, ok := snap[id]; !ok && ti.Status.Final() {
						snap[id] = ti
					}
				}
			}
			prev = snap
			if done {
				for _, ct := range graph {
					ti, ok := snap[ct.task.ID]
					if !ok && (retain == 1 || ct.parent != "") {
						continue // forgotten, or never accepted (a dependency forgotten first), or never spawned (checkGrowth)
					}
					if !ok || !ti.Status.Final() {
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
	t.Logf("%d kills, %d rounds, %d children; %d long attempts checked for being counted", kills, rounds, gens, checkedCounts)
	t.Logf("re-runs: %d committed checked, %d histories of %d attempts", reruns.committed, reruns.histories, reruns.attempts)
	t.Logf("inheritance: %d runs in their pool checked (%d of children), %d stored pools and priorities", inherited.runs, inherited.childRuns, inherited.stored)
	t.Logf("growth, over the inspections: %d whole families, %d spawners stored without theirs, %d children's runs checked, %d dependents of joins, %d branch dependents skipped as not chosen, %d chosen that ran",
		grown.families, grown.childless, grown.childRuns, grown.joinHeld, grown.notChosen, grown.chosenRan)
}

// checkGeneration compares what the parent read before a child (prev) and
// after it (snap), with what the child ran. With retention, a task that
// is not in the store may have ended and been forgotten: it must not be
// named by a task the store keeps (retention never forgets a dependency
// of a kept task).
func checkGeneration(t *testing.T, where string, graph []crashTask, prev, snap snapshot, expected map[string]bool, ran map[string]int, retain bool, ex map[string]bool) {
	t.Helper()
	for id := range expected {
		if _, ok := snap[id]; !ok && !retain {
			t.Errorf("%s: %s: its Submit returned, and the store has lost it", where, id)
		}
	}
	if retain {
		for _, ct := range graph {
			if _, kept := snap[ct.task.ID]; !kept {
				continue
			}
			for _, d := range ct.task.Deps {
				if _, ok := snap[d]; !ok && expected[d] {
					t.Errorf("%s: %s is kept and its dependency %s is gone", where, ct.task.ID, d)
				}
			}
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
		if !ok || ex[id] {
			continue // not seen before, or maybe re-opened since (Rerun): it may run again
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

var debugOrder func(graph []crashTask, id string)

// checkOrder checks, over every child so far, that no dependency started
// after a task that waits for its end had started: a task runs only once
// its dependencies' ends are committed, so a crash never makes a
// dependency run again after it (AnyFailed starts at the first failure,
// while other dependencies may still run: it is left out).
func checkOrder(t *testing.T, where string, graph []crashTask, log []logEntry, snap snapshot, ex map[string]bool) {
	t.Helper()
	deps := map[string][]string{}
	for _, ct := range graph {
		if ct.task.When != coordinator.AnyFailed && !ex[ct.task.ID] {
			deps[ct.task.ID] = ct.task.Deps
		}
	}
	started := map[string]int{} // the first start of each task, by line
	for i, e := range log {
		if e.kind != "run" {
			continue
		}
		if _, ok := started[e.id]; !ok {
			started[e.id] = i
		}
	}
	for i, e := range log {
		if e.kind != "run" {
			continue
		}
		for dependent, ds := range deps {
			at, ok := started[dependent]
			if !ok || at >= i || !slices.Contains(ds, e.id) {
				continue
			}
			t.Errorf("%s: %s started (line %d, gen %d) after its dependent %s (%v) had started (line %d)",
				where, e.id, i, e.gen, dependent, graphRule(graph, dependent), at)
		}
	}
	// NoneFailed waits until a skipped dependency's class is final: every
	// task upstream of it, through skipped tasks, has ended. None of those
	// starts after the NoneFailed task did (under the old rule, the first
	// bad end decided, and one of them could start after it). A cancelled
	// task is settled at once: what is upstream of it may run on.
	byID := map[string]crashTask{}
	for _, ct := range graph {
		byID[ct.task.ID] = ct
	}
	skipped := map[string]bool{} // by the store (a forgotten task is not walked through)
	for id, ti := range snap {
		skipped[id] = ti.Status == coordinator.Skipped
	}
	for _, ct := range graph {
		at, ok := started[ct.task.ID]
		if !ok || ct.task.When != coordinator.NoneFailed || ex[ct.task.ID] {
			continue
		}
		seen := map[string]bool{}
		var walk func(id string)
		walk = func(id string) {
			for _, d := range byID[id].task.Deps {
				if seen[d] {
					continue
				}
				seen[d] = true
				for i, e := range log {
					if e.kind == "run" && e.id == d && i > at {
						t.Errorf("%s: %s, upstream of %s (NoneFailed) through skipped tasks, started (line %d) after it had started (line %d)",
							where, d, ct.task.ID, i, at)
						if debugOrder != nil {
							debugOrder(graph, ct.task.ID)
						}
						break
					}
				}
				if skipped[d] {
					walk(d)
				}
			}
		}
		for _, d := range ct.task.Deps {
			if skipped[d] {
				walk(d)
			}
		}
	}
}

func graphRule(graph []crashTask, id string) coordinator.Trigger {
	for _, ct := range graph {
		if ct.task.ID == id {
			return ct.task.When
		}
	}
	return 0
}

// checkCounted checks that every attempt that had run countedAfter when
// its child was killed, without returning, counts after the restart: the
// store has its start (the children have no subscriber, logger or
// middleware, which used to be what made a start be committed). Series
// are left out (their attempts count per run).
var checkedCounts int

func checkCounted(t *testing.T, where string, graph []crashTask, prev, snap snapshot, log []logEntry, gen int, killedAt int64, ex map[string]bool) {
	t.Helper()
	recurring := map[string]bool{}
	for _, ct := range graph {
		recurring[ct.task.ID] = ct.task.Every > 0
	}
	starts := map[string]int{} // functions started in gen
	open := map[string]int64{} // the start, in gen, of a function that has not returned
	for _, e := range log {
		if e.gen != gen {
			continue
		}
		switch e.kind {
		case "run":
			starts[e.id]++
			open[e.id] = e.at
		case "end":
			delete(open, e.id)
		}
	}
	for id, at := range open {
		now, ok := snap[id]
		if recurring[id] || !ok || ex[id] || time.Duration(killedAt-at) < countedAfter {
			continue
		}
		checkedCounts++
		if want := prev[id].Attempts + starts[id]; now.Attempts < want {
			t.Errorf("%s: %s had run %v when the child was killed; after the restart it has %d attempts, want at least %d (its start was not committed)",
				where, id, time.Duration(killedAt-at), now.Attempts, want)
		}
	}
}

// checkGrowth checks families and branches in the store (snap, as read
// after the child: with retention, what it forgot is not in it) against
// what the children ran (the side log, every child so far):
//
//   - a family is whole or absent: a spawner has all its children stored
//     or none; with them, it is joining (Pending), Succeeded, Failed by
//     its join (ErrChildFailed) or Cancelled, and counts them
//     (TaskInfo.Children); without them, none of these but Cancelled and
//     Failed by its own error; no child is stored without its spawner;
//   - no child ran in this child process unless its spawner's spawning
//     attempt was committed: a child that ran is stored, unless retention
//     forgot its whole family (its root is gone too);
//   - a spawner's dependents (AnyFailed aside, which starts at a failure)
//     started after every start and end of its family's functions: its
//     join held them until the family was final;
//   - a branch's unchosen dependents never ran: a dependent Skipped as not
//     chosen never ran, and one that ran after its branch's success was
//     in the choice of the branch's last attempt before it started (the
//     attempt whose success was committed).
var grown struct{ families, childless, childRuns, joinHeld, notChosen, chosenRan int }

func checkGrowth(t *testing.T, where string, graph []crashTask, snap snapshot, log []logEntry, gen int, retain bool, ex map[string]bool) {
	t.Helper()
	kids := map[string][]string{}
	parent := map[string]string{}
	var branches []string
	dependents := map[string][]crashTask{}
	for _, ct := range graph {
		if ct.parent != "" {
			kids[ct.parent] = append(kids[ct.parent], ct.task.ID)
			parent[ct.task.ID] = ct.parent
		}
		if ct.branch {
			branches = append(branches, ct.task.ID)
		}
		for _, d := range ct.task.Deps {
			dependents[d] = append(dependents[d], ct)
		}
	}
	for sp, cs := range kids {
		if ex[sp] {
			continue // maybe re-run: its family replaced, its join re-opened
		}
		si, sok := snap[sp]
		stored := 0
		for _, c := range cs {
			ci, ok := snap[c]
			if !ok {
				continue
			}
			stored++
			if ci.Parent != sp {
				t.Errorf("%s: %s is stored with parent %q; want %s", where, c, ci.Parent, sp)
			}
		}
		switch {
		case stored > 0 && !sok:
			t.Errorf("%s: %d children of %s are stored, and it is not", where, stored, sp)
		case stored > 0 && stored < len(cs):
			t.Errorf("%s: half a family: %d of the %d children of %s (%v) are stored", where, stored, len(cs), sp, si.Status)
		case stored > 0:
			grown.families++
			ok := si.Status == coordinator.Succeeded || si.Status == coordinator.Cancelled ||
				(si.Status == coordinator.Pending && si.Joining) ||
				(si.Status == coordinator.Failed && errors.Is(si.Err, coordinator.ErrChildFailed))
			if !ok || si.Children != len(cs) {
				t.Errorf("%s: %s has its %d children stored, and is %v (joining %v, err %v, %d children); want its spawning attempt's success committed",
					where, sp, len(cs), si.Status, si.Joining, si.Err, si.Children)
			}
		case sok:
			grown.childless++
			bad := si.Joining || si.Children != 0 || si.Status == coordinator.Succeeded ||
				(si.Status == coordinator.Failed && errors.Is(si.Err, coordinator.ErrChildFailed))
			if bad {
				t.Errorf("%s: %s has none of its %d children stored, and is %v (joining %v, err %v, %d children)",
					where, sp, len(cs), si.Status, si.Joining, si.Err, si.Children)
			}
		}
	}
	root := func(id string) string {
		for parent[id] != "" {
			id = parent[id]
		}
		return id
	}
	for c, n := range ranIn(log, gen) {
		if parent[c] == "" || ex[c] {
			continue
		}
		grown.childRuns++
		if _, ok := snap[c]; ok {
			continue
		}
		if _, kept := snap[root(c)]; kept || !retain {
			t.Errorf("%s: %s ran %d times in this child, and is not stored: its spawner's attempt (%s: %v) was not committed",
				where, c, n, parent[c], snap[parent[c]].Status)
		}
	}

	firstRun := map[string]int{}
	lastChose := map[string][]int{} // a branch's choices, by line
	for i, e := range log {
		switch e.kind {
		case "run":
			if _, ok := firstRun[e.id]; !ok {
				firstRun[e.id] = i
			}
		case "chose":
			lastChose[e.id] = append(lastChose[e.id], i)
		}
	}
	family := func(sp string) map[string]bool {
		in := map[string]bool{}
		work := []string{sp}
		for len(work) > 0 {
			p := work[len(work)-1]
			work = work[:len(work)-1]
			for _, c := range kids[p] {
				in[c] = true
				work = append(work, c)
			}
		}
		return in
	}
	for sp := range kids {
		if ex[sp] {
			continue
		}
		fam := family(sp)
		for _, d := range dependents[sp] {
			at, ok := firstRun[d.task.ID]
			if !ok || d.task.When == coordinator.AnyFailed || len(fam) == 0 {
				continue
			}
			grown.joinHeld++
			for i, e := range log {
				if i > at && (e.kind == "run" || e.kind == "end") && fam[e.id] {
					t.Errorf("%s: %s (%v) started (line %d) before %s of its dependency %s's family (line %d): the join did not hold it",
						where, d.task.ID, d.task.When, at, e.kind, sp, i)
					break
				}
			}
		}
	}
	for _, br := range branches {
		if ex[br] {
			continue // maybe re-run: it chose again
		}
		bi, bok := snap[br]
		for _, d := range dependents[br] {
			id := d.task.ID
			at, ran := firstRun[id]
			if di, ok := snap[id]; ok && di.Status == coordinator.Skipped && errors.Is(di.Err, coordinator.ErrNotChosen) && di.Cause == br {
				grown.notChosen++
				if ran {
					t.Errorf("%s: %s is skipped as not chosen by %s, and ran (line %d)", where, id, br, at)
				}
			}
			if !ran || !bok || bi.Status != coordinator.Succeeded || d.task.When == coordinator.AnyFailed {
				continue
			}
			grown.chosenRan++
			last := ""
			for _, i := range lastChose[br] {
				if i < at {
					last = log[i].arg
				}
			}
			if !slices.Contains(strings.Split(last, ","), id) {
				t.Errorf("%s: %s ran (line %d) after its branch %s succeeded, and was not in its last choice before that (%q)", where, id, at, br, last)
			}
		}
	}
}

// checkInherited checks that every task ran in its pool and is stored
// with its pool and priority: a child in its spawner's unless it set its
// own, across restarts (a restart once put children in the default pool at
// priority 0).
var inherited struct{ runs, childRuns, stored int }

func checkInherited(t *testing.T, where string, graph []crashTask, snap snapshot, log []logEntry) {
	t.Helper()
	byID := make(map[string]crashTask, len(graph))
	for _, ct := range graph {
		byID[ct.task.ID] = ct
		ti, ok := snap[ct.task.ID]
		if !ok {
			continue
		}
		inherited.stored++
		if ti.Pool != ct.pool || ti.Priority != ct.prio {
			t.Errorf("%s: %s is stored in pool %q at priority %d; want pool %q, priority %d (parent %q)",
				where, ct.task.ID, ti.Pool, ti.Priority, ct.pool, ct.prio, ct.parent)
		}
	}
	for _, e := range log {
		if e.kind != "run" {
			continue
		}
		ct := byID[e.id]
		inherited.runs++
		if ct.parent != "" {
			inherited.childRuns++
		}
		if e.arg != ct.pool {
			t.Errorf("%s: %s ran in pool %q (generation %d); want %q (parent %q)", where, e.id, e.arg, e.gen, ct.pool, ct.parent)
		}
	}
}

// checkReruns checks the re-runs and the history across the children:
// a re-run committed (its Rerun returned) is never lost (TaskInfo.Reruns
// counts at least the committed ones, while the task is kept), and each
// task's history only grows: what an inspection saw is still there at the
// next (older attempts may be dropped from its front by WithHistory's
// bound, none rewritten), and no attempt is recorded twice (its attempts
// come in the order of their re-run, run and number).
var reruns struct{ committed, histories, attempts int }

func checkReruns(t *testing.T, where string, graph []crashTask, snap snapshot, prev, now histories, log []logEntry, ex map[string]bool) {
	t.Helper()
	committed := map[string]int{}
	for _, e := range log {
		if e.kind == "reran" {
			committed[e.id]++
		}
	}
	respawned := rerunRespawned(graph, log)
	replaced := func(id string) bool { // a spawner above it re-opened whole (called, or downstream of a call) replaced its family
		for p := parentOf(id); p != ""; p = parentOf(p) {
			if ti, ok := snap[p]; respawned[p] && (!ok || ti.Reruns > 0) {
				return true
			}
		}
		return false
	}
	for id, n := range committed {
		if ti, ok := snap[id]; ok && !replaced(id) && ti.Reruns < n {
			t.Errorf("%s: %s was re-run %d times (committed), and the store says %d", where, id, n, ti.Reruns)
		}
		reruns.committed += n
	}
	key := func(a coordinator.Attempt) [3]int { return [3]int{a.Rerun, a.Run, a.Attempt} }
	for id, h := range now {
		reruns.histories++
		reruns.attempts += len(h.Attempts)
		for i := 1; i < len(h.Attempts); i++ {
			a, b := key(h.Attempts[i-1]), key(h.Attempts[i])
			if !(a[0] < b[0] || a[0] == b[0] && (a[1] < b[1] || a[1] == b[1] && a[2] < b[2])) {
				var lines []string
				for _, e := range log {
					if e.id == id {
						lines = append(lines, fmt.Sprintf("%s g%d %s", e.kind, e.gen, e.arg))
					}
				}
				t.Errorf("%s: %s's history has attempt %v after %v: recorded twice, or out of order (%s); before %s; info %+v; log %v", where, id, b, a, historyString(h), historyString(prev[id]), snap[id], lines)
				break
			}
		}
		old, ok := prev[id]
		if !ok || ex[id] && parentOf(id) != "" {
			continue // a member of a family a re-run may have replaced: a new task
		}
		// Every attempt seen before is still there, unless dropped from
		// the front by the bound.
		seen := map[[3]int]coordinator.Attempt{}
		for _, a := range h.Attempts {
			seen[key(a)] = a
		}
		first := [3]int{}
		if len(h.Attempts) > 0 {
			first = key(h.Attempts[0])
		}
		for _, a := range old.Attempts {
			k := key(a)
			if k[0] < first[0] || k[0] == first[0] && (k[1] < first[1] || k[1] == first[1] && k[2] < first[2]) {
				continue // dropped by the bound
			}
			if b, ok := seen[k]; !ok || b.Outcome != a.Outcome || !b.Ended.Equal(a.Ended) {
				t.Errorf("%s: %s's attempt %v (%v, ended %v) is gone or changed since the last inspection: now %+v", where, id, k, a.Outcome, a.Ended, b)
			}
		}
	}
}

// rerunAffected lists the tasks a Rerun of the side log may have
// re-opened: each task it was called on (committed or not), what is
// downstream of it in the graph, the spawners whose joins it may re-open
// and the families a re-run spawner replaces, through a worklist. The
// checks that a final task never runs again leave them out.
func rerunAffected(graph []crashTask, log []logEntry) map[string]bool {
	dependents := map[string][]string{}
	children := map[string][]string{}
	parent := map[string]string{}
	for _, ct := range graph {
		for _, d := range ct.task.Deps {
			dependents[d] = append(dependents[d], ct.task.ID)
		}
		if ct.parent != "" {
			children[ct.parent] = append(children[ct.parent], ct.task.ID)
			parent[ct.task.ID] = ct.parent
		}
	}
	ex := map[string]bool{}
	var work []string
	add := func(id string) {
		if id != "" && !ex[id] {
			ex[id] = true
			work = append(work, id)
		}
	}
	for _, e := range log {
		if e.kind == "rerun" {
			add(e.id)
		}
	}
	for len(work) > 0 {
		id := work[len(work)-1]
		work = work[:len(work)-1]
		for _, c := range dependents[id] {
			add(c)
		}
		for _, c := range children[id] {
			add(c)
		}
		add(parent[id])
	}
	return ex
}

// rerunRespawned lists the tasks a Rerun of the side log may have
// re-opened whole, so that a spawner among them made a new family in
// place of the old: each task it was called on, and (a call may have
// asked for its downstream) every task downstream of one re-opened,
// through dependencies and through joins (a child's re-open re-opens its
// spawner's join, which does not re-spawn, but whose downstream re-opens
// whole). A child's re-runs are counted by the store only while its
// family is the one they were made in.
func rerunRespawned(graph []crashTask, log []logEntry) map[string]bool {
	dependents := map[string][]string{}
	for _, ct := range graph {
		for _, d := range ct.task.Deps {
			dependents[d] = append(dependents[d], ct.task.ID)
		}
	}
	whole, joined := map[string]bool{}, map[string]bool{}
	var work []string
	visit := func(id string, join bool) {
		set := whole
		if join {
			set = joined
		}
		if id != "" && !set[id] {
			set[id] = true
			work = append(work, id)
		}
	}
	for _, e := range log {
		if e.kind == "rerun" {
			visit(e.id, false)
		}
	}
	for len(work) > 0 {
		id := work[len(work)-1]
		work = work[:len(work)-1]
		for _, c := range dependents[id] {
			visit(c, false)
		}
		visit(parentOf(id), true)
	}
	return whole
}

func historyString(h coordinator.History) string {
	var b strings.Builder
	for _, a := range h.Attempts {
		fmt.Fprintf(&b, "[x%d r%d a%d %v %v-%v] ", a.Rerun, a.Run, a.Attempt, a.Outcome, a.Started.Format("05.000000"), a.Ended.Format("05.000000"))
	}
	return b.String()
}

// parentOf is the spawner of a child of the crash graph ("" for a task
// submitted): its ID is the spawner's, then "/k".
func parentOf(id string) string {
	if i := strings.LastIndexByte(id, '/'); i >= 0 {
		return id[:i]
	}
	return ""
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
