package replica

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/batonhq/baton/coordinator"
	"github.com/nats-io/nats.go"
)

// Names of the JetStream objects and subjects of a store called S (S is
// checked by validName):
//
//	stream   BATON_S_LOG      subjects baton.S.log.{commit,snap,term,beat}   the log: file storage, R3 by default
//	subject  baton.S.log.commit   a group commit (one message, or an atomic batch of parts)
//	subject  baton.S.log.snap     a snapshot of every record (an atomic batch of parts)
//	subject  baton.S.log.term     a term begins (its own sequence is the term), or ends (Baton-Resign)
//	subject  baton.S.log.beat     the leader is alive (written when nothing else was for a third of the lease)
//	subject  baton.S.api.T        core NATS: requests to the leader of term T (Client)
//	subject  baton.S.ready        core NATS: a leader answers requests from now on (body: its term)
//	subject  baton.S.lead         core NATS: who leads? every replica answers (leadAnswer)
//	subject  baton.S.events       core NATS: the leader's events (Client.Subscribe)
//
// Every message of the log carries the term of its writer (Baton-Term;
// a term message is its own term) and its name (Baton-Leader), and every
// append but a standby's first expects the last sequence its writer read
// (Nats-Expected-Last-Sequence): a writer that missed an append, as a
// deposed leader has, can append nothing.
func streamName(store string) string       { return "BATON_" + store + "_LOG" }
func logSubjects(store string) string      { return "baton." + store + ".log.>" }
func logSubject(store, kind string) string { return "baton." + store + ".log." + kind }

// logStreamSubjects are the subjects the log's stream takes: only the
// kinds this package writes, so that a stray message on another
// baton.S.log subject is not stored (it would move the log past the
// leader's expected last sequence, and fence it).
func logStreamSubjects(store string) []string {
	return []string{logSubject(store, kindCommit), logSubject(store, kindSnap), logSubject(store, kindTerm), logSubject(store, kindBeat)}
}

func apiSubject(store string, term uint64) string {
	return "baton." + store + ".api." + strconv.FormatUint(term, 10)
}
func eventsSubject(store string) string { return "baton." + store + ".events" }

// readySubject is where a leader says, once its requests subject is
// subscribed, that it answers (core NATS; body: its term). Not under
// baton.S.api: a client may publish there, and must not say it.
func readySubject(store string) string { return "baton." + store + ".ready" }

// leadSubject is where every replica answers who leads, as its view of
// the log says (core NATS; answer: leadAnswer as JSON).
func leadSubject(store string) string { return "baton." + store + ".lead" }

// leadAnswer is a replica's answer on leadSubject.
type leadAnswer struct {
	Term     uint64 `json:"term"`               // the log's current term (0: the log is empty)
	Leader   string `json:"leader,omitempty"`   // its leader's name
	Resigned bool   `json:"resigned,omitempty"` // the leader resigned: nobody leads
}

// Kinds of log messages: the last token of their subject.
const (
	kindCommit = "commit"
	kindSnap   = "snap"
	kindTerm   = "term"
	kindBeat   = "beat"
)

// Headers of log messages.
const (
	hdrTerm     = "Baton-Term"           // the writer's term (absent on a term message that begins one)
	hdrLeader   = "Baton-Leader"         // the writer's name (WithName)
	hdrPart     = "Baton-Part"           // "i/n": part i of a record in n messages (absent: 1/1)
	hdrID       = "Baton-Id"             // names an append, to tell after an error whether it landed
	hdrResign   = "Baton-Resign"         // "1" on a term message: the leader resigned (Close)
	hdrSecret   = "Baton-Secret"         // on a claim and a snapshot's first part: the store's secret (hex), for its pools' tokens (jetstream.WithSecret)
	hdrQuar     = "Baton-Quarantine"     // on a commit that takes a record the scheduler refused out of the store: why
	hdrQuarKey  = "Baton-Quarantine-Key" // its key, as Go quotes it (strconv.Quote)
	hdrExpected = "Nats-Expected-Last-Sequence"
	hdrBatchID  = "Nats-Batch-Id"
	hdrBatchSeq = "Nats-Batch-Sequence"
	hdrCommit   = "Nats-Batch-Commit"
)

// maxParts is the most messages one record (a commit or a snapshot) may
// take: an atomic batch holds at most 1,000 messages by default
// (nats-server's max_batch_size).
const maxParts = 1000

// partHeadroom is what a part leaves of the server's max payload for its
// headers.
const partHeadroom = 4 << 10

// formatVersion is the first byte of every record's body.
const formatVersion = 1

// Operations in a record's body.
const (
	opPut    = 'p'
	opDelete = 'd'
)

// appendPut appends a put of key to value to a record's body.
func appendPut(b, key, value []byte) []byte {
	b = append(b, opPut)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = binary.AppendUvarint(b, uint64(len(value)))
	return append(b, value...)
}

// appendDelete appends a delete of key to a record's body.
func appendDelete(b, key []byte) []byte {
	b = append(b, opDelete)
	b = binary.AppendUvarint(b, uint64(len(key)))
	return append(b, key...)
}

