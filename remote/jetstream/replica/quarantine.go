package replica

import (
	"errors"
	"sync"
	"time"
)

// errJunk is the error of a log message that no replica of the store
// wrote in its current term (view.junkLocked): it is quarantined, not
// applied.
var errJunk = errors.New("replica: quarantined a log message no replica wrote")

// Quarantined is something of the log that a replica did not apply, so
// that the store goes on without it:
//
//   - a message that is not a replica's append of the log's current term
//     (Key nil): a JetStream API answer, or another responder's answer,
//     that a requester aimed at the log's subjects by naming one as its
//     reply subject, or a copy of an earlier message. Every replica skips
//     it; it is not a sign of life, and a leader whose append it got
//     ahead of appends after it (it is not fenced). It stays in the
//     log's stream until the leader's next compaction purges it.
//   - a record that the scheduler refused to restore (Key set: an unknown
//     key, a record it cannot decode): the leader that found it takes
//     it out of the store, in a commit of its own that deletes the key
//     (its Baton-Quarantine header says why), and restores without it.
//     Data is the record's value as it was.
//
// Replica.Quarantined and Store.Quarantined list them; each is also
// logged at Warn (WithLogger).
type Quarantined struct {
	Seq    uint64    // the log message (for a record: the message of the commit that took it out)
	Kind   string    // the message's kind: the last token of its subject (commit, snap, term, beat)
	Reason string    // why it was not applied
	Key    []byte    // a record taken out of the store: its key; nil for a message
	Data   []byte    // the message's body or the record's value, cut at QuarantineKeep bytes
	Size   int       // the full size of what Data holds
	At     time.Time // when this replica quarantined it
}

// QuarantineKeep is how many bytes of a quarantined message or record a
// replica keeps for Quarantined; it keeps the last 64 quarantined.
const QuarantineKeep = 4 << 10

const quarantineMax = 64

// quarantine is a replica's report of what it quarantined: a count, and
// the last quarantineMax. Safe for concurrent use.
type quarantine struct {
	mu      sync.Mutex // guards the fields below
	n       int
	items   []Quarantined
	pending []Quarantined // not yet told (WithNotify), at most quarantineMax
	wake    chan struct{} // signalled (buffer 1, coalescing) when pending grows; nil: nobody tells
}

func (q *quarantine) add(x Quarantined) {
	x.Size = len(x.Data)
	if len(x.Data) > QuarantineKeep {
		x.Data = x.Data[:QuarantineKeep]
	}
	x.Data = append([]byte(nil), x.Data...)
	if x.At.IsZero() {
		x.At = time.Now()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.n++
	if len(q.items) == quarantineMax {
		q.items = append(q.items[:0], q.items[1:]...)
	}
	q.items = append(q.items, x)
	if q.wake != nil && len(q.pending) < quarantineMax {
		q.pending = append(q.pending, x)
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
}

// take returns what was quarantined and not yet told.
func (q *quarantine) take() []Quarantined {
	q.mu.Lock()
	defer q.mu.Unlock()
	p := q.pending
	q.pending = nil
	return p
}

// tell calls f with every quarantine as it comes, until done closes: the
// Replica's Notices (WithNotify) of quarantines come from here, never
// from under the view's lock where they are found.
func (q *quarantine) tell(f func(Quarantined), done <-chan struct{}) {
	for {
		select {
		case <-q.wake:
			for _, x := range q.take() {
				f(x)
			}
		case <-done:
			return
		}
	}
}

// list returns how many were quarantined, and the last ones, oldest first.
func (q *quarantine) list() (int, []Quarantined) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n, append([]Quarantined(nil), q.items...)
}

// Quarantined returns how many messages and records this replica has
// quarantined since New, and the last 64 of them, oldest first (see
// Quarantined, the type). Every replica reports the messages it read;
// a record taken out is reported by the leader that took it out. It does
// not block, is safe for concurrent use, and still answers after
// Shutdown.
func (r *Replica) Quarantined() (int, []Quarantined) { return r.view.quar.list() }

// Quarantined returns how many messages and records this Store has
// quarantined, and the last 64 of them, oldest first, as
// Replica.Quarantined does. It does not block, is safe for concurrent
// use, and still answers after Close.
func (s *Store) Quarantined() (int, []Quarantined) { return s.view.quar.list() }
