package replica

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/nats-io/nats.go"
)

// Client reaches the scheduler of a replicated store from any process:
// its calls go to the replica that leads the store (a request on
// baton.S.api.T, for term T), found in the log, and follow the lead when
// it changes. A Replica's own calls are its Client's. It needs no
// JetStream rights but reading the log's last message (see the package
// doc, Who may do what).
//
// Every call blocks until the leader answers, and waits for a leader while
// none leads, until its context ends: then it returns ErrNoLeader, or
// ctx.Err() if a leader was found and had not answered. ctx.Err() says
// the answer did not come in time, not that nothing was done: a Submit,
// Cancel, Rerun, Pause or Resume the leader had may have been applied
// (look with Info). A request the leader never got is sent again to the next
// leader; one it had when it stopped leading is sent again if asking
// twice is harmless (Info, History, WaitTasks, Wait, Pause, Resume), and
// otherwise (Submit, Cancel, Rerun) fails with ErrLeaderLost: it may or
// may not have been applied. A WaitTasks or Wait whose context ends tells the
// leader, which stops waiting for it (its deadline travels with the
// request too). While no answer comes, a call sends its request again
// (after 1 s, then at doubling intervals up to 16 s): a message in
// flight through a server that stops is lost, request or answer. Copies
// go only while the Client is connected. The leader does a request it
// gets twice once: a copy that comes while it works is answered by that
// one answer, and a copy that comes later, within a minute, gets the
// same answer again (an answer over 1 KiB, of Info, History, WaitTasks or
// Wait, which are harmless to do twice, is not kept: the copy is done
// again; a Rerun's is kept whatever its size). A copy of a Submit, Cancel
// or Rerun sent a minute or more after the first (a Client cut off that
// long) that the leader has no answer for fails with ErrLeaderLost: it
// may or may not have been done.
//
// Requests and answers are core NATS messages, each within the server's
// max payload (1 MiB by default; JSON, a []byte as base64, a third
// larger): a Submit whose batch exceeds it fails at once with
// nats.ErrMaxPayload (split the batch, or keep payloads by reference),
// and an answer that would exceed it (an Info or a WaitTasks error
// carrying large results) fails with ErrAnswerTooLarge.
//
// All methods are safe for concurrent use. After Close they return
// ErrClosed.
type Client struct {
	nc   *nats.Conn    // owned by the caller
	name string        // immutable: the store's name
	poll time.Duration // immutable: how often a wait for a leader looks again, besides term messages

	mu     sync.Mutex           // guards the fields below
	term   uint64               // the leader's term as last read (0: not known)
	leader string               // its name
	dead   uint64               // a term whose leader did not answer: wait for another
	wake   chan struct{}        // closed at the next leader's word heard, replaced
	watch  []*nats.Subscription // leaders' word (core NATS): the lead changes
	subs   []*nats.Subscription // Subscribe's
	closed bool
}

// NewClient returns a Client of the store called name, through nc (which
// must reconnect: nats.MaxReconnects(-1); the Client never closes it).
// It subscribes to the leaders' word that they answer, to learn of a new
// leader without asking; it does not block otherwise. Close it when done.
// It needs no JetStream rights (ClientPermissions).
func NewClient(nc *nats.Conn, name string) (*Client, error) {
	if err := checkArgs(nc, name); err != nil {
		return nil, err
	}
	c := &Client{nc: nc, name: name, poll: time.Second, wake: make(chan struct{})}
	// A leader's word that it answers (readySubject) wakes the calls
	// waiting for a leader, and those waiting for an answer of another.
	for _, subject := range []string{readySubject(name)} {
		sub, err := nc.Subscribe(subject, func(*nats.Msg) { c.heard() })
		if err != nil {
			c.Close()
			return nil, err
		}
		c.watch = append(c.watch, sub)
	}
	return c, nil
}

// heard wakes the calls waiting for a leader, and those waiting for an
// answer (is their leader still the leader?), and forgets the leader
// known: a leader said it answers. A leader cut off without its
// connection closing (paused, partitioned) still has its subscription on
// the server, so that a request sent to its term is neither answered nor
// refused: only the next leader's word tells that the lead moved.
func (c *Client) heard() {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.wake)
	c.wake = make(chan struct{})
	c.term, c.leader = 0, ""
}

