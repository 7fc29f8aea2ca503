package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/batonhq/baton/internal/record"
	"github.com/batonhq/baton/worker"
)

// A durable scheduler (WithStore) writes two records per task, in the
// format of package internal/record: its definition, once, when Submit
// accepts it, and its state, rewritten in every coordinator iteration that
// changes it. Which transitions are written: every one that emits an event
// (start, success, recurrence, retry, failure, cancel, skip), every wait
// put into the delayed set, and a Cancel of a running task. What is not
// written is recomputed on restore (restore.go): whether a task's
// dependencies are met, and whether a task whose time has come is ready.

// durable is what the state keeps to write its records: what changed
// since the last commit, and the records' sequence numbers. It never
// touches the store: the loop commits what takeCommit returns. Owned by
// the coordinator goroutine, like the state (New uses it before the loop
// starts).
type durable struct {
	funcs     map[string]func(context.Context, []byte) error
	resumes   []bool         // by pool index: resumes the attempts a crash left running (worker.Resumer)
	runs      []bool         // by pool index: its Worker is worker.Func, so a task needs a function
	seq       []uint64       // by record: the sequence its keys carry (0: none)
	next      uint64         // the next sequence to give
	mark      []uint32       // by record: the epoch it was last made dirty in
	epoch     uint32         // this iteration's
	dirty     []int32        // records whose state to write this iteration
	histDirty []int32        // records whose history to write this iteration (history.go)
	histMark  []uint32       // by record: the epoch its history was last marked in
	defs      []KV           // definitions of the tasks submitted this iteration
	deletes   []uint64       // sequences of the tasks forgotten this iteration
	cancels   map[int32]bool // Cancel reached these while they ran (fCancelReq from Cancel, not Shutdown)
	meta      bool           // the version record is to be written, with the next commit
	pools     []int          // pools whose state (paused) to write this iteration
	early     []seqRange     // the journaled batches' roots submitted this iteration: they may go out before its commit (journaled.go)
	journaled int            // tasks of journaled batches submitted this iteration (journaled.go)
	restoring bool           // restore is submitting the stored tasks: submit must make nothing ready
	careful   map[int32]bool // restored tasks whose next start waits for its commit (careful.go)
	rash      bool           // WithCarefulRestart(false): mark none
	failed    error          // a commit failed: nothing more is written
	buf       []byte         // encoding space, reused
	ch        Changes        // reused
}

// touch marks t's state to be written at the end of this iteration.
func (d *durable) touch(t int32) {
	if int(t) >= len(d.mark) {
		d.mark = slices.Grow(d.mark, int(t)+1-len(d.mark))
		d.mark = d.mark[:cap(d.mark)]
	}
	if d.mark[t] != d.epoch {
		d.mark[t] = d.epoch
		d.dirty = append(d.dirty, t)
	}
}

// touchPool marks pool i's record to be written at the end of this
// iteration.
func (d *durable) touchPool(i int) {
	if !slices.Contains(d.pools, i) {
		d.pools = append(d.pools, i)
	}
}

// touched marks t dirty on a durable scheduler: called where a transition
// that emits no event happens (a wait put into the delayed set).
func (s *state) touched(t int32) {
	if s.dur != nil {
		s.dur.touch(t)
	}
}

// forgot is called by retention for a task it drops: its records go.
func (s *state) forgot(t int32) {
	if d := s.dur; d != nil && int(t) < len(d.seq) && d.seq[t] != 0 {
		d.deletes = append(d.deletes, d.seq[t])
		d.seq[t] = 0
		delete(d.cancels, t)
		delete(d.careful, t)
	}
}

// cancelAsked records that Cancel reached t while its function ran (it
// ends Cancelled when the function returns): written, so that a restart
// in between cancels it rather than running it again.
func (s *state) cancelAsked(t int32) {
	if d := s.dur; d != nil && s.hot[t].flags&fCancelReq != 0 && !s.hot[t].status.Final() {
		if d.cancels == nil {
			d.cancels = map[int32]bool{}
		}
		d.cancels[t] = true
		d.touch(t)
	}
}

