// Package record is the format of a durable Baton scheduler's records: the
// keys it writes to a coordinator.Store and the encoding of each task's
// definition and state. Nothing here is for users; the coordinator owns
// the format and its version.
//
// Keys:
//
//	"m"                 the format version (uvarint)
//	"p" name            a pool's state: whether it is paused (version 3 on)
//	"t" seq(8, BE) "d"  definition: what Submit was given, dependencies by ID
//	"t" seq(8, BE) "s"  state: status, attempts, runs, due times, error, result
//	"t" seq(8, BE) "h"  history: the attempts kept of the task (version 5; none
//	                    for a task whose only attempt succeeded plainly: its
//	                    state's Last says it)
//
// seq numbers tasks in submission order, so that a Load in key order reads
// them in the order they were submitted, each definition before its state.
package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Version is the record format this package writes and reads. Version 2
// added the timeout error kind (ErrKindTimeout) and the nil-result flag;
// version 3 the pool records and a definition's Key and Slots (a version
// 2 definition reads with neither); version 4 the family of a spawned
// task (Def.Parent) and a spawner's join and a branch's choice
// (State.Joining, JoinFrom, Adopt, Branched, Chosen), each read only if
// present, so that an older record reads as before, and the error kind of
// a failed join (ErrKindJoin); version 5 the attempt history (KindHistory
// records, State.Last), re-runs (State.Reruns) and the class a skip keeps
// (State.CauseClass), these two after a second flags byte; version 6 a
// time beyond what an int64 of nanoseconds holds (after 2262), as seconds
// and nanoseconds, and the error kinds of a sentinel wrapped in a text of
// its own (ErrKindCancelledText and its kin).
const Version = 6

// ErrCorrupt is the error of a record that cannot be decoded (the
// coordinator wraps it in its ErrStoreCorrupt).
var ErrCorrupt = errors.New("record: corrupt")

// MetaKey is the version record's key.
var MetaKey = []byte("m")

// Kinds of task records, the last byte of their keys.
const (
	KindDef     = 'd'
	KindState   = 's'
	KindHistory = 'h' // version 5
)

// TaskKeyLen is the length of a task record's key.
const TaskKeyLen = 10

// AppendTaskKey appends the key of task seq's record of the given kind.
func AppendTaskKey(b []byte, seq uint64, kind byte) []byte {
	b = append(b, 't')
	b = binary.BigEndian.AppendUint64(b, seq)
	return append(b, kind)
}

// ParseTaskKey reads a task record's key; ok is false for any other key.
func ParseTaskKey(key []byte) (seq uint64, kind byte, ok bool) {
	if len(key) != TaskKeyLen || key[0] != 't' {
		return 0, 0, false
	}
	return binary.BigEndian.Uint64(key[1:9]), key[9], true
}

// AppendVersion appends the version record's value.
func AppendVersion(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

// DecodeVersion reads the version record's value.
func DecodeVersion(v []byte) (uint64, error) {
	rd := reader{b: v}
	n := rd.uvarint()
	return n, rd.done()
}

// Def is a task's definition: what Submit was given, with its
// dependencies by ID and its Delay as the absolute time it may start.
type Def struct {
	ID, Func, Pool string
	Payload        []byte
	HasPayload     bool // a Payload was given (nil and empty are told apart)
	Deps           []string
	Priority       int
	MaxAttempts    int
	BaseDelay      time.Duration
	MaxDelay       time.Duration
	Jitter         float64
	Timeout        time.Duration
	Every          time.Duration
	Cron           string
	Times          int
	Missed         int
	When           int
	NotBefore      time.Time
	Key            string // Task.Key (version 3)
	Slots          int    // Task.Slots (version 3)
	Parent         string // the task whose attempt spawned it ("": submitted); version 4
}

// Append appends d's encoding.
func (d *Def) Append(b []byte) []byte {
	b = appendString(b, d.ID)
	b = appendString(b, d.Func)
	b = appendString(b, d.Pool)
	b = appendBytes(b, d.Payload, d.HasPayload)
	b = binary.AppendUvarint(b, uint64(len(d.Deps)))
	for _, dep := range d.Deps {
		b = appendString(b, dep)
	}
	b = binary.AppendVarint(b, int64(d.Priority))
	b = binary.AppendVarint(b, int64(d.MaxAttempts))
	b = binary.AppendVarint(b, int64(d.BaseDelay))
	b = binary.AppendVarint(b, int64(d.MaxDelay))
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(d.Jitter))
	b = binary.AppendVarint(b, int64(d.Timeout))
	b = binary.AppendVarint(b, int64(d.Every))
	b = appendString(b, d.Cron)
	b = binary.AppendVarint(b, int64(d.Times))
	b = binary.AppendVarint(b, int64(d.Missed))
	b = binary.AppendVarint(b, int64(d.When))
	b = appendTime(b, d.NotBefore)
	b = appendString(b, d.Key)
	b = binary.AppendVarint(b, int64(d.Slots))
	if d.Parent != "" {
		b = appendString(b, d.Parent)
	}
	return b
}

