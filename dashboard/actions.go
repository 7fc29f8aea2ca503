package dashboard

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"

	"github.com/batonhq/baton/coordinator"
)

// bulkChunk is how many tasks one coordinator turn of a bulk action takes
// at most: a Rerun of that many IDs, or that many Cancels one by one.
const bulkChunk = 100

// by names who asked for an action, for EventReopened's Cause: the
// dashboard, and the user of HTTP basic auth if the request has one.
func by(r *http.Request) string {
	if u, _, ok := r.BasicAuth(); ok && u != "" {
		return "dashboard (" + cut(u, 100) + ")"
	}
	return "dashboard"
}

// actionForm parses an action's form of at most limit bytes: 403 when
// read-only, 400 for a bad form; false when it answered.
func (d *Dashboard) actionForm(w http.ResponseWriter, r *http.Request, limit int64) bool {
	if d.cfg.readOnly {
		d.fail(w, r, http.StatusForbidden, ErrReadOnly.Error())
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	if err := r.ParseForm(); err != nil {
		d.fail(w, r, http.StatusBadRequest, "dashboard: bad form: "+err.Error())
		return false
	}
	return true
}

// taskForm parses the form of an action on one task (its id): as
// actionForm, and 400 without one id; false when it answered.
func (d *Dashboard) taskForm(w http.ResponseWriter, r *http.Request) (string, bool) {
	if !d.actionForm(w, r, 64<<10) {
		return "", false
	}
	ids := r.PostForm["id"]
	if len(ids) != 1 || ids[0] == "" {
		d.fail(w, r, http.StatusBadRequest, "dashboard: which task? the form needs one id")
		return "", false
	}
	return ids[0], true
}

// serveRerun re-runs the task named by the form's id (Scheduler.Rerun),
// with its downstream if the form's downstream is "1": 303 to the task's
// page (200 with JSON to a JSON request, listing what was re-opened);
// 403 when read-only, 400 without one id, 404 for an unknown task, 409
// for one that did not fail, was not cancelled nor skipped.
func (d *Dashboard) serveRerun(w http.ResponseWriter, r *http.Request) {
	id, ok := d.taskForm(w, r)
	if !ok {
		return
	}
	down := r.PostForm.Get("downstream") == "1"
	res, err := d.s.Rerun(r.Context(), coordinator.RerunRequest{IDs: []string{id}, Downstream: down, By: by(r)})
	d.forgetOverview()
	switch {
	case errors.Is(err, coordinator.ErrUnknownTask):
		d.fail(w, r, http.StatusNotFound, fmt.Sprintf("dashboard: unknown task %q", cut(id, 200)))
		return
	case errors.Is(err, coordinator.ErrNotRerunnable):
		info, _ := d.s.Info(id)
		d.fail(w, r, http.StatusConflict, fmt.Sprintf("dashboard: task %q is %v: only a failed, cancelled or skipped task is re-run", cut(id, 200), info.Status))
		return
	case err != nil:
		d.failErr(w, r, err)
		return
	}
	if wantsJSON(r) {
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "reopened": res.Reopened})
		return
	}
	http.Redirect(w, r, d.cfg.prefix+"/task?"+url.Values{"id": {id}, "done": {"rerun"}, "n": {strconv.Itoa(len(res.Reopened))}}.Encode(), http.StatusSeeOther)
}

// bulkData is the confirmation page of a bulk action.
type bulkData struct {
	Action, Verb string
	IDs          []string // the tasks it takes (selected rows), or none for "all matching"
	Query        string   // the filter, for "all matching" (encoded)
	All          bool
	Count        int // tasks it touches
	Skipped      int // of those chosen, the tasks it leaves alone (not in a status it applies to)
	Shown        []string
	Back         template.URL // the table's query, which the handler encoded (html/template must not escape its = and &)
	Set          string       // "all matching": setDigest of the tasks it touches, confirmed with Count
	Changed      bool         // "all matching" was confirmed for another count (Confirmed; -1: none given): asked again
	Confirmed    int
}

var bulkVerbs = map[string]string{
	"retry":  "Re-run",
	"rerun":  "Re-run with everything downstream",
	"cancel": "Cancel",
}

