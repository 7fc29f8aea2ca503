package coordinator

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/batonhq/baton/worker"
)

// A durable scheduler (WithStore) writes two records per task: its
// definition, once, when Submit accepts it, and its state, rewritten in
// every coordinator iteration that changes it. Keys:
//
//	"m"                 the format version (uvarint)
//	"t" seq(8, BE) "d"  definition: what Submit was given, dependencies by ID
//	"t" seq(8, BE) "s"  state: status, attempts, runs, due times, error, result
//
// seq numbers tasks in submission order, so that Load reads them in the
// order they were submitted. Which transitions are written: every one that
// emits an event (start, success, recurrence, retry, failure, cancel,
// skip), every wait put into the delayed set, and a Cancel of a running
// task. What is not written is recomputed on restore: whether a task's
// dependencies are met, and whether a task whose time has come is ready.

// formatVersion is the record format this version writes and reads. A
// store with a higher version is refused with ErrStoreVersion. Version 2
// added the timeout error kind (errTimeout) and the nil-result flag; a
// version 1 store is read as it is and says version 2 from its next
// commit on (an older Baton then refuses it, rather than misread it).
const formatVersion = 2

var metaKey = []byte("m")

const (
	kindDef   = 'd'
	kindState = 's'
)

func appendTaskKey(b []byte, seq uint64, kind byte) []byte {
	b = append(b, 't')
	b = binary.BigEndian.AppendUint64(b, seq)
	return append(b, kind)
}

// durable is what the state keeps to write its records: what changed
// since the last commit, and the records' sequence numbers. It never
// touches the store: the loop commits what takeCommit returns. Owned by
// the coordinator goroutine, like the state (New uses it before the loop
// starts).
type durable struct {
	funcs     map[string]func(context.Context, []byte) error
	seq       []uint64       // by record: the sequence its keys carry (0: none)
	next      uint64         // the next sequence to give
	mark      []uint32       // by record: the epoch it was last made dirty in
	epoch     uint32         // this iteration's
	dirty     []int32        // records whose state to write this iteration
	defs      []KV           // definitions of the tasks submitted this iteration
	deletes   []uint64       // sequences of the tasks forgotten this iteration
	cancels   map[int32]bool // Cancel reached these while they ran (fCancelReq from Cancel, not Shutdown)
	meta      bool           // the version record is to be written, with the next commit
	restoring bool           // restore is submitting the stored tasks: submit must make nothing ready
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
	for i := range b.tasks {
		task := &b.tasks[i]
		t, _ := s.find(task.ID)
		if int(t) >= len(d.seq) {
			d.seq = slices.Grow(d.seq, int(t)+1-len(d.seq))
			d.seq = d.seq[:cap(d.seq)]
		}
		d.seq[t] = d.next
		d.next++
		start := len(d.buf)
		d.buf = appendTaskKey(d.buf, d.seq[t], kindDef)
		k := len(d.buf)
		d.buf = s.appendDef(d.buf, t, task)
		d.defs = append(d.defs, KV{Key: d.buf[start:k:k], Value: d.buf[k:len(d.buf):len(d.buf)]})
		d.touch(t)
	}
}

// answer queues a WaitTasks call's result, delivered at the end of the
// iteration: on a durable scheduler, once the ends it reports are
// committed (or with the commit's error if it failed).
func (s *state) answer(reply chan<- error, err error) { s.later(answer{err: reply, val: err}) }