// DecodeDef reads a definition; an error wraps ErrCorrupt.
func DecodeDef(v []byte) (Def, error) {
	rd := reader{b: v}
	var d Def
	d.ID = rd.string()
	d.Func = rd.string()
	d.Pool = rd.string()
	d.Payload, d.HasPayload = rd.bytes()
	n := rd.uvarint()
	if n > uint64(len(v)) {
		return d, fmt.Errorf("%w: a definition with %d dependencies", ErrCorrupt, n)
	}
	if n > 0 {
		d.Deps = make([]string, n)
		for i := range d.Deps {
			d.Deps[i] = rd.string()
		}
	}
	d.Priority = int(rd.varint())
	d.MaxAttempts = int(rd.varint())
	d.BaseDelay = time.Duration(rd.varint())
	d.MaxDelay = time.Duration(rd.varint())
	d.Jitter = math.Float64frombits(rd.uint64())
	d.Timeout = time.Duration(rd.varint())
	d.Every = time.Duration(rd.varint())
	d.Cron = rd.string()
	d.Times = int(rd.varint())
	d.Missed = int(rd.varint())
	d.When = int(rd.varint())
	d.NotBefore = rd.time()
	if len(rd.b) > 0 { // version 3 on
		d.Key = rd.string()
		d.Slots = int(rd.varint())
	}
	if len(rd.b) > 0 { // version 4 on
		d.Parent = rd.string()
	}
	return d, rd.done()
}

// PoolKeyPrefix starts every pool record's key; the pool's name follows.
const PoolKeyPrefix = 'p'

// AppendPoolKey appends the key of pool name's record.
func AppendPoolKey(b []byte, name string) []byte {
	return append(append(b, PoolKeyPrefix), name...)
}

// ParsePoolKey reads a pool record's key; ok is false for any other key.
func ParsePoolKey(key []byte) (name string, ok bool) {
	if len(key) == 0 || key[0] != PoolKeyPrefix {
		return "", false
	}
	return string(key[1:]), true
}

// Pool is a pool's record.
type Pool struct {
	Paused bool
}

// Append appends p's encoding.
func (p *Pool) Append(b []byte) []byte {
	var flags uint8
	if p.Paused {
		flags |= 1
	}
	return append(b, flags)
}

// DecodePool reads a pool record; an error wraps ErrCorrupt.
func DecodePool(v []byte) (Pool, error) {
	rd := reader{b: v}
	flags := rd.byte()
	if flags&^1 != 0 {
		return Pool{}, fmt.Errorf("%w: pool flags %#x", ErrCorrupt, flags)
	}
	return Pool{Paused: flags&1 != 0}, rd.done()
}

// State is a task's state record.
type State struct {
	Status    uint8 // the coordinator's Status: Pending, Ready, Running (an attempt started), or final
	CancelReq bool  // Cancel reached it while it ran
	HasResult bool
	NilResult bool // the result is nil itself, not a []byte
	Attempts  int32
	Runs      int32
	Due       time.Time     // Pending in the delayed set: when it is due
	Planned   time.Time     // recurring: the planned start of the current run
	At        time.Time     // when the state was written
	ErrKind   uint8         // ErrKind...
	ErrMsg    string        // ErrKindOther, ErrKindJoin and the Text kinds: the error's text; ErrKindTimeout: the function's error's, if any
	Timeout   time.Duration // ErrKindTimeout: the attempt's timeout
	Cause     string        // Skipped: the task to blame
	Result    []byte
	Joining   bool     // its attempt succeeded having spawned tasks not all final (Status is Pending); version 4
	JoinFrom  int32    // a spawner: where the children of its current join start among its children; version 4
	Adopt     string   // a spawner: the child whose result becomes its own at a good join; version 4
	Branched  bool     // its successful attempt chose its dependents (Chosen); version 4
	Chosen    []string // the dependents a branch chose; version 4
	Last      *Attempt // its latest attempt that ended, for the history (version 5); nil: none
	Reruns    int32    // times Rerun re-opened it (version 5)
	// CauseClass is, for a Skipped task whose cause was re-run since it
	// blamed it, the class its skip keeps: 1 + the coordinator's
	// endClass; 0: its cause's status says it (version 5).
	CauseClass uint8
}

