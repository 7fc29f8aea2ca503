package dashboard

import (
	"context"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
)

// deadlineWriter records the write deadlines set on it.
type deadlineWriter struct {
	*httptest.ResponseRecorder
	deadlines []time.Time
}

func (w *deadlineWriter) SetWriteDeadline(t time.Time) error {
	w.deadlines = append(w.deadlines, t)
	return nil
}

// A stream that Close (or an http.Server's Shutdown) ended never gets a
// write deadline in the future again: its next write is refused, where
// it set one after Close had moved it to the past and a client that does
// not read then held it for the whole write timeout (found by a review).
func TestEndedStreamGetsNoNewDeadline(t *testing.T) {
	s, err := coordinator.New()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	d := New(s, WithWriteTimeout(time.Minute))
	w := &deadlineWriter{ResponseRecorder: httptest.NewRecorder()}
	st := d.openStream(w, httptest.NewRequest(http.MethodGet, "/events", nil))
	if st == nil {
		t.Fatal("openStream on an open dashboard = nil")
	}
	rc := http.NewResponseController(w)
	if !d.armWrite(st, rc) || len(w.deadlines) != 1 || !w.deadlines[0].After(d.wall.Now()) {
		t.Fatalf("armWrite on an open stream: deadlines %v; want one in the future", w.deadlines)
	}
	d.Close()
	if len(w.deadlines) != 2 || w.deadlines[1].After(d.wall.Now()) {
		t.Fatalf("Close: deadlines %v; want the write's moved to the past", w.deadlines)
	}
	if d.armWrite(st, rc) {
		t.Errorf("armWrite after Close = true; want the stream ended")
	}
	if len(w.deadlines) != 2 {
		t.Errorf("armWrite after Close set deadline %v; want none", w.deadlines[2:])
	}
}

// setDigest is hash/fnv's FNV-1a summed over the IDs, whatever their
// order.
func TestSetDigest(t *testing.T) {
	ids := []string{"a", "lint", "", "ü-ß", strings.Repeat("x", 300)}
	var sum uint64
	for _, id := range ids {
		h := fnv.New64a()
		_, _ = h.Write([]byte(id))
		sum += h.Sum64()
	}
	if got, want := setDigest(ids), strconv.FormatUint(sum, 16); got != want {
		t.Errorf("setDigest = %s; want %s", got, want)
	}
	if setDigest(ids) != setDigest([]string{ids[3], ids[0], ids[4], ids[2], ids[1]}) {
		t.Errorf("setDigest depends on the order")
	}
	if setDigest(ids) == setDigest(ids[1:]) {
		t.Errorf("setDigest of a set with one ID fewer is the same")
	}
}