// takeCommit returns what this iteration changed as one commit (nil:
// nothing to write), for the loop to commit (outbox); committed learns
// how that went. After a failed commit nothing more is written.
func (s *state) takeCommit(now time.Time) *Changes {
	d := s.dur
	if d.failed != nil || (len(d.dirty) == 0 && len(d.deletes) == 0 && len(d.defs) == 0) {
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
		d.buf = appendTaskKey(d.buf, d.seq[t], kindState)
		k := len(d.buf)
		d.buf = st.append(d.buf)
		c.Puts = append(c.Puts, KV{Key: d.buf[start:k:k], Value: d.buf[k:len(d.buf):len(d.buf)]})
	}
	for _, seq := range d.deletes {
		start := len(d.buf)
		d.buf = appendTaskKey(d.buf, seq, kindDef)
		d.buf = appendTaskKey(d.buf, seq, kindState)
		c.Deletes = append(c.Deletes, d.buf[start:start+10:start+10], d.buf[start+10:start+20:start+20])
	}
	if len(c.Puts) == 0 && len(c.Deletes) == 0 {
		return nil
	}
	if d.meta { // the version record goes with a commit, never alone
		c.Puts = append(c.Puts, KV{Key: metaKey, Value: binary.AppendUvarint(nil, formatVersion)})
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
	d.defs, d.dirty, d.deletes = d.defs[:0], d.dirty[:0], d.deletes[:0]
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

// storedState is a task's state record.
type storedState struct {
	status    Status // Pending, Ready, Running (an attempt started), or final
	cancelReq bool   // Cancel reached it while it ran
	hasResult bool
	nilResult bool // the result is nil itself (SetResult(ctx, nil)), not a []byte
	attempts  int32
	runs      int32
	due       time.Time // Pending in the delayed set: when it is due
	planned   time.Time // recurring: the planned start of the current run
	at        time.Time // when the state was written
	errKind   uint8
	errMsg    string        // errOther: the error's text; errTimeout: the function's error's, if any
	timeout   time.Duration // errTimeout: the attempt's timeout
	cause     string        // Skipped: the task to blame
	result    []byte
}

// Error kinds of a state record: the sentinels keep their identity.
const (
	errNone uint8 = iota
	errCancelled
	errClosed
	errInterrupted
	errOther
	errTimeout // a *worker.TimeoutError: errors.Is ErrTimeout and context.DeadlineExceeded after a restart too
)

// stateOf describes t for its state record; false: nothing to write (a
// task Shutdown cancelled before it started keeps its last record, so that
// a restart resumes it).
func (s *state) stateOf(t int32, now time.Time) (storedState, bool) {
	r := &s.tasks[t]
	h := &s.hot[t]
	st := storedState{status: h.status, attempts: r.attempts, runs: r.runs, at: now}
	x := r.x
	var timeout *worker.TimeoutError
	switch h.status {
	case dispatched:
		if h.flags&fStarted != 0 {
			st.status = Running
		} else {
			st.status, st.attempts = Ready, r.attempts-1 // handed out, not started: not an attempt yet
		}
	case Pending:
		if x != nil && x.inWheel {
			st.due = x.due
		}
	case Cancelled:
		if x != nil && x.err == ErrClosed && s.closing {
			// Shutdown's doing: a durable scheduler resumes the task after
			// a restart. One the user cancelled stays cancelled; one whose
			// attempt Shutdown stopped runs again, the attempt not counted;
			// one that was not running keeps its last record.
			switch {
			case s.dur.cancels[t]:
				st.errKind = errCancelled
				return st, true
			case h.flags&fCancelReq != 0:
				st.status, st.attempts = Ready, r.attempts-1
				if x.recurring() {
					st.planned = x.planned
				}
				return st, true
			}
			return st, false
		}
	}
	if !st.status.Final() && s.dur.cancels[t] {
		st.cancelReq = true
	}
	if x != nil {
		if x.recurring() {
			st.planned = x.planned
		}
		switch {
		case x.err == nil || st.status == Succeeded || st.status == Skipped:
		case errors.Is(x.err, ErrCancelled):
			st.errKind = errCancelled
		case errors.Is(x.err, ErrClosed):
			st.errKind = errClosed
		case errors.Is(x.err, ErrInterrupted):
			st.errKind = errInterrupted
		case errors.As(x.err, &timeout):
			st.errKind, st.timeout = errTimeout, timeout.After
			if timeout.Err != nil {
				st.errMsg = timeout.Err.Error()
			}
		default:
			st.errKind, st.errMsg = errOther, x.err.Error()
		}
		if x.hasResult {
			if b, ok := x.result.([]byte); ok || x.result == nil {
				st.hasResult, st.result, st.nilResult = true, b, x.result == nil
			}
		}
	}
	if h.status == Skipped && r.link != noTask {
		st.cause = s.key(r.link)
	}
	return st, true
}

// appendDef encodes task t's definition: the submitted Task, with its
// dependencies as resolved (Graph handles included) and its Delay as the
// absolute time it may start.
func (s *state) appendDef(b []byte, t int32, task *Task) []byte {
	r := &s.tasks[t]
	b = appendString(b, task.ID)
	b = appendString(b, task.Func)
	b = appendString(b, task.Pool)
	p, _ := task.Payload.([]byte)
	b = appendBytes(b, p, task.Payload != nil)
	deps := s.edges(r, r.deps)
	b = binary.AppendUvarint(b, uint64(len(deps)))
	for _, dep := range deps {
		b = appendString(b, s.key(dep))
	}
	b = binary.AppendVarint(b, int64(task.Priority))
	b = binary.AppendVarint(b, int64(task.Retry.MaxAttempts))
	b = binary.AppendVarint(b, int64(task.Retry.BaseDelay))
	b = binary.AppendVarint(b, int64(task.Retry.MaxDelay))
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(task.Retry.Jitter))
	b = binary.AppendVarint(b, int64(task.Timeout))
	b = binary.AppendVarint(b, int64(task.Every))
	b = appendString(b, task.Cron)
	b = binary.AppendVarint(b, int64(task.Times))
	b = binary.AppendVarint(b, int64(task.Missed))
	b = binary.AppendVarint(b, int64(task.When))
	var notBefore time.Time
	if r.x != nil {
		notBefore = r.x.notBefore
	}
	return appendTime(b, notBefore)
}

// storedDef is a decoded definition.
type storedDef struct {
	task      Task
	notBefore time.Time
}

func decodeDef(v []byte) (storedDef, error) {
	rd := reader{b: v}
	var d storedDef
	t := &d.task
	t.ID = rd.string()
	t.Func = rd.string()
	t.Pool = rd.string()
	if p, ok := rd.bytes(); ok {
		t.Payload = p
	}
	n := rd.uvarint()
	if n > uint64(len(v)) {
		return d, fmt.Errorf("%w: a definition with %d dependencies", ErrStoreCorrupt, n)
	}
	if n > 0 {
		t.Deps = make([]string, n)
		for i := range t.Deps {
			t.Deps[i] = rd.string()
		}
	}
	t.Priority = int(rd.varint())
	t.Retry.MaxAttempts = int(rd.varint())
	t.Retry.BaseDelay = time.Duration(rd.varint())
	t.Retry.MaxDelay = time.Duration(rd.varint())
	t.Retry.Jitter = math.Float64frombits(rd.uint64())
	t.Timeout = time.Duration(rd.varint())
	t.Every = time.Duration(rd.varint())
	t.Cron = rd.string()
	t.Times = int(rd.varint())
	t.Missed = Missed(rd.varint())
	t.When = Trigger(rd.varint())
	d.notBefore = rd.time()
	return d, rd.done()
}

func (st *storedState) append(b []byte) []byte {
	var flags uint8
	if st.cancelReq {
		flags |= 1
	}
	if st.hasResult {
		flags |= 2
	}
	if st.nilResult {
		flags |= 4
	}
	b = append(b, byte(st.status), flags)
	b = binary.AppendVarint(b, int64(st.attempts))
	b = binary.AppendVarint(b, int64(st.runs))
	b = appendTime(b, st.due)
	b = appendTime(b, st.planned)
	b = appendTime(b, st.at)
	b = append(b, st.errKind)
	if st.errKind == errOther || st.errKind == errTimeout {
		b = appendString(b, st.errMsg)
	}
	if st.errKind == errTimeout {
		b = binary.AppendVarint(b, int64(st.timeout))
	}
	b = appendString(b, st.cause)
	if st.hasResult {
		b = appendBytes(b, st.result, st.result != nil)
	}
	return b
}

func decodeState(v []byte) (storedState, error) {
	rd := reader{b: v}
	var st storedState
	st.status = Status(rd.byte())
	flags := rd.byte()
	st.cancelReq, st.hasResult, st.nilResult = flags&1 != 0, flags&2 != 0, flags&4 != 0
	st.attempts = int32(rd.varint())
	st.runs = int32(rd.varint())
	st.due = rd.time()
	st.planned = rd.time()
	st.at = rd.time()
	st.errKind = rd.byte()
	if st.errKind == errOther || st.errKind == errTimeout {
		st.errMsg = rd.string()
	}
	if st.errKind == errTimeout {
		st.timeout = time.Duration(rd.varint())
	}
	st.cause = rd.string()
	if st.hasResult {
		st.result, _ = rd.bytes()
	}
	if err := rd.done(); err != nil {
		return st, err
	}
	if st.status > Skipped || st.errKind > errTimeout || st.attempts < 0 || st.runs < 0 {
		return st, fmt.Errorf("%w: a state record with status %d, error kind %d", ErrStoreCorrupt, st.status, st.errKind)
	}
	return st, nil
}

func (st *storedState) err() error {
	switch st.errKind {
	case errCancelled:
		return ErrCancelled
	case errClosed:
		return ErrClosed
	case errInterrupted:
		return ErrInterrupted
	case errOther:
		return errors.New(st.errMsg)
	case errTimeout:
		te := &worker.TimeoutError{After: st.timeout}
		if st.errMsg != "" {
			te.Err = errors.New(st.errMsg)
		}
		return te
	}
	return nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendBytes writes p, telling nil (present false) from empty.
func appendBytes(b, p []byte, present bool) []byte {
	if !present {
		return append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(p))+1)
	return append(b, p...)
}

// appendTime writes t to the nanosecond, and the zero time apart.
func appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, 0)
	}
	b = append(b, 1)
	return binary.AppendVarint(b, t.UnixNano())
}

