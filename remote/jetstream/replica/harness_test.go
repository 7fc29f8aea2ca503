package replica_test

import (
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
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/remote/jetstream/replica"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
)

var (
	harnessRounds = flag.Int("replica.harness", 1, "TestProcessHarness: rounds of each disruption (leader SIGKILL, SIGSTOP, partition, connection resets, the log's stream-leader server SIGKILLed); 20 for docs/distributed.md's figures")
	harnessSeed   = flag.Uint64("replica.harness.seed", 0, "TestProcessHarness: seed of the graphs, the order of the disruptions and their moments (0: a new one, logged)")
)

// natsProc is a nats-server process of the harness: the binary built from
// the module this one requires, run on deploy/accounts.conf.
type natsProc struct {
	name string
	conf string
	port int
	cmd  *exec.Cmd
	exit chan error
}

// harness is issue #28's proof rig, as a user deploys replica: three
// nats-server processes (file storage, the ready configuration's
// accounts and users), three replica processes each behind TCP proxies
// of its own (one per server: blackholed or reset at will), two worker
// processes, and a Client in the test; every role connects as its user,
// the replicas' log through the log's account.
type harness struct {
	t       *testing.T
	dir     string
	bin     string
	servers []*natsProc
	kids    *children
	proxies map[string][]*proxy // each replica's, by its name
	client  *replica.Client
	logConn *nats.Conn // a replica-log user's: the log, for inspections
	checks  *crashChecks
	logPath string

	replicas map[string]*child
	leader   string
	term     uint64
	deaths   map[int]int64 // pid: when it was SIGKILLed
	paused   map[int][2]int64
}

const harnessStore, harnessPool = confStore, confPool

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{t: t, dir: t.TempDir(), proxies: map[string][]*proxy{}, replicas: map[string]*child{},
		deaths: map[int]int64{}, paused: map[int][2]int64{}}
	h.bin = filepath.Join(h.dir, "nats-server")
	build := exec.Command("go", "build", "-o", h.bin, "github.com/nats-io/nats-server/v2")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building nats-server from the module: %v\n%s", err, out)
	}
	accounts, err := os.ReadFile(filepath.Join(deployDir(t), "accounts.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.dir, "accounts.conf"), accounts, 0o600); err != nil {
		t.Fatal(err)
	}
	ports, routes := freePorts(t, 3), freePorts(t, 3)
	for i := range 3 {
		var rs []string
		for j := range 3 {
			if j != i {
				rs = append(rs, fmt.Sprintf("%q", fmt.Sprintf("nats-route://127.0.0.1:%d", routes[j])))
			}
		}
		p := &natsProc{name: fmt.Sprintf("s%d", i), port: ports[i], conf: filepath.Join(h.dir, fmt.Sprintf("s%d.conf", i))}
		conf := fmt.Sprintf("server_name: %s\nlisten: 127.0.0.1:%d\njetstream { store_dir: %q }\ncluster { name: baton, listen: 127.0.0.1:%d, routes: [%s] }\ninclude accounts.conf\n",
			p.name, p.port, filepath.Join(h.dir, p.name), routes[i], strings.Join(rs, ", "))
		if err := os.WriteFile(p.conf, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		h.servers = append(h.servers, p)
		h.start(p)
	}
	t.Cleanup(func() {
		for _, p := range h.servers {
			h.stop(p, syscall.SIGTERM)
		}
	})
	var urls []string
	for _, p := range h.servers {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", p.port))
	}
	url := strings.Join(urls, ",")
	h.logConn = h.connect(url, "replica-log", "_INBOX_replica_log")
	// The proxies first: cleanups run last registered first, and the
	// replicas must stop (and resign) through them before they close.
	for i := range 3 {
		name := fmt.Sprintf("replica-%d", i)
		for _, p := range h.servers {
			h.proxies[name] = append(h.proxies[name], newProxy(t, fmt.Sprintf("127.0.0.1:%d", p.port)))
		}
	}
	h.logPath = filepath.Join(h.dir, "side.log")
	h.checks = &crashChecks{t: t, expected: map[string]bool{}}
	h.kids = newChildren(t, envStore+"="+harnessStore, envLog+"="+h.logPath, envLease+"="+failoverLease.String(), envPool+"="+harnessPool)
	if h.client, err = replica.NewClient(h.connect(url, "client", "_INBOX_client"), harnessStore); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.client.Close() })
	for i := range 2 {
		h.kids.start("worker", fmt.Sprintf("worker-%d", i), envURL+"="+url, envCreds+"=worker-"+harnessPool+":worker-"+harnessPool+"-secret",
			envInbox+"=_INBOX_worker")
	}
	for i := range 3 {
		name := fmt.Sprintf("replica-%d", i)
		h.replicas[name] = h.startReplica(name, h.replicaURL(name))
	}
	n := h.kids.waitNotice(func(n notice) bool { return n.Role == "leader" }, "a first leader")
	h.leader, h.term = n.Replica, n.Term
	return h
}

