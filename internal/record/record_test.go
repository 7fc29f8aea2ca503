package record

import (
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const statuses = 7 // the coordinator's: Pending .. Skipped

// Records decode back to what was encoded, and any bytes decode to a
// value or to ErrCorrupt, never a panic.
func FuzzDecodeRecords(f *testing.F) {
	st := State{Status: 4, CancelReq: true, HasResult: true, Attempts: 3, Runs: 2,
		Due: time.Unix(0, 0), Planned: time.Unix(5, 6), At: time.Unix(7, 8), ErrKind: ErrKindOther,
		ErrMsg: "boom", Cause: "up", Result: []byte("r")}
	f.Add(st.Append(nil))
	timedOut := State{Status: 4, Attempts: 1, ErrKind: ErrKindTimeout, ErrMsg: "query users", Timeout: time.Second}
	f.Add(timedOut.Append(nil))
	joinFailed := State{Status: 4, Attempts: 1, ErrKind: ErrKindJoin, ErrMsg: `task "p": spawned "p/a" failed: boom`, JoinFrom: 2}
	f.Add(joinFailed.Append(nil))
	last := Attempt{Attempt: 2, Run: 1, Outcome: 2, Handed: 5, Started: 6, Ended: 9, Worker: "w1", ErrKind: ErrKindTimeout, ErrMsg: "slow", Timeout: time.Second}
	withLast := State{Status: 4, Attempts: 2, Last: &last}
	f.Add(withLast.Append(nil))
	rerun := State{Status: 6, Cause: "up", Reruns: 2, CauseClass: 1}
	f.Add(rerun.Append(nil))
	hist := History{Dropped: 3, Attempts: []Attempt{last, {Attempt: 3, Run: 1, Outcome: 1, Ended: 10}}}
	f.Add(hist.Append(nil))
	def := Def{ID: "a", Func: "f", Payload: []byte{1}, HasPayload: true, Deps: []string{"b", "c"}, Jitter: 0.5, Cron: "@daily", NotBefore: time.Unix(9, 0)}
	f.Add(def.Append(nil))
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, err := DecodeState(b, statuses); err == nil {
			again, err := DecodeState(got.Append(nil), statuses)
			if err != nil || !reflect.DeepEqual(again, got) {
				t.Fatalf("state %+v re-decoded as %+v (%v)", got, again, err)
			}
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("DecodeState error %v does not wrap ErrCorrupt", err)
		}
		if got, err := DecodeHistory(b); err == nil {
			again, err := DecodeHistory(got.Append(nil))
			if err != nil || !reflect.DeepEqual(again, got) {
				t.Fatalf("history %+v re-decoded as %+v (%v)", got, again, err)
			}
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("DecodeHistory error %v does not wrap ErrCorrupt", err)
		}
		if got, err := DecodeDef(b); err == nil {
			again, err := DecodeDef(got.Append(nil))
			if err != nil || !sameDef(again, got) {
				t.Fatalf("definition %+v re-decoded as %+v (%v)", got, again, err)
			}
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("DecodeDef error %v does not wrap ErrCorrupt", err)
		}
	})
}

// sameDef reports whether two definitions are equal, Jitter by its bits:
// a NaN read from a record must come back the same NaN, and DeepEqual
// finds no NaN equal to itself.
func sameDef(a, b Def) bool {
	if math.Float64bits(a.Jitter) != math.Float64bits(b.Jitter) {
		return false
	}
	a.Jitter, b.Jitter = 0, 0
	return reflect.DeepEqual(a, b)
}

func TestRoundTrip(t *testing.T) {
	st := State{Status: 3, HasResult: true, Attempts: 1, Runs: 1, At: time.Unix(0, 1), Result: []byte{}}
	got, err := DecodeState(st.Append(nil), statuses)
	if err != nil || !reflect.DeepEqual(got, st) || !got.SameAs(&st) {
		t.Errorf("decoded %+v (%v); want %+v", got, err, st)
	}
	later := st
	later.At = time.Unix(9, 9)
	if !later.SameAs(&st) {
		t.Error("SameAs told two records apart by the time they were written")
	}
	for _, st := range []State{{Status: 6, Cause: "up", Reruns: 3}, {Status: 6, Cause: "up", CauseClass: 2},
		{Status: 6, Cause: "up", Reruns: 1, CauseClass: 1, Last: &Attempt{Attempt: 1, Run: 1, Rerun: 1, Outcome: 1}}} {
		if got, err := DecodeState(st.Append(nil), statuses); err != nil || !reflect.DeepEqual(got, st) {
			t.Errorf("decoded %+v (%v); want %+v", got, err, st)
		}
	}
	if _, err := DecodeState((&State{Status: 6, CauseClass: 4}).Append(nil), statuses); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a cause class out of range decoded: %v", err)
	}
	if _, err := DecodeState((&State{Status: statuses}).Append(nil), statuses); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a status out of range decoded: %v", err)
	}
	key := AppendTaskKey(nil, 42, KindState)
	if seq, kind, ok := ParseTaskKey(key); !ok || seq != 42 || kind != KindState || len(key) != TaskKeyLen {
		t.Errorf("ParseTaskKey(%q) = %d, %c, %v", key, seq, kind, ok)
	}
	if v, err := DecodeVersion(AppendVersion(nil, Version)); err != nil || v != Version {
		t.Errorf("version read back as %d, %v", v, err)
	}
}