// reader decodes a record; the first error sticks and every later read
// returns zero values.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = fmt.Errorf("%w: a record ends early or holds a bad number", ErrStoreCorrupt)
	}
	r.b = nil
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) byte() uint8 {
	if len(r.b) < 1 {
		r.fail()
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) uint64() uint64 {
	if len(r.b) < 8 {
		r.fail()
		return 0
	}
	v := binary.BigEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *reader) raw(n uint64) []byte {
	if n > uint64(len(r.b)) {
		r.fail()
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) string() string { return string(r.raw(r.uvarint())) }

func (r *reader) bytes() ([]byte, bool) {
	n := r.uvarint()
	if n == 0 {
		return nil, false
	}
	return bytes.Clone(r.raw(n - 1)), true
}

func (r *reader) time() time.Time {
	switch r.byte() {
	case 0:
		return time.Time{}
	case 1:
		return time.Unix(0, r.varint())
	}
	r.fail()
	return time.Time{}
}

func (r *reader) done() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: %d bytes after the end of a record", ErrStoreCorrupt, len(r.b))
	}
	return r.err
}

// storedTask is one task as Load found it.
type storedTask struct {
	seq   uint64
	def   storedDef
	state storedState
}

// loader decodes a store's records as its Load hands them over (add is
// Load's fn): the version and every task, in submission order. Pure
// decoding: New calls the store.
type loader struct {
	tasks   []storedTask
	version uint64
	seen    bool // the version record was there
}