// Attempt is one attempt of a task, in a history record or a state's Last.
type Attempt struct {
	Attempt, Run, Rerun    int32
	Outcome                uint8  // the coordinator's Outcome
	Handed, Started, Ended int64  // UnixNano; 0: unknown
	Worker                 string // "" if none was named
	ErrKind                uint8  // as a state's
	ErrMsg                 string // ErrKindOther, ErrKindJoin, the Text kinds, ErrKindTimeout (the function's error's, if any)
	Timeout                time.Duration
	Lines                  []Line // its log lines kept, oldest first
	LinesDropped           int32  // its log lines not kept
}

// Line is one line of an attempt's log.
type Line struct {
	Time       int64 // UnixNano
	Level      int32 // slog.Level
	Msg, Attrs string
}

func (a *Attempt) append(b []byte) []byte {
	b = binary.AppendVarint(b, int64(a.Attempt))
	b = binary.AppendVarint(b, int64(a.Run))
	b = binary.AppendVarint(b, int64(a.Rerun))
	b = append(b, a.Outcome)
	b = binary.AppendVarint(b, a.Handed)
	b = binary.AppendVarint(b, a.Started)
	b = binary.AppendVarint(b, a.Ended)
	b = appendString(b, a.Worker)
	b = append(b, a.ErrKind)
	if hasMsg(a.ErrKind) {
		b = appendString(b, a.ErrMsg)
	}
	if a.ErrKind == ErrKindTimeout {
		b = binary.AppendVarint(b, int64(a.Timeout))
	}
	b = binary.AppendUvarint(b, uint64(a.LinesDropped))
	b = binary.AppendUvarint(b, uint64(len(a.Lines)))
	for _, l := range a.Lines {
		b = binary.AppendVarint(b, l.Time)
		b = binary.AppendVarint(b, int64(l.Level))
		b = appendString(b, l.Msg)
		b = appendString(b, l.Attrs)
	}
	return b
}

func (r *reader) attempt() Attempt {
	var a Attempt
	a.Attempt = int32(r.varint())
	a.Run = int32(r.varint())
	a.Rerun = int32(r.varint())
	a.Outcome = r.byte()
	a.Handed = r.varint()
	a.Started = r.varint()
	a.Ended = r.varint()
	a.Worker = r.string()
	a.ErrKind = r.byte()
	if hasMsg(a.ErrKind) {
		a.ErrMsg = r.string()
	}
	if a.ErrKind == ErrKindTimeout {
		a.Timeout = time.Duration(r.varint())
	}
	a.LinesDropped = int32(r.uvarint())
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail()
		return a
	}
	for range n {
		a.Lines = append(a.Lines, Line{Time: r.varint(), Level: int32(r.varint()), Msg: r.string(), Attrs: r.string()})
	}
	if a.ErrKind >= errKinds || a.Attempt < 0 || a.Run < 0 || a.Rerun < 0 || a.LinesDropped < 0 {
		r.fail()
	}
	return a
}

func hasMsg(kind uint8) bool {
	return kind == ErrKindOther || kind == ErrKindTimeout || kind >= ErrKindJoin
}

// History is a task's history record: the attempts kept, oldest first,
// and how many older ones were dropped.
type History struct {
	Dropped  int32
	Attempts []Attempt
}

// Append appends h's encoding.
func (h *History) Append(b []byte) []byte {
	b = binary.AppendUvarint(b, uint64(h.Dropped))
	b = binary.AppendUvarint(b, uint64(len(h.Attempts)))
	for i := range h.Attempts {
		b = h.Attempts[i].append(b)
	}
	return b
}