func (h *harness) startReplica(name, url string) *child {
	return h.kids.start("replica", name, envURL+"="+url, envCreds+"=replica:replica-secret", envInbox+"=_INBOX_replica",
		envLogU+"=replica-log:replica-log-secret:_INBOX_replica_log")
}

func (h *harness) replicaURL(name string) string {
	var urls []string
	for _, px := range h.proxies[name] {
		urls = append(urls, px.url())
	}
	return strings.Join(urls, ",")
}

// connect connects to url as user (its password is user-secret),
// retrying while the servers start (a guard, not a pace).
func (h *harness) connect(url, user, inbox string) *nats.Conn {
	h.t.Helper()
	deadline := time.Now().Add(long)
	for {
		nc, err := nats.Connect(url, nats.UserInfo(user, user+"-secret"), nats.CustomInboxPrefix(inbox),
			nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err == nil {
			h.t.Cleanup(nc.Close)
			return nc
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("connecting as %s: %v", user, err)
		}
		tick := time.NewTimer(50 * time.Millisecond)
		<-tick.C
	}
}

// start starts a nats-server process, with the users' passwords in its
// environment.
func (h *harness) start(p *natsProc) {
	h.t.Helper()
	p.cmd = exec.Command(h.bin, "-c", p.conf)
	p.cmd.Env = os.Environ()
	for _, u := range []string{"BATON_REPLICA", "BATON_WORKER", "BATON_CLIENT", "BATON_REPLICA_LOG", "BATON_SYS"} {
		user := map[string]string{"BATON_REPLICA": "replica", "BATON_WORKER": "worker-" + harnessPool, "BATON_CLIENT": "client",
			"BATON_REPLICA_LOG": "replica-log", "BATON_SYS": "sys"}[u]
		p.cmd.Env = append(p.cmd.Env, u+"_PASSWORD="+user+"-secret")
	}
	logf, err := os.OpenFile(filepath.Join(h.dir, p.name+".log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		h.t.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	dieWithTest(p.cmd)
	if err := p.cmd.Start(); err != nil {
		h.t.Fatalf("starting %s: %v", p.name, err)
	}
	p.exit = make(chan error, 1)
	go func() { p.exit <- p.cmd.Wait(); logf.Close() }()
}

// stop sends sig to p and waits for it to exit (a no-op if it has).
func (h *harness) stop(p *natsProc, sig syscall.Signal) {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exit:
	case <-time.After(long):
		_ = p.cmd.Process.Kill()
		<-p.exit
	}
	p.cmd = nil
}

// streamLeader returns the server that leads the log's stream now, asking
// until one does (up to a guard): JetStream elects one seconds after its
// leader died.
func (h *harness) streamLeader(not string) string {
	h.t.Helper()
	js, _ := njs.New(h.logConn)
	deadline := time.Now().Add(long)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		st, err := js.Stream(ctx, "BATON_"+harnessStore+"_LOG")
		var leader string
		if err == nil {
			if info, err := st.Info(ctx); err == nil && info.Cluster != nil {
				leader = info.Cluster.Leader
			}
		}
		cancel()
		if leader != "" && leader != not {
			return leader
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("the log's stream has no leader (but %q) after %v", not, long)
		}
		tick := time.NewTimer(20 * time.Millisecond)
		<-tick.C
	}
}

func (h *harness) submit(tasks []coordinator.Task) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*long)
	defer cancel()
	for {
		err := h.client.Submit(ctx, tasks...)
		if errors.Is(err, replica.ErrLeaderLost) {
			if _, ok, ierr := h.client.Info(ctx, tasks[0].ID); ierr == nil && ok {
				err = nil
			} else {
				continue
			}
		}
		if errors.Is(err, coordinator.ErrDuplicateID) {
			err = nil
		}
		if err != nil {
			h.t.Fatalf("Submit = %v", err)
		}
		for _, task := range tasks {
			h.checks.expected[task.ID] = true
		}
		return
	}
}

