package replica_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/coordinator/storetest"
	"github.com/batonhq/baton/remote/jetstream/replica"
	"github.com/batonhq/baton/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// testLease is the lease of the tests' stores: short, for takeovers that
// do not wait, and long enough for a loaded machine's signs of life.
const testLease = 500 * time.Millisecond

// storeName makes a store name of a test's directory.
func storeName(dir string) string {
	h := sha256.Sum256([]byte(dir))
	return "st" + hex.EncodeToString(h[:6])
}

// The conformance suite, on an R3 log in a three-server cluster.
func TestStoreConformance(t *testing.T) {
	c := startCluster(t, 3, nil)
	nc := c.connect(t)
	waitReady(t, nc)
	storetest.Run(t, func(t *testing.T, dir string) coordinator.Store {
		return replica.NewStore(nc, storeName(dir), replica.WithLease(testLease), replica.WithName(t.Name()))
	})
}

// waitReady creates a first R3 store on the cluster, so that the tests'
// own stores do not wait for the cluster to form (2-8 s).
func waitReady(t testing.TB, nc *nats.Conn) {
	t.Helper()
	st := replica.NewStore(nc, "warmup", replica.WithLease(testLease), replica.WithLockWait(long))
	if err := st.Load(func(k, v []byte) error { return nil }); err != nil {
		t.Fatalf("warming the cluster up: %v", err)
	}
	st.Close()
}

// records loads st and returns its records.
func records(t *testing.T, st coordinator.Store) map[string]string {
	t.Helper()
	got := map[string]string{}
	if err := st.Load(func(k, v []byte) error { got[string(k)] = string(v); return nil }); err != nil {
		t.Fatalf("Load = %v", err)
	}
	return got
}

func commit(st coordinator.Store, puts map[string]string, deletes ...string) error {
	c := &coordinator.Changes{}
	for k, v := range puts {
		c.Puts = append(c.Puts, coordinator.KV{Key: []byte(k), Value: []byte(v)})
	}
	for _, k := range deletes {
		c.Deletes = append(c.Deletes, []byte(k))
	}
	return st.Commit(c)
}

// logOf reads every message of a store's log: subject kind, term and
// writer.
type logEntry struct {
	seq          uint64
	kind, leader string
	term         string
	resign       bool
	quarantine   string // Baton-Quarantine: a commit that took a record out
}

// logOf reads the log, again while JetStream cannot answer (a server of
// the cluster just lost or back), up to a guard.
func logOf(t *testing.T, nc *nats.Conn, store string) []logEntry {
	t.Helper()
	deadline := time.Now().Add(long)
	for {
		out, err := logOnce(nc, store)
		if err == nil {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("reading the log of %s: %v", store, err)
		}
		tick := time.NewTimer(50 * time.Millisecond)
		<-tick.C
	}
}

func logOnce(nc *nats.Conn, store string) ([]logEntry, error) {
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	st, err := js.Stream(ctx, "BATON_"+store+"_LOG")
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	var out []logEntry
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		kind := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
		out = append(out, logEntry{seq: seq, kind: kind, leader: m.Header.Get("Baton-Leader"),
			term: m.Header.Get("Baton-Term"), resign: m.Header.Get("Baton-Resign") == "1", quarantine: m.Header.Get("Baton-Quarantine")})
	}
	return out, nil
}