// DecodeHistory reads a history record; an error wraps ErrCorrupt.
func DecodeHistory(v []byte) (History, error) {
	rd := reader{b: v}
	var h History
	h.Dropped = int32(rd.uvarint())
	n := rd.uvarint()
	if n > uint64(len(v)) {
		return h, fmt.Errorf("%w: a history of %d attempts", ErrCorrupt, n)
	}
	h.Attempts = make([]Attempt, n)
	for i := range h.Attempts {
		h.Attempts[i] = rd.attempt()
	}
	if err := rd.done(); err != nil {
		return h, err
	}
	if h.Dropped < 0 {
		return h, fmt.Errorf("%w: a history that dropped %d attempts", ErrCorrupt, h.Dropped)
	}
	return h, nil
}

// Error kinds of a state record: the coordinator's sentinels keep their
// identity across a restart.
const (
	ErrKindNone uint8 = iota
	ErrKindCancelled
	ErrKindClosed
	ErrKindInterrupted
	ErrKindOther
	ErrKindTimeout
	ErrKindJoin // a spawner's join failed (its error wraps the coordinator's ErrChildFailed); version 4
	// A function's error that wraps ErrCancelled, ErrClosed or
	// ErrInterrupted in a text of its own (ErrMsg); version 6.
	ErrKindCancelledText
	ErrKindClosedText
	ErrKindInterruptedText
	errKinds // the number of kinds
)

// Append appends st's encoding.
func (st *State) Append(b []byte) []byte {
	var flags uint8
	if st.CancelReq {
		flags |= 1
	}
	if st.HasResult {
		flags |= 2
	}
	if st.NilResult {
		flags |= 4
	}
	if st.Joining {
		flags |= 8
	}
	if st.Branched {
		flags |= 16
	}
	family := st.JoinFrom != 0 || st.Adopt != ""
	if family {
		flags |= 32
	}
	if st.Last != nil {
		flags |= 64
	}
	var more uint8 // a second flags byte, after the first, if any of its bits is set
	if st.Reruns != 0 {
		more |= 1
	}
	if st.CauseClass != 0 {
		more |= 2
	}
	if more != 0 {
		flags |= 128
	}
	b = append(b, st.Status, flags)
	if more != 0 {
		b = append(b, more)
	}
	b = binary.AppendVarint(b, int64(st.Attempts))
	b = binary.AppendVarint(b, int64(st.Runs))
	b = appendTime(b, st.Due)
	b = appendTime(b, st.Planned)
	b = appendTime(b, st.At)
	b = append(b, st.ErrKind)
	if hasMsg(st.ErrKind) {
		b = appendString(b, st.ErrMsg)
	}
	if st.ErrKind == ErrKindTimeout {
		b = binary.AppendVarint(b, int64(st.Timeout))
	}
	b = appendString(b, st.Cause)
	if st.HasResult {
		b = appendBytes(b, st.Result, st.Result != nil)
	}
	if family {
		b = binary.AppendVarint(b, int64(st.JoinFrom))
		b = appendString(b, st.Adopt)
	}
	if st.Branched {
		b = binary.AppendUvarint(b, uint64(len(st.Chosen)))
		for _, c := range st.Chosen {
			b = appendString(b, c)
		}
	}
	if st.Last != nil {
		b = st.Last.append(b)
	}
	if st.Reruns != 0 {
		b = binary.AppendVarint(b, int64(st.Reruns))
	}
	if st.CauseClass != 0 {
		b = append(b, st.CauseClass)
	}
	return b
}

