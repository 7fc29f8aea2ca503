package jetstream

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Names of the JetStream objects of a pool called P (P is checked by
// validPool):
//
//	stream   BATON_P_ATTEMPTS  subject baton.P.attempts    work queue, one message per attempt
//	consumer workers           on BATON_P_ATTEMPTS         shared by every Serve of the pool
//	stream   BATON_P_RESULTS   subjects baton.P.results.>  interest retention, one message per outcome
//	consumer coord-I           on BATON_P_RESULTS          one per Pool instance I, filter baton.P.results.I
//	subject  baton.P.cancel                                core NATS, body = attempt key: stop it
const workConsumer = "workers"

var poolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func attemptsStream(pool string) string  { return "BATON_" + pool + "_ATTEMPTS" }
func resultsStream(pool string) string   { return "BATON_" + pool + "_RESULTS" }
func attemptsSubject(pool string) string { return "baton." + pool + ".attempts" }
func resultsSubject(pool, instance string) string {
	return "baton." + pool + ".results." + instance
}
func cancelSubject(pool string) string { return "baton." + pool + ".cancel" }
func maxDeliveriesSubject(pool string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + attemptsStream(pool) + "." + workConsumer
}
func consumerCreatedSubject(pool string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.CREATED." + attemptsStream(pool) + "." + workConsumer
}
func resultsConsumer(instance string) string { return "coord-" + instance }

// Headers of an attempt message, besides its Nats-Msg-Id (the attempt
// key, which names the instance, round, attempt and task). Its body is
// Payload.Data.
const (
	hdrKind     = "Baton-Kind"
	hdrDeadline = "Baton-Deadline" // unix nanoseconds; absent without a deadline
)

// attemptKey names one attempt of one task for one Pool instance:
// instance/round/attempt/task. It is the attempt message's Nats-Msg-Id, so
// publishing it again is deduplicated by the stream.
func attemptKey(instance string, j jobID) string {
	return instance + "/" + strconv.Itoa(j.round) + "/" + strconv.Itoa(j.attempt) + "/" + j.task
}

type jobID struct {
	task           string
	round, attempt int
}

// parseKey is attemptKey's inverse; ok is false for a malformed key.
func parseKey(key string) (instance string, id jobID, ok bool) {
	parts := strings.SplitN(key, "/", 4)
	if len(parts) != 4 || !poolName.MatchString(parts[0]) {
		return "", id, false
	}
	var err1, err2 error
	id.round, err1 = strconv.Atoi(parts[1])
	id.attempt, err2 = strconv.Atoi(parts[2])
	id.task = parts[3]
	return parts[0], id, err1 == nil && err2 == nil
}

func attemptMsg(pool, key, kind string, data []byte, deadline time.Time) *nats.Msg {
	m := nats.NewMsg(attemptsSubject(pool))
	m.Data = data
	m.Header.Set(nats.MsgIdHdr, key)
	m.Header.Set(hdrKind, kind)
	if !deadline.IsZero() {
		m.Header.Set(hdrDeadline, strconv.FormatInt(deadline.UnixNano(), 10))
	}
	return m
}

// status of an outcome.
const (
	statusOK        = "ok"
	statusError     = "error"
	statusPanic     = "panic"
	statusCancelled = "cancelled" // the handler stopped because the coordinator cancelled the attempt
)

// outcome is the body of a results message (JSON).
type outcome struct {
	Key      string `json:"key"`
	Status   string `json:"status"`
	Worker   string `json:"worker"`
	Delivery int    `json:"delivery"`
	Result   []byte `json:"result,omitempty"`
	Error    string `json:"error,omitempty"`
	Stack    string `json:"stack,omitempty"`
	Code     string `json:"code,omitempty"` // codeUnknownKind, or empty
}

const codeUnknownKind = "unknown-kind"

// keyRing is a set of the last n keys added: a bounded memory of attempts
// already settled or cancelled. Not safe for concurrent use.
type keyRing struct {
	m    map[string]struct{}
	ring []string
	next int
}

func newKeyRing(n int) *keyRing {
	return &keyRing{m: make(map[string]struct{}, n), ring: make([]string, n)}
}

func (r *keyRing) has(k string) bool { _, ok := r.m[k]; return ok }

func (r *keyRing) add(k string) {
	if r.has(k) {
		return
	}
	if old := r.ring[r.next]; old != "" {
		delete(r.m, old)
	}
	r.ring[r.next] = k
	r.m[k] = struct{}{}
	r.next = (r.next + 1) % len(r.ring)
}

func decodeOutcome(data []byte) (outcome, error) {
	var o outcome
	if err := json.Unmarshal(data, &o); err != nil {
		return o, fmt.Errorf("jetstream: undecodable outcome: %w", err)
	}
	switch o.Status {
	case statusOK, statusError, statusPanic, statusCancelled:
	default:
		return o, fmt.Errorf("jetstream: outcome of %q has unknown status %q", o.Key, o.Status)
	}
	if o.Key == "" {
		return o, fmt.Errorf("jetstream: outcome without a key")
	}
	return o, nil
}

// validKey reports whether s can travel in a NATS header value.
func validHeader(s string) bool {
	return !strings.ContainsAny(s, "\r\n\x00")
}
