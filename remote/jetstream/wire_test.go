package jetstream

import (
	"bytes"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
)

// sameLogs compares log lines by value (times with Equal).
func sameLogs(a, b []coordinator.LogLine) bool {
	return slices.EqualFunc(a, b, func(x, y coordinator.LogLine) bool {
		return x.Time.Equal(y.Time) && x.Level == y.Level && x.Message == y.Message && x.Attrs == y.Attrs
	})
}

func TestOutcomeRoundTrip(t *testing.T) {
	for _, o := range []outcome{
		{Key: "i/1/2/a/b", Status: statusOK, Worker: "w", Delivery: 1, Result: []byte("r")},
		{Key: "i/3/4/t", Status: statusPanic, Worker: "host:1", Delivery: 300, Error: "boom", Stack: "goroutine 1\n"},
		{Key: "k", Status: statusError, Code: codeUnknownKind, Error: "no handler"},
		{Key: "i/1/1/t", Seq: 1 << 40, Status: statusCancelled, Delivery: 2},
		{Key: "i/1/1/l", Status: statusError, Error: "e", LogsDropped: 3, Result: []byte("r"), Logs: []coordinator.LogLine{
			{Time: time.Unix(1700000000, 123), Level: slog.LevelWarn, Message: "a line", Attrs: "n=1"},
			{Time: time.Unix(-5, 0), Level: slog.Level(-8), Message: "", Attrs: ""}}},
	} {
		got, err := decodeOutcome(o.encode())
		if err != nil || got.Key != o.Key || got.Status != o.Status || got.Code != o.Code || got.Worker != o.Worker ||
			got.Delivery != o.Delivery || got.Seq != o.Seq || got.Error != o.Error || got.Stack != o.Stack || !bytes.Equal(got.Result, o.Result) ||
			!sameLogs(got.Logs, o.Logs) || got.LogsDropped != o.LogsDropped {
			t.Errorf("decodeOutcome(encode(%+v)) = %+v, %v", o, got, err)
		}
	}
	// Version 1 (an older Serve's) has no sequence.
	if o, err := decodeOutcome([]byte{1, statusOK, 0, 1, 1, 'k', 0, 0, 0, 'r'}); err != nil || o.Key != "k" || o.Seq != 0 || string(o.Result) != "r" {
		t.Errorf("decodeOutcome(version 1) = %+v, %v", o, err)
	}
	// Version 3 (before the log) has a token and no log.
	if o, err := decodeOutcome([]byte{3, statusOK, 0, 1, 0, 1, 'k', 0, 0, 0, 1, 'x', 'r'}); err != nil || o.Token != "x" || o.Logs != nil || string(o.Result) != "r" {
		t.Errorf("decodeOutcome(version 3) = %+v, %v", o, err)
	}
	// A count of lines the bytes cannot hold is refused before any
	// allocation for them.
	if _, err := decodeOutcome([]byte{4, statusOK, 0, 1, 0, 1, 'k', 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}); err == nil {
		t.Error("decodeOutcome(a huge line count) = nil error")
	}
	for _, b := range [][]byte{nil, {1}, {3, 1, 0, 1, 0}, {2, 1, 0, 1}, {1, 9, 0, 1, 0}, {1, 1, 0, 1, 5, 'a'}, {1, 1, 0, 1, 0, 0, 0, 0}} {
		if _, err := decodeOutcome(b); err == nil {
			t.Errorf("decodeOutcome(%v) = nil error; want one", b)
		}
	}
}

func TestCancelBody(t *testing.T) {
	for _, c := range []struct {
		key string
		seq uint64
	}{{"i/1/1/a b", 7}, {"i/1/1/t", 0}, {"123/2/3/x\ty", 1 << 50}} {
		if key, seq := parseCancel(cancelBody(c.key, c.seq)); key != c.key || seq != c.seq {
			t.Errorf("parseCancel(cancelBody(%q, %d)) = %q, %d", c.key, c.seq, key, seq)
		}
	}
	if key, seq := parseCancel([]byte("i/1/1/t")); key != "i/1/1/t" || seq != 0 { // an older Pool's
		t.Errorf("parseCancel(a bare key) = %q, %d", key, seq)
	}
	if outcomeMsgID("k", 1) == outcomeMsgID("k", 2) {
		t.Error("two publications of a key share an outcome message ID")
	}
}

func TestParseKey(t *testing.T) {
	inst, id, ok := parseKey(attemptKey("coord-1", jobID{task: "a/b c", round: 3, attempt: 7}))
	if !ok || inst != "coord-1" || id != (jobID{task: "a/b c", round: 3, attempt: 7}) {
		t.Fatalf("parseKey = %q, %+v, %v", inst, id, ok)
	}
	key := attemptKey("coord-1", jobID{task: "t+1/x", round: 3, attempt: 7})
	k1 := rekey(key, 42)
	if k2 := rekey(k1, 43); k1 == key || k2 == k1 || k2 != "coord-1+43/3/7/t+1/x" {
		t.Errorf("rekey: %q, then %q", k1, k2)
	}
	if inst, id, ok := parseKey(k1); !ok || inst != "coord-1" || id != (jobID{task: "t+1/x", round: 3, attempt: 7}) {
		t.Errorf("parseKey(%q) = %q, %+v, %v", k1, inst, id, ok)
	}
	if outcomeSubject("p", "i", key) == outcomeSubject("p", "i", k1) {
		t.Error("a rekeyed attempt shares its outcome subject")
	}
	for _, k := range []string{"", "a/1/2", "bad inst/1/1/t", "i/x/1/t", "i/1/y/t", "i+/1/1/t", "i+x/1/1/t", "+1/1/1/t"} {
		if _, _, ok := parseKey(k); ok {
			t.Errorf("parseKey(%q) ok; want malformed", k)
		}
	}
}

