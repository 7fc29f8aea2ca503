package dashboard

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// serveEvents is the live stream: server-sent events, each a whole state,
// so that a page that missed some (asleep, reconnected) is right at the
// next one. It sends one at once, then one per change of the scheduler,
// at most one per interval however many events come (they coalesce), and
// one per refresh at least, events or not. An "overview" event carries the
// overview; with ?task=ID a "task" event carries that task as well.
func (d *Dashboard) serveEvents(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		d.fail(w, r, http.StatusNotImplemented, "dashboard: this server cannot stream")
		return
	}
	taskID := r.URL.Query().Get("task")
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // a proxy must not hold updates back
	w.WriteHeader(http.StatusOK)
	defer d.watch()()
	ctx := r.Context()
	var buf bytes.Buffer
	var seen uint64 // the scheduler's totals, summed, at the last update
	for {
		changed := d.rec.watch() // before reading: a change while we read wakes the next round
		d.grew(&seen)
		buf.Reset()
		writeEvent(&buf, "overview", d.overview())
		if taskID != "" {
			if v, found, _ := d.task(ctx, taskID, false); found {
				writeEvent(&buf, "task", v)
			} else {
				writeEvent(&buf, "gone", map[string]string{"id": taskID})
			}
		}
		if _, err := w.Write(buf.Bytes()); err != nil {
			return
		}
		fl.Flush()
		// At most one update per interval: events that come meanwhile
		// wait, and are sent together.
		pace := d.cfg.clk.Timer(d.cfg.interval)
		select {
		case <-pace.C:
		case <-ctx.Done():
			pace.Stop()
			return
		case <-d.closed:
			pace.Stop()
			return
		}
		// Then the next update comes with the next event, the next
		// interval in which the scheduler's totals grew (starts and
		// successes send no event the dashboard listens to), or the
		// refresh.
		refresh := d.cfg.clk.Timer(d.cfg.refresh - d.cfg.interval)
	wait:
		for !d.grew(&seen) {
			poll := d.cfg.clk.Timer(d.cfg.interval)
			select {
			case <-poll.C:
				continue
			case <-changed:
			case <-refresh.C:
			case <-ctx.Done():
			case <-d.closed:
			}
			poll.Stop()
			break wait
		}
		refresh.Stop()
		select {
		case <-ctx.Done():
			return
		case <-d.closed:
			return
		default:
		}
	}
}

// writeEvent appends one server-sent event whose data is v as JSON (JSON
// has no raw newline, so one data line carries it).
func writeEvent(buf *bytes.Buffer, name string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	buf.WriteString("event: ")
	buf.WriteString(name)
	buf.WriteString("\ndata: ")
	buf.Write(b)
	buf.WriteString("\n\n")
}

// grew reports whether the scheduler's totals, summed (totalsSum), are
// no longer *seen, and sets *seen to them: a round trip to the
// coordinator, whatever the number of tasks.
func (d *Dashboard) grew(seen *uint64) bool {
	n := totalsSum(d.s.Totals())
	grew := n != *seen
	*seen = n
	return grew
}