// encodeChanges returns c as a record's body.
func encodeChanges(c *coordinator.Changes) []byte {
	n := 1
	for _, kv := range c.Puts {
		n += 1 + 2*binary.MaxVarintLen32 + len(kv.Key) + len(kv.Value)
	}
	for _, k := range c.Deletes {
		n += 1 + binary.MaxVarintLen32 + len(k)
	}
	b := make([]byte, 1, n)
	b[0] = formatVersion
	for _, kv := range c.Puts {
		b = appendPut(b, kv.Key, kv.Value)
	}
	for _, k := range c.Deletes {
		b = appendDelete(b, k)
	}
	return b
}

// errCorrupt is the error of a log message this package cannot read.
var errCorrupt = errors.New("replica: corrupt log record")

// errStray is the error of a message on the log's stream of a kind this
// package does not write: it is skipped, and reported once.
var errStray = errors.New("replica: stray message in the log")

// decodeOps calls put or del for every operation of a record's body, in
// order. The slices it passes alias body.
func decodeOps(body []byte, put func(key, value []byte), del func(key []byte)) error {
	if len(body) == 0 || body[0] != formatVersion {
		if len(body) > 0 && body[0] > formatVersion {
			return fmt.Errorf("%w: log record format %d, this version reads up to %d", coordinator.ErrStoreVersion, body[0], formatVersion)
		}
		return fmt.Errorf("%w: no format byte", errCorrupt)
	}
	b := body[1:]
	field := func() ([]byte, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, false
		}
		f := b[k : k+int(n)]
		b = b[k+int(n):]
		return f, true
	}
	for len(b) > 0 {
		op := b[0]
		b = b[1:]
		key, ok := field()
		if !ok {
			return fmt.Errorf("%w: a cut key", errCorrupt)
		}
		switch op {
		case opPut:
			value, ok := field()
			if !ok {
				return fmt.Errorf("%w: a cut value", errCorrupt)
			}
			put(key, value)
		case opDelete:
			del(key)
		default:
			return fmt.Errorf("%w: operation %q", errCorrupt, op)
		}
	}
	return nil
}

// split cuts a record's body into parts of at most size bytes (at least
// one part, empty or not).
func split(body []byte, size int) [][]byte {
	if len(body) <= size {
		return [][]byte{body}
	}
	var parts [][]byte
	for len(body) > 0 {
		n := min(size, len(body))
		parts = append(parts, body[:n:n])
		body = body[n:]
	}
	return parts
}

// parsePart reads a Baton-Part header ("i/n"; absent: 1/1).
func parsePart(h nats.Header) (i, n int, err error) {
	v := h.Get(hdrPart)
	if v == "" {
		return 1, 1, nil
	}
	a, b, ok := strings.Cut(v, "/")
	if ok {
		i, err = strconv.Atoi(a)
		if err == nil {
			n, err = strconv.Atoi(b)
		}
	}
	if !ok || err != nil || i < 1 || i > n || n > maxParts {
		return 0, 0, fmt.Errorf("%w: part %q", errCorrupt, v)
	}
	return i, n, nil
}

// pubAck is JetStream's answer to a publish (a single message, or the
// commit of an atomic batch).
type pubAck struct {
	Stream   string `json:"stream"`
	Sequence uint64 `json:"seq"`
	Count    uint64 `json:"count"` // the messages of an atomic batch
	Error    *struct {
		Code        int    `json:"code"`
		ErrCode     int    `json:"err_code"`
		Description string `json:"description"`
	} `json:"error"`
}

// JetStream's error codes that say an append expected a last sequence
// the stream has moved past: someone else appended (10071 "wrong last
// sequence"; 10164 is given for the same cause on some paths).
const (
	errCodeWrongLastSeq  = 10071
	errCodeWrongLastSeq2 = 10164
)

// errRefused is an append the stream refused because its expected last
// sequence was stale; errUnknown one whose fate is unknown (a timeout, a
// lost connection, no stream leader for a moment).
var (
	errRefused = errors.New("replica: append refused: the log moved on")
)

// readAck decodes a publish's answer: its sequence, or errRefused for a
// stale expectation, or another error.
func readAck(m *nats.Msg) (uint64, error) {
	if m.Header.Get("Status") == "503" {
		return 0, nats.ErrNoResponders
	}
	var a pubAck
	if err := json.Unmarshal(m.Data, &a); err != nil {
		return 0, fmt.Errorf("replica: undecodable publish answer: %w", err)
	}
	if e := a.Error; e != nil {
		if e.ErrCode == errCodeWrongLastSeq || e.ErrCode == errCodeWrongLastSeq2 {
			return 0, fmt.Errorf("%w (%s)", errRefused, e.Description)
		}
		return 0, fmt.Errorf("replica: JetStream refused an append: %s (code %d)", e.Description, e.ErrCode)
	}
	if a.Sequence == 0 {
		return 0, fmt.Errorf("replica: publish answer without a sequence: %q", bytes.TrimSpace(m.Data))
	}
	return a.Sequence, nil
}