// Close stops the Client: its subscriptions (Subscribe's too) end, and its
// calls return ErrClosed from then on. Calls under way end with their
// contexts. It is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	for _, s := range c.watch {
		_ = s.Unsubscribe()
	}
	for _, s := range c.subs {
		_ = s.Unsubscribe()
	}
	c.subs = nil
	return nil
}

// Leader returns the name and the term of the replica that leads the
// store, waiting for one until ctx ends (ErrNoLeader). The answer may be
// stale by the time it returns.
func (c *Client) Leader(ctx context.Context) (name string, term uint64, err error) {
	t, n, err := c.find(ctx)
	return n, t, err
}

// find returns the current leader's term and name, reading the log's last
// message if it is not known, and waiting while nobody leads.
func (c *Client) find(ctx context.Context) (uint64, string, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return 0, "", ErrClosed
		}
		term, leader, wake := c.term, c.leader, c.wake
		c.mu.Unlock()
		if term != 0 {
			return term, leader, nil
		}
		lctx, cancel := context.WithTimeout(ctx, lookTimeout) // JetStream may not answer at all (a cluster forming)
		term, leader, err := c.look(lctx)
		cancel()
		if err != nil && ctx.Err() != nil {
			return 0, "", fmt.Errorf("%w: store %q: %w", ErrNoLeader, c.name, ctx.Err())
		}
		c.mu.Lock()
		if err == nil && term != 0 && term != c.dead {
			c.term, c.leader = term, leader
			c.mu.Unlock()
			return term, leader, nil
		}
		// A dead term is skipped until the next wake or poll only: its
		// leader may have been restoring, or its subscription on its way.
		c.dead = 0
		c.mu.Unlock()
		t := time.NewTimer(c.poll)
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		if ctx.Err() != nil {
			return 0, "", fmt.Errorf("%w: store %q: %w", ErrNoLeader, c.name, ctx.Err())
		}
	}
}

// lookTimeout bounds one reading of the log's last message.
const lookTimeout = 2 * time.Second

// A request with no answer goes again after resendFirst, then at
// doubling intervals up to resendMax (the leader's answers keep a copy's
// answer longer: answerKeep).
const (
	resendFirst = time.Second
	resendMax   = 16 * time.Second
)

// look asks the store's replicas which term leads, and its leader's
// name (0: none: no replica answers, the last leader resigned, or the
// log is empty). Every replica answers (baton.S.lead) from the log as it
// has read it; the first answer is taken: a standby reads a new term
// within a moment of its claim, and a Client that asks a term whose
// leader is gone is told so (no interest) and asks again. A Client reads
// nothing of the log itself: it needs no JetStream rights at all.
func (c *Client) look(ctx context.Context) (uint64, string, error) {
	m, err := c.nc.RequestWithContext(ctx, leadSubject(c.name), nil)
	if errors.Is(err, nats.ErrNoResponders) {
		return 0, "", nil // no replica runs
	}
	if err != nil {
		return 0, "", err
	}
	var a leadAnswer
	if err := json.Unmarshal(m.Data, &a); err != nil {
		return 0, "", fmt.Errorf("replica: undecodable answer to who leads: %w", err)
	}
	if a.Resigned {
		return 0, "", nil
	}
	return a.Term, a.Leader, nil
}

// forget drops term as the leader's (it did not answer, or said it no
// longer leads): the next call waits for another.
func (c *Client) forget(term uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.term == term {
		c.term, c.leader, c.dead = 0, "", term
	}
}

// errNoAnswer: the leader asked had no subscription (it is gone); the
// request was not delivered. errMoved: the lead changed while the request
// waited for its answer.
var (
	errNoAnswer = errors.New("replica: no replica answers for that term")
	errMoved    = errors.New("replica: the lead changed during the request")
)

