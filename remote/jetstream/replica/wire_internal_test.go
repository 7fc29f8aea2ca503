package replica

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
)

// fill sets every field of the struct v points to, recursively, to a
// value that is not its zero value, leaving functions and interfaces
// (which a test sets by hand) alone.
func fill(v reflect.Value) {
	for i := range v.NumField() {
		f := v.Field(i)
		if !f.CanSet() {
			continue
		}
		switch f.Kind() {
		case reflect.String:
			f.SetString("x" + v.Type().Field(i).Name)
		case reflect.Int, reflect.Int64:
			if f.Type() == reflect.TypeFor[time.Duration]() {
				f.SetInt(int64(time.Second))
			} else {
				f.SetInt(2)
			}
		case reflect.Uint8:
			f.SetUint(2)
		case reflect.Float64:
			f.SetFloat(0.5)
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Slice:
			if f.Type().Elem().Kind() == reflect.String {
				f.Set(reflect.ValueOf([]string{"d"}))
			}
		case reflect.Struct:
			fill(f)
		}
	}
}

// Every field of a Task described by data, and of a TaskInfo and an
// Event, travels on the wire: a field added to the coordinator's types
// and forgotten here (as Task.Key and Task.Slots were) fails this test.
func TestWireCarriesEveryField(t *testing.T) {
	var task coordinator.Task
	fill(reflect.ValueOf(&task).Elem())
	task.Cron, task.Payload = "@every 1s", []byte("p")
	w, err := toWire(task)
	if err != nil {
		t.Fatal(err)
	}
	if got := w.task(); !reflect.DeepEqual(got, task) {
		t.Errorf("Task through the wire:\n got %+v\nwant %+v", got, task)
	}

	var ti coordinator.TaskInfo
	fill(reflect.ValueOf(&ti).Elem())
	ti.Err, ti.Result = coordinator.ErrCancelled, []byte("r")
	if got := infoToWire(ti).info(); !reflect.DeepEqual(got, ti) {
		t.Errorf("TaskInfo through the wire:\n got %+v\nwant %+v", got, ti)
	}

	var ev coordinator.Event
	fill(reflect.ValueOf(&ev).Elem())
	ev.Err, ev.At = coordinator.ErrClosed, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if got := eventToWire(ev, 1).event(); !reflect.DeepEqual(got, ev) {
		t.Errorf("Event through the wire:\n got %+v\nwant %+v", got, ev)
	}
}

// A History crosses the wire whole: every field of every attempt, log
// lines with their times and levels, the coordinator's sentinels.
func TestWireCarriesAHistory(t *testing.T) {
	at := time.Unix(1700000000, 5).UTC()
	h := coordinator.History{Dropped: 4, Attempts: []coordinator.Attempt{
		{Attempt: 1, Run: 2, Rerun: 3, Pool: "io", Worker: "host:1", HandedOut: at, Started: at.Add(time.Second), Ended: at.Add(2 * time.Second),
			Outcome: coordinator.OutcomeCancelled, Err: coordinator.ErrCancelled, LogsDropped: 7,
			Logs: []coordinator.LogLine{{Time: at, Level: slog.LevelWarn, Message: "m", Attrs: "k=v"}}},
		{Attempt: 2, Run: 2, Outcome: coordinator.OutcomeRunning, HandedOut: at},
	}}
	b, err := json.Marshal(historyToWire(h))
	if err != nil {
		t.Fatal(err)
	}
	var w wireHistory
	if err := json.Unmarshal(b, &w); err != nil {
		t.Fatal(err)
	}
	got := w.history()
	if !reflect.DeepEqual(got, h) {
		t.Errorf("History through the wire:\n got %+v\nwant %+v", got, h)
	}
}

// A History larger than a message holds is answered without its oldest
// attempts, then without the oldest lines of its newest, counted; HTML in
// a line costs its own size, not six times it.
func TestHistoryAnswerFits(t *testing.T) {
	line := coordinator.LogLine{Message: strings.Repeat("<b>&</b>", 100)}
	var h coordinator.History
	for i := range 10 {
		a := coordinator.Attempt{Attempt: i + 1, Run: 1, Outcome: coordinator.OutcomeFailed}
		for range 100 {
			a.Logs = append(a.Logs, line)
		}
		h.Attempts = append(h.Attempts, a)
	}
	rep := &reply{Known: true, History: historyToWire(h)}
	b, err := marshalAnswer(rep)
	if err != nil || bytes.Contains(b, []byte(`\u003c`)) {
		t.Fatalf("marshalAnswer: %v, escaped %v", err, bytes.Contains(b, []byte(`\u003c`)))
	}
	const max = 100_000
	b = fitHistory(rep, b, max)
	var back reply
	if err := json.Unmarshal(b, &back); err != nil || len(b) > max {
		t.Fatalf("fitted answer: %d bytes, %v", len(b), err)
	}
	got := back.History.history()
	if len(got.Attempts) != 1 || got.Dropped != 9 || got.Attempts[0].Attempt != 10 ||
		len(got.Attempts[0].Logs)+got.Attempts[0].LogsDropped != 100 || len(got.Attempts[0].Logs) == 0 {
		t.Errorf("fitted: %d attempts (%d dropped), the last %d with %d lines and %d dropped; want the newest, its newest lines",
			len(got.Attempts), got.Dropped, got.Attempts[0].Attempt, len(got.Attempts[0].Logs), got.Attempts[0].LogsDropped)
	}
}
