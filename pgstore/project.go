package pgstore

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/internal/record"
	"github.com/batonhq/baton/worker"
	"github.com/jackc/pgx/v5/pgtype"
)

// What a commit writes to baton.tasks: the task records of the commit
// decoded into columns. Records this version cannot decode (a newer
// format, a kind it does not know) are kept in baton.records as they are
// and leave the columns as they were: the projection is a view for
// people, never what Load reads.

// defRows are the columns of the definitions of one commit.
type defRows struct {
	seq                  []int64
	id, fn, pool, parent []string
	deps                 []string // JSON arrays
	prio, maxAttempts    []int32
	key                  []string
	payload              [][]byte
	submitted            []string // IDs of tasks submitted (no parent): an inbox batch's acceptance
	undecodable          int      // definitions this version cannot decode (kept in baton.records only)
}

// stateRows are the columns of the state records of one commit.
type stateRows struct {
	seq              []int64
	status           []string
	attempts, runs   []int32
	errKind, errText []string
	cause            []string
	result           [][]byte
	due, at          []pgtype.Timestamptz
	last             []string // last_attempt: JSON, "" for NULL
	final            bool     // a task became (or stayed) final: waiters look
	undecodable      int
	deletedSeq       []int64  // definitions deleted: the task's row goes
	deletedStateOnly []int64  // states deleted without their definition
	histSeq          []int64  // history records written
	hist             []string // their history column: JSON
	histDeleted      []int64  // history records deleted (with their definition or alone)
}

// statuses is how many coordinator statuses a state record may hold.
const statuses = uint8(coordinator.Skipped) + 1

// project decodes c's task records into rows.
func project(c *coordinator.Changes) (defRows, stateRows) {
	var d defRows
	var s stateRows
	for _, kv := range c.Puts {
		seq, kind, ok := record.ParseTaskKey(kv.Key)
		if !ok {
			continue
		}
		switch kind {
		case record.KindDef:
			def, err := record.DecodeDef(kv.Value)
			if err != nil {
				d.undecodable++
				continue
			}
			deps := make([]string, len(def.Deps))
			for i, dep := range def.Deps {
				deps[i] = dbText(dep)
			}
			dj, _ := json.Marshal(deps) // strings always marshal
			var payload []byte
			if def.HasPayload {
				payload = def.Payload
				if payload == nil {
					payload = []byte{}
				}
			}
			d.seq = append(d.seq, int64(seq))
			d.id = append(d.id, idText(def.ID))
			d.fn = append(d.fn, dbText(def.Func))
			d.pool = append(d.pool, dbText(def.Pool))
			d.parent = append(d.parent, idText(def.Parent))
			d.deps = append(d.deps, string(dj))
			d.prio = append(d.prio, int32(def.Priority))
			d.maxAttempts = append(d.maxAttempts, int32(def.MaxAttempts))
			d.key = append(d.key, dbText(def.Key))
			d.payload = append(d.payload, payload)
			if def.Parent == "" {
				d.submitted = append(d.submitted, def.ID)
			}
		case record.KindState:
			st, err := record.DecodeState(kv.Value, statuses)
			if err != nil {
				s.undecodable++
				continue
			}
			status := coordinator.Status(st.Status)
			var result []byte
			if st.HasResult && !st.NilResult {
				result = st.Result
				if result == nil {
					result = []byte{}
				}
			}
			s.seq = append(s.seq, int64(seq))
			s.status = append(s.status, status.String())
			s.attempts = append(s.attempts, st.Attempts)
			s.runs = append(s.runs, st.Runs)
			kindName, text := errorColumns(st.ErrKind, st.ErrMsg, st.Timeout)
			s.errKind = append(s.errKind, kindName)
			s.errText = append(s.errText, errText(text))
			s.cause = append(s.cause, dbText(st.Cause))
			s.result = append(s.result, result)
			s.due = append(s.due, tstz(st.Due))
			s.at = append(s.at, tstz(st.At))
			last := ""
			if st.Last != nil {
				last = string(attemptJSON(st.Last))
			}
			s.last = append(s.last, last)
			if status.Final() {
				s.final = true
			}
		case record.KindHistory:
			h, err := record.DecodeHistory(kv.Value)
			if err != nil {
				s.undecodable++
				continue
			}
			s.histSeq = append(s.histSeq, int64(seq))
			s.hist = append(s.hist, string(historyJSON(&h)))
		}
	}
	defDel, stateDel := map[uint64]bool{}, map[uint64]bool{}
	for _, k := range c.Deletes {
		seq, kind, ok := record.ParseTaskKey(k)
		if !ok {
			continue
		}
		switch kind {
		case record.KindDef:
			defDel[seq] = true
		case record.KindState:
			stateDel[seq] = true
		case record.KindHistory:
			s.histDeleted = append(s.histDeleted, int64(seq))
		}
	}
	for seq := range defDel {
		s.deletedSeq = append(s.deletedSeq, int64(seq))
	}
	for seq := range stateDel {
		if !defDel[seq] {
			s.deletedStateOnly = append(s.deletedStateOnly, int64(seq))
		}
	}
	if len(defDel) > 0 {
		s.final = true // a waiter for a dropped task must hear of it
	}
	return d, s
}

// Names of the error kinds in baton.tasks.error_kind.
var errKindNames = map[uint8]string{
	record.ErrKindCancelled:   "cancelled",
	record.ErrKindClosed:      "closed",
	record.ErrKindInterrupted: "interrupted",
	record.ErrKindOther:       "error",
	record.ErrKindTimeout:     "timeout",
	record.ErrKindJoin:        "join",
	// A sentinel wrapped in a text of its own: the sentinel's kind, that text.
	record.ErrKindCancelledText:   "cancelled",
	record.ErrKindClosedText:      "closed",
	record.ErrKindInterruptedText: "interrupted",
}

// errorColumns returns the error_kind and error columns ("" for NULL) of
// an error as a record keeps it (a state's, an attempt's): the text a
// restored scheduler's TaskInfo.Err would give.
func errorColumns(errKind uint8, msg string, timeout time.Duration) (kind, text string) {
	switch errKind {
	case record.ErrKindNone:
		return "", ""
	case record.ErrKindCancelled:
		return errKindNames[errKind], coordinator.ErrCancelled.Error()
	case record.ErrKindClosed:
		return errKindNames[errKind], coordinator.ErrClosed.Error()
	case record.ErrKindInterrupted:
		return errKindNames[errKind], coordinator.ErrInterrupted.Error()
	case record.ErrKindTimeout:
		te := &worker.TimeoutError{After: timeout}
		if msg != "" {
			te.Err = errors.New(msg)
		}
		return errKindNames[errKind], te.Error()
	default:
		return errKindNames[errKind], msg
	}
}

func tstz(t time.Time) pgtype.Timestamptz {
	if t.IsZero() {
		return pgtype.Timestamptz{}
	}
	return pgtype.Timestamptz{Time: t, Valid: true}
}