// call sends req to the leader and decodes its reply, following the lead
// as the Client doc says (again: whether req may be sent twice).
func (c *Client) call(ctx context.Context, req *request, again bool) (*reply, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	for {
		term, _, err := c.find(ctx)
		if err != nil {
			return nil, err
		}
		r, err := c.ask(ctx, term, req, data, req.Op == opWaitTasks || req.Op == opWait)
		switch {
		case errors.Is(err, errNoAnswer):
			c.forget(term)
			continue
		case errors.Is(err, errMoved) && again:
			c.forget(term) // not its term any more: ask the log, not the cache
			continue
		case errors.Is(err, errMoved):
			return nil, fmt.Errorf("%w (store %q, term %d)", ErrLeaderLost, c.name, term)
		case err != nil:
			return nil, err
		}
		if r.Err != nil {
			switch r.Err.Code {
			case codeGaveUp:
				// The leader stopped waiting when this caller's time was
				// up, by its own clock: so is ctx, or about to be.
				<-ctx.Done()
				return nil, ctx.Err()
			case codeNotLeader, codeClosed, codeFenced:
				// Not done there: ask the next leader.
				c.forget(term)
				continue
			case codeStoreFailed, codeLost:
				if !again {
					return nil, fmt.Errorf("%w (store %q, term %d): %w", ErrLeaderLost, c.name, term, r.Err.err())
				}
				c.forget(term)
				continue
			}
		}
		return r, nil
	}
}

// ask sends one request to the leader of term and waits for its answer,
// for ctx, or for the lead to change. A wait (abandon) whose ctx ends
// tells the leader, which ends it rather than keep it until the tasks
// end.
func (c *Client) ask(ctx context.Context, term uint64, req *request, data []byte, abandon bool) (*reply, error) {
	inbox := c.nc.NewInbox()
	ch := make(chan *nats.Msg, 1)
	sub, err := c.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	msg := &nats.Msg{Subject: apiSubject(c.name, term), Reply: inbox, Data: data}
	if err := c.nc.PublishMsg(msg); err != nil {
		return nil, err
	}
	// Core NATS loses a message in flight through a server that stops:
	// the request, or its answer. While no answer comes, the same request
	// goes again, to the same reply subject; the leader does it once and
	// answers every copy alike (answers).
	every, first := resendFirst, time.Now()
	resend := time.NewTimer(every)
	defer resend.Stop()
	resent, checked := false, false
	for {
		c.mu.Lock()
		wake, closed, known := c.wake, c.closed, c.term
		c.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		if known != term && !checked {
			// A leader's word came since the call found term (heard
			// forgot it): the wake that told it has gone by, and a
			// leader cut off without its connection closing neither
			// answers nor refuses. Is the lead still with term?
			checked = true
			if c.moved(ctx, term) {
				return nil, errMoved
			}
		}
		select {
		case m := <-ch:
			r, err := decodeAnswer(m)
			if errors.Is(err, errNoAnswer) && resent {
				// A copy found no interest in term's subject on its
				// server (the leader reconnecting, or its interest not
				// yet known there): that does not say the lead moved. A
				// move wakes this call (a term message); until then the
				// first copy's answer, or a later copy's, may come.
				continue
			}
			return r, err
		case <-resend.C:
			// Only while connected: a copy buffered through a long
			// disconnection would reach the leader long after it may
			// have forgotten the answer (answerKeep).
			if c.nc.IsConnected() {
				resent = true
				cp := *req
				cp.Age = time.Since(first)
				if b, err := json.Marshal(&cp); err == nil {
					_ = c.nc.PublishMsg(&nats.Msg{Subject: msg.Subject, Reply: inbox, Data: b})
				}
			}
			every = min(2*every, resendMax)
			resend.Reset(every)
		case <-wake:
			select {
			case m := <-ch: // an answer is in: it wins over the wake
				return decodeAnswer(m)
			default:
			}
			// A term message, or a leader's word: is the lead still with
			// term?
			if c.moved(ctx, term) {
				return nil, errMoved
			}
		case <-ctx.Done():
			if abandon {
				if b, err := json.Marshal(&request{Op: opAbandon, Inbox: inbox}); err == nil {
					_ = c.nc.Publish(apiSubject(c.name, term), b)
				}
			}
			return nil, ctx.Err()
		}
	}
}

// moved reports whether the store's replicas say that a term other than
// term leads now (false if they do not answer within lookTimeout).
func (c *Client) moved(ctx context.Context, term uint64) bool {
	lctx, cancel := context.WithTimeout(ctx, lookTimeout)
	defer cancel()
	now, _, err := c.look(lctx)
	return err == nil && now != term
}

// timeout is what is left of ctx's time, for a wait's request (0: no
// deadline).
func timeout(ctx context.Context) time.Duration {
	d, ok := ctx.Deadline()
	if !ok {
		return 0
	}
	return max(time.Until(d), time.Nanosecond)
}

