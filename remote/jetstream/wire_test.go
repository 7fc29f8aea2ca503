package jetstream

import (
	"bytes"
	"testing"
)

func TestOutcomeRoundTrip(t *testing.T) {
	for _, o := range []outcome{
		{Key: "i/1/2/a/b", Status: statusOK, Worker: "w", Delivery: 1, Result: []byte("r")},
		{Key: "i/3/4/t", Status: statusPanic, Worker: "host:1", Delivery: 300, Error: "boom", Stack: "goroutine 1\n"},
		{Key: "k", Status: statusError, Code: codeUnknownKind, Error: "no handler"},
	} {
		got, err := decodeOutcome(o.encode())
		if err != nil || got.Key != o.Key || got.Status != o.Status || got.Code != o.Code || got.Worker != o.Worker ||
			got.Delivery != o.Delivery || got.Error != o.Error || got.Stack != o.Stack || !bytes.Equal(got.Result, o.Result) {
			t.Errorf("decodeOutcome(encode(%+v)) = %+v, %v", o, got, err)
		}
	}
	for _, b := range [][]byte{nil, {1}, {2, 1, 0, 1}, {1, 9, 0, 1, 0}, {1, 1, 0, 1, 5, 'a'}, {1, 1, 0, 1, 0, 0, 0, 0}} {
		if _, err := decodeOutcome(b); err == nil {
			t.Errorf("decodeOutcome(%v) = nil error; want one", b)
		}
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
		if err != nil || again.Key != o.Key || again.Error != o.Error || !bytes.Equal(again.Result, o.Result) {
			t.Fatalf("re-encoded %+v decodes to %+v, %v", o, again, err)
		}
	})
}