// Version 3's fields round-trip, and a version 2 record (without them)
// reads with them zero.
func TestFamilyFields(t *testing.T) {
	st := State{Status: 0, Joining: true, JoinFrom: 4, Adopt: "m/reduce", Branched: true, Chosen: []string{"a", "b"}}
	got, err := DecodeState(st.Append(nil), statuses)
	if err != nil || !reflect.DeepEqual(got, st) || !got.SameAs(&st) {
		t.Errorf("decoded %+v (%v); want %+v", got, err, st)
	}
	if other := (State{Joining: true}); other.SameAs(&st) {
		t.Error("SameAs did not tell a different join apart")
	}
	def := Def{ID: "c", Parent: "p"}
	if got, err := DecodeDef(def.Append(nil)); err != nil || !reflect.DeepEqual(got, def) {
		t.Errorf("decoded %+v (%v); want %+v", got, err, def)
	}
	old := Def{ID: "c"}
	if got, err := DecodeDef(old.Append(nil)); err != nil || got.Parent != "" {
		t.Errorf("a definition without a parent decoded as %+v (%v)", got, err)
	}
}

// A time outside what an int64 of nanoseconds holds (before 1678, after
// 2262: a snooze or delay of math.MaxInt64 ends in 2318) reads back as
// written, to the nanosecond; UnixNano wrapped it to a time long past.
func TestFarTimesRoundTrip(t *testing.T) {
	edge := time.Unix(0, math.MaxInt64)
	for _, at := range []time.Time{
		edge, edge.Add(1), edge.Add(-1), time.Unix(0, math.MinInt64), time.Unix(0, math.MinInt64).Add(-1),
		time.Date(2318, 3, 1, 4, 5, 6, 7, time.UTC), time.Date(1600, 1, 1, 0, 0, 0, 999_999_999, time.UTC),
		time.Unix(1<<62, 0), time.Unix(-1<<62, 5), time.Unix(maxNanoSec, 1), time.Unix(minNanoSec, 1),
	} {
		st := State{Status: 1, Due: at}
		got, err := DecodeState(st.Append(nil), statuses)
		if err != nil || !got.Due.Equal(at) {
			t.Errorf("Due %v read back as %v (%v)", at, got.Due, err)
		}
	}
	// A nanosecond field out of range is corrupt.
	b := binary.AppendVarint([]byte{2}, 1<<40)
	b = binary.AppendUvarint(b, uint64(time.Second))
	r := reader{b: b}
	if r.time(); !errors.Is(r.err, ErrCorrupt) {
		t.Errorf("a time of %d nanoseconds in its second read as %v", time.Second, r.err)
	}
}

// A sentinel's kind with a text of its own keeps the text, in a state and
// in an attempt.
func TestSentinelTextKindsRoundTrip(t *testing.T) {
	for _, kind := range []uint8{ErrKindCancelledText, ErrKindClosedText, ErrKindInterruptedText} {
		st := State{Status: 4, ErrKind: kind, ErrMsg: "upstream said: cancelled"}
		if got, err := DecodeState(st.Append(nil), statuses); err != nil || !reflect.DeepEqual(got, st) {
			t.Errorf("decoded %+v (%v); want %+v", got, err, st)
		}
		h := History{Attempts: []Attempt{{Attempt: 1, Run: 1, Outcome: 2, ErrKind: kind, ErrMsg: "upstream said: closed"}}}
		if got, err := DecodeHistory(h.Append(nil)); err != nil || !reflect.DeepEqual(got, h) {
			t.Errorf("decoded %+v (%v); want %+v", got, err, h)
		}
	}
	if _, err := DecodeState((&State{Status: 4, ErrKind: errKinds}).Append(nil), statuses); !errors.Is(err, ErrCorrupt) {
		t.Errorf("an error kind out of range decoded: %v", err)
	}
}
