package replica_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/remote/jetstream"
	"github.com/batonhq/baton/remote/jetstream/replica"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
)

var (
	failoverKills = flag.Int("replica.kills", 20, "failover test: SIGKILLs of the leader")
	failoverSeed  = flag.Uint64("replica.seed", 0, "failover tests: seed of the graphs and of the kill times (0: a new one, logged)")
)

// failoverLease is the lease of the failover tests' replicas.
const failoverLease = time.Second

// roundTasks is the graph of one round: tasks depending on up to two
// earlier ones of the round or of the round before, a third of them local
// (the function "local" on the leader's own workers), the rest remote
// (the pool's worker processes); retries, delays, priorities, trigger
// rules.
func roundTasks(round int, rng *rand.Rand) []coordinator.Task {
	const n = 30
	var out []coordinator.Task
	var earlier []string
	if round > 0 {
		for i := range n {
			earlier = append(earlier, fmt.Sprintf("r%02d-%02d", round-1, i))
		}
	}
	for i := range n {
		id := fmt.Sprintf("r%02d-%02d", round, i)
		t := coordinator.Task{ID: id, Pool: "remote", Timeout: long,
			Payload: jetstream.Payload{Kind: "step", Data: []byte(id)}.Encode(),
			Retry:   coordinator.RetryPolicy{MaxAttempts: 4}, Priority: rng.IntN(3)}
		if rng.IntN(3) == 0 {
			t.Pool, t.Func, t.Payload, t.Timeout = "", "local", []byte(id), 0
		}
		for range rng.IntN(3) {
			if len(earlier) == 0 {
				break
			}
			if dep := earlier[rng.IntN(len(earlier))]; !slices.Contains(t.Deps, dep) {
				t.Deps = append(t.Deps, dep)
			}
		}
		switch rng.IntN(10) {
		case 0:
			t.Delay = time.Duration(rng.IntN(50)) * time.Millisecond
		case 1, 2:
			if len(t.Deps) > 0 {
				t.When = []coordinator.Trigger{coordinator.AllDone, coordinator.AnyFailed, coordinator.NoneFailed}[rng.IntN(3)]
			}
		}
		out = append(out, t)
		earlier = append(earlier, id)
	}
	return out
}

// failoverRig is a three-server cluster, three replica processes, two
// worker processes, and a Client in the test.
type failoverRig struct {
	t       *testing.T
	c       *cluster
	kids    *children
	store   string
	logPath string
	client  *replica.Client
	checks  *crashChecks

	elections *elections // the cluster's leader elections, as its advisories tell them

	replicas map[string]*child // by name: the process running it now
	leader   string            // the replica that leads, as its last notice said
	term     uint64
}

func newFailoverRig(t *testing.T, store string) *failoverRig {
	c := startCluster(t, 3, nil)
	nc := c.connect(t)
	waitReady(t, nc)
	logPath := filepath.Join(t.TempDir(), "side.log")
	r := &failoverRig{t: t, c: c, store: store, logPath: logPath, replicas: map[string]*child{},
		kids:   newChildren(t, envURL+"="+c.url(), envStore+"="+store, envLog+"="+logPath, envLease+"="+failoverLease.String()),
		checks: &crashChecks{t: t, expected: map[string]bool{}}}
	r.elections = watchElections(t, nc)
	var err error
	if r.client, err = replica.NewClient(nc, store); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.client.Close() })
	for i := range 2 {
		r.kids.start("worker", fmt.Sprintf("worker-%d", i))
	}
	for i := range 3 {
		name := fmt.Sprintf("replica-%d", i)
		r.replicas[name] = r.kids.start("replica", name)
	}
	n := r.kids.waitNotice(func(n notice) bool { return n.Role == "leader" }, "a first leader")
	r.leader, r.term = n.Replica, n.Term
	return r
}