func (ld *loader) add(key, value []byte) error {
	switch {
	case bytes.Equal(key, metaKey):
		rd := reader{b: value}
		ld.version, ld.seen = rd.uvarint(), true
		if err := rd.done(); err != nil {
			return err
		}
		if ld.version > formatVersion {
			return fmt.Errorf("%w: version %d, this one reads up to %d", ErrStoreVersion, ld.version, formatVersion)
		}
		return nil
	case len(key) == 10 && key[0] == 't':
		seq := binary.BigEndian.Uint64(key[1:9])
		switch key[9] {
		case kindDef:
			def, err := decodeDef(value)
			if err != nil {
				return fmt.Errorf("task record %d: %w", seq, err)
			}
			ld.tasks = append(ld.tasks, storedTask{seq: seq, def: def})
			return nil
		case kindState:
			if len(ld.tasks) == 0 || ld.tasks[len(ld.tasks)-1].seq != seq {
				return fmt.Errorf("%w: task record %d has a state and no definition", ErrStoreCorrupt, seq)
			}
			st, err := decodeState(value)
			if err != nil {
				return fmt.Errorf("task record %d: %w", seq, err)
			}
			ld.tasks[len(ld.tasks)-1].state = st
			return nil
		}
	}
	return fmt.Errorf("%w: unknown key %q", ErrStoreCorrupt, key)
}

