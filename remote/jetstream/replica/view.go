package replica

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// view is the store's records as of a position in the log: what a
// standby reads as the log grows (follow), and what the leader keeps up
// to date with its own appends, to write snapshots. One view serves the
// stores a Replica opens one after the other, so that a replica fenced
// and back to standby reads on from where it was.
//
// Reading rules. Messages are read in stream order. A gap (a sequence
// skipped: a compaction purged what came before a snapshot) makes the
// records unknown (synced false) until a snapshot is read whole; the
// stream then begins with one. A snapshot read while synced is the state
// the view has already and is skipped; a commit read while not synced is
// skipped (the snapshot that follows holds it). A record in several
// messages (an atomic batch, parts i/n) counts once its last part is
// read.
type view struct {
	mu      sync.Mutex        // guards the fields below
	data    map[string][]byte // the records as of applied, if synced; values are the view's own
	applied uint64            // the last stream sequence read (any kind; 0: none)
	synced  bool              // data is the state as of applied
	term    uint64            // the term of the last message read (0: none)
	leader  string            // its writer's name
	resign  bool              // the last message read is a resignation: nobody leads
	partial []byte            // the parts of a record read so far
	pkind   string            // their kind
	pnext   int               // the part expected next (0: no record in parts)
	bytes   int64             // bytes read or written since the last snapshot (with msgOverhead each)
	snap    int64             // the size of the last snapshot read or written
	strays  int               // messages of unknown kinds skipped (errStray)
	life    uint64            // the sequence of the last message a replica wrote (not quarantined): a sign of life
	stream  time.Time         // the identity of the stream read (its creation time; zero: none yet)
	secret  []byte            // the store's secret, as the last claim or snapshot said (nil: none yet)
	quar    quarantine        // what was quarantined (kept across resets: it is a report)
}

// msgOverhead is what a log message costs beyond its body, for
// compaction's accounting (headers, subject, the stream's index).
const msgOverhead = 128

func newView() *view { return &view{data: map[string][]byte{}, synced: true} }

// logMsg is a message of the log as read: from a consumer, a direct get,
// or the leader's own append.
type logMsg struct {
	seq    uint64
	kind   string
	header nats.Header
	data   []byte
}

// kindOf returns a log subject's kind (its last token).
func kindOf(subject string) string {
	if i := bytes.LastIndexByte([]byte(subject), '.'); i >= 0 {
		return subject[i+1:]
	}
	return subject
}

// read applies the next message of the log. Corrupt records are errors;
// they leave the view not synced. The first message of an unknown kind
// is an error wrapping errStray, which leaves the view as it was: it is
// only reported.
func (v *view) read(m logMsg) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.readLocked(m)
}