// submit submits a batch through the Client until it is stored (a lost
// answer is looked into: the batch is stored whole or not at all).
func (r *failoverRig) submit(tasks []coordinator.Task) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	for {
		err := r.client.Submit(ctx, tasks...)
		if errors.Is(err, replica.ErrLeaderLost) {
			if _, ok, ierr := r.client.Info(ctx, tasks[0].ID); ierr == nil && ok {
				err = nil
			} else {
				continue
			}
		}
		if errors.Is(err, coordinator.ErrDuplicateID) {
			err = nil // stored by a try whose answer was lost
		}
		if err != nil {
			r.t.Fatalf("Submit = %v", err)
		}
		for _, task := range tasks {
			r.checks.expected[task.ID] = true
		}
		return
	}
}

// killLeader kills the leading replica with SIGKILL and waits for
// another to lead; it returns the kill's time, how long the takeover
// took (to the new leader's restored scheduler), and how much of that
// was spent waiting for JetStream to elect the leader of the new
// leader's results consumer (from the claim to the election; 0 if its
// advisory did not come in the restore). A replacement process takes
// the killed one's name.
func (r *failoverRig) killLeader() (killed int64, took, election time.Duration, pid int) {
	r.t.Helper()
	victim := r.replicas[r.leader]
	pid = victim.cmd.Process.Pid
	killed = time.Now().UnixNano()
	victim.signal(r.t, syscall.SIGKILL)
	victim.killed(r.t)
	old := r.term
	n := r.kids.waitNotice(func(n notice) bool { return n.Role == "leader" && n.Term > old }, "a takeover")
	r.leader, r.term = n.Replica, n.Term
	took = time.Duration(n.At - killed)
	r.t.Logf("killed %s; %s leads %v later (its restore, from its claim: %v: claim %v, pools %v, scheduler %v, requests %v)", victim.name, n.Replica,
		took.Round(time.Millisecond), n.Restore.Round(time.Millisecond), n.Claim.Round(time.Millisecond), n.Pools.Round(time.Millisecond),
		n.Scheduler.Round(time.Millisecond), n.Requests.Round(time.Millisecond))
	if wait, names := r.elections.during(n.At-int64(n.Restore), n.At); wait > 0 {
		// The restore waited for JetStream to elect the leader of the
		// new leader's results consumer: the cluster's time, not ours.
		r.t.Logf("  of which %v from the claim to JetStream's election of the results consumer %s", wait.Round(time.Millisecond), names)
		election = wait
	}
	r.replicas[victim.name] = r.kids.start("replica", victim.name)
	return killed, took, election, pid
}