// FuzzDecodeOutcome: any bytes decode or fail cleanly, and what decodes
// encodes back to a message that decodes the same.
func FuzzDecodeOutcome(f *testing.F) {
	f.Add((&outcome{Key: "i/1/1/t", Status: statusOK, Result: []byte("x")}).encode())
	f.Add([]byte{1, 2, 0, 1, 1, 'k', 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := decodeOutcome(b)
		if err != nil {
			return
		}
		again, err := decodeOutcome(o.encode())
		if err != nil || again.Key != o.Key || again.Error != o.Error || !bytes.Equal(again.Result, o.Result) ||
			!sameLogs(again.Logs, o.Logs) || again.LogsDropped != o.LogsDropped {
			t.Fatalf("re-encoded %+v decodes to %+v, %v", o, again, err)
		}
	})
}

func TestHeldRoundTrip(t *testing.T) {
	for _, hs := range [][]held{
		{{key: "i/1/1/t", seq: 7, delivery: 2}},
		{{key: "i/1/2/a b", seq: 1 << 40, delivery: 5}, {key: "j+9/3/1/x", seq: 1, delivery: 1 << 20}},
	} {
		got, err := decodeHeld(encodeHeld(hs))
		if err != nil || len(got) != len(hs) {
			t.Fatalf("decodeHeld(encodeHeld(%+v)) = %+v, %v", hs, got, err)
		}
		for i := range hs {
			if got[i] != hs[i] {
				t.Errorf("decodeHeld(encodeHeld(%+v))[%d] = %+v", hs, i, got[i])
			}
		}
	}
	for _, b := range [][]byte{nil, {}, {2}, {1, 7}, {1, 7, 2}, {1, 7, 2, 0}, {1, 7, 2, 3, 'a'}} {
		if _, err := decodeHeld(b); err == nil {
			t.Errorf("decodeHeld(%v) = nil error; want one", b)
		}
	}
}

// fit makes a result too large for a message a failure that says so, and
// keeps the log lines that still fit beside it (it dropped them all
// first); only lines that do not fit go, the oldest first, counted.
func TestFitKeepsTheLogBesideAFailure(t *testing.T) {
	lines := []coordinator.LogLine{{Message: "first"}, {Message: "why it failed"}}
	o := outcome{Key: "i/1/1/t", Status: statusOK, Result: make([]byte, 2000), Logs: lines}
	fit(&o, 1000)
	if o.Status != statusError || len(o.Logs) != 2 || o.LogsDropped != 0 {
		t.Errorf("a result too large: status %d, %d lines, %d dropped; want a failure with both lines", o.Status, len(o.Logs), o.LogsDropped)
	}
	o = outcome{Key: "k", Status: statusOK, Logs: []coordinator.LogLine{{Message: string(make([]byte, 600))}, {Message: "newest"}}}
	fit(&o, 500)
	if o.Status != statusOK || len(o.Logs) != 1 || o.Logs[0].Message != "newest" || o.LogsDropped != 1 {
		t.Errorf("a log too large: status %d, lines %d, %d dropped; want the newest line kept, one dropped", o.Status, len(o.Logs), o.LogsDropped)
	}
}

// An outcome's decoding keeps at most maxOutcomeLines lines, the newest,
// and counts the rest; a dropped count past what the history holds stops
// at math.MaxInt32; a line without a time keeps the zero time.
func TestDecodeOutcomeBoundsTheLog(t *testing.T) {
	many := make([]coordinator.LogLine, maxOutcomeLines+10)
	for i := range many {
		many[i].Message = fmt.Sprint(i)
	}
	many[len(many)-1].Time = time.Unix(5, 0)
	got, err := decodeOutcome((&outcome{Key: "k", Status: statusOK, Logs: many, LogsDropped: 1 << 40}).encode())
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Logs) != maxOutcomeLines || got.Logs[0].Message != "10" || got.LogsDropped != math.MaxInt32 {
		t.Errorf("%d lines from %q, %d dropped; want %d from 10, MaxInt32", len(got.Logs), got.Logs[0].Message, got.LogsDropped, maxOutcomeLines)
	}
	if !got.Logs[0].Time.IsZero() || !got.Logs[len(got.Logs)-1].Time.Equal(time.Unix(5, 0)) {
		t.Errorf("times %v, %v; want zero, then 5 s after the epoch", got.Logs[0].Time, got.Logs[len(got.Logs)-1].Time)
	}
	got, err = decodeOutcome((&outcome{Key: "k", Status: statusOK, Logs: many[:3], LogsDropped: 7}).encode())
	if err != nil || len(got.Logs) != 3 || got.LogsDropped != 7 {
		t.Errorf("3 lines, 7 dropped: decoded %d lines, %d dropped, %v", len(got.Logs), got.LogsDropped, err)
	}
}