func (v *view) readLocked(m logMsg) error {
	if m.seq != v.applied+1 {
		// A gap: the term the log is in is unknown until a message says.
		v.synced, v.pnext, v.partial, v.term = false, 0, nil, 0
	}
	v.applied = m.seq
	v.bytes += int64(len(m.data)) + msgOverhead
	if reason := v.junkLocked(m); reason != "" {
		v.quar.add(Quarantined{Seq: m.seq, Kind: m.kind, Reason: reason, Data: m.data})
		return fmt.Errorf("%w: message %d on %q: %s", errJunk, m.seq, m.kind, reason)
	}
	v.life = m.seq
	if b, err := hex.DecodeString(m.header.Get(hdrSecret)); err == nil && len(b) >= 16 && (m.kind == kindTerm || m.kind == kindSnap) {
		v.secret = b
	}
	switch m.kind {
	case kindTerm:
		v.leader, v.resign = m.header.Get(hdrLeader), m.header.Get(hdrResign) == "1"
		if v.resign {
			v.term, _ = strconv.ParseUint(m.header.Get(hdrTerm), 10, 64)
		} else {
			v.term = m.seq
		}
		v.pnext = 0
		return nil
	case kindBeat:
		v.noteWriter(m.header)
		v.pnext = 0
		return nil
	case kindCommit, kindSnap:
	default:
		// Not this package's: a stray message (the stream accepts only
		// the four kinds' subjects since it was created or updated by
		// this version, so it was stored before, or by a later version).
		// It changes no record; the view reads on. Said once per view.
		v.pnext = 0
		if v.strays++; v.strays == 1 {
			return fmt.Errorf("%w: message %d on subject kind %q, not one of this package's: skipped (and any further)", errStray, m.seq, m.kind)
		}
		return nil
	}
	v.noteWriter(m.header)
	i, n, err := parsePart(m.header)
	if err != nil {
		v.synced, v.pnext = false, 0
		return err
	}
	switch {
	case i == 1:
		v.partial, v.pkind, v.pnext = v.partial[:0], m.kind, 1
	case v.pnext != i || v.pkind != m.kind:
		v.pnext = 0 // the rest of a record whose beginning was purged or missed
		return nil
	}
	body := m.data
	if n > 1 {
		v.partial = append(v.partial, m.data...)
		if i < n {
			v.pnext++
			return nil
		}
		body = v.partial
	}
	v.pnext = 0
	if m.kind == kindSnap {
		v.bytes, v.snap = 0, int64(len(body))
		if v.synced {
			return nil // the state the view has
		}
		data := map[string][]byte{}
		if err := decodeOps(body, func(k, val []byte) { data[string(k)] = bytes.Clone(val) }, func([]byte) {}); err != nil {
			return fmt.Errorf("snapshot ending at %d: %w", m.seq, err)
		}
		v.data, v.synced = data, true
		return nil
	}
	if !v.synced {
		return nil
	}
	if err := v.applyLocked(body); err != nil {
		v.synced = false
		return fmt.Errorf("commit ending at %d: %w", m.seq, err)
	}
	if why := m.header.Get(hdrQuar); why != "" {
		// A leader took a record its scheduler refused out of the store.
		key, _ := strconv.Unquote(m.header.Get(hdrQuarKey))
		v.quar.add(Quarantined{Seq: m.seq, Kind: m.kind, Reason: why, Key: []byte(key)})
	}
	return nil
}

// junkLocked says why m is not a message a replica of the store wrote
// in its current term ("" if it is one): every message a replica appends
// names its writer (Baton-Leader) and the append (Baton-Id, on its first
// part), and every one but a claim names its term (Baton-Term), which
// must be the term the log is in. Nothing else is applied: a JetStream
// API answer or any responder's answer that a requester aimed at the
// log's subjects (its reply subject) carries none of these headers, and
// a message of a deposed term cannot have landed after a claim (every
// append expects the log's end), so it can only be a copy. Guarded by
// mu.
func (v *view) junkLocked(m logMsg) string {
	h := m.header
	switch {
	case m.kind != kindTerm && m.kind != kindBeat && m.kind != kindCommit && m.kind != kindSnap:
		return "" // a stray: skipped by the reading rules, reported once
	case !validHeader(h.Get(hdrLeader)):
		return "no writer (Baton-Leader): not a replica's append"
	}
	first := true
	if m.kind == kindCommit || m.kind == kindSnap {
		if i, _, err := parsePart(h); err == nil && i > 1 {
			first = false
		}
	}
	if first && h.Get(hdrID) == "" {
		return "no append ID (Baton-Id): not a replica's append"
	}
	t := h.Get(hdrTerm)
	if m.kind == kindTerm && h.Get(hdrResign) != "1" {
		if t != "" {
			return "a claim that names a term"
		}
		return "" // a claim: its own sequence is the term
	}
	term, err := strconv.ParseUint(t, 10, 64)
	switch {
	case err != nil || term == 0:
		return fmt.Sprintf("no term (Baton-Term %q)", t)
	case term >= m.seq:
		return fmt.Sprintf("term %d, which begins after it", term)
	case v.term != 0 && term != v.term:
		return fmt.Sprintf("term %d while the log is in term %d", term, v.term)
	}
	return ""
}