// serveBulk acts on many tasks of the tasks table: the form's action
// (retry, rerun: with downstream, or cancel) on its ids (the rows
// selected) or, with all=1, every task matching its q (the table's
// filter). Without confirm=yes it answers a page that says how many tasks
// the action touches and asks to confirm (for all=1, with that count as
// count and a digest of those tasks as set: confirmed for other tasks, it
// asks again, 409); with it, it acts, bulkChunk
// tasks per coordinator turn, and sends the browser back to the table
// with a notice of how many it changed (JSON: the counts). 403 when
// read-only, 400 for an unknown action, no task, or a bad filter.
func (d *Dashboard) serveBulk(w http.ResponseWriter, r *http.Request) {
	if !d.actionForm(w, r, 4<<20) {
		return
	}
	action := r.PostForm.Get("action")
	verb, ok := bulkVerbs[action]
	if !ok {
		d.fail(w, r, http.StatusBadRequest, "dashboard: bad action: want retry, rerun or cancel")
		return
	}
	bd := bulkData{Action: action, Verb: verb, All: r.PostForm.Get("all") == "1"}
	applies := func(st coordinator.Status) bool {
		if action == "cancel" {
			return !st.Final()
		}
		return st == coordinator.Failed || st == coordinator.Cancelled || st == coordinator.Skipped
	}
	var ids []string
	chosen := 0
	if bd.All {
		q, err := url.ParseQuery(r.PostForm.Get("q"))
		if err != nil {
			d.fail(w, r, http.StatusBadRequest, "dashboard: bad filter in q")
			return
		}
		tq, err := parseTaskQuery(q, d.s.PoolSizes())
		if err != nil {
			d.failErr(w, r, err)
			return
		}
		bd.Query = tq.values(1).Encode()
		bd.Back = template.URL(bd.Query)
		if ids, chosen, err = d.matching(r.Context(), tq, applies); err != nil {
			return // the client went away
		}
	} else {
		bd.IDs = uniqueIDs(r.PostForm["ids"])
		chosen = len(bd.IDs)
		if chosen == 0 {
			d.fail(w, r, http.StatusBadRequest, "dashboard: which tasks? select rows, or all matching")
			return
		}
		d.mir.mu.RLock()
		for _, id := range bd.IDs {
			if row := d.mir.byID[id]; row != nil && applies(row.Status) {
				ids = append(ids, id)
			}
		}
		d.mir.mu.RUnlock()
	}
	bd.Count, bd.Skipped = len(ids), chosen-len(ids)
	confirm := r.PostForm.Get("confirm") == "yes"
	if bd.All {
		bd.Set = setDigest(ids)
	}
	if confirm && bd.All {
		// "All matching" is confirmed for the tasks it would touch then,
		// their count and a digest of their IDs: if they changed since
		// (more, fewer, or others in their place), nothing is done and the
		// user confirms again what they are now, so that the action never
		// reaches a task the confirmation did not count.
		n, err := strconv.Atoi(r.PostForm.Get("count"))
		if err != nil || n != bd.Count || r.PostForm.Get("set") != bd.Set {
			confirm, bd.Changed, bd.Confirmed = false, true, n
			if err != nil || n < 0 {
				bd.Confirmed = -1
			}
		}
	}
	if !confirm {
		bd.Shown = ids[:min(len(ids), 20)]
		if wantsJSON(r) {
			status, answer := http.StatusOK, map[string]any{"action": action, "count": bd.Count, "leftAlone": bd.Skipped, "confirm": "post again with confirm=yes"}
			if bd.All {
				answer["set"] = bd.Set
				answer["confirm"] = "post again with confirm=yes, count=" + strconv.Itoa(bd.Count) + " and set=" + bd.Set
			}
			if bd.Changed {
				status, answer["error"] = http.StatusConflict, "dashboard: the tasks matching changed since the count confirmed: confirm the new count"
			}
			writeJSON(w, status, answer)
			return
		}
		status := http.StatusOK
		if bd.Changed {
			status = http.StatusConflict
		}
		d.render(w, status, "bulk", pageData{Title: "Confirm: " + verb, Nav: "tasks", Data: bd})
		return
	}
	done, refused := 0, 0
	who := by(r)
	for len(ids) > 0 && r.Context().Err() == nil {
		chunk := ids[:min(len(ids), bulkChunk)]
		ids = ids[len(chunk):]
		switch action {
		case "cancel":
			for _, id := range chunk {
				if d.s.Cancel(id) {
					done++
				} else {
					refused++
				}
			}
		default:
			req := coordinator.RerunRequest{IDs: chunk, Downstream: action == "rerun", By: who}
			if _, err := d.s.Rerun(r.Context(), req); err == nil {
				done += len(chunk)
				continue
			}
			// Refused whole (a task changed since the copy said): one by one.
			for _, id := range chunk {
				req.IDs = []string{id}
				if _, err := d.s.Rerun(r.Context(), req); err == nil {
					done++
				} else {
					refused++
				}
			}
		}
	}
	d.forgetOverview()
	if wantsJSON(r) {
		writeJSON(w, http.StatusOK, map[string]any{"action": action, "done": done, "refused": refused})
		return
	}
	back := url.Values{"done": {action}, "n": {strconv.Itoa(done)}, "refused": {strconv.Itoa(refused)}}
	http.Redirect(w, r, d.cfg.prefix+"/tasks?"+back.Encode(), http.StatusSeeOther)
}

// actionFlash is the notice after an action the browser was sent back
// from (?done=…&n=…): numbers and fixed words only, never text from the
// query.
func actionFlash(q url.Values) string {
	n, err := strconv.Atoi(q.Get("n"))
	if err != nil || n < 0 {
		return ""
	}
	refused, _ := strconv.Atoi(q.Get("refused"))
	var s string
	switch q.Get("done") {
	case "retry":
		s = fmt.Sprintf("%d tasks re-run.", n)
	case "rerun":
		s = fmt.Sprintf("%d tasks re-run, with everything downstream of them that did not succeed.", n)
	case "cancel":
		s = fmt.Sprintf("%d tasks cancelled: a task that was running ends Cancelled once its function returns.", n)
	default:
		return ""
	}
	if refused > 0 {
		s += fmt.Sprintf(" %d were refused: their status had changed.", refused)
	}
	return s
}

// uniqueIDs is ids without repeats, in their first order: a form that
// names a task twice acts on it once, and counts it once.
func uniqueIDs(ids []string) []string {
	seen := make(map[string]struct{}, len(ids))
	out := ids[:0:0]
	for _, id := range ids {
		if _, dup := seen[id]; !dup {
			seen[id] = struct{}{}
			out = append(out, id)
		}
	}
	return out
}

// setDigest is a digest of a set of IDs, whatever their order (a sort by
// attempts may reorder the same tasks): the sum of their FNV-1a hashes,
// in hex. The same on every dashboard process, so that a confirmation
// served by one is checked by another behind a load balancer.
func setDigest(ids []string) string {
	const offset, prime = 14695981039346656037, 1099511628211 // FNV-1a, 64 bits (hash/fnv's, without an allocation an ID)
	var sum uint64
	for _, id := range ids {
		h := uint64(offset)
		for i := range len(id) {
			h = (h ^ uint64(id[i])) * prime
		}
		sum += h
	}
	return strconv.FormatUint(sum, 16)
}
