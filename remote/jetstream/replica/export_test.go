package replica

import (
	"context"
	"encoding/json"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/remote/jetstream"
	"github.com/nats-io/nats.go"
)

// Handlers waits until at most n of the leader's request handlers are
// running, or ctx ends (its error); only for testing.
func (r *Replica) Handlers(ctx context.Context, n int) error {
	for r.handling.Load() > int64(n) {
		select {
		case <-r.handled:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// HandlersBegun is how many of the leader's request handlers have
// started so far; only for testing.
func (r *Replica) HandlersBegun() int64 { return r.begun.Load() }

// HandlerBegun waits until more than n request handlers have started, or
// ctx ends (its error); only for testing.
func (r *Replica) HandlerBegun(ctx context.Context, n int64) error {
	for r.begun.Load() <= n {
		select {
		case <-r.began:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// SubmitRequest is the request a Client's Submit of tasks sends, and
// APISubject where it goes for term; AnswerErr is the error an answer
// carries. Only for testing.
func SubmitRequest(tasks ...coordinator.Task) ([]byte, error) {
	return SubmitCopy(0, tasks...)
}

// SubmitCopy is a copy of that request sent age after the first.
func SubmitCopy(age time.Duration, tasks ...coordinator.Task) ([]byte, error) {
	req := &request{Op: opSubmit, Age: age}
	for _, t := range tasks {
		w, err := toWire(t)
		if err != nil {
			return nil, err
		}
		req.Tasks = append(req.Tasks, w)
	}
	return json.Marshal(req)
}

func APISubject(store string, term uint64) string { return apiSubject(store, term) }

func AnswerErr(m *nats.Msg) error {
	r, err := decodeAnswer(m)
	if err != nil {
		return err
	}
	if r.Err != nil {
		return r.Err.err()
	}
	return nil
}

// CancelRequest is the request a Client's Cancel of id sends; only for
// testing.
func CancelRequest(id string) ([]byte, error) {
	return json.Marshal(&request{Op: opCancel, IDs: []string{id}})
}

// AskAfterHeard is a call's request to term sent once a leader's word
// was heard after the call found term (heard, then ask), as a race
// between them has it; it returns ask's error (ErrMoved: the lead
// changed). Only for testing.
func AskAfterHeard(ctx context.Context, c *Client, term uint64) error {
	c.heard()
	b, err := json.Marshal(&request{Op: opInfo, IDs: []string{"x"}})
	if err != nil {
		return err
	}
	_, err = c.ask(ctx, term, &request{Op: opInfo, IDs: []string{"x"}}, b, false)
	return err
}

var ErrMoved = errMoved

// NewPoolInTakeover is how a takeover creates a remote pool of st, which
// must lead (Load), through nc, as the takeover of term gen; only for
// testing.
func NewPoolInTakeover(ctx context.Context, st *Store, gen uint64, nc *nats.Conn, name string, opts ...jetstream.Option) (*jetstream.Pool, error) {
	r := &Replica{nc: nc, name: st.name, cfg: defaults()}
	return r.newPool(ctx, st, gen, name, opts)
}

// Epoch is the life of the log st leads (its generation's epoch); only
// for testing.
func (s *Store) Epoch() uint64 { return s.epoch() }