// takeover waits for a leader of a later term than old.
func (h *harness) takeover(old uint64, what string) notice {
	h.t.Helper()
	n := h.kids.waitNotice(func(n notice) bool { return n.Role == "leader" && n.Term > old }, what)
	h.leader, h.term = n.Replica, n.Term
	return n
}

// moved says whether the lead moved from term old, as the log says (its
// last claim): a Client's answer may come from a replica that has not
// read the last claim yet. If it moved, it waits for the new leader's
// notice.
func (h *harness) moved(old uint64) bool {
	h.t.Helper()
	term := h.lastClaim()
	if term == 0 || term == old {
		return false
	}
	if term < h.term {
		return false // read before the notice's term landed: that notice is newer
	}
	n := h.kids.waitNotice(func(n notice) bool { return n.Role == "leader" && n.Term == term }, fmt.Sprintf("the leader of term %d", term))
	h.leader, h.term = n.Replica, n.Term
	return true
}

// lastClaim returns the term of the log's last claim (the sequence of
// its last term message that is not a resignation), asking again while
// JetStream cannot answer (a server just lost), up to a guard.
func (h *harness) lastClaim() uint64 {
	h.t.Helper()
	js, _ := njs.New(h.logConn)
	deadline := time.Now().Add(long)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var term uint64
		st, err := js.Stream(ctx, "BATON_"+harnessStore+"_LOG")
		if err == nil {
			var m *njs.RawStreamMsg
			if m, err = st.GetLastMsgForSubject(ctx, "baton."+harnessStore+".log.term"); err == nil {
				term = m.Sequence
				if m.Header.Get("Baton-Resign") == "1" {
					term, _ = strconv.ParseUint(m.Header.Get("Baton-Term"), 10, 64)
				}
			}
		}
		cancel()
		if err == nil {
			return term
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("reading the log's last claim: %v", err)
		}
		tick := time.NewTimer(50 * time.Millisecond)
		<-tick.C
	}
}

// fenced waits for name's return to standby from term.
func (h *harness) fenced(name string, term uint64) {
	h.t.Helper()
	f := h.kids.waitNotice(func(n notice) bool { return n.Replica == name && n.Role == "standby" && n.Term == term },
		name+"'s return to standby")
	if !f.Fenced {
		h.t.Errorf("%s went back to standby saying %q; want fenced (ErrFenced)", name, f.Err)
	}
}