// decodeAnswer reads the leader's answer to a request (errNoAnswer: no
// replica had a subscription for its term).
func decodeAnswer(m *nats.Msg) (*reply, error) {
	if m.Header.Get("Status") == "503" {
		return nil, errNoAnswer
	}
	var r reply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return nil, fmt.Errorf("replica: undecodable answer of the leader: %w", err)
	}
	return &r, nil
}

// Submit adds a batch of tasks through the leader, as the leader's
// Scheduler.SubmitContext does (the batch is accepted whole once it is
// committed, or rejected whole), with the same errors: a
// *coordinator.TaskError wrapping the coordinator's sentinels, a
// *coordinator.CycleError. A task must be described by data alone (no
// Run, RetryIf or Schedule; a []byte Payload): others are refused here
// with a *coordinator.TaskError wrapping coordinator.ErrNotDurable. It
// returns ErrLeaderLost when the leader stopped leading with the batch
// in hand (see the Client doc). Unlike SubmitContext's, its ctx.Err()
// does not say the batch was not stored: the leader may have committed
// it and answered too late. Either way, look (Info) before trying again:
// a second Submit of a stored batch fails with
// coordinator.ErrDuplicateID. A batch larger than the server's max
// payload fails with nats.ErrMaxPayload, sent to no one.
func (c *Client) Submit(ctx context.Context, tasks ...coordinator.Task) error {
	req := &request{Op: opSubmit}
	for _, t := range tasks {
		w, err := toWire(t)
		if err != nil {
			return err
		}
		req.Tasks = append(req.Tasks, w)
	}
	r, err := c.call(ctx, req, false)
	if err != nil {
		return err
	}
	if r.Err != nil {
		return r.Err.err()
	}
	return nil
}

// Cancel cancels a task through the leader, as Scheduler.Cancel does: it
// reports whether the cancel took (false for an unknown or final task),
// once the leader committed it. An error says it could not be asked
// (ErrNoLeader) or that the answer was lost (ErrLeaderLost, or ctx.Err()
// once a leader had it): it may or may not have been applied.
func (c *Client) Cancel(ctx context.Context, id string) (bool, error) {
	r, err := c.call(ctx, &request{Op: opCancel, IDs: []string{id}}, false)
	if err != nil {
		return false, err
	}
	if r.Err != nil {
		return false, r.Err.err()
	}
	return r.OK, nil
}

// Rerun re-opens tasks through the leader, as Scheduler.Rerun does: the
// result lists every task re-opened once the leader committed the re-run
// (like a Submit); its errors keep the coordinator's (a
// *coordinator.TaskError wrapping ErrUnknownTask or ErrNotRerunnable,
// errors.Is works). An error that says it could not be asked
// (ErrNoLeader) re-opened nothing; ErrLeaderLost or ctx.Err() once a
// leader had it: it may or may not have been applied (Info tells:
// TaskInfo.Reruns). A result larger than the server's max payload fails
// with ErrAnswerTooLarge although the re-run was done.
func (c *Client) Rerun(ctx context.Context, req coordinator.RerunRequest) (coordinator.RerunResult, error) {
	r, err := c.call(ctx, &request{Op: opRerun, IDs: req.IDs, Downstream: req.Downstream, By: req.By}, false)
	if err != nil {
		return coordinator.RerunResult{}, err
	}
	if r.Err != nil {
		return coordinator.RerunResult{}, r.Err.err()
	}
	return coordinator.RerunResult{Reopened: r.Reopened}, nil
}

// History reports a task's attempts as the leader's Scheduler.History
// does (false: unknown to it), their log lines included; Attempt.Err
// keeps the coordinator's sentinels and timeouts as Info's TaskInfo.Err
// does, other errors arrive as their text, and text that is not UTF-8
// arrives with its bad bytes replaced. A history larger than the server's
// max payload comes without its oldest attempts, or the oldest lines of
// its newest, counted in Dropped and LogsDropped.
func (c *Client) History(ctx context.Context, id string) (coordinator.History, bool, error) {
	r, err := c.call(ctx, &request{Op: opHistory, IDs: []string{id}}, true)
	if err != nil {
		return coordinator.History{}, false, err
	}
	if r.Err != nil {
		return coordinator.History{}, false, r.Err.err()
	}
	if !r.Known || r.History == nil {
		return coordinator.History{}, false, nil
	}
	return r.History.history(), true, nil
}

