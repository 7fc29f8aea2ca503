package jetstream

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/nats-io/nats.go"
)

// Names of the JetStream objects of a pool called P (P is checked by
// validPool):
//
//	stream   BATON_P_ATTEMPTS  subject baton.P.attempts    work queue, one message per attempt
//	consumer workers           on BATON_P_ATTEMPTS         shared by every Serve of the pool
//	stream   BATON_P_RESULTS   subjects baton.P.results.>  interest retention, one message per outcome,
//	                                                       on baton.P.results.I.H (H: a hash of its attempt key)
//	consumer coord-I-G         on BATON_P_RESULTS          one per Pool of instance I (G: random, per NewPool),
//	                                                       filter baton.P.results.I.>; a NewPool deletes the others
//	subject  baton.P.cancel                                core NATS, body = publication (cancelBody): stop it
//	subject  baton.P.config                                core NATS: NewPool set the consumers, read them again
//	subject  baton.P.held.I                                core NATS, body = held reports (encodeHeld): a Serve holds
//	                                                       the last delivery of these publications of instance I
const workConsumer = "workers"

// validName reports whether s names a pool or a Pool instance: 1-64
// letters, digits, '-' or '_' (a subject token and part of a stream or
// consumer name). By hand: it runs for every attempt.
func validName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func attemptsStream(pool string) string  { return "BATON_" + pool + "_ATTEMPTS" }
func resultsStream(pool string) string   { return "BATON_" + pool + "_RESULTS" }
func attemptsSubject(pool string) string { return "baton." + pool + ".attempts" }
func resultsSubject(pool, instance string) string {
	return "baton." + pool + ".results." + instance
}

// outcomeSubject is where the outcome of the attempt key goes: a subject
// per attempt, so that a Pool can look up one attempt's outcome
// (Pool.dead).
func outcomeSubject(pool, instance, key string) string {
	h := fnv.New128a()
	h.Write([]byte(key))
	var sum [16]byte
	return resultsSubject(pool, instance) + "." + hex.EncodeToString(h.Sum(sum[:0]))
}
func cancelSubject(pool string) string { return "baton." + pool + ".cancel" }

// configSubject is where NewPool announces that it set the pool's
// consumers (a lease may have changed): Serve reads them again.
func configSubject(pool string) string { return "baton." + pool + ".config" }

// heldSubject is where Serve reports to the Pool instance the attempts
// whose last delivery it holds (Pool.onHeld).
func heldSubject(pool, instance string) string { return "baton." + pool + ".held." + instance }

func maxDeliveriesSubject(pool string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + attemptsStream(pool) + "." + workConsumer
}
func consumerCreatedSubject(pool string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.CREATED." + attemptsStream(pool) + "." + workConsumer
}

// resultsConsumer names the results consumer of one Pool of instance:
// gen is generation's.
func resultsConsumer(instance, gen string) string { return "coord-" + instance + "-" + gen }

// genBytes is the size of a random generation (a Pool without
// WithGeneration).
const genBytes = 8

// generation is a Pool's WithGeneration: the zero value for none.
type generation struct{ epoch, term uint64 }