// The proof issue #28 asks for, on real processes: three nats-server
// processes (built from the module), three replica processes and two
// workers, each role its user of deploy/accounts.conf; round after round
// of a graph, in a random order, the leader SIGKILLed, SIGSTOPped past
// its lease, partitioned (its proxies blackhole), its connections reset,
// and the server leading the log's stream SIGKILLed. After each, checks
// from the log itself (replica.ReadRecords and the log's messages): no
// task whose Submit returned is lost, nothing final changes, no append
// from a deposed term, nothing runs after its end was committed (no
// committed success runs again), and no two runs of one task overlap
// beyond the documented grace. The takeover times are logged (-v) and in
// docs/distributed.md: go test ./replica/ -run TestProcessHarness -v
// -replica.harness=20.
func TestProcessHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("processes and a cluster: not in -short")
	}
	rng := rand.New(rand.NewPCG(seedOf(t, *harnessSeed, "replica.harness.seed"), 28))
	h := newHarness(t)
	started := make(chan string, 4096)
	unsubscribe, err := h.client.Subscribe(func(ev coordinator.Event) {
		if ev.Kind == coordinator.EventStarted {
			select {
			case started <- ev.TaskID:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unsubscribe()

	took := map[string][]time.Duration{}
	var elections []time.Duration
	moved, resetMoves := 0, 0
	round := 0
	for range *harnessRounds {
		order := []string{"kill", "pause", "partition", "reset", "server"}
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, what := range order {
			h.submit(roundTasks(round, rng))
			prefix := fmt.Sprintf("r%02d-", round)
			for seen := 0; seen < 6; { // mid-graph
				if id := recv(t, started, "a start"); strings.HasPrefix(id, prefix) {
					seen++
				}
			}
			time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond) // a random moment: the disruption's time is the test's input
			where := fmt.Sprintf("round %d (%s)", round, what)
			h.moved(h.term) // the leader as the log says, not as the notices last did
			victim := h.replicas[h.leader]
			pid, old, name := victim.cmd.Process.Pid, h.term, h.leader
			at := time.Now()
			switch what {
			case "kill":
				victim.signal(t, syscall.SIGKILL)
				victim.killed(t)
				h.deaths[pid] = at.UnixNano()
				n := h.takeover(old, "a takeover of the killed leader")
				took[what] = append(took[what], time.Duration(n.At-at.UnixNano()))
				h.replicas[name] = h.startReplica(name, h.replicaURL(name))
			case "pause":
				victim.signal(t, syscall.SIGSTOP)
				n := h.takeover(old, "a takeover of the paused leader")
				took[what] = append(took[what], time.Duration(n.At-at.UnixNano()))
				cont := time.Now()
				victim.signal(t, syscall.SIGCONT)
				h.paused[pid] = [2]int64{at.UnixNano(), cont.UnixNano()}
				h.fenced(name, old)
			case "partition":
				for _, px := range h.proxies[name] {
					px.setPaused(true)
				}
				if _, ok := h.kids.waitNoticeFor(func(n notice) bool { return n.Role == "leader" && n.Term > old }, long); !ok {
					entries := logOf(t, h.logConn, harnessStore)
					for _, e := range entries[max(0, len(entries)-8):] {
						t.Logf("log %d: %s by %q, term %s", e.seq, e.kind, e.leader, e.term)
					}
					t.Fatalf("%s: no takeover of %s (term %d, pid %d) partitioned %v ago", where, name, old, pid, time.Since(at))
				}
				n := h.takeover(old, "a takeover of the partitioned leader")
				took[what] = append(took[what], time.Duration(n.At-at.UnixNano()))
				for _, px := range h.proxies[name] {
					px.setPaused(false)
				}
				h.fenced(name, old)
			case "reset":
				for range 3 {
					for _, px := range h.proxies[name] {
						px.reset()
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*long)
				if err := h.client.WaitTasks(ctx, roundIDs(round)...); err != nil && !errors.As(err, new(*coordinator.TasksError)) {
					t.Fatalf("%s: WaitTasks = %v", where, err)
				}
				cancel()
				if h.moved(old) {
					resetMoves++
				}
			case "server":
				down := h.streamLeader("")
				var p *natsProc
				for _, s := range h.servers {
					if s.name == down {
						p = s
					}
				}
				h.stop(p, syscall.SIGKILL)
				elected := h.streamLeader(down)
				elections = append(elections, time.Since(at))
				t.Logf("%s: server %s (the log's stream leader) killed; %s leads the stream %v later", where, down, elected, time.Since(at).Round(time.Millisecond))
				ctx, cancel := context.WithTimeout(context.Background(), 2*long)
				if err := h.client.WaitTasks(ctx, roundIDs(round)...); err != nil && !errors.As(err, new(*coordinator.TasksError)) {
					t.Fatalf("%s: WaitTasks = %v", where, err)
				}
				cancel()
				if h.moved(old) {
					moved++
				}
				// The stall: the longest time without a dispatch, from the
				// kill until the round's tasks were final.
				finished, last, stall := time.Now().UnixNano(), at.UnixNano(), int64(0)
				for _, l := range readSideLog(t, h.logPath) {
					if l.kind == "dispatch" && l.at > at.UnixNano() && l.at <= finished {
						stall, last = max(stall, l.at-last), l.at
					}
				}
				took[what] = append(took[what], time.Duration(stall))
				h.start(p)
			}
			log := readSideLog(t, h.logPath)
			h.checks.check(where, inspect(t, h.logConn, harnessStore), log)
			checkTerms(t, where, logOf(t, h.logConn, harnessStore))
			checkOverlap(t, where, log, h.deaths, h.paused)
			if t.Failed() {
				return
			}
			round++
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*long)
	defer cancel()
	if err := h.client.Wait(ctx); err != nil {
		t.Fatalf("Wait for the graph = %v", err)
	}
	final := inspect(t, h.logConn, harnessStore)
	log := readSideLog(t, h.logPath)
	h.checks.check("at the end", final, log)
	checkOrder(t, "at the end", final, log)
	checkOverlap(t, "at the end", log, h.deaths, h.paused)
	for id := range h.checks.expected {
		if s := final.tasks[id]; !s.status().Final() {
			t.Errorf("%s is %v at the end; want final", id, s.status())
		}
	}
	t.Logf("lease %v, %d rounds: takeover after a SIGKILL of the leader: %s; after a SIGSTOP: %s; after a partition: %s",
		failoverLease, round, spread(took["kill"]), spread(took["pause"]), spread(took["partition"]))
	t.Logf("the log's stream-leader server SIGKILLed: JetStream's next stream leader %s; the longest time without a dispatch, from the kill until the round's tasks were final, %s; the lead moved %d times of %d",
		spread(elections), spread(took["server"]), moved, len(elections))
	t.Logf("connection resets of the leader (3 in a row, %d rounds): the lead moved %d times", *harnessRounds, resetMoves)
	// A term moves once per real change of leader: count the claims that
	// landed (the log is compacted only past 4 MiB: these runs keep it
	// whole).
	claims := 0
	for _, e := range logOf(t, h.logConn, harnessStore) {
		if e.kind == "term" && !e.resign && e.leader != "" {
			claims++
		}
	}
	changes := 1 + len(took["kill"]) + len(took["pause"]) + len(took["partition"]) + moved + resetMoves
	t.Logf("claims in the log: %d, for %d changes of leader (the first lead included)", claims, changes)
	if claims > 2*changes {
		t.Errorf("%d claims in the log for %d changes of leader: a claim storm", claims, changes)
	}
}

// roundIDs are the task IDs of a round of roundTasks.
func roundIDs(round int) []string {
	var ids []string
	for i := range 30 {
		ids = append(ids, fmt.Sprintf("r%02d-%02d", round, i))
	}
	return ids
}

// checkTerms checks, from the log's messages, that every append names
// the term the log is in: none comes from a deposed term (a message of
// no writer is quarantined, and skipped here too).
func checkTerms(t *testing.T, where string, log []logEntry) {
	t.Helper()
	var cur uint64
	for _, e := range log {
		if e.leader == "" {
			continue
		}
		if e.kind == "term" && !e.resign {
			cur = e.seq
			continue
		}
		term, err := strconv.ParseUint(e.term, 10, 64)
		if err != nil {
			t.Errorf("%s: log message %d (%s) names no term", where, e.seq, e.kind)
			continue
		}
		if cur == 0 {
			cur = term // the log begins after a compaction
		}
		if term != cur {
			t.Errorf("%s: log message %d (%s) by %s is of term %d, after term %d began: an append from a deposed term", where, e.seq, e.kind, e.leader, term, cur)
		}
	}
}

// overlapGrace is how far two runs of one task may overlap: a function
// whose context ends returns at once here, and the lease's gate ends it
// an eighth of a lease before a standby may claim (ErrLeaseLapsed); what
// is left is the scheduling of the processes on a loaded machine, and,
// for a process resumed after a SIGSTOP, the moment its overdue lease
// watch takes to cancel what it ran.
var overlapGrace = 250*time.Millisecond + raceSlack

// checkOverlap checks that no two runs of one task (the side log's run
// and end lines, by process) overlap by more than overlapGrace. A run
// with no end ended when its process was killed (deaths); a run of a
// process SIGSTOPped (paused: from, to) did not run meanwhile.
func checkOverlap(t *testing.T, where string, log []logLine, deaths map[int]int64, paused map[int][2]int64) {
	t.Helper()
	type run struct {
		pid        int
		start, end int64
	}
	open := map[string]map[int]int64{}
	runs := map[string][]run{}
	for _, l := range log {
		switch l.kind {
		case "run":
			if open[l.id] == nil {
				open[l.id] = map[int]int64{}
			}
			open[l.id][l.pid] = l.at
		case "end":
			if s, ok := open[l.id][l.pid]; ok {
				runs[l.id] = append(runs[l.id], run{l.pid, s, l.at})
				delete(open[l.id], l.pid)
			}
		}
	}
	for id, m := range open {
		for pid, s := range m {
			if d, ok := deaths[pid]; ok {
				runs[id] = append(runs[id], run{pid, s, d})
			}
		}
	}
	// The intervals a run ran in: a SIGSTOPped process ran nothing
	// while it was stopped.
	spans := func(r run) [][2]int64 {
		if p, ok := paused[r.pid]; ok && r.start < p[0] && r.end > p[1] {
			return [][2]int64{{r.start, p[0]}, {p[1], r.end}}
		}
		return [][2]int64{{r.start, r.end}}
	}
	var worst time.Duration
	for id, rs := range runs {
		for i := range rs {
			for j := i + 1; j < len(rs); j++ {
				a, b := rs[i], rs[j]
				if a.pid == b.pid {
					continue
				}
				var over int64
				for _, x := range spans(a) {
					for _, y := range spans(b) {
						over += max(0, min(x[1], y[1])-max(x[0], y[0]))
					}
				}
				worst = max(worst, time.Duration(over))
				if time.Duration(over) > overlapGrace {
					t.Errorf("%s: two runs of %s overlap by %v (process %d from %d, process %d from %d); want at most %v",
						where, id, time.Duration(over), a.pid, a.start, b.pid, b.start, overlapGrace)
				}
			}
		}
	}
	if worst > 0 {
		t.Logf("%s: the largest overlap of two runs of one task: %v", where, worst)
	}
}

// seedOf returns the seed a randomized process test draws from: fixed when
// its flag (named flagName) sets one, otherwise a new one on every run, so
// that CI keeps trying new graphs and moments. Either way the seed is
// logged with the flag that repeats the run.
func seedOf(t *testing.T, fixed uint64, flagName string) uint64 {
	t.Helper()
	seed := fixed
	if seed == 0 {
		seed = rand.Uint64() | 1
	}
	t.Logf("seed %d (-%s=%d repeats this run)", seed, flagName, seed)
	return seed
}