// DecodeState reads a state record; an error wraps ErrCorrupt. statuses
// is how many statuses there are: a higher one is corrupt.
func DecodeState(v []byte, statuses uint8) (State, error) {
	rd := reader{b: v}
	var st State
	st.Status = rd.byte()
	flags := rd.byte()
	st.CancelReq, st.HasResult, st.NilResult = flags&1 != 0, flags&2 != 0, flags&4 != 0
	st.Joining, st.Branched = flags&8 != 0, flags&16 != 0
	var more uint8
	if flags&128 != 0 {
		more = rd.byte()
	}
	st.Attempts = int32(rd.varint())
	st.Runs = int32(rd.varint())
	st.Due = rd.time()
	st.Planned = rd.time()
	st.At = rd.time()
	st.ErrKind = rd.byte()
	if hasMsg(st.ErrKind) {
		st.ErrMsg = rd.string()
	}
	if st.ErrKind == ErrKindTimeout {
		st.Timeout = time.Duration(rd.varint())
	}
	st.Cause = rd.string()
	if st.HasResult {
		st.Result, _ = rd.bytes()
	}
	if flags&32 != 0 {
		st.JoinFrom = int32(rd.varint())
		st.Adopt = rd.string()
	}
	if st.Branched {
		n := rd.uvarint()
		if n > uint64(len(v)) {
			return st, fmt.Errorf("%w: a branch that chose %d tasks", ErrCorrupt, n)
		}
		st.Chosen = make([]string, n)
		for i := range st.Chosen {
			st.Chosen[i] = rd.string()
		}
	}
	if flags&64 != 0 {
		a := rd.attempt()
		st.Last = &a
	}
	if more&1 != 0 {
		st.Reruns = int32(rd.varint())
	}
	if more&2 != 0 {
		st.CauseClass = rd.byte()
	}
	if err := rd.done(); err != nil {
		return st, err
	}
	if st.Status >= statuses || st.ErrKind >= errKinds || st.Attempts < 0 || st.Runs < 0 || st.JoinFrom < 0 || st.Reruns < 0 ||
		st.CauseClass > 3 || more&^3 != 0 {
		return st, fmt.Errorf("%w: a state record with status %d, error kind %d", ErrCorrupt, st.Status, st.ErrKind)
	}
	return st, nil
}

// SameAs reports whether st says what old says, the times each was
// written aside.
func (st *State) SameAs(old *State) bool {
	return st.Status == old.Status && st.CancelReq == old.CancelReq && st.HasResult == old.HasResult &&
		st.NilResult == old.NilResult && st.Attempts == old.Attempts && st.Runs == old.Runs &&
		st.Due.Equal(old.Due) && st.Planned.Equal(old.Planned) && st.ErrKind == old.ErrKind &&
		st.ErrMsg == old.ErrMsg && st.Timeout == old.Timeout && st.Cause == old.Cause &&
		bytes.Equal(st.Result, old.Result) && (st.Result == nil) == (old.Result == nil) &&
		st.Joining == old.Joining && st.JoinFrom == old.JoinFrom && st.Adopt == old.Adopt &&
		st.Branched == old.Branched && slices.Equal(st.Chosen, old.Chosen) &&
		(st.Last == nil) == (old.Last == nil) && (st.Last == nil || st.Last.same(old.Last)) && st.Reruns == old.Reruns &&
		st.CauseClass == old.CauseClass
}

func (a *Attempt) same(b *Attempt) bool {
	return a.Attempt == b.Attempt && a.Run == b.Run && a.Rerun == b.Rerun && a.Outcome == b.Outcome && a.Handed == b.Handed &&
		a.Started == b.Started && a.Ended == b.Ended && a.Worker == b.Worker && a.ErrKind == b.ErrKind &&
		a.ErrMsg == b.ErrMsg && a.Timeout == b.Timeout && a.LinesDropped == b.LinesDropped && slices.Equal(a.Lines, b.Lines)
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

// appendTime writes t to the nanosecond, and the zero time apart: as
// nanoseconds since 1970 if an int64 holds them (1678 to 2262), else
// (version 6) as seconds and nanoseconds, so that a wait that ends beyond
// (a snooze or a delay of math.MaxInt64 ends in 2318 on today's clock; a
// sum AddSat saturated, much later) is not read back as a time long past.
func appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, 0)
	}
	if sec := t.Unix(); sec <= minNanoSec || sec >= maxNanoSec {
		b = append(b, 2)
		b = binary.AppendVarint(b, sec)
		return binary.AppendUvarint(b, uint64(t.Nanosecond()))
	}
	b = append(b, 1)
	return binary.AppendVarint(b, t.UnixNano())
}

// The seconds, since 1970, strictly between which a time's UnixNano is
// exact.
const (
	maxNanoSec = math.MaxInt64 / int64(time.Second)
	minNanoSec = math.MinInt64 / int64(time.Second)
)

// reader decodes a record; the first error sticks and every later read
// returns zero values.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = fmt.Errorf("%w: a record ends early or holds a bad number", ErrCorrupt)
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
	case 2:
		sec, nsec := r.varint(), r.uvarint()
		if nsec >= uint64(time.Second) {
			r.fail()
			return time.Time{}
		}
		return time.Unix(sec, int64(nsec))
	}
	r.fail()
	return time.Time{}
}

func (r *reader) done() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: %d bytes after the end of a record", ErrCorrupt, len(r.b))
	}
	return r.err
}
