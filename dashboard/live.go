package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"time"
)

// stream is one live stream open: its connection's controller, to cut a
// write short, and a channel closed to end it.
type stream struct {
	rc   *http.ResponseController
	end  chan struct{}
	once bool // end was closed (guarded by the dashboard's streamMu)
}

// openStream registers a stream; on the first stream of an http.Server,
// it registers with the server's Shutdown, which then ends the
// dashboard's streams at once rather than wait for them. It returns nil
// once the dashboard is closed.
func (d *Dashboard) openStream(w http.ResponseWriter, r *http.Request) *stream {
	d.streamMu.Lock()
	defer d.streamMu.Unlock()
	st := &stream{rc: http.NewResponseController(w), end: make(chan struct{})}
	if d.isClosed {
		return nil
	}
	if srv, ok := r.Context().Value(http.ServerContextKey).(*http.Server); ok {
		if _, done := d.hooked[srv]; !done {
			d.hooked[srv] = struct{}{}
			srv.RegisterOnShutdown(func() { d.endStreams(false) })
		}
	}
	d.streams[st] = struct{}{}
	return st
}

func (d *Dashboard) closeStream(st *stream) {
	d.streamMu.Lock()
	defer d.streamMu.Unlock()
	delete(d.streams, st)
}

// endStreams ends every live stream open: a stream waiting for its next
// update returns, and one blocked in a write has its write deadline moved
// to the past, so that the write fails at once. With closing, no stream
// opens after (Close).
func (d *Dashboard) endStreams(closing bool) {
	d.streamMu.Lock()
	defer d.streamMu.Unlock()
	if closing && !d.isClosed {
		d.isClosed = true
		close(d.closed)
	}
	for st := range d.streams {
		if !st.once {
			st.once = true
			close(st.end)
		}
		_ = st.rc.SetWriteDeadline(time.Unix(1, 0))
	}
}

// armWrite gives the stream's next write its deadline, and reports false
// if the stream has ended (or the deadline cannot be set): under
// streamMu, so that endStreams, which moves a blocked write's deadline to
// the past, never runs between a check of st.end and the deadline set
// after it, which would have put the deadline back in the future. st is
// nil for the one update a closed dashboard sends.
func (d *Dashboard) armWrite(st *stream, rc *http.ResponseController) bool {
	if st != nil {
		d.streamMu.Lock()
		defer d.streamMu.Unlock()
		if st.once {
			return false
		}
	}
	err := rc.SetWriteDeadline(d.wall.Now().Add(d.cfg.writeTimeout))
	return err == nil || errors.Is(err, http.ErrNotSupported)
}

// serveEvents is the live stream: server-sent events, each a whole state,
// so that a page that missed some (asleep, reconnected) is right at the
// next one. It sends one at once, then one per change of the dashboard's
// copy of the tasks (at most one per interval however many tasks change:
// they coalesce), and one per refresh at least. An "overview" event
// carries the overview; with ?task=ID a "task" event carries that task as
// well, or one "gone" event (without the ID) if it is unknown, after
// which the stream sends only overviews. Every write has a deadline
// (WithWriteTimeout): a client that stops reading is dropped then.
func (d *Dashboard) serveEvents(w http.ResponseWriter, r *http.Request) {
	taskID := r.URL.Query().Get("task")
	st := d.openStream(w, r)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // a proxy must not hold updates back
	w.WriteHeader(http.StatusOK)
	if st != nil {
		defer d.closeStream(st)
	}
	if r.Method == http.MethodHead {
		// No body: net/http discards what a HEAD response writes, so a
		// write would never block for its deadline to end it, and the
		// stream would look its task up at every change for as long as
		// the client held the connection.
		return
	}
	ctx := r.Context()
	var buf bytes.Buffer
	for {
		changed, _ := d.mir.watch() // before reading: a change while we read wakes the next round
		buf.Reset()
		writeEvent(&buf, "overview", d.overview())
		if taskID != "" {
			if v, found, _ := d.task(ctx, taskID, false); found {
				writeEvent(&buf, "task", v)
			} else {
				writeEvent(&buf, "gone", map[string]bool{"gone": true})
				taskID = "" // an unknown ID is not looked up, nor sent, again
			}
		}
		rc := http.NewResponseController(w)
		if !d.armWrite(st, rc) {
			return
		}
		if _, err := w.Write(buf.Bytes()); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		if st == nil {
			return // the dashboard is closed: one update, then the end
		}
		// At most one update per interval: changes that come meanwhile
		// wait, and are sent together.
		pace := d.cfg.clk.Timer(d.cfg.interval)
		select {
		case <-pace.C:
		case <-ctx.Done():
			pace.Stop()
			return
		case <-st.end:
			pace.Stop()
			return
		}
		// Then the next update comes with the next change, or the refresh
		// (a pool paused elsewhere, the running times).
		refresh := d.cfg.clk.Timer(d.cfg.refresh - d.cfg.interval)
		select {
		case <-changed:
		case <-refresh.C:
		case <-ctx.Done():
			refresh.Stop()
			return
		case <-st.end:
			refresh.Stop()
			return
		}
		refresh.Stop()
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
