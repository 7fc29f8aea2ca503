package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/internal/record"
	"github.com/jackc/pgx/v5"
)

// Where a task's attempts are in baton.tasks: the history column holds
// its history record (the attempts the scheduler keeps, with their log
// lines), last_attempt its state's newest ended attempt. A task whose one
// attempt succeeded plainly has no history record (the coordinator writes
// none: its state says it all), so its history is NULL and last_attempt
// is the whole story. Both are JSON in the shapes below, which
// docs/postgres.md documents for SQL readers.

// historyDoc is the history column.
type historyDoc struct {
	Dropped  int32        `json:"dropped"`
	Attempts []attemptDoc `json:"attempts"`
}

// attemptDoc is one attempt in the history and last_attempt columns.
type attemptDoc struct {
	Attempt     int32      `json:"attempt"`
	Run         int32      `json:"run"`
	Rerun       int32      `json:"rerun"`
	Outcome     string     `json:"outcome"` // coordinator.Outcome's String
	Worker      string     `json:"worker,omitempty"`
	HandedOut   *time.Time `json:"handed_out,omitempty"`
	Started     *time.Time `json:"started,omitempty"`
	Ended       *time.Time `json:"ended,omitempty"`
	ErrorKind   string     `json:"error_kind,omitempty"` // as baton.tasks.error_kind
	Error       string     `json:"error,omitempty"`
	Logs        []lineDoc  `json:"logs,omitempty"`
	LogsDropped int32      `json:"logs_dropped,omitempty"`
}

// lineDoc is one log line of an attempt.
type lineDoc struct {
	Time  *time.Time `json:"time,omitempty"`
	Level string     `json:"level"` // slog.Level's String: INFO, WARN+2
	Msg   string     `json:"msg"`
	Attrs string     `json:"attrs,omitempty"`
}

// historyJSON is the history column of history record h.
func historyJSON(h *record.History) []byte {
	doc := historyDoc{Dropped: h.Dropped, Attempts: make([]attemptDoc, len(h.Attempts))}
	for i := range h.Attempts {
		doc.Attempts[i] = attemptDocOf(&h.Attempts[i])
	}
	b, _ := json.Marshal(doc) // times within UnixNano's range always marshal
	return b
}

// attemptJSON is the last_attempt column of a state's Last.
func attemptJSON(a *record.Attempt) []byte {
	b, _ := json.Marshal(attemptDocOf(a))
	return b
}

func attemptDocOf(a *record.Attempt) attemptDoc {
	kind, text := errorColumns(a.ErrKind, a.ErrMsg, a.Timeout)
	d := attemptDoc{Attempt: a.Attempt, Run: a.Run, Rerun: a.Rerun, Outcome: coordinator.Outcome(a.Outcome).String(),
		Worker: dbText(a.Worker), HandedOut: nanoTime(a.Handed), Started: nanoTime(a.Started), Ended: nanoTime(a.Ended),
		ErrorKind: kind, Error: errText(text), LogsDropped: a.LinesDropped}
	for _, l := range a.Lines {
		d.Logs = append(d.Logs, lineDoc{Time: nanoTime(l.Time), Level: slog.Level(l.Level).String(), Msg: dbText(l.Msg), Attrs: dbText(l.Attrs)})
	}
	return d
}

// nanoTime is UnixNano n as a time, nil for 0 (unknown).
func nanoTime(n int64) *time.Time {
	if n == 0 {
		return nil
	}
	t := time.Unix(0, n).UTC()
	return &t
}

var outcomeByName = func() map[string]coordinator.Outcome {
	m := map[string]coordinator.Outcome{}
	for o := coordinator.OutcomeRunning; o <= coordinator.OutcomeSnoozed; o++ {
		m[o.String()] = o
	}
	return m
}()

// attempt is doc as History tells it; pool is the task's.
func (doc *attemptDoc) attempt(pool string) (coordinator.Attempt, error) {
	o, ok := outcomeByName[doc.Outcome]
	if !ok {
		return coordinator.Attempt{}, fmt.Errorf("outcome %q", doc.Outcome)
	}
	a := coordinator.Attempt{Attempt: int(doc.Attempt), Run: int(doc.Run), Rerun: int(doc.Rerun), Pool: pool, Worker: doc.Worker,
		HandedOut: timeOf(doc.HandedOut), Started: timeOf(doc.Started), Ended: timeOf(doc.Ended), Outcome: o,
		LogsDropped: int(doc.LogsDropped)}
	if doc.ErrorKind != "" {
		a.Err = errOf(doc.ErrorKind, doc.Error)
	}
	for _, l := range doc.Logs {
		var level slog.Level
		if err := level.UnmarshalText([]byte(l.Level)); err != nil {
			return coordinator.Attempt{}, fmt.Errorf("log line level %q", l.Level)
		}
		a.Logs = append(a.Logs, coordinator.LogLine{Time: timeOf(l.Time), Level: level, Message: l.Msg, Attrs: l.Attrs})
	}
	return a, nil
}

func timeOf(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// History returns the attempts of task id that the leader committed, as
// Scheduler.History tells them (oldest first, with their log lines, and
// how many older ones were dropped), read from baton.tasks' history and
// last_attempt columns; false if no task has that ID. An attempt running
// now is not among them (the leader's Scheduler().History tells it too),
// nor are those of a task the leader has not written since the schema's
// version 2. Err is the sentinel for a cancelled, shut down or
// interrupted attempt, and an error of the text for another, as Info
// gives. It needs only the reader's privileges (RolesSQL). It does not
// wait, and is safe for concurrent use; after Close it returns ErrClosed.
func (c *Client) History(ctx context.Context, id string) (coordinator.History, bool, error) {
	if err := c.ready(ctx); err != nil {
		return coordinator.History{}, false, err
	}
	var pool string
	var hist, last []byte
	err := c.pool.QueryRow(ctx, `SELECT coalesce(pool, ''), history, last_attempt FROM baton.tasks
		WHERE store = $1 AND id = $2 ORDER BY seq DESC LIMIT 1`, c.name, id).Scan(&pool, &hist, &last)
	if errors.Is(err, pgx.ErrNoRows) {
		return coordinator.History{}, false, nil
	}
	if err != nil {
		return coordinator.History{}, false, fmt.Errorf("pgstore: History(%q): %w", id, err)
	}
	var doc historyDoc
	switch {
	case hist != nil:
		err = json.Unmarshal(hist, &doc)
	case last != nil:
		doc.Attempts = make([]attemptDoc, 1)
		err = json.Unmarshal(last, &doc.Attempts[0])
	}
	h := coordinator.History{Dropped: int(doc.Dropped)}
	for i := 0; err == nil && i < len(doc.Attempts); i++ {
		var a coordinator.Attempt
		if a, err = doc.Attempts[i].attempt(pool); err == nil {
			h.Attempts = append(h.Attempts, a)
		}
	}
	if err != nil {
		return coordinator.History{}, false, fmt.Errorf("%w: History(%q): task %q's attempts in baton.tasks: %v", coordinator.ErrStoreCorrupt, id, id, err)
	}
	return h, true, nil
}