// prepare checks a batch against what a durable scheduler can restore and
// binds named functions (Task.Func) to their tasks. It runs on the
// caller's goroutine, before validateTask; it copies the batch's tasks
// before changing one (submission.own), since they are the caller's.
func (s *Scheduler) prepare(b *submission) error {
	cfg := s.dcfg
	if cfg == nil {
		for i := range b.tasks {
			if t := &b.tasks[i]; t.Func != "" {
				return &TaskError{ID: t.ID, Err: ErrInvalidTask, Detail: fmt.Sprintf("function %s is not registered (WithFunc)", quoteID(t.Func))}
			}
		}
		return nil
	}
	for i := range b.tasks {
		t := &b.tasks[i]
		bad := func(sentinel error, format string, args ...any) error {
			return &TaskError{ID: t.ID, Err: sentinel, Detail: fmt.Sprintf(format, args...)}
		}
		if t.Func != "" {
			f, ok := cfg.funcs[t.Func]
			switch {
			case t.Run != nil:
				return bad(ErrInvalidTask, "both Run and Func %s", quoteID(t.Func))
			case !ok:
				return bad(ErrInvalidTask, "function %s is not registered (WithFunc)", quoteID(t.Func))
			}
			var payload []byte
			switch p := t.Payload.(type) {
			case nil:
			case []byte:
				payload = p
			default:
				return bad(ErrInvalidTask, "the Payload of a Func task is a []byte, not a %T", t.Payload)
			}
			b.own()
			t = &b.tasks[i]
			t.Run = func(ctx context.Context) error { return f(ctx, payload) }
		}
		if cfg.store == nil {
			continue
		}
		switch t.Payload.(type) {
		case nil, []byte:
		default:
			return bad(ErrNotDurable, "a Payload of type %T: a durable task's Payload is a []byte", t.Payload)
		}
		switch {
		case t.Func == "" && t.Run != nil:
			return bad(ErrNotDurable, "a Run closure cannot be rebuilt after a restart: register it with WithFunc and name it in Func")
		case t.Retry.RetryIf != nil:
			return bad(ErrNotDurable, "Retry.RetryIf is a function: it cannot be stored")
		case t.Schedule != nil:
			return bad(ErrNotDurable, "a Schedule is a Go value: use Cron or Every")
		}
	}
	return nil
}

// checkResult refuses, on a durable scheduler, a result that is not a
// []byte: only bytes are stored.
func checkResult(s *Scheduler, v any) error {
	if s == nil || s.dcfg == nil || s.dcfg.store == nil {
		return nil
	}
	switch v.(type) {
	case nil, []byte:
		return nil
	}
	return fmt.Errorf("%w: a durable scheduler stores []byte results, not %T", ErrResultType, v)
}

// submitted is called when a batch was stored: its tasks are numbered,
// their definitions encoded and their states marked (its Submit is
// answered after the commit, as every answer is).
func (s *state) submitted(b *submission) {
	d := s.dur
	if d == nil {
		return
	}
	early := b.journaled && selfContained(b)
	for i := range b.tasks {
		task := &b.tasks[i]
		t, _ := s.find(task.ID)
		if int(t) >= len(d.seq) {
			d.seq = slices.Grow(d.seq, int(t)+1-len(d.seq))
			d.seq = d.seq[:cap(d.seq)]
		}
		d.seq[t] = d.next
		if b.journaled {
			d.journal(b, i, d.next, early)
		}
		d.next++
		start := len(d.buf)
		d.buf = record.AppendTaskKey(d.buf, d.seq[t], record.KindDef)
		k := len(d.buf)
		def := s.defOf(t, task)
		d.buf = def.Append(d.buf)
		d.defs = append(d.defs, KV{Key: d.buf[start:k:k], Value: d.buf[k:len(d.buf):len(d.buf)]})
		d.touch(t)
	}
}

// answer queues a WaitTasks call's result, delivered at the end of the
// iteration: on a durable scheduler, once the ends it reports are
// committed (or with the commit's error if it failed).
func (s *state) answer(reply chan<- error, err error) { s.later(answer{err: reply, val: err}) }

// storePending reports whether takeCommit has something to write.
func (s *state) storePending() bool {
	d := s.dur
	return d.failed == nil && (len(d.dirty) > 0 || len(d.deletes) > 0 || len(d.defs) > 0 || len(d.pools) > 0 || len(d.histDirty) > 0)
}

