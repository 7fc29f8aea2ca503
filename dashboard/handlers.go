package dashboard

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batonhq/baton/coordinator"
)

//go:embed web/templates/*.html
var templateFS embed.FS

//go:embed web/static
var staticFS embed.FS

// pages are the parsed templates, one set per page, each with the layout.
var pages = func() map[string]*template.Template {
	funcs := template.FuncMap{
		"seconds": func(f float64) string { return roundDuration(time.Duration(f * float64(time.Second))).String() },
		"rate": func(f float64) string {
			if f >= 100 {
				return strconv.FormatFloat(f, 'f', 0, 64)
			}
			return strconv.FormatFloat(f, 'f', 1, 64)
		},
		"clock": func(t time.Time) string {
			if t.IsZero() {
				return "before the dashboard"
			}
			return t.UTC().Format("15:04:05.000")
		},
		"poolLabel": poolLabel,
		"minus":     func(a, b int) int { return a - b },
		"short":     func(id string) string { return cut(id, 64) }, // a long ID in a table: the link's title has it whole
		"since": func(t, now time.Time) string {
			if t.IsZero() {
				return "before" // it was in this status when the dashboard started
			}
			return roundDuration(max(0, now.Sub(t))).String()
		},
		"poolAction": func(base, from string, p poolView) poolAction { return poolAction{base, from, p} },
		"asset":      func(name string) string { return "static/" + name + "?v=" + assetVersion[name] },
	}
	layout := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "web/templates/layout.html", "web/templates/partials.html"))
	out := map[string]*template.Template{}
	for _, name := range []string{"overview", "tasks", "task", "graph", "pools", "error", "bulk"} {
		t := template.Must(layout.Clone())
		out[name] = template.Must(t.ParseFS(templateFS, "web/templates/"+name+".html"))
	}
	return out
}()

// assetVersion is a hash of each static file, so that a page names the
// version it was made with and a browser may keep a file for long.
var assetVersion = func() map[string]string {
	out := map[string]string{}
	_ = fs.WalkDir(staticFS, "web/static", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := staticFS.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		out[strings.TrimPrefix(p, "web/static/")] = hex.EncodeToString(sum[:6])
		return nil
	})
	return out
}()

// poolAction is what a pool's pause or resume form needs.
type poolAction struct {
	Base, From string
	Pool       poolView
}

// pageData is what every page's template gets.
type pageData struct {
	Title    string
	Nav      string // the current section: overview, tasks, graph, pools
	Base     string // the prefix, ending in "/": every link starts with it
	ReadOnly bool
	Stream   string // the live stream's URL, relative to Base ("" for none)
	Flash    string
	Data     any
}

func (d *Dashboard) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", d.serveOverview)
	mux.HandleFunc("GET /overview.json", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, d.overview()) })
	mux.HandleFunc("GET /tasks", d.serveTasks)
	mux.HandleFunc("GET /tasks.json", d.serveTasks)
	mux.HandleFunc("GET /task", d.serveTask)
	mux.HandleFunc("GET /task.json", d.serveTask)
	mux.HandleFunc("POST /task/cancel", d.serveCancel)
	mux.HandleFunc("POST /task/rerun", d.serveRerun)
	mux.HandleFunc("POST /tasks/bulk", d.serveBulk)
	mux.HandleFunc("POST /pools/pause", d.servePause)
	mux.HandleFunc("POST /pools/resume", d.servePause)
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, d.cfg.prefix+"/static/favicon.svg?v="+assetVersion["favicon.svg"], http.StatusMovedPermanently)
	})
	for _, action := range []string{"/task/cancel", "/task/rerun", "/tasks/bulk", "/pools/pause", "/pools/resume"} {
		mux.HandleFunc(action, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", http.MethodPost)
			d.fail(w, r, http.StatusMethodNotAllowed, "dashboard: "+r.Method+" "+action+": an action is a POST (a form's button)")
		})
	}
	mux.HandleFunc("GET /graph", d.serveGraph)
	mux.HandleFunc("GET /graph.json", d.serveGraph)
	mux.HandleFunc("GET /pools", d.servePools)
	mux.HandleFunc("GET /events", d.serveEvents)
	mux.HandleFunc("GET /static/{name}", serveStatic)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		d.fail(w, r, http.StatusNotFound, "no such page: "+r.URL.Path)
	})
	var h http.Handler = mux
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.fail(w, r, http.StatusForbidden, "cross-origin request refused: actions must come from the dashboard's own pages")
	}))
	h = cop.Handler(h)
	if d.cfg.prefix != "" {
		inner := http.StripPrefix(d.cfg.prefix, h)
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == d.cfg.prefix {
				http.Redirect(w, r, d.cfg.prefix+"/", http.StatusMovedPermanently)
				return
			}
			if !strings.HasPrefix(r.URL.Path, d.cfg.prefix+"/") {
				http.NotFound(w, r)
				return
			}
			inner.ServeHTTP(w, r)
		})
	}
	return securityHeaders(h)
}