// openDurable restores into s, which is new (nothing was submitted yet
// and no goroutine runs), the tasks a store's Load handed to ld, and
// returns what the restore decided (interrupted attempts, skips) as a
// first commit, nil if nothing: New commits it and tells committed.
func (s *state) openDurable(cfg *durableConfig, ld *loader, now time.Time) (*Changes, error) {
	d := &durable{funcs: cfg.funcs, next: 1, epoch: 1}
	s.dur = d
	if !ld.seen {
		if len(ld.tasks) > 0 {
			return nil, fmt.Errorf("%w: task records without a version record", ErrStoreCorrupt)
		}
		d.meta = true // a new store: say which format it holds
	} else if ld.version < formatVersion {
		d.meta = true // an older format: say this one from the next commit on
	}
	if err := s.restore(ld.tasks, now); err != nil {
		return nil, err
	}
	d.keepUnchanged(s, ld.tasks, now)
	return s.takeCommit(now), nil
}

// keepUnchanged drops from this iteration's writes the restored tasks
// whose state record would read as it was stored: a task put back in the
// delayed set at its stored time, or queued again as it was, has nothing
// new to say. Only what the restore decided is written (interrupted
// attempts, skips, missed starts), so that opening a store rewrites
// nothing that did not change: the file does not grow by a copy of every
// waiting task per restart, and a store on a full disk whose restore
// decides nothing opens without a write.
func (d *durable) keepUnchanged(s *state, stored []storedTask, now time.Time) {
	kept := d.dirty[:0]
	for _, t := range d.dirty {
		if int(t) < len(stored) {
			if st, ok := s.stateOf(t, now); !ok || st.sameAs(&stored[t].state) {
				d.mark[t] = 0 // not dirty (epochs start at 1)
				continue
			}
		}
		kept = append(kept, t)
	}
	d.dirty = kept
}

// sameAs reports whether st says what was stored in old, the time each
// was written aside.
func (st *storedState) sameAs(old *storedState) bool {
	return st.status == old.status && st.cancelReq == old.cancelReq && st.hasResult == old.hasResult &&
		st.nilResult == old.nilResult && st.attempts == old.attempts && st.runs == old.runs &&
		st.due.Equal(old.due) && st.planned.Equal(old.planned) && st.errKind == old.errKind &&
		st.errMsg == old.errMsg && st.timeout == old.timeout && st.cause == old.cause &&
		bytes.Equal(st.result, old.result) && (st.result == nil) == (old.result == nil)
}

