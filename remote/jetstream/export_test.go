package jetstream

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
)

// EncodeOutcome encodes an outcome as Serve publishes it, with status
// "ok" or "error"; only for testing (forged duplicates).
func EncodeOutcome(key, status, worker string, delivery int, errText string) []byte {
	o := outcome{Key: key, Status: statusOK, Worker: worker, Delivery: delivery, Error: errText}
	if status != "ok" {
		o.Status = statusError
	}
	return o.encode()
}

// Withdrawn is Serve's look at a delivery again: whether pool's work
// stream no longer holds message seq ("gone"), still does ("held"), or
// does not say ("unknown", after asking for the longer of lease and
// withdrawnPatience). AttemptsStream and AttemptsSubject name the work
// stream and its subject. Only for testing.
func Withdrawn(nc *nats.Conn, pool string, seq uint64, lease time.Duration) string {
	s := &server{nc: nc, pool: pool}
	s.lease.Store(int64(lease))
	return [...]string{lookHeld: "held", lookGone: "gone", lookUnknown: "unknown"}[s.withdrawn(context.Background(), seq)]
}

// SetWithdrawnPatience sets how long Serve looks up a delivery again that
// gets no answer (at least the lease), until the test's cleanup.
func SetWithdrawnPatience(t interface{ Cleanup(func()) }, d time.Duration) {
	old := withdrawnPatience
	withdrawnPatience = d
	t.Cleanup(func() { withdrawnPatience = old })
}

func AttemptsStream(pool string) string  { return attemptsStream(pool) }
func AttemptsSubject(pool string) string { return attemptsSubject(pool) }

// OutcomeSubject is where Serve publishes the outcome of attempt key for
// a Pool instance, and AttemptKey an attempt's key; only for testing
// (forged outcomes).
func OutcomeSubject(pool, instance, key string) string { return outcomeSubject(pool, instance, key) }

func AttemptKey(instance, task string, round, attempt int) string {
	return attemptKey(instance, jobID{task: task, round: round, attempt: attempt})
}

// WorkConsumer is the name of a pool's work consumer, from which Serve
// pulls.
const WorkConsumer = workConsumer