// suffix is the generation in the Pool's results consumer's name: "g",
// the epoch and the term in 16 hex digits each, or, for none, genBytes
// random bytes in hex.
func (g generation) suffix() string {
	if g.term > 0 {
		return fmt.Sprintf("g%016x%016x", g.epoch, g.term)
	}
	var b [genBytes]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// generationOf returns the generation in name, a results consumer of
// instance (ownConsumer), if it has one.
func generationOf(name, instance string) (generation, bool) {
	gen, ok := strings.CutPrefix(name, resultsConsumer(instance, ""))
	digits, ordered := strings.CutPrefix(gen, "g")
	if !ok || !ordered || len(digits) != 32 {
		return generation{}, false
	}
	epoch, err1 := strconv.ParseUint(digits[:16], 16, 64)
	term, err2 := strconv.ParseUint(digits[16:], 16, 64)
	if err1 != nil || err2 != nil || term == 0 {
		return generation{}, false
	}
	return generation{epoch, term}, true
}

// ownConsumer reports whether name is a results consumer of instance:
// resultsConsumer's with a generation, so that instance "a" does not
// take "a-b"'s.
func ownConsumer(name, instance string) bool {
	gen, ok := strings.CutPrefix(name, resultsConsumer(instance, ""))
	if !ok {
		return false
	}
	if _, ordered := generationOf(name, instance); ordered {
		return true
	}
	if len(gen) != 2*genBytes {
		return false
	}
	_, err := hex.DecodeString(gen)
	return err == nil
}

// Headers of an attempt message, besides its Nats-Msg-Id (the attempt
// key, which names the instance, round, attempt and task). Its body is
// Payload.Data.
const (
	hdrKind     = "Baton-Kind"
	hdrDeadline = "Baton-Deadline" // unix nanoseconds; absent without a deadline
	hdrToken    = "Baton-Token"    // the attempt's token (WithSecret); Serve returns it in the outcome
)

// attemptKey names one attempt of one task for one Pool instance:
// instance/round/attempt/task. It is the attempt message's Nats-Msg-Id, so
// publishing it again is deduplicated by the stream.
//
// An attempt published under its key and then withdrawn or stopped (its
// Do's context ended: a Shutdown, before a durable coordinator restarts
// and runs it again) is published again under instance+G/round/attempt/task
// (rekey), G being the stream sequence of the publication that died: a
// fresh message ID, yet the same one for every Do that finds the same
// dead publication.
func attemptKey(instance string, j jobID) string {
	return instance + "/" + strconv.Itoa(j.round) + "/" + strconv.Itoa(j.attempt) + "/" + j.task
}

// rekey gives key the generation gen (replacing the one it had).
func rekey(key string, gen uint64) string {
	i := strings.IndexByte(key, '/')
	head := key[:i]
	if j := strings.IndexByte(head, '+'); j >= 0 {
		head = head[:j]
	}
	return head + "+" + strconv.FormatUint(gen, 10) + key[i:]
}

// A publication is one message of an attempt in the attempts stream: its
// key and its stream sequence. A key names an attempt and is reused (the
// same attempt handed out again after a restart, a task ID used again
// after retention forgot the first task), the sequence never is: what the
// Pool and Serve remember of an attempt (settled, cancelled) and the
// outcome's message ID name the publication, so that nothing remembered
// of one publication of a key reaches a later one.

// pubID names the publication of key at stream sequence seq (0: a
// publication whose sequence is not known).
func pubID(key string, seq uint64) string { return strconv.FormatUint(seq, 10) + "\n" + key }

// cancelBody is the body of a cancel message: the publication to stop
// (seq 0: whichever publication of key was stored before the cancel).
func cancelBody(key string, seq uint64) []byte { return []byte(pubID(key, seq)) }

// parseCancel reverses cancelBody. A body without a sequence (an older
// Pool's) names the key alone: seq 0.
func parseCancel(b []byte) (key string, seq uint64) {
	s := string(b)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		if n, err := strconv.ParseUint(s[:i], 10, 64); err == nil {
			return s[i+1:], n
		}
	}
	return s, 0
}

// outcomeMsgID is the Nats-Msg-Id of an outcome: one per publication, so
// that the results stream stores a redelivered attempt's outcome once and
// a later publication's outcome as new.
func outcomeMsgID(key string, seq uint64) string {
	return "out/" + strconv.FormatUint(seq, 10) + "/" + key
}

type jobID struct {
	task           string
	round, attempt int
}

// parseKey is attemptKey's inverse; ok is false for a malformed key.
func parseKey(key string) (instance string, id jobID, ok bool) {
	// By hand rather than strings.SplitN: it runs for every attempt.
	i := strings.IndexByte(key, '/')
	if i < 0 {
		return "", id, false
	}
	instance, rest := key[:i], key[i+1:]
	if j := strings.IndexByte(instance, '+'); j >= 0 { // a generation (rekey)
		if _, err := strconv.ParseUint(instance[j+1:], 10, 64); err != nil {
			return "", id, false
		}
		instance = instance[:j]
	}
	if !validName(instance) {
		return "", id, false
	}
	var err error
	for _, n := range []*int{&id.round, &id.attempt} {
		j := strings.IndexByte(rest, '/')
		if j < 0 {
			return "", id, false
		}
		if *n, err = strconv.Atoi(rest[:j]); err != nil {
			return "", id, false
		}
		rest = rest[j+1:]
	}
	id.task = rest
	return instance, id, true
}

func attemptMsg(pool, key, kind string, data []byte, deadline time.Time, token string) *nats.Msg {
	m := nats.NewMsg(attemptsSubject(pool))
	m.Data = data
	m.Header.Set(nats.MsgIdHdr, key)
	m.Header.Set(hdrKind, kind)
	if token != "" {
		m.Header.Set(hdrToken, token)
	}
	if !deadline.IsZero() {
		m.Header.Set(hdrDeadline, strconv.FormatInt(deadline.UnixNano(), 10))
	}
	return m
}

// status of an outcome.
const (
	statusOK        byte = iota + 1
	statusError          // the handler returned an error
	statusPanic          // the handler panicked
	statusCancelled      // the handler stopped because the coordinator cancelled the attempt
)