// restore rebuilds the stored tasks: one batch through submit (which
// wires the graph and stops before making anything ready), then each
// task's stored state laid over it, then what is due: interrupted attempts
// retried or failed, ready tasks queued, waits put back at their times.
func (s *state) restore(stored []storedTask, now time.Time) error {
	if len(stored) == 0 {
		return nil
	}
	d := s.dur
	b := &submission{tasks: make([]Task, len(stored))}
	for i := range stored {
		st := &stored[i]
		t := st.def.task
		if _, ok := s.byName[t.Pool]; !ok {
			return fmt.Errorf("%w: the store holds task %s of pool %s, which New was not given (WithPool)", ErrInvalidOption, quoteID(t.ID), quoteID(t.Pool))
		}
		if t.Func != "" {
			f, ok := d.funcs[t.Func]
			if !ok {
				return fmt.Errorf("%w: the store holds task %s of function %s, which New was not given (WithFunc)", ErrInvalidOption, quoteID(t.ID), quoteID(t.Func))
			}
			payload, _ := t.Payload.([]byte)
			t.Run = func(ctx context.Context) error { return f(ctx, payload) }
		}
		if t.Cron != "" {
			sched, err := parseCron(t.Cron)
			if err != nil {
				return fmt.Errorf("%w: task %s: %v", ErrStoreCorrupt, quoteID(t.ID), err)
			}
			if b.scheds == nil {
				b.scheds = make([]Schedule, len(stored))
			}
			b.scheds[i] = sched
		}
		b.tasks[i] = t
		d.next = max(d.next, st.seq+1)
	}
	d.restoring = true
	err := s.submit(b, now)
	d.restoring = false
	if err != nil {
		return fmt.Errorf("%w: its tasks do not form a graph: %w", ErrStoreCorrupt, err)
	}
	// submit numbered the records 0..n-1 in batch order.
	d.seq = make([]uint64, len(stored))
	var finals []retention
	for i := range stored {
		t := int32(i)
		st := &stored[i].state
		d.seq[t] = stored[i].seq
		r := &s.tasks[t]
		h := &s.hot[t]
		r.attempts, r.runs = st.attempts, st.runs
		if !stored[i].def.notBefore.IsZero() {
			s.extra(t).notBefore = stored[i].def.notBefore
		}
		if e := st.err(); e != nil {
			s.extra(t).err = e
		}
		if st.hasResult {
			x := s.extra(t)
			x.result, x.hasResult = any(st.result), true
			if st.nilResult {
				x.result = nil // SetResult(ctx, nil): nil, not a []byte(nil)
			}
		}
		if r.x != nil && r.x.recurring() {
			r.x.planned = st.planned
		}
		if st.cancelReq {
			if d.cancels == nil {
				d.cancels = map[int32]bool{}
			}
			d.cancels[t] = true
		}
		if st.status.Final() {
			h.status = st.status
			h.unmet = 0
			s.open--
			if s.retain {
				finals = append(finals, retention{at: st.at, t: t})
			}
		}
	}
	for i := range stored {
		t := int32(i)
		st := &stored[i].state
		if st.status != Skipped || st.cause == "" {
			continue
		}
		if c, ok := s.find(st.cause); ok {
			s.tasks[t].link = c
			if s.retain {
				s.held[c].refs++
			}
		}
	}
	s.restoreCounts(finals)
	// What is due, in submission order. A cascade may reach a task before
	// its turn: then it is no longer Pending, or waits in the delayed set.
	for i := range stored {
		t := int32(i)
		st := &stored[i].state
		h := &s.hot[t]
		if h.status != Pending || (s.tasks[t].x != nil && s.tasks[t].x.inWheel) {
			continue
		}
		verdict, cause := s.ruleVerdict(t)
		if verdict == ruleRuns {
			h.unmet = 0 // under AnyFailed, started before every dependency ended: nothing more to count
		}
		switch {
		case st.cancelReq:
			h.flags |= fCancelReq
			s.cancelled(t, now)
		case st.status == Running:
			// The attempt was running when the process died: it counts,
			// and is retried if the policy allows.
			s.failed(t, ErrInterrupted, true, now)
		case verdict == ruleSkips:
			// Its rule cannot be met any more: a dependency's end was
			// written and its own was not, which one commit per
			// iteration rules out (kept for safety).
			s.skip(t, cause, now)
			s.cascade(now)
		case verdict == ruleWaits:
		case st.status == Ready:
			s.pushReady(t, now)
		case !st.due.IsZero():
			s.schedule(t, st.due, now) // a start missed meanwhile: catchUp, when it is handed out
		default:
			s.eligible(t, now)
		}
	}
	return nil
}

