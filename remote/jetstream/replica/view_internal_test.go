package replica

import (
	"errors"
	"maps"
	"strconv"
	"testing"

	"github.com/batonhq/baton/coordinator"
	"github.com/nats-io/nats.go"
)

// logScript builds log messages for the view's reading rules.
type logScript struct{ seq uint64 }

func (l *logScript) msg(kind string, term uint64, body []byte, part string) logMsg {
	l.seq++
	h := nats.Header{hdrTerm: []string{strconv.FormatUint(term, 10)}, hdrLeader: []string{"r"}, hdrID: []string{"id." + strconv.FormatUint(l.seq, 10)}}
	if term == 0 {
		h.Del(hdrTerm) // a claim: its own sequence is its term
	}
	if part != "" {
		h[hdrPart] = []string{part}
	}
	return logMsg{seq: l.seq, kind: kind, header: h, data: body}
}

func put(kv ...string) []byte {
	c := &coordinator.Changes{}
	for i := 0; i < len(kv); i += 2 {
		c.Puts = append(c.Puts, coordinator.KV{Key: []byte(kv[i]), Value: []byte(kv[i+1])})
	}
	return encodeChanges(c)
}

func del(keys ...string) []byte {
	c := &coordinator.Changes{}
	for _, k := range keys {
		c.Deletes = append(c.Deletes, []byte(k))
	}
	return encodeChanges(c)
}

func dataOf(v *view) map[string]string {
	out := map[string]string{}
	for k, val := range v.data {
		out[k] = string(val)
	}
	return out
}

func TestViewReadingRules(t *testing.T) {
	var l logScript
	all := []logMsg{
		l.msg(kindTerm, 0, nil, ""),                  // 1: term 1
		l.msg(kindCommit, 1, put("a", "1"), ""),      // 2
		l.msg(kindCommit, 1, put("b", "2"), ""),      // 3
		l.msg(kindBeat, 1, nil, ""),                  // 4
		l.msg(kindCommit, 1, del("a"), ""),           // 5
		l.msg(kindSnap, 1, put("b", "2")[:3], "1/2"), // 6: a snapshot in two parts
		l.msg(kindSnap, 1, put("b", "2")[3:], "2/2"), // 7
		l.msg(kindCommit, 1, put("c", "3"), ""),      // 8
	}
	all[0].header.Del(hdrTerm)
	want := map[string]string{"b": "2", "c": "3"}

	t.Run("from the start", func(t *testing.T) {
		v := newView()
		for _, m := range all {
			if err := v.read(m); err != nil {
				t.Fatal(err)
			}
		}
		if !v.synced || !maps.Equal(dataOf(v), want) || v.term != 1 || v.applied != 8 {
			t.Errorf("synced %v, records %v, term %d, applied %d; want synced, %v, term 1, applied 8", v.synced, dataOf(v), v.term, v.applied, want)
		}
	})
	t.Run("from the snapshot (purged before it)", func(t *testing.T) {
		v := newView()
		for _, m := range all[5:] {
			if err := v.read(m); err != nil {
				t.Fatal(err)
			}
		}
		if !v.synced || !maps.Equal(dataOf(v), want) {
			t.Errorf("synced %v, records %v; want synced, %v", v.synced, dataOf(v), want)
		}
	})
	t.Run("a gap mid-snapshot", func(t *testing.T) {
		// The reader had read up to 2, then a purge took 3-6 away: the
		// rest of a snapshot whose start is gone is no footing.
		v := newView()
		for _, m := range append(append([]logMsg{}, all[:2]...), all[6:]...) {
			if err := v.read(m); err != nil {
				t.Fatal(err)
			}
		}
		if v.synced {
			t.Errorf("synced after a gap with no whole snapshot after it: records %v", dataOf(v))
		}
	})
	t.Run("a snapshot while synced is skipped", func(t *testing.T) {
		v := newView()
		for _, m := range all[:5] {
			v.read(m)
		}
		v.data["only-mine"] = []byte("x") // were the snapshot applied, this would go
		for _, m := range all[5:] {
			v.read(m)
		}
		if _, ok := v.data["only-mine"]; !ok {
			t.Error("a snapshot read while synced replaced the records")
		}
	})
	t.Run("resignation", func(t *testing.T) {
		v := newView()
		for _, m := range all {
			v.read(m)
		}
		r := l.msg(kindTerm, 1, nil, "")
		r.header.Set(hdrResign, "1")
		v.read(r)
		if !v.resign || v.term != 1 {
			t.Errorf("after a resignation: resign %v, term %d; want true, 1", v.resign, v.term)
		}
	})
}

func TestOpsRoundTrip(t *testing.T) {
	c := &coordinator.Changes{Puts: []coordinator.KV{{Key: []byte("k"), Value: []byte{}}, {Key: []byte{0, 1}, Value: []byte("v")}},
		Deletes: [][]byte{[]byte("gone")}}
	var got []string
	err := decodeOps(encodeChanges(c), func(k, v []byte) { got = append(got, "put "+string(k)+"="+string(v)) },
		func(k []byte) { got = append(got, "del "+string(k)) })
	want := []string{"put k=", "put \x00\x01=v", "del gone"}
	if err != nil || len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("decodeOps(encodeChanges) = %q, %v; want %q", got, err, want)
	}
	for _, bad := range [][]byte{nil, {9}, {formatVersion, 'p', 5, 'a'}, {formatVersion, 'x', 1, 'a'}} {
		if err := decodeOps(bad, func(k, v []byte) {}, func([]byte) {}); err == nil {
			t.Errorf("decodeOps(%v) = nil; want an error", bad)
		}
	}
}

