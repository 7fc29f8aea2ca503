package coordinator

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// Records decode back to what was encoded, and any bytes decode to a
// value or to ErrStoreCorrupt, never a panic.
func FuzzDecodeRecords(f *testing.F) {
	st := storedState{status: Failed, cancelReq: true, hasResult: true, attempts: 3, runs: 2,
		due: time.Unix(0, 0), planned: time.Unix(5, 6), at: time.Unix(7, 8), errKind: errOther,
		errMsg: "boom", cause: "up", result: []byte("r")}
	f.Add(st.append(nil))
	timedOut := storedState{status: Failed, attempts: 1, errKind: errTimeout, errMsg: "query users", timeout: time.Second}
	f.Add(timedOut.append(nil))
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, err := decodeState(b); err == nil {
			again, err := decodeState(got.append(nil))
			if err != nil || !reflect.DeepEqual(again, got) {
				t.Fatalf("state %+v re-decoded as %+v (%v)", got, again, err)
			}
		} else if !errors.Is(err, ErrStoreCorrupt) {
			t.Fatalf("decodeState error %v does not wrap ErrStoreCorrupt", err)
		}
		if _, err := decodeDef(b); err != nil && !errors.Is(err, ErrStoreCorrupt) {
			t.Fatalf("decodeDef error %v does not wrap ErrStoreCorrupt", err)
		}
	})
}

func TestStateRecordRoundTrip(t *testing.T) {
	st := storedState{status: Succeeded, hasResult: true, attempts: 1, runs: 1, at: time.Unix(0, 1), result: []byte{}}
	got, err := decodeState(st.append(nil))
	if err != nil || !reflect.DeepEqual(got, st) {
		t.Errorf("decoded %+v (%v); want %+v", got, err, st)
	}
	for _, s := range []storedState{{errKind: errCancelled}, {errKind: errClosed}, {errKind: errInterrupted}, {errKind: errTimeout, timeout: 5}} {
		got, _ := decodeState(s.append(nil))
		if e := got.err(); e == nil || errors.Is(e, ErrStoreCorrupt) {
			t.Errorf("error kind %d restored as %v", s.errKind, e)
		}
	}
}
