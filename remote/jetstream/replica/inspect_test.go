package replica_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/internal/record"
	"github.com/batonhq/baton/remote/jetstream/replica"
	"github.com/nats-io/nats.go"
)

// The crash checks of boltstore/crash_test.go, adapted: the state is read
// from the replicated store itself (replica.ReadRecords: the log, as any
// replica would restore it), decoded with the coordinator's record
// format (internal/record: this package's path is under the core's, so
// it may import it; a change of the format breaks this test's build, not
// its verdicts), between kills.

// stored is a task as the store holds it.
type stored struct {
	def   record.Def
	state record.State
}

func (s stored) status() coordinator.Status { return coordinator.Status(s.state.Status) }

// inspection is every task of the store, read at a moment.
type inspection struct {
	at    int64 // when the reading began (UnixNano): what is final in it was final then
	tasks map[string]stored
}

func inspect(t *testing.T, nc *nats.Conn, store string) inspection {
	t.Helper()
	var in inspection
	var err error
	// A reading through an ordered consumer can stall for good right
	// after a server of the cluster came back (seen once in the process
	// harness): a reading that has not ended in a third of the guard is
	// begun again.
	for try := range 3 {
		if in, err = inspectOnce(nc, store, long/3); err == nil {
			return in
		}
		t.Logf("reading the replicated store (try %d): %v", try+1, err)
	}
	t.Fatalf("reading the replicated store: %v", err)
	return in
}

func inspectOnce(nc *nats.Conn, store string, within time.Duration) (inspection, error) {
	in := inspection{at: time.Now().UnixNano(), tasks: map[string]stored{}}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	bySeq := map[uint64]*stored{}
	err := replica.ReadRecords(ctx, nc, store, func(k, v []byte) error {
		seq, kind, ok := record.ParseTaskKey(k)
		if !ok {
			return nil // the version record
		}
		s := bySeq[seq]
		if s == nil {
			s = &stored{}
			bySeq[seq] = s
		}
		var err error
		switch kind {
		case record.KindDef:
			s.def, err = record.DecodeDef(v)
		case record.KindState:
			s.state, err = record.DecodeState(v, uint8(coordinator.Skipped)+1)
		}
		return err
	})
	if err != nil {
		return in, err
	}
	for _, s := range bySeq {
		in.tasks[s.def.ID] = *s
	}
	return in, nil
}

// crashChecks holds what the checks carry from one inspection to the
// next.
type crashChecks struct {
	t        *testing.T
	expected map[string]bool // tasks whose Submit returned nil
	prev     inspection
	// Counted across the run.
	interruptedLocal  int // local attempts a kill interrupted, counted as such
	interruptedRemote int // remote ones: must stay 0 (the Pool resumes them)
}

// check compares an inspection with the one before and with the side log
// (lines in time order).
func (c *crashChecks) check(where string, now inspection, log []logLine) {
	t := c.t
	t.Helper()
	for id := range c.expected {
		if _, ok := now.tasks[id]; !ok {
			t.Errorf("%s: %s: its Submit returned, and the store has lost it", where, id)
		}
	}
	for id, s := range now.tasks {
		st := s.state
		if s.status() == coordinator.Succeeded && string(st.Result) != "res:"+id {
			t.Errorf("%s: %s succeeded with result %q; want res:%s", where, id, st.Result, id)
		}
		before, ok := c.prev.tasks[id]
		if st.ErrKind == record.ErrKindInterrupted && (!ok || before.state.ErrKind != record.ErrKindInterrupted || before.state.Attempts != st.Attempts) {
			if s.def.Pool == "remote" {
				c.interruptedRemote++
				t.Errorf("%s: remote task %s counts an interrupted attempt: the Pool resumes them", where, id)
			} else {
				c.interruptedLocal++
			}
		}
		if !ok {
			continue
		}
		if before.status().Final() {
			if s.state.Status != before.state.Status || s.state.Attempts != before.state.Attempts ||
				s.state.Runs != before.state.Runs || string(s.state.Result) != string(before.state.Result) {
				t.Errorf("%s: %s was final (%v, attempts %d) and is now %v, attempts %d", where, id,
					before.status(), before.state.Attempts, s.status(), s.state.Attempts)
			}
			continue
		}
		if st.Runs < before.state.Runs || (st.Runs == before.state.Runs && st.Attempts < before.state.Attempts) {
			t.Errorf("%s: %s went back from run %d attempt %d to run %d attempt %d", where, id,
				before.state.Runs, before.state.Attempts, st.Runs, st.Attempts)
		}
	}
	// Nothing runs after its end was decided (the final state's time, on
	// the leader's clock: this machine's).
	for _, l := range log {
		if s, ok := now.tasks[l.id]; ok && l.kind == "run" && s.status().Final() && l.at > s.state.At.UnixNano() {
			t.Errorf("%s: %s ended %v at %s and ran again at %s (process %d; runs of it: %s)", where, l.id, s.status(),
				s.state.At.Format("15:04:05.000000"), time.Unix(0, l.at).Format("15:04:05.000000"), l.pid, runsOf(log, l.id))
		}
	}
	c.prev = now
}

// checkOrder checks, over the whole side log, that no dependency began
// after a task that waits for its end had begun: a task runs only once
// its dependencies' ends are committed, so no failover makes a
// dependency run again after its dependent (AnyFailed starts at the first
// failure, while other dependencies may still run: it is left out).
func checkOrder(t *testing.T, where string, in inspection, log []logLine) {
	t.Helper()
	first := map[string]int64{}
	for _, l := range log {
		if _, ok := first[l.id]; !ok && l.kind == "run" {
			first[l.id] = l.at
		}
	}
	var bad []string
	for _, l := range log {
		if l.kind != "run" {
			continue
		}
		for id, s := range in.tasks {
			at, ok := first[id]
			if !ok || at >= l.at || coordinator.Trigger(s.def.When) == coordinator.AnyFailed || !slices.Contains(s.def.Deps, l.id) {
				continue
			}
			bad = append(bad, fmt.Sprintf("%s began at %d, after its dependent %s (%v) at %d", l.id, l.at, id, coordinator.Trigger(s.def.When), at))
		}
	}
	for _, b := range bad {
		t.Errorf("%s: %s", where, b)
	}
}

// runsOf describes the side log's lines of task id: kind, process, time.
func runsOf(log []logLine, id string) string {
	var out []string
	for _, l := range log {
		if l.id == id {
			out = append(out, fmt.Sprintf("%s/%d/%d@%s", l.kind, l.attempt, l.pid, time.Unix(0, l.at).Format("15:04:05.000000")))
		}
	}
	return strings.Join(out, " ")
}