// restoreCounts sets, after a restore, what the cascade counts
// (cascade.go): for a Skipped task, its dependencies whose ends are not
// settled; for a task not final, those it has not taken into account yet
// under its rule; and with retention, what holds each task. Settlement
// spreads from the tasks whose dependencies are all settled, through a
// worklist. finals are the final tasks with the time each ended.
func (s *state) restoreCounts(finals []retention) {
	var work []int32
	for t := range s.tasks {
		t := int32(t)
		if s.hot[t].status != Skipped {
			continue
		}
		r := &s.tasks[t]
		n := int32(0)
		for _, dep := range s.edges(r, r.deps) {
			if ds := s.hot[dep].status; !ds.Final() || ds == Skipped {
				n++ // settled when it ends, or once its own count is 0
			}
		}
		if s.hot[t].unmet = n; n == 0 {
			work = append(work, t)
		}
	}
	for len(work) > 0 {
		t := work[len(work)-1]
		work = work[:len(work)-1]
		s.eachSucc(&s.tasks[t], func(c int32) {
			if hc := &s.hot[c]; hc.status == Skipped && hc.unmet > 0 {
				if hc.unmet--; hc.unmet == 0 {
					work = append(work, c)
				}
			}
		})
	}
	for t := range s.tasks {
		t := int32(t)
		h := &s.hot[t]
		r := &s.tasks[t]
		if !h.status.Final() {
			h.unmet = 0
			for _, dep := range s.edges(r, r.deps) {
				var counted bool
				switch h.rule() {
				case AllSucceeded:
					counted = s.hot[dep].status == Succeeded
				case AllDone:
					counted = s.hot[dep].status.Final()
				default:
					counted = s.decided(dep)
				}
				if !counted {
					h.unmet++
				}
			}
		}
		if s.retain {
			// Whatever its own state: a task final already (cancelled, or
			// started early by AnyFailed) still hears from a dependency
			// that has not ended, and must not be forgotten before.
			s.held[t].preds = 0
			for _, dep := range s.edges(r, r.deps) {
				if !s.settledEnd(dep) {
					s.held[t].preds++
				}
			}
		}
	}
	if s.retain {
		slices.SortStableFunc(finals, func(a, b retention) int { return a.at.Compare(b.at) })
		s.expiry = append(s.expiry, finals...)
	}
}

// decided reports whether a task under AnyFailed or NoneFailed takes its
// dependency dep into account: dep is final, and if Skipped its class is
// final (failed, or settled).
func (s *state) decided(dep int32) bool {
	ds := s.hot[dep].status
	return ds.Final() && (ds != Skipped || s.hot[dep].unmet == 0 || s.classOfEnd(dep) == endFailed)
}

type verdict uint8

const (
	ruleWaits verdict = iota // a dependency it waits for has not ended
	ruleRuns                 // its rule is met
	ruleSkips                // its rule can no longer be met
)

// ruleVerdict judges a restored task that is not final by its
// dependencies' ends alone, and for a skip names the root cause.
func (s *state) ruleVerdict(t int32) (verdict, int32) {
	h := &s.hot[t]
	r := &s.tasks[t]
	worst, cause := endBenign+1, int32(noTask)
	waiting := false
	for _, dep := range s.edges(r, r.deps) {
		ds := s.hot[dep].status
		switch {
		case ds == Succeeded:
		case !ds.Final():
			waiting = true
		case h.rule() == AllDone:
		case h.rule() != AllSucceeded && !s.decided(dep):
			waiting = true
		default:
			if c := s.classOfEnd(dep); c < worst {
				worst, cause = c, s.root(dep)
			}
		}
	}
	switch h.rule() {
	case AllSucceeded:
		if worst <= endBenign {
			return ruleSkips, cause
		}
	case AnyFailed:
		switch {
		case worst == endFailed:
			return ruleRuns, noTask
		case !waiting:
			return ruleSkips, noTask
		}
	case NoneFailed:
		if worst < endBenign {
			return ruleSkips, cause
		}
	}
	if waiting {
		return ruleWaits, noTask
	}
	return ruleRuns, noTask
}

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