// takeCommit returns what this iteration changed as one commit (nil:
// nothing to write), for the loop to commit (outbox); committed learns
// how that went. After a failed commit nothing more is written.
func (s *state) takeCommit(now time.Time) *Changes {
	d := s.dur
	if !s.storePending() {
		return nil
	}
	c := &d.ch
	c.Puts, c.Deletes = append(c.Puts[:0], d.defs...), c.Deletes[:0]
	for _, t := range d.dirty {
		if int(t) >= len(d.seq) || d.seq[t] == 0 || s.hot[t].status == dropped {
			continue
		}
		st, ok := s.stateOf(t, now)
		if !ok {
			continue
		}
		start := len(d.buf)
		d.buf = record.AppendTaskKey(d.buf, d.seq[t], record.KindState)
		k := len(d.buf)
		d.buf = st.Append(d.buf)
		c.Puts = append(c.Puts, KV{Key: d.buf[start:k:k], Value: d.buf[k:len(d.buf):len(d.buf)]})
	}
	for _, t := range d.histDirty {
		if int(t) >= len(d.seq) || d.seq[t] == 0 || s.hot[t].status == dropped {
			continue
		}
		h, ok := s.historyRecord(t)
		if !ok {
			continue // implied by its state's Last
		}
		start := len(d.buf)
		d.buf = record.AppendTaskKey(d.buf, d.seq[t], record.KindHistory)
		k := len(d.buf)
		d.buf = h.Append(d.buf)
		c.Puts = append(c.Puts, KV{Key: d.buf[start:k:k], Value: d.buf[k:len(d.buf):len(d.buf)]})
	}
	for _, i := range d.pools {
		p := record.Pool{Paused: s.pools[i].paused}
		start := len(d.buf)
		d.buf = record.AppendPoolKey(d.buf, s.pools[i].name)
		k := len(d.buf)
		d.buf = p.Append(d.buf)
		c.Puts = append(c.Puts, KV{Key: d.buf[start:k:k], Value: d.buf[k:len(d.buf):len(d.buf)]})
	}
	for _, seq := range d.deletes {
		start := len(d.buf)
		d.buf = record.AppendTaskKey(d.buf, seq, record.KindDef)
		d.buf = record.AppendTaskKey(d.buf, seq, record.KindHistory)
		d.buf = record.AppendTaskKey(d.buf, seq, record.KindState)
		k := record.TaskKeyLen
		c.Deletes = append(c.Deletes, d.buf[start:start+k:start+k], d.buf[start+k:start+2*k:start+2*k], d.buf[start+2*k:start+3*k:start+3*k])
	}
	if len(c.Puts) == 0 && len(c.Deletes) == 0 {
		return nil
	}
	if d.meta { // the version record goes with a commit, never alone
		c.Puts = append(c.Puts, KV{Key: record.MetaKey, Value: record.AppendVersion(nil, record.Version)})
	}
	return c
}

// committed learns how the loop's commit of takeCommit's changes went
// (failed: nil if committed or there was nothing to commit; otherwise
// commitFailure's error), readies the next iteration's, and returns the
// failure that stopped the scheduler, if any: the first, for good.
func (s *state) committed(failed error) error {
	d := s.dur
	if failed != nil && d.failed == nil {
		d.failed = failed
	} else if failed == nil && len(d.ch.Puts) > 0 {
		d.meta = false
	}
	clear(d.ch.Puts)
	clear(d.ch.Deletes)
	d.ch.Puts, d.ch.Deletes = d.ch.Puts[:0], d.ch.Deletes[:0]
	clear(d.defs)
	d.defs, d.dirty, d.deletes, d.pools, d.histDirty, d.early = d.defs[:0], d.dirty[:0], d.deletes[:0], d.pools[:0], d.histDirty[:0], d.early[:0]
	d.journaled = 0
	if cap(d.buf) > 1<<20 {
		d.buf = nil // a large batch: do not keep its space
	} else {
		d.buf = d.buf[:0]
	}
	d.epoch++
	if d.epoch == 0 { // wrapped: old marks could match again
		clear(d.mark)
		d.epoch = 1
	}
	return d.failed
}