// outcome is the body of a results message. On the wire (encode): a
// version byte (4), the status, the code, then the delivery and the
// attempt message's stream sequence as uvarints, the key, worker, error
// text, stack and token each as a uvarint length and its bytes, the
// handler's log (the count of lines left out and of lines as uvarints,
// then each line's time in unix nanoseconds and level as varints, its
// message and attributes as a uvarint length and bytes), and the result
// as the rest (version 1, from an older Serve, has no sequence; version
// 2 no token; version 3 no log).
// Hand-written because the outcome is on every attempt's path and JSON
// cost a tenth of an attempt's CPU.
type outcome struct {
	Key      string
	Seq      uint64 // the stream sequence of the attempt message it answers (0: not known)
	Status   byte
	Code     byte // codeUnknownKind, or 0
	Worker   string
	Delivery int
	Result   []byte
	Error    string
	Stack    string
	Token    string // the attempt's Baton-Token, returned (WithSecret)
	// The handler's log lines (coordinator.Logger in the handler), the
	// newest WithHandlerLogs keeps, and how many it left out.
	Logs        []coordinator.LogLine
	LogsDropped int
}

// maxOutcomeLines is the most log lines an outcome's decoding keeps.
const maxOutcomeLines = 1000

const (
	outcomeVersion  = 4
	codeUnknownKind = 1
	codeTimeout     = 2 // the handler failed after its deadline passed
)

func (o *outcome) encode() []byte {
	b := make([]byte, 0, 3+7*binary.MaxVarintLen32+len(o.Key)+len(o.Worker)+len(o.Error)+len(o.Stack)+len(o.Token)+logSize(o.Logs)+len(o.Result))
	b = append(b, outcomeVersion, o.Status, o.Code)
	b = binary.AppendUvarint(b, uint64(o.Delivery))
	b = binary.AppendUvarint(b, o.Seq)
	for _, s := range []string{o.Key, o.Worker, o.Error, o.Stack, o.Token} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendUvarint(b, uint64(o.LogsDropped))
	b = binary.AppendUvarint(b, uint64(len(o.Logs)))
	for _, l := range o.Logs {
		var ns int64 // 0: no time
		if !l.Time.IsZero() {
			ns = l.Time.UnixNano()
		}
		b = binary.AppendVarint(b, ns)
		b = binary.AppendVarint(b, int64(l.Level))
		for _, s := range []string{l.Message, l.Attrs} {
			b = binary.AppendUvarint(b, uint64(len(s)))
			b = append(b, s...)
		}
	}
	return append(b, o.Result...)
}

// logSize bounds the bytes lines take in an outcome.
func logSize(lines []coordinator.LogLine) int {
	n := 0
	for _, l := range lines {
		n += 4*binary.MaxVarintLen64 + len(l.Message) + len(l.Attrs)
	}
	return n
}

var errBadOutcome = errors.New("jetstream: undecodable outcome")

func decodeOutcome(b []byte) (outcome, error) {
	var o outcome
	if len(b) < 3 || b[0] < 1 || b[0] > outcomeVersion {
		return o, errBadOutcome
	}
	version := b[0]
	o.Status, o.Code, b = b[1], b[2], b[3:]
	if o.Status < statusOK || o.Status > statusCancelled {
		return o, fmt.Errorf("%w: status %d", errBadOutcome, o.Status)
	}
	d, n := binary.Uvarint(b)
	if n <= 0 || d > 1<<31 {
		return o, errBadOutcome
	}
	o.Delivery, b = int(d), b[n:]
	if version >= 2 {
		if o.Seq, n = binary.Uvarint(b); n <= 0 {
			return o, errBadOutcome
		}
		b = b[n:]
	}
	fields := []*string{&o.Key, &o.Worker, &o.Error, &o.Stack}
	if version >= 3 {
		fields = append(fields, &o.Token)
	}
	str := func(f *string) bool {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return false
		}
		*f, b = string(b[n:n+int(l)]), b[n+int(l):]
		return true
	}
	for _, f := range fields {
		if !str(f) {
			return o, errBadOutcome
		}
	}
	if version >= 4 {
		dropped, n := binary.Uvarint(b)
		if n <= 0 {
			return o, errBadOutcome
		}
		o.LogsDropped, b = int(min(dropped, math.MaxInt32)), b[n:] // the history counts no further
		count, n := binary.Uvarint(b)
		if n <= 0 || count > uint64(len(b)-n)/4 { // a line takes at least 4 bytes
			return o, errBadOutcome
		}
		b = b[n:]
		// Only the newest maxOutcomeLines are kept (the coordinator keeps
		// fewer still: WithTaskLogs): a message of tiny lines must not
		// cost 16 times its size in memory. The others are counted.
		skip := int(count) - min(int(count), maxOutcomeLines)
		o.LogsDropped = min(o.LogsDropped+skip, math.MaxInt32)
		if count > 0 {
			o.Logs = make([]coordinator.LogLine, int(count)-skip)
		}
		for i := range int(count) {
			var l coordinator.LogLine
			ns, n := binary.Varint(b)
			if n <= 0 {
				return o, errBadOutcome
			}
			b = b[n:]
			level, n := binary.Varint(b)
			if n <= 0 || level < math.MinInt32 || level > math.MaxInt32 {
				return o, errBadOutcome
			}
			b = b[n:]
			l.Level = slog.Level(level)
			if ns != 0 { // 0: a line without a time keeps the zero time
				l.Time = time.Unix(0, ns)
			}
			if !str(&l.Message) || !str(&l.Attrs) {
				return o, errBadOutcome
			}
			if i >= skip {
				o.Logs[i-skip] = l
			}
		}
	}
	if o.Key == "" {
		return o, fmt.Errorf("%w: no key", errBadOutcome)
	}
	if len(b) > 0 {
		o.Result = bytes.Clone(b)
	}
	return o, nil
}