// A leader that another replica took over while it was silent commits
// nothing more: its first commit after the takeover is refused with
// ErrFenced, and so is every later one, and its lease's middleware
// starts no attempt; the log holds nothing of it after the new term.
// (The old leader's lease is long, so that it writes no sign of life in
// time: a paused process, for the log.)
func TestFencedStoreCommitsNothing(t *testing.T) {
	c := startCluster(t, 3, nil)
	nc := c.connect(t)
	waitReady(t, nc)
	old := replica.NewStore(nc, "fence", replica.WithName("old"), replica.WithLease(time.Minute))
	if got := records(t, old); len(got) != 0 {
		t.Fatalf("a new store holds %v", got)
	}
	if err := commit(old, map[string]string{"a": "1", "b": "2"}); err != nil {
		t.Fatal(err)
	}
	oldTerm := old.Term()

	// The new one claims the store once the old has been silent for its
	// (short) lease.
	next := replica.NewStore(nc, "fence", replica.WithName("new"), replica.WithLease(testLease), replica.WithLockWait(long))
	if got := records(t, next); got["a"] != "1" || got["b"] != "2" || len(got) != 2 {
		t.Fatalf("the new leader restored %v; want the old leader's commits", got)
	}
	if next.Term() <= oldTerm {
		t.Fatalf("new term %d; want after %d", next.Term(), oldTerm)
	}

	for i := range 2 {
		err := commit(old, map[string]string{"a": "stale"})
		if !errors.Is(err, replica.ErrFenced) {
			t.Fatalf("old leader's commit #%d after the takeover = %v; want ErrFenced", i+1, err)
		}
	}
	// The gate: an attempt of the old leader does not start.
	ran := false
	w := old.Middleware()("", worker.Func{})
	err := w.Do(context.Background(), worker.Job{ID: "x", Run: func(context.Context) error { ran = true; return nil }})
	if ran || !errors.Is(err, replica.ErrFenced) {
		t.Errorf("old leader's gated attempt: ran %v, error %v; want not run, ErrFenced", ran, err)
	}
	if err := commit(next, map[string]string{"c": "3"}); err != nil {
		t.Fatalf("new leader's commit = %v", err)
	}
	old.Close()
	next.Close()
	for _, e := range logOf(t, nc, "fence") {
		if e.seq > next.Term() && e.leader == "old" {
			t.Errorf("log message %d (%s) by the old leader after the new term %d", e.seq, e.kind, next.Term())
		}
	}
	again := replica.NewStore(nc, "fence", replica.WithLease(testLease))
	if got := records(t, again); got["a"] != "1" || got["c"] != "3" || len(got) != 3 {
		t.Errorf("after both closed: %v; want a=1 b=2 c=3", got)
	}
	again.Close()
	if err := again.Load(func(k, v []byte) error { return nil }); !errors.Is(err, replica.ErrClosed) {
		t.Errorf("Load after Close = %v; want ErrClosed", err)
	}
	never := replica.NewStore(nc, "fence")
	never.Close()
	for _, st := range []*replica.Store{next, never} { // closed while leading; closed before Load
		if err := commit(st, map[string]string{"d": "4"}); !errors.Is(err, replica.ErrClosed) {
			t.Errorf("Commit after Close = %v; want ErrClosed", err)
		}
	}
}

// A commit larger than a message is an atomic batch: it is read back
// whole; refused (a stale leader's), it lands nothing.
func TestLargeCommitIsAtomic(t *testing.T) {
	c := startCluster(t, 3, nil)
	nc := c.connect(t)
	waitReady(t, nc)
	big := func(tag string) map[string]string {
		m := map[string]string{}
		val := strings.Repeat(tag, 1000)
		for i := range 3000 { // about 3 MB: four parts at the default 1 MiB max payload
			m[fmt.Sprintf("k%05d", i)] = val
		}
		return m
	}
	old := replica.NewStore(nc, "big", replica.WithName("old"), replica.WithLease(time.Minute))
	records(t, old)
	if err := commit(old, big("x")); err != nil {
		t.Fatalf("large commit = %v", err)
	}
	next := replica.NewStore(nc, "big", replica.WithName("new"), replica.WithLease(testLease), replica.WithLockWait(long))
	got := records(t, next)
	if len(got) != 3000 || got["k02999"] != strings.Repeat("x", 1000) {
		t.Fatalf("the large commit read back as %d records", len(got))
	}
	if err := commit(old, big("y")); !errors.Is(err, replica.ErrFenced) {
		t.Fatalf("a stale leader's large commit = %v; want ErrFenced", err)
	}
	old.Close()
	next.Close()
	var parts int
	for _, e := range logOf(t, nc, "big") {
		if e.kind == "commit" {
			parts++
		}
		if e.leader == "old" && e.seq > next.Term() {
			t.Errorf("message %d of the refused batch landed", e.seq)
		}
	}
	if parts < 2 {
		t.Errorf("the large commit took %d messages; want an atomic batch of several", parts)
	}
	again := replica.NewStore(nc, "big", replica.WithLease(testLease))
	if got := records(t, again); len(got) != 3000 || got["k00000"] != strings.Repeat("x", 1000) {
		t.Errorf("after the refused batch: %d records, k00000 %.10q…", len(got), got["k00000"])
	}
	again.Close()
}