// stateOf describes t for its state record; false: nothing to write (a
// task Shutdown cancelled before it started keeps its last record, so that
// a restart resumes it).
func (s *state) stateOf(t int32, now time.Time) (record.State, bool) {
	r := &s.tasks[t]
	h := &s.hot[t]
	status := h.status
	st := record.State{Attempts: r.attempts, Runs: r.runs, At: now}
	resumed := false // a join Shutdown cut, stored as joining
	x := r.x
	if x != nil {
		st.Reruns = x.reruns
	}
	if s.historyOn() && int(t) < len(s.histHead) {
		if a, ok := s.lastAttempt(t); ok {
			a.Lines, a.LinesDropped = nil, 0 // in its history record: an attempt that logged has one
			st.Last = &a
		}
	}
	switch h.status {
	case dispatched:
		if h.flags&fStarted != 0 {
			status = Running
		} else {
			status, st.Attempts = Ready, r.attempts-1 // handed out, not started: not an attempt yet
		}
	case Pending:
		if x != nil && x.inWheel {
			st.Due = x.due
		}
	case joining:
		status, st.Joining = Pending, true
	case Cancelled:
		if s.fam != nil && s.fam[t].cut && s.closing {
			// A join Shutdown cut: its attempt succeeded and its children
			// are stored; a restart resumes the join, with no error
			// (Shutdown's cancel is no end of it).
			status, st.Joining, resumed = Pending, true, true
			break
		}
		if s.errOf(t) == ErrClosed && s.closing {
			// Shutdown's doing: a durable scheduler resumes the task after
			// a restart. One the user cancelled stays cancelled; one whose
			// attempt Shutdown stopped runs again, the attempt not counted;
			// one that was not running keeps its last record.
			switch {
			case s.dur.cancels[t]:
				st.Status, st.ErrKind = uint8(status), record.ErrKindCancelled
				return st, true
			case h.flags&fCancelReq != 0:
				st.Status, st.Attempts = uint8(Ready), r.attempts-1
				if x != nil && x.recurring() {
					st.Planned = x.planned
				}
				return st, true
			}
			return st, false
		}
	}
	st.Status = uint8(status)
	if !status.Final() && s.dur.cancels[t] {
		st.CancelReq = true
	}
	if err := s.errOf(t); err != nil && status != Succeeded && status != Skipped && !resumed {
		st.ErrKind, st.ErrMsg, st.Timeout = errKindOf(err)
	}
	if x != nil {
		if x.recurring() {
			st.Planned = x.planned
		}
		if x.hasResult {
			if b, ok := x.result.([]byte); ok || x.result == nil {
				st.HasResult, st.Result, st.NilResult = true, b, x.result == nil
			}
		}
	}
	if h.status == Skipped && r.link != noTask {
		st.Cause = s.key(r.link)
		st.CauseClass = s.keptClass(t)
	}
	if x != nil && x.branched {
		st.Branched, st.Chosen = true, x.chosen
	}
	if s.fam != nil {
		f := &s.fam[t]
		st.JoinFrom = f.first
		if f.adopt != noTask {
			st.Adopt = s.key(f.adopt)
		}
	}
	return st, true
}

// defOf describes task t's definition record: the submitted Task, with
// its dependencies as resolved (Graph handles included), its Delay as the
// absolute time it may start, and the pool and priority it runs with (a
// spawned child's are its spawner's unless it set its own).
func (s *state) defOf(t int32, task *Task) record.Def {
	r := &s.tasks[t]
	h := &s.hot[t]
	p, _ := task.Payload.([]byte)
	d := record.Def{ID: task.ID, Func: task.Func, Pool: s.pools[h.pool].name, Payload: p, HasPayload: task.Payload != nil,
		Priority: int(h.prio), MaxAttempts: task.Retry.MaxAttempts, BaseDelay: task.Retry.BaseDelay,
		MaxDelay: task.Retry.MaxDelay, Jitter: task.Retry.Jitter, Timeout: task.Timeout, Every: task.Every,
		Cron: task.Cron, Times: task.Times, Missed: int(task.Missed), When: int(task.When), Key: task.Key, Slots: task.Slots}
	for _, dep := range s.edges(r, r.deps) {
		d.Deps = append(d.Deps, s.key(dep))
	}
	if r.x != nil {
		d.NotBefore = r.x.notBefore
	}
	if s.fam != nil && s.fam[t].parent != noTask {
		d.Parent = s.key(s.fam[t].parent)
	}
	return d
}