// Info reports a task as the leader's Scheduler.Info does (false: unknown
// to it). TaskInfo.Err keeps the coordinator's sentinels
// (coordinator.ErrCancelled, ErrClosed, ErrInterrupted) and timeouts
// (*worker.TimeoutError); other errors arrive as their text.
func (c *Client) Info(ctx context.Context, id string) (coordinator.TaskInfo, bool, error) {
	r, err := c.call(ctx, &request{Op: opInfo, IDs: []string{id}}, true)
	if err != nil {
		return coordinator.TaskInfo{}, false, err
	}
	if r.Err != nil {
		return coordinator.TaskInfo{}, false, r.Err.err()
	}
	if !r.Known || r.Info == nil {
		return coordinator.TaskInfo{}, false, nil
	}
	return r.Info.info(), true, nil
}

// WaitTasks waits, through the leader, until every listed task is final,
// as Scheduler.WaitTasks does: nil if all succeeded, a
// *coordinator.TasksError otherwise, an error wrapping
// coordinator.ErrUnknownTask for an ID the leader does not know. A change
// of leader meanwhile is waited through. ctx.Err() if ctx ends.
func (c *Client) WaitTasks(ctx context.Context, ids ...string) error {
	r, err := c.call(ctx, &request{Op: opWaitTasks, IDs: ids, Timeout: timeout(ctx)}, true)
	if err != nil {
		return err
	}
	if r.Err != nil {
		return r.Err.err()
	}
	return nil
}

// Wait waits, through the leader, until every task submitted so far is
// final, as Scheduler.Wait does; a change of leader meanwhile is waited
// through. ctx.Err() if ctx ends.
func (c *Client) Wait(ctx context.Context) error {
	r, err := c.call(ctx, &request{Op: opWait, Timeout: timeout(ctx)}, true)
	if err != nil {
		return err
	}
	if r.Err != nil {
		return r.Err.err()
	}
	return nil
}

// Pause pauses a pool through the leader, as the leader's
// Scheduler.Pause does: once it returns, the pool starts nothing more,
// and the pause is committed (it survives a takeover). Errors: one
// wrapping coordinator.ErrUnknownPool for a pool the leader was not
// given, those of every call (ErrNoLeader, ctx.Err()). Asking twice is
// harmless: a Pause the leader had when it stopped leading is asked
// again of the next.
func (c *Client) Pause(ctx context.Context, pool string) error {
	return c.poolCall(ctx, opPause, pool)
}

// Resume resumes a pool through the leader, as Scheduler.Resume does,
// with Pause's errors.
//
// A rate limit (Scheduler.SetRateLimit) has no call here: it is an
// option, not state, and a durable scheduler does not store it. Give it
// to every replica (WithScheduler(coordinator.WithRateLimit(...))); a
// change made on the leader's Scheduler (Replica.Scheduler) holds until
// the next takeover.
func (c *Client) Resume(ctx context.Context, pool string) error {
	return c.poolCall(ctx, opResume, pool)
}

func (c *Client) poolCall(ctx context.Context, op, pool string) error {
	r, err := c.call(ctx, &request{Op: op, Pool: pool}, true)
	if err != nil {
		return err
	}
	if r.Err != nil {
		return r.Err.err()
	}
	return nil
}

// Subscribe calls fn for every event the leader publishes from now on
// (core NATS on baton.S.events), in the order each leader decided them,
// on a goroutine of the Client's connection: fn is never called
// concurrently with itself, and events queue for a slow fn without
// bound. Delivery is at most once: an event decided by a leader that died
// before publishing it, or sent while this connection was down, is not
// delivered (Info and WaitTasks tell the state). Call unsubscribe to
// stop; an event already on its way may still be delivered once. It does
// not block beyond a subscription; its error is the connection's, or
// ErrClosed.
func (c *Client) Subscribe(fn func(coordinator.Event)) (unsubscribe func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	sub, err := c.nc.Subscribe(eventsSubject(c.name), func(m *nats.Msg) {
		var w wireEvent
		if json.Unmarshal(m.Data, &w) == nil {
			fn(w.event())
		}
	})
	if err != nil {
		return nil, err
	}
	_ = sub.SetPendingLimits(-1, -1)
	c.subs = append(c.subs, sub)
	return func() { _ = sub.Unsubscribe() }, nil
}