// Compaction keeps the log bounded while records come and go (as under
// retention): a snapshot of every record, then a purge of what came
// before it. A store opened on the compacted log, and a standby that
// followed it throughout, read the same records as the leader's.
func TestCompactionKeepsTheLogBounded(t *testing.T) {
	c := startCluster(t, 3, nil)
	nc := c.connect(t)
	waitReady(t, nc)
	const compactAfter = 64 << 10
	st := replica.NewStore(nc, "compact", replica.WithName("leader"), replica.WithLease(testLease), replica.WithCompactAfter(compactAfter))
	records(t, st)
	// A standby follows from the start (its Load waits for the leader to
	// resign).
	standby := replica.NewStore(nc, "compact", replica.WithName("standby"), replica.WithLease(testLease), replica.WithLockWait(time.Hour))
	followed := make(chan map[string]string, 1)
	go func() {
		got := map[string]string{}
		err := standby.Load(func(k, v []byte) error { got[string(k)] = string(v); return nil })
		if err != nil {
			got = map[string]string{"error": err.Error()}
		}
		followed <- got
	}()
	want := map[string]string{}
	val := strings.Repeat("v", 200)
	js, _ := jetstream.New(nc)
	var maxBytes uint64
	for round := range 200 {
		puts := map[string]string{}
		for i := range 20 {
			k := fmt.Sprintf("r%03d-%02d", round, i)
			puts[k], want[k] = val, val
		}
		var dels []string
		if round >= 5 { // records live five rounds
			for i := range 20 {
				k := fmt.Sprintf("r%03d-%02d", round-5, i)
				dels = append(dels, k)
				delete(want, k)
			}
		}
		if err := commit(st, puts, dels...); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		info, err := js.Stream(context.Background(), "BATON_compact_LOG")
		if err != nil {
			t.Fatal(err)
		}
		if b := info.CachedInfo().State.Bytes; b > maxBytes {
			maxBytes = b
		}
	}
	// The records are 100 of about 210 bytes; the log's bound is about
	// three times the snapshot plus compactAfter, and messages' overhead.
	if limit := uint64(4 * compactAfter); maxBytes > limit {
		t.Errorf("the log grew to %d bytes; want at most %d", maxBytes, limit)
	}
	t.Logf("the log's largest size: %d bytes (200 rounds of 20 records, 4.2 KB each)", maxBytes)
	if err := st.Close(); err != nil { // resigns: the standby leads
		t.Fatal(err)
	}
	got := recv(t, followed, "the standby's Load")
	if !maps.Equal(got, want) {
		t.Errorf("the standby that followed the log read %d records; want %d", len(got), len(want))
	}
	standby.Close()
	fresh := replica.NewStore(nc, "compact", replica.WithLease(testLease))
	if got := records(t, fresh); !maps.Equal(got, want) {
		t.Errorf("a store opened on the compacted log read %d records; want %d", len(got), len(want))
	}
	fresh.Close()
}

// recv waits for one value on ch, failing the test after long.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(long):
		t.Fatalf("no %s after %v", what, long)
		panic("unreachable")
	}
}