// errKindOf is how a record says err (a state's, an attempt's): its kind,
// its text where the kind needs it, and a timeout's duration.
func errKindOf(err error) (kind uint8, msg string, timeout time.Duration) {
	var te *worker.TimeoutError
	switch {
	case err == nil:
	case errors.Is(err, ErrChildFailed):
		// First: a *JoinError wraps its children's errors, which may be
		// any of the kinds below.
		return record.ErrKindJoin, err.Error(), 0
	case errors.Is(err, ErrCancelled):
		return sentinelKind(err, ErrCancelled, record.ErrKindCancelled, record.ErrKindCancelledText)
	case errors.Is(err, ErrClosed):
		return sentinelKind(err, ErrClosed, record.ErrKindClosed, record.ErrKindClosedText)
	case errors.Is(err, ErrInterrupted):
		return sentinelKind(err, ErrInterrupted, record.ErrKindInterrupted, record.ErrKindInterruptedText)
	case errors.As(err, &te):
		if te.Err != nil {
			msg = te.Err.Error()
		}
		return record.ErrKindTimeout, msg, te.After
	default:
		return record.ErrKindOther, err.Error(), 0
	}
	return record.ErrKindNone, "", 0
}

// sentinelKind is errKindOf for err, which wraps sentinel: the sentinel's
// kind, or with its text its Text kind if it says more than sentinel.
func sentinelKind(err, sentinel error, plain, text uint8) (uint8, string, time.Duration) {
	if msg := err.Error(); msg != sentinel.Error() {
		return text, msg, 0
	}
	return plain, "", 0
}

// storedSentinelError is, after a restart, an error that wrapped one of
// the coordinator's sentinels in a text of its own: that text, and the
// sentinel for errors.Is.
type storedSentinelError struct {
	msg      string
	sentinel error
}

func (e *storedSentinelError) Error() string { return e.msg }

// Unwrap returns the sentinel.
func (e *storedSentinelError) Unwrap() error { return e.sentinel }

// stateErr is a state record's error, the sentinels with their identity.
func stateErr(st *record.State) error {
	return kindErr(st.ErrKind, st.ErrMsg, st.Timeout)
}

// kindErr is the error a record says (errKindOf), the sentinels with their
// identity.
func kindErr(kind uint8, msg string, timeout time.Duration) error {
	switch kind {
	case record.ErrKindCancelled:
		return ErrCancelled
	case record.ErrKindClosed:
		return ErrClosed
	case record.ErrKindInterrupted:
		return ErrInterrupted
	case record.ErrKindCancelledText:
		return &storedSentinelError{msg, ErrCancelled}
	case record.ErrKindClosedText:
		return &storedSentinelError{msg, ErrClosed}
	case record.ErrKindInterruptedText:
		return &storedSentinelError{msg, ErrInterrupted}
	case record.ErrKindOther:
		return errors.New(msg)
	case record.ErrKindJoin:
		return storedJoinError(msg)
	case record.ErrKindTimeout:
		te := &worker.TimeoutError{After: timeout}
		if msg != "" {
			te.Err = errors.New(msg)
		}
		return te
	}
	return nil
}

// storedJoinError is a failed join's error after a restart: the
// *JoinError's text, wrapping ErrChildFailed (the children's own errors
// are not stored).
type storedJoinError string

func (e storedJoinError) Error() string { return string(e) }

// Is makes errors.Is(err, ErrChildFailed) true.
func (e storedJoinError) Is(target error) bool { return target == ErrChildFailed }

func ownerOf(o any) *Scheduler {
	s, _ := o.(*Scheduler)
	return s
}

// storeFailed stops a scheduler whose store failed a commit: as if the
// process had died, nothing more is written (the loop's Shutdown cancels
// in memory only), and a scheduler created on the store later resumes from
// the last commit. It runs on the coordinator goroutine.
func (s *Scheduler) storeFailed(err error) {
	s.log.Error("coordinator: store commit failed; shutting down", "error", err)
	s.failed.Store(&err)
	s.closed.Store(true)
	s.stopOnce.Do(func() { close(s.stopc) })
}