// reset forgets the records and keeps the view usable: it once assigned
// the whole struct, its locked mutex included, and the deferred Unlock
// was a fatal error that no recover catches.
func TestViewResetKeepsItsLock(t *testing.T) {
	var l logScript
	v := newView()
	for _, m := range []logMsg{l.msg(kindTerm, 0, nil, ""), l.msg(kindCommit, 1, put("a", "1"), "")} {
		if err := v.read(m); err != nil {
			t.Fatal(err)
		}
	}
	v.reset()
	if applied, synced, term, _, _ := v.position(); applied != 0 || !synced || term != 0 || len(v.data) != 0 {
		t.Errorf("after reset: applied %d, synced %v, term %d, records %v; want 0, true, 0, none", applied, synced, term, dataOf(v))
	}
	var m logScript
	if err := v.read(m.msg(kindTerm, 0, nil, "")); err != nil {
		t.Fatal(err)
	}
	if err := v.read(m.msg(kindCommit, 1, put("b", "2"), "")); err != nil || !maps.Equal(dataOf(v), map[string]string{"b": "2"}) {
		t.Errorf("read after reset = %v, records %v; want nil, b=2", err, dataOf(v))
	}
}

// A message of a kind this package does not write (a stray publish
// stored before the stream took only the four kinds' subjects) is
// skipped: the view stays synced, reads on, and says so once.
func TestViewSkipsStrayMessages(t *testing.T) {
	var l logScript
	v := newView()
	msgs := []logMsg{
		l.msg(kindTerm, 0, nil, ""),
		l.msg(kindCommit, 1, put("a", "1"), ""),
		l.msg("other", 0, []byte("hello"), ""),
		l.msg("other", 0, []byte("again"), ""),
		l.msg(kindCommit, 1, put("b", "2"), ""),
	}
	var errs []error
	for _, m := range msgs {
		if err := v.read(m); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) != 1 || !errors.Is(errs[0], errStray) {
		t.Errorf("read errors = %v; want one wrapping errStray", errs)
	}
	want := map[string]string{"a": "1", "b": "2"}
	if applied, synced, term, _, _ := v.position(); !synced || applied != 5 || term != 1 || !maps.Equal(dataOf(v), want) {
		t.Errorf("synced %v, applied %d, term %d, records %v; want true, 5, 1, %v", synced, applied, term, dataOf(v), want)
	}
}

// A message no replica wrote in the log's current term (a JetStream
// answer or a responder's, aimed at the log's subjects by a reply
// subject; a copy of an older term's) is quarantined: not applied, not a
// sign of life, the term and leader as they were, reported.
func TestViewQuarantinesWhatNoReplicaWrote(t *testing.T) {
	var l logScript
	bare := func(kind string, body []byte) logMsg {
		l.seq++
		return logMsg{seq: l.seq, kind: kind, header: nats.Header{}, data: body}
	}
	msgs := []logMsg{
		l.msg(kindTerm, 0, nil, ""),             // 1: term 1
		l.msg(kindCommit, 1, put("a", "1"), ""), // 2
		bare(kindCommit, []byte(`{"type":"io.nats.jetstream.api.v1.stream_info_response"}`)), // 3: a JetStream answer
		bare(kindTerm, []byte(`{"ok":true}`)),                                                // 4: an answer on the term subject
		l.msg(kindCommit, 1, put("b", "2"), ""),                                              // 5
		l.msg(kindBeat, 7, nil, ""),                                                          // 6: a term that begins after it
		l.msg(kindCommit, 0, put("c", "3"), ""),                                              // 7: no term
	}
	msgs[6].header.Set(hdrTerm, "1")
	msgs[6].header.Del(hdrID) // a first part without an append ID
	v := newView()
	var errs []error
	for _, m := range msgs {
		if err := v.read(m); err != nil {
			errs = append(errs, err)
		}
	}
	for _, err := range errs {
		if !errors.Is(err, errJunk) {
			t.Errorf("read error %v; want one wrapping errJunk", err)
		}
	}
	n, items := v.quar.list()
	if len(errs) != 4 || n != 4 || len(items) != 4 {
		t.Fatalf("%d errors, %d quarantined (%d listed); want 4: messages 3, 4, 6 and 7", len(errs), n, len(items))
	}
	for i, seq := range []uint64{3, 4, 6, 7} {
		if items[i].Seq != seq || items[i].Reason == "" {
			t.Errorf("quarantined[%d] = seq %d (%q); want seq %d with a reason", i, items[i].Seq, items[i].Reason, seq)
		}
	}
	want := map[string]string{"a": "1", "b": "2"}
	applied, synced, term, leader, resign := v.position()
	if !synced || applied != 7 || term != 1 || leader != "r" || resign || !maps.Equal(dataOf(v), want) {
		t.Errorf("synced %v, applied %d, term %d, leader %q, resign %v, records %v; want true, 7, 1, r, false, %v",
			synced, applied, term, leader, resign, dataOf(v), want)
	}
	if life := v.lastLife(); life != 5 {
		t.Errorf("last sign of life %d; want 5 (quarantined messages are none)", life)
	}
}