// held is one entry of a held report: a worker holds the publication of
// key at stream sequence seq, on its delivery-th delivery, the last one
// WithMaxDeliver allows. Serve sends a report when it takes such a
// delivery and each time it extends its lease; the Pool fails the attempt
// with ErrMaxDeliveries once reports stop for longer than the lease
// (Pool.do), since no worker will ever be given it again.
//
// On the wire (encodeHeld): a version byte (1), then for each entry its
// sequence and delivery as uvarints and its key as a uvarint length and
// its bytes.
type held struct {
	key      string
	seq      uint64
	delivery int
}

const heldVersion = 1

func encodeHeld(hs []held) []byte {
	n := 1
	for _, h := range hs {
		n += 3*binary.MaxVarintLen64 + len(h.key)
	}
	b := append(make([]byte, 0, n), heldVersion)
	for _, h := range hs {
		b = binary.AppendUvarint(b, h.seq)
		b = binary.AppendUvarint(b, uint64(h.delivery))
		b = binary.AppendUvarint(b, uint64(len(h.key)))
		b = append(b, h.key...)
	}
	return b
}

var errBadHeld = errors.New("jetstream: undecodable held report")

func decodeHeld(b []byte) ([]held, error) {
	if len(b) < 1 || b[0] != heldVersion {
		return nil, errBadHeld
	}
	b = b[1:]
	var hs []held
	for len(b) > 0 {
		var h held
		var n int
		if h.seq, n = binary.Uvarint(b); n <= 0 {
			return nil, errBadHeld
		}
		b = b[n:]
		d, n := binary.Uvarint(b)
		if n <= 0 || d > 1<<31 {
			return nil, errBadHeld
		}
		h.delivery, b = int(d), b[n:]
		l, n := binary.Uvarint(b)
		if n <= 0 || l == 0 || l > uint64(len(b)-n) {
			return nil, errBadHeld
		}
		h.key, b = string(b[n:n+int(l)]), b[n+int(l):]
		hs = append(hs, h)
	}
	return hs, nil
}

// keyRing is a set of the last n keys added, each with a time: a bounded
// memory of publications already settled or cancelled. Not safe for
// concurrent use.
type keyRing struct {
	m    map[string]time.Time
	ring []string
	next int
}

func newKeyRing(n int) *keyRing {
	return &keyRing{m: make(map[string]time.Time, n), ring: make([]string, n)}
}

func (r *keyRing) has(k string) bool { _, ok := r.m[k]; return ok }

// at returns when k was added, if it is in the ring.
func (r *keyRing) at(k string) (time.Time, bool) { t, ok := r.m[k]; return t, ok }

func (r *keyRing) add(k string) { r.addAt(k, time.Time{}) }

func (r *keyRing) addAt(k string, t time.Time) {
	if _, ok := r.m[k]; ok {
		r.m[k] = t
		return
	}
	if old := r.ring[r.next]; old != "" {
		delete(r.m, old)
	}
	r.ring[r.next] = k
	r.m[k] = t
	r.next = (r.next + 1) % len(r.ring)
}

// validHeader reports whether s travels unchanged in a NATS header value:
// no line break or NUL, and no white space at either end, which the
// client trims when it reads the header.
func validHeader(s string) bool {
	return !strings.ContainsAny(s, "\r\n\x00") && strings.TrimSpace(s) == s
}