// securityHeaders sets what every answer carries: nothing from elsewhere
// (no CDN, no inline script), not framed, not sniffed.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "same-origin")
		h.ServeHTTP(w, r)
	})
}

func serveStatic(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	b, err := staticFS.ReadFile(path.Join("web/static", name))
	if err != nil || strings.Contains(name, "..") {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("ETag", `"`+assetVersion[name]+`"`)
	if r.URL.Query().Get("v") == assetVersion[name] {
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		w.Header().Set("Cache-Control", "no-cache")
	}
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(b))
}

// wantsJSON reports whether r asks for JSON: a .json path, or an Accept
// header that names JSON before HTML.
func wantsJSON(r *http.Request) bool {
	if strings.HasSuffix(r.URL.Path, ".json") {
		return true
	}
	a := r.Header.Get("Accept")
	return strings.Contains(a, "application/json") && !strings.Contains(a, "text/html")
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "dashboard: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// fail answers an error: JSON {"error": msg} to a JSON request, else the
// error page.
func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, code int, msg string) {
	if wantsJSON(r) {
		writeJSON(w, code, map[string]string{"error": msg})
		return
	}
	d.render(w, code, "error", pageData{Title: http.StatusText(code), Data: struct {
		Code int
		Msg  string
	}{code, msg}})
}