// SIGKILL the leader mid-graph, again and again, with remote workers
// running: each time a standby leads within the lease and a second, the
// store keeps every promise (crashChecks), and at the end the graph is
// finished. The failover times are logged (-v), and are in
// docs/distributed.md.
func TestFailoverKills(t *testing.T) {
	if testing.Short() {
		t.Skip("processes and a cluster: not in -short")
	}
	rig := newFailoverRig(t, "kills")
	rng := rand.New(rand.NewPCG(seedOf(t, *failoverSeed, "replica.seed"), 22))
	started := make(chan string, 4096)
	unsubscribe, err := rig.client.Subscribe(func(ev coordinator.Event) {
		if ev.Kind == coordinator.EventStarted {
			started <- ev.TaskID
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unsubscribe()

	type kill struct {
		at   int64
		took time.Duration
		pid  int
	}
	var kills []kill
	for round := range *failoverKills {
		rig.submit(roundTasks(round, rng))
		prefix := fmt.Sprintf("r%02d-", round)
		for seen := 0; seen < 6; { // mid-graph: six of the round's attempts have started
			if id := recv(t, started, "a start"); strings.HasPrefix(id, prefix) {
				seen++
			}
		}
		time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond) // a random moment, not an event: the kill's time is the test's input
		at, took, election, pid := rig.killLeader()
		kills = append(kills, kill{at, took, pid})
		// The bound is on the replicas' part: a lease of silence, the
		// claim, the restore. The new leader's results consumer is
		// created in the restore, and JetStream's election of its leader
		// (usually a few hundred ms, seconds at times: raft's election
		// timeout after a failed first vote) is the cluster's part.
		if limit := failoverLease + time.Second + raceSlack; took-election > limit {
			t.Errorf("kill %d: a standby led %v after the kill (%v of it waiting for JetStream's election of the results consumer); want within %v besides that", round+1, took, election, limit)
		}
		log := readSideLog(t, rig.logPath)
		rig.checks.check(fmt.Sprintf("kill %d", round+1), inspect(t, rig.c.connect(t), rig.store), log)
		checkInterrupted(t, fmt.Sprintf("kill %d", round+1), log, pid, at)
		if t.Failed() {
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*long)
	defer cancel()
	if err := rig.client.Wait(ctx); err != nil {
		t.Fatalf("Wait for the graph = %v", err)
	}
	final := inspect(t, rig.c.connect(t), rig.store)
	log := readSideLog(t, rig.logPath)
	rig.checks.check("at the end", final, log)
	checkOrder(t, "at the end", final, log)
	for id := range rig.checks.expected {
		if s := final.tasks[id]; !s.status().Final() {
			t.Errorf("%s is %v at the end; want final", id, s.status())
		}
	}

	// Failover, as users feel it: from the kill to the next attempt
	// dispatched (by the new leader); and to the new leader's notice.
	var notices, dispatches []time.Duration
	for _, k := range kills {
		notices = append(notices, k.took)
		for _, l := range log {
			if l.kind == "dispatch" && l.at > k.at && l.pid != k.pid {
				dispatches = append(dispatches, time.Duration(l.at-k.at))
				break
			}
		}
	}
	t.Logf("%d kills (lease %v): kill to the next leader's restored scheduler: %s; kill to its first dispatch: %s",
		len(kills), failoverLease, spread(notices), spread(dispatches))
	t.Logf("local attempts counted as interrupted: %d; remote ones: %d (they are resumed)",
		rig.checks.interruptedLocal, rig.checks.interruptedRemote)
}

// spread describes durations: median and worst.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("median %v, worst %v (%d)", s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), len(s))
}

// checkInterrupted checks that every local attempt the killed leader
// (pid) was running when it was killed, begun long enough before to have
// its start committed, counts after the takeover: the task's next
// dispatch is a later attempt.
func checkInterrupted(t *testing.T, where string, log []logLine, pid int, killed int64) {
	t.Helper()
	type open struct {
		attempt int
		since   int64
	}
	running := map[string]open{} // local attempts of pid without an end
	last := map[string]int{}     // the attempt pid dispatched last, by task
	for _, l := range log {
		if l.pid != pid || l.at > killed {
			continue
		}
		switch l.kind {
		case "dispatch":
			last[l.id] = l.attempt
		case "run": // pid's own runs are its local functions
			running[l.id] = open{attempt: last[l.id], since: l.at}
		case "end":
			delete(running, l.id)
		}
	}
	for id, o := range running {
		if time.Duration(killed-o.since) < countedAfter {
			continue
		}
		for _, l := range log {
			if l.kind == "dispatch" && l.id == id && l.pid != pid && l.at > killed && l.attempt <= o.attempt {
				t.Errorf("%s: %s's attempt %d was running on the killed leader for %v; the next leader dispatched attempt %d: want it counted as interrupted",
					where, id, o.attempt, time.Duration(killed-o.since), l.attempt)
			}
		}
	}
}

// SIGSTOP the leader mid-graph for longer than its lease: a standby takes
// over; then SIGCONT it. The old leader commits nothing (nothing of it in
// the log after the new term), dispatches nothing (no attempt passes its
// lease's gate, no function of it starts, after it resumed), says it was
// fenced, and goes back to standby: it takes over in its turn when the
// new leader is killed. The graph finishes.
func TestPausedLeaderIsFenced(t *testing.T) {
	if testing.Short() {
		t.Skip("processes and a cluster: not in -short")
	}
	rig := newFailoverRig(t, "paused")
	rng := rand.New(rand.NewPCG(seedOf(t, *failoverSeed, "replica.seed"), 23))
	started := make(chan string, 4096)
	unsubscribe, err := rig.client.Subscribe(func(ev coordinator.Event) {
		if ev.Kind == coordinator.EventStarted {
			started <- ev.TaskID
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unsubscribe()
	for round := range 3 {
		rig.submit(roundTasks(round, rng))
	}
	for range 10 {
		recv(t, started, "a start")
	}
	paused, name := rig.replicas[rig.leader], rig.leader
	pid := paused.cmd.Process.Pid
	paused.signal(t, syscall.SIGSTOP)
	oldTerm := rig.term
	n := rig.kids.waitNotice(func(n notice) bool { return n.Role == "leader" && n.Term > oldTerm }, "a takeover of the paused leader")
	rig.leader, rig.term = n.Replica, n.Term
	resumed := time.Now().UnixNano()
	paused.signal(t, syscall.SIGCONT)
	f := rig.kids.waitNotice(func(n notice) bool { return n.Replica == name && n.Role == "standby" && n.Term == oldTerm },
		"the resumed leader's return to standby")
	if !f.Fenced {
		t.Errorf("the resumed leader went back to standby saying %q; want fenced (ErrFenced)", f.Err)
	}
	t.Logf("paused leader %s (term %d) resumed, and said: %s", name, oldTerm, f.Err)

	for _, e := range logOf(t, rig.c.connect(t), rig.store) {
		if e.seq > rig.term && e.leader == name {
			t.Errorf("log message %d (%s, term %s) written by the fenced leader after the new term %d", e.seq, e.kind, e.term, rig.term)
		}
	}
	// A function that begins after the resume was let start before the
	// pause (the window between the lease's check and the call, which a
	// pause may split): its dispatch says when. None may be let start
	// after the resume.
	admitted := map[string]int64{}
	late := 0
	for _, l := range readSideLog(t, rig.logPath) {
		switch {
		case l.pid != pid:
		case l.kind == "dispatch":
			admitted[l.id] = l.at
			if l.at > resumed {
				t.Errorf("the fenced leader let %s start %v after it resumed", l.id, time.Duration(l.at-resumed))
			}
		case l.kind == "run" && l.at > resumed:
			late++
			if admitted[l.id] > resumed {
				t.Errorf("the fenced leader began %s %v after it resumed", l.id, time.Duration(l.at-resumed))
			}
		}
	}
	t.Logf("functions let start before the pause that began after the resume: %d", late)

	// It is a standby again: kill the new leader and the third replica,
	// and it leads.
	for nm, c := range rig.replicas {
		if nm != name {
			c.signal(t, syscall.SIGKILL)
			c.killed(t)
		}
	}
	n = rig.kids.waitNotice(func(n notice) bool { return n.Role == "leader" && n.Term > rig.term }, "the fenced replica leading again")
	if n.Replica != name {
		t.Fatalf("%s leads; want %s, the only replica left", n.Replica, name)
	}
	rig.leader, rig.term = n.Replica, n.Term
	ctx, cancel := context.WithTimeout(context.Background(), 2*long)
	defer cancel()
	if err := rig.client.Wait(ctx); err != nil {
		t.Fatalf("Wait for the graph = %v", err)
	}
	final := inspect(t, rig.c.connect(t), rig.store)
	log := readSideLog(t, rig.logPath)
	rig.checks.check("at the end", final, log)
	checkOrder(t, "at the end", final, log)
	for id := range rig.checks.expected {
		if s := final.tasks[id]; !s.status().Final() {
			t.Errorf("%s is %v at the end; want final", id, s.status())
		}
	}
}

// Stop one of the three servers mid-graph (the one leading the log's
// stream): the graph goes on, tasks submitted meanwhile finish; start it
// again: it catches up (its copy of the log reaches the end the others
// have), and the graph finishes. (The servers run in the test's process:
// stopping one closes its clients' connections and its raft groups at
// once, as a killed process's would; its files stay, as they would.)
func TestServerLossMidGraph(t *testing.T) {
	if testing.Short() {
		t.Skip("processes and a cluster: not in -short")
	}
	rig := newFailoverRig(t, "servers")
	rng := rand.New(rand.NewPCG(seedOf(t, *failoverSeed, "replica.seed"), 24))
	for round := range 3 {
		rig.submit(roundTasks(round, rng))
	}
	nc := rig.c.connect(t)
	js, _ := njs.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*long)
	defer cancel()
	st, err := js.Stream(ctx, "BATON_servers_LOG")
	if err != nil {
		t.Fatal(err)
	}
	info := st.CachedInfo()
	var down int
	if _, err := fmt.Sscanf(info.Cluster.Leader, "s%d", &down); err != nil {
		t.Fatalf("the log's stream leader is %q", info.Cluster.Leader)
	}
	if err := rig.client.WaitTasks(ctx, "r00-00"); err != nil && !errors.As(err, new(*coordinator.TasksError)) {
		t.Fatal(err) // mid-graph: the first task is done
	}
	rig.c.stop(down)
	t.Logf("stopped server s%d, the log's stream leader", down)
	var later []string
	for round := 3; round < 6; round++ {
		tasks := roundTasks(round, rng)
		rig.submit(tasks)
		for _, task := range tasks {
			later = append(later, task.ID)
		}
	}
	if err := rig.client.WaitTasks(ctx, later...); err != nil && !errors.As(err, new(*coordinator.TasksError)) {
		t.Fatalf("WaitTasks of what was submitted while a server was down = %v", err)
	}
	rig.c.start(down)
	if !rig.c.servers[down].ReadyForConnections(long) {
		t.Fatal("restarted server not ready")
	}
	if err := rig.client.Wait(ctx); err != nil {
		t.Fatalf("Wait for the graph = %v", err)
	}
	// It catches up: its own copy of the log reaches the end the stream
	// has now. JetStream gives no event for it: the test looks, every
	// few milliseconds, up to a guard.
	info, err = st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := info.State.LastSeq
	var got uint64
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for got < want {
		jsz, err := rig.c.servers[down].Jsz(&server.JSzOptions{Accounts: true, Streams: true})
		if err == nil {
			for _, a := range jsz.AccountDetails {
				for _, sd := range a.Streams {
					if sd.Name == "BATON_servers_LOG" {
						got = sd.State.LastSeq
					}
				}
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("the restarted server's log ends at %d; the stream's at %d", got, want)
		}
	}
	t.Logf("the restarted server caught up: its log ends at %d (the stream's at %d)", got, want)
	final := inspect(t, nc, rig.store)
	log := readSideLog(t, rig.logPath)
	rig.checks.check("at the end", final, log)
	checkOrder(t, "at the end", final, log)
	for id := range rig.checks.expected {
		if s := final.tasks[id]; !s.status().Final() {
			t.Errorf("%s is %v at the end; want final", id, s.status())
		}
	}
}

// elections records when the JetStream cluster elected the leader of a
// results consumer of the remote pool, from its advisories: a takeover
// creates the new leader's consumer (jetstream.NewPool), and with
// replicas JetStream elects its leader, which takes seconds at times
// (an election that fails waits out nats-server's raft timeout).
type elections struct {
	mu  sync.Mutex
	got []election
}

type election struct {
	at       int64 // UnixNano, when the advisory came
	consumer string
}

func watchElections(t *testing.T, nc *nats.Conn) *elections {
	e := &elections{}
	prefix := "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.BATON_" + remotePool + "_RESULTS."
	sub, err := nc.Subscribe(prefix+"*", func(m *nats.Msg) {
		e.mu.Lock()
		e.got = append(e.got, election{time.Now().UnixNano(), strings.TrimPrefix(m.Subject, prefix)})
		e.mu.Unlock()
	})
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return e
}

// during returns how long of the span from..to JetStream spent electing
// a results consumer's leader (from from to the last election in the
// span, 0 if none), and names the consumers.
func (e *elections) during(from, to int64) (time.Duration, string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var last int64
	var names []string
	for _, el := range e.got {
		if el.at > from && el.at <= to {
			last = max(last, el.at)
			names = append(names, el.consumer)
		}
	}
	if last == 0 {
		return 0, ""
	}
	return time.Duration(last - from), strings.Join(names, ", ")
}