// noteWriter records the term and writer of a message that carries them.
func (v *view) noteWriter(h nats.Header) {
	if t, err := strconv.ParseUint(h.Get(hdrTerm), 10, 64); err == nil {
		v.term, v.leader, v.resign = t, h.Get(hdrLeader), false
	}
}

// applyLocked applies a commit's body to the records.
func (v *view) applyLocked(body []byte) error {
	return decodeOps(body,
		func(k, val []byte) { v.data[string(k)] = bytes.Clone(val) },
		func(k []byte) { delete(v.data, string(k)) })
}

// appended records the leader's own append of a record of kind ending at
// seq (body: a commit's, applied to the records; nil for a term, beat or
// snapshot message). Guarded by the caller's append lock; takes mu.
func (v *view) appended(seq uint64, kind string, body []byte, size int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.applied, v.life = seq, seq
	switch kind {
	case kindSnap:
		v.bytes, v.snap = 0, size
	case kindCommit:
		v.bytes += size
		_ = v.applyLocked(body) // encoded here: it decodes
	default:
		v.bytes += size
	}
}

// lastLife returns the sequence of the last message of a replica read or
// appended: what a standby's silence is measured from (quarantined
// messages are no sign of life).
func (v *view) lastLife() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.life
}

// position returns the last sequence read, whether the records are known
// as of it, and the term and leader it names.
func (v *view) position() (applied uint64, synced bool, term uint64, leader string, resign bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.applied, v.synced, v.term, v.leader, v.resign
}

// adopt makes the view one of the stream created at created: if it read
// another stream of the log's name (deleted and created again since),
// it forgets all of it, and reports true. Sequences number the messages
// of one stream only: read on from where it was, the view would apply
// the new stream's messages onto the old one's records.
func (v *view) adopt(created time.Time) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.stream.IsZero() || created.IsZero() {
		if v.stream.IsZero() {
			v.stream = created
		}
		return false
	}
	if v.stream.Equal(created) {
		return false
	}
	v.resetLocked()
	v.stream = created
	return true
}

// identity returns the creation time of the stream the view reads.
func (v *view) identity() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.stream
}

// reset forgets everything: the log is read again from its start.
func (v *view) reset() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.resetLocked()
}

func (v *view) resetLocked() {
	// Field by field: assigning *v whole would overwrite mu, locked here,
	// and the deferred Unlock would then unlock a zero mutex (a fatal
	// error).
	v.data, v.applied, v.synced = map[string][]byte{}, 0, true
	v.term, v.leader, v.resign = 0, "", false
	v.partial, v.pkind, v.pnext = nil, "", 0
	v.bytes, v.snap, v.strays, v.life = 0, 0, 0, 0
	v.secret = nil
}

// storeSecret returns the store's secret as the log says, drawing one if
// it says none (a claim then writes it).
func (v *view) storeSecret() []byte {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.secret == nil {
		v.secret = make([]byte, 32)
		_, _ = rand.Read(v.secret)
	}
	return bytes.Clone(v.secret)
}

// records calls fn with every record in ascending key order.
func (v *view) records(fn func(key, value []byte) error) error {
	v.mu.Lock()
	keys := slices.Sorted(maps.Keys(v.data))
	vals := make([][]byte, len(keys))
	for i, k := range keys {
		vals[i] = v.data[k]
	}
	v.mu.Unlock()
	for i, k := range keys {
		if err := fn([]byte(k), vals[i]); err != nil {
			return err
		}
	}
	return nil
}

// snapshot returns every record as a record's body (puts), and whether
// compaction is due: what was written since the last snapshot passes
// max(least, twice the last snapshot).
func (v *view) compactionDue(least int64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.synced && v.bytes > max(least, 2*v.snap)
}

// encodeAll returns every record as a snapshot's body.
func (v *view) encodeAll() []byte {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 1
	for k, val := range v.data {
		n += 1 + 20 + len(k) + len(val)
	}
	b := make([]byte, 1, n)
	b[0] = formatVersion
	for k, val := range v.data {
		b = appendPut(b, []byte(k), val)
	}
	return b
}