// failErr answers err: a bad query is a 400, an unknown task a 404, a
// request that ended is dropped; anything else is a 500.
func (d *Dashboard) failErr(w http.ResponseWriter, r *http.Request, err error) {
	var bq *badQuery
	switch {
	case errors.As(err, &bq):
		d.fail(w, r, http.StatusBadRequest, err.Error())
	case errors.Is(err, coordinator.ErrUnknownTask):
		d.fail(w, r, http.StatusNotFound, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		d.fail(w, r, http.StatusServiceUnavailable, err.Error())
	default:
		d.fail(w, r, http.StatusInternalServerError, err.Error())
	}
}

func (d *Dashboard) render(w http.ResponseWriter, code int, name string, p pageData) {
	p.Base = d.cfg.prefix + "/"
	p.ReadOnly = d.cfg.readOnly
	if p.Nav == "" {
		p.Nav = name
	}
	var buf bytes.Buffer
	if err := pages[name].ExecuteTemplate(&buf, "layout.html", p); err != nil {
		http.Error(w, "dashboard: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

func (d *Dashboard) serveOverview(w http.ResponseWriter, r *http.Request) {
	d.render(w, http.StatusOK, "overview", pageData{Title: "Overview", Stream: "events", Flash: d.poolFlash(r), Data: d.overview()})
}

func (d *Dashboard) servePools(w http.ResponseWriter, r *http.Request) {
	d.render(w, http.StatusOK, "pools", pageData{Title: "Pools", Stream: "events", Flash: d.poolFlash(r), Data: d.overview()})
}

// poolFlash is the notice of a pause or resume the browser was sent back
// after (?done=pause&pool=NAME), or "": it names the pool only if it is
// one of the scheduler's (a notice never echoes arbitrary query text).
func (d *Dashboard) poolFlash(r *http.Request) string {
	q := r.URL.Query()
	pool := q.Get("pool")
	if _, known := d.s.PoolSizes()[pool]; !known {
		return ""
	}
	name := poolLabel(pool)
	switch q.Get("done") {
	case "pause":
		return "Pool " + name + " paused: it starts nothing until resumed; attempts already running go on."
	case "resume":
		return "Pool " + name + " resumed."
	}
	return ""
}

// servePause pauses (POST pools/pause) or resumes (POST pools/resume) the
// pool named by the form's pool ("" is the default pool): 303 back to the
// page named by the form's from (overview or pools, the default), or 200
// with JSON to a JSON request. Pausing a paused pool, or resuming one
// that runs, does nothing and succeeds. 403 when read-only, 400 without
// one pool, 404 for an unknown pool, 409 once the scheduler is shut
// down, each changing nothing.
func (d *Dashboard) servePause(w http.ResponseWriter, r *http.Request) {
	if !d.actionForm(w, r, 64<<10) {
		return
	}
	pools := r.PostForm["pool"]
	if len(pools) != 1 {
		d.fail(w, r, http.StatusBadRequest, "dashboard: which pool? the form needs one pool (empty for the default pool)")
		return
	}
	name := pools[0]
	pause := strings.HasSuffix(r.URL.Path, "/pause")
	var err error
	if pause {
		err = d.s.Pause(name)
	} else {
		err = d.s.Resume(name)
	}
	d.forgetOverview()
	switch {
	case errors.Is(err, coordinator.ErrUnknownPool):
		d.fail(w, r, http.StatusNotFound, fmt.Sprintf("dashboard: unknown pool %q", cut(name, 200)))
		return
	case errors.Is(err, coordinator.ErrClosed):
		d.fail(w, r, http.StatusConflict, "dashboard: the scheduler is shut down: its pools start nothing more")
		return
	case err != nil:
		d.fail(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	if wantsJSON(r) {
		writeJSON(w, http.StatusOK, map[string]any{"pool": name, "paused": d.s.Paused(name)})
		return
	}
	back := "pools"
	if r.PostForm.Get("from") == "overview" {
		back = ""
	}
	done := "resume"
	if pause {
		done = "pause"
	}
	http.Redirect(w, r, d.cfg.prefix+"/"+back+"?"+url.Values{"done": {done}, "pool": {name}}.Encode(), http.StatusSeeOther)
}

// tasksData is the tasks page.
type tasksData struct {
	Q        taskQuery
	Page     *taskPage
	Pools    []string
	Statuses []statusLink // each status with its count, under the filters but the status one
	Prev     template.URL // the previous page's query ("" on the first page)
	Next     template.URL
	Last     template.URL // the last page's query ("" on it)
	First    template.URL
	Columns  []column
	Sizes    []int
	Query    string // the filters, for "all matching" (encoded)
	ReadOnly bool
}

// statusLink is a status of the tasks page's filter, with its count.
type statusLink struct {
	Name    string
	Count   int
	Checked bool
}

// column is a header of the tasks table: a link that sorts by it (again:
// the other way), and aria-sort's value when the table is sorted by it.
type column struct {
	Name, Sort string
	Arrow      string       // ▲ or ▼ on the sorted column
	Link       template.URL // a query the handler encoded: html/template must not escape its = and &
}

// Summary says how many tasks matched and what the page shows.
func (d tasksData) Summary() string {
	p := d.Page
	s := fmt.Sprintf("%d matching tasks", p.Total)
	if len(p.Rows) > 0 {
		from := (d.Q.Page-1)*d.Q.Size + 1
		s += fmt.Sprintf("; %d to %d shown", from, from+len(p.Rows)-1)
	}
	switch {
	case d.Q.Sort == "submitted" && d.Q.Desc:
		s += ", newest first"
	case d.Q.Sort == "submitted":
		s += ", oldest first"
	default:
		dir := "ascending"
		if d.Q.Desc {
			dir = "descending"
		}
		s += fmt.Sprintf(", by %s, %s", d.Q.Sort, dir)
	}
	if p.Loading {
		s += " (the dashboard is still reading the scheduler's tasks: more will come)"
	}
	return s + "."
}

func (d *Dashboard) serveTasks(w http.ResponseWriter, r *http.Request) {
	sizes := d.s.PoolSizes()
	tq, err := parseTaskQuery(r.URL.Query(), sizes)
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	page, err := d.query(r.Context(), tq)
	if err != nil {
		return // the client went away while its query's result was built
	}
	if wantsJSON(r) {
		type row struct {
			ID       string    `json:"id"`
			Status   string    `json:"status"`
			Pool     string    `json:"pool"`
			Key      string    `json:"key,omitempty"`
			Priority int       `json:"priority"`
			When     string    `json:"when"`
			Attempts int       `json:"attempts"`
			Runs     int       `json:"runs"`
			Reruns   int       `json:"reruns"`
			Parent   string    `json:"parent,omitempty"`
			Cause    string    `json:"cause,omitempty"`
			Err      string    `json:"err,omitempty"`
			Seen     time.Time `json:"seen"`
			Since    time.Time `json:"since"`
		}
		out := struct {
			Rows   []row          `json:"rows"`
			Total  int            `json:"total"`
			Counts map[string]int `json:"counts"`
			Page   int            `json:"page"`
			Pages  int            `json:"pages"`
		}{Rows: []row{}, Total: page.Total, Counts: map[string]int{}, Page: tq.Page, Pages: page.Pages}
		for _, n := range statusNames {
			out.Counts[n.name] = page.Counts[n.st]
		}
		for _, t := range page.Rows {
			out.Rows = append(out.Rows, row{t.ID, t.Status.String(), t.Pool, t.Key, t.Priority, t.When.String(), t.Attempts, t.Runs, t.Reruns, t.Parent, t.Cause, t.Err, t.Seen, t.Since})
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	data := tasksData{Q: tq, Page: page, Sizes: []int{25, 50, 100, 200, 500}, ReadOnly: d.cfg.readOnly}
	for name := range sizes {
		data.Pools = append(data.Pools, name)
	}
	slices.Sort(data.Pools)
	for _, n := range statusNames {
		data.Statuses = append(data.Statuses, statusLink{Name: n.name, Count: page.Counts[n.st], Checked: slices.Contains(tq.Statuses, n.st)})
	}
	if tq.Page > 1 {
		data.Prev = template.URL(tq.values(tq.Page - 1).Encode())
		data.First = template.URL(tq.values(1).Encode())
	}
	if tq.Page < page.Pages {
		data.Next = template.URL(tq.values(tq.Page + 1).Encode())
		data.Last = template.URL(tq.values(page.Pages).Encode())
	}
	q := tq
	q.Page = 1
	data.Query = q.values(1).Encode()
	for _, k := range sortKeys {
		q := tq
		q.Sort, q.Desc = k, !(tq.Sort == k && tq.Desc)
		if tq.Sort != k && k != "submitted" {
			q.Desc = false
		}
		c := column{Name: k, Link: template.URL(q.values(1).Encode())}
		if tq.Sort == k {
			c.Sort, c.Arrow = "ascending", "▲"
			if tq.Desc {
				c.Sort, c.Arrow = "descending", "▼"
			}
		}
		data.Columns = append(data.Columns, c)
	}
	d.render(w, http.StatusOK, "tasks", pageData{Title: "Tasks", Stream: "events", Flash: actionFlash(r.URL.Query()), Data: data})
}

func (d *Dashboard) serveTask(w http.ResponseWriter, r *http.Request) {
	id, ok := r.URL.Query()["id"]
	if !ok || len(id) != 1 {
		d.fail(w, r, http.StatusBadRequest, "dashboard: which task? give its ID as ?id=")
		return
	}
	v, found, err := d.task(r.Context(), id[0], true)
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	if !found {
		d.fail(w, r, http.StatusNotFound, fmt.Sprintf("dashboard: unknown task %q (never submitted, or forgotten by retention)", cut(id[0], 200)))
		return
	}
	if wantsJSON(r) {
		writeJSON(w, http.StatusOK, v)
		return
	}
	flash := ""
	switch r.URL.Query().Get("done") {
	case "cancel":
		flash = "Cancel asked: a task that was running ends Cancelled once its function returns."
	case "rerun":
		if n, err := strconv.Atoi(r.URL.Query().Get("n")); err == nil && n >= 0 {
			flash = fmt.Sprintf("Re-run: %d tasks re-opened.", n)
		}
	}
	d.render(w, http.StatusOK, "task", pageData{Title: "Task " + cut(v.ID, 80), Nav: "tasks",
		Stream: "events?" + url.Values{"task": {v.ID}}.Encode(), Flash: flash, Data: v})
}

// serveCancel cancels the task named by the form's id: 303 to the task's
// page (200 with JSON to a JSON request); 403 when read-only, 400 without
// an id, 404 for an unknown task and 409 for one already final or being
// cancelled, each changing nothing.
func (d *Dashboard) serveCancel(w http.ResponseWriter, r *http.Request) {
	id, ok := d.taskForm(w, r)
	if !ok {
		return
	}
	info, ok := d.s.Info(id)
	if !ok {
		d.fail(w, r, http.StatusNotFound, fmt.Sprintf("dashboard: unknown task %q", cut(id, 200)))
		return
	}
	if !d.s.Cancel(id) {
		info, _ = d.s.Info(id)
		d.fail(w, r, http.StatusConflict, fmt.Sprintf("dashboard: task %q is %v: nothing to cancel (it is final, or already being cancelled)", cut(id, 200), info.Status))
		return
	}
	if wantsJSON(r) {
		info, _ = d.s.Info(id)
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "cancelled": true, "status": info.Status.String()})
		return
	}
	http.Redirect(w, r, d.cfg.prefix+"/task?"+url.Values{"id": {id}, "done": {"cancel"}}.Encode(), http.StatusSeeOther)
}

// graphData is the graph page.
type graphData struct {
	Q        graphQuery
	Query    string // for graph.json
	G        *graphView
	Pools    []string
	Statuses []string
	deps     [][]string
}

// HasStatus reports whether the graph's filter takes the status named name.
func (d graphData) HasStatus(name string) bool {
	st, _ := parseStatus(name)
	return slices.Contains(d.Q.Statuses, st)
}

// DepsOf returns the dependencies of node i that are in the graph.
func (d graphData) DepsOf(i int) []string { return d.deps[i] }

// Summary says what the graph shows.
func (d graphData) Summary() string {
	g := d.G
	s := fmt.Sprintf("%d tasks, %d dependencies", len(g.Nodes), len(g.Edges))
	if g.Root != "" {
		s = fmt.Sprintf("The tasks at most %d dependencies away from %s, both ways: ", g.Depth, g.Root) + s
	} else {
		what := "running or failed (the newest)"
		if len(d.Q.Statuses) > 0 {
			what = "of the filter (the newest)"
		}
		s = fmt.Sprintf("The tasks at most %d dependencies away from the %d tasks %s, both ways, and their spawned families: ", g.Depth, g.Roots, what) + s
		if g.Roots == 0 {
			s = "No task is running or failed: choose a task, or a status. " + s
		}
	}
	if g.Truncated {
		s += fmt.Sprintf("; cut at the %d nearest tasks: choose a task, a smaller depth or a status to see the rest", g.Limit)
	}
	return s + "."
}

func (d *Dashboard) serveGraph(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	sizes := d.s.PoolSizes()
	tq, err := parseTaskQuery(url.Values{"status": q["status"], "pool": q["pool"]}, sizes)
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	gq := graphQuery{Root: q.Get("id"), Depth: defaultDepth, Statuses: tq.Statuses, Pool: tq.Pool}
	if s := q.Get("depth"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxDepth {
			d.failErr(w, r, &badQuery{"depth", s, fmt.Sprintf("want a whole number from 1 to %d", maxDepth)})
			return
		}
		gq.Depth = n
	}
	g, err := d.graph(r.Context(), gq)
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	if wantsJSON(r) {
		writeJSON(w, http.StatusOK, g)
		return
	}
	data := graphData{Q: gq, G: g}
	jq := url.Values{}
	if gq.Root != "" {
		jq.Set("id", gq.Root)
		jq.Set("depth", strconv.Itoa(gq.Depth))
	}
	for _, st := range gq.Statuses {
		jq.Add("status", st.String())
	}
	if gq.Pool != anyPool {
		jq.Set("pool", gq.Pool)
	}
	data.Query = jq.Encode()
	for name := range sizes {
		data.Pools = append(data.Pools, name)
	}
	slices.Sort(data.Pools)
	for _, n := range statusNames {
		data.Statuses = append(data.Statuses, n.name)
	}
	data.deps = make([][]string, len(g.Nodes))
	for _, e := range g.Edges {
		data.deps[e[1]] = append(data.deps[e[1]], g.Nodes[e[0]].ID)
	}
	title := "Graph"
	if gq.Root != "" {
		title = "Graph around " + cut(gq.Root, 80)
	}
	d.render(w, http.StatusOK, "graph", pageData{Title: title, Stream: "events", Data: data})
}
