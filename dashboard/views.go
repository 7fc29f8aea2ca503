package dashboard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"html/template"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/batonhq/baton/coordinator"
)

// The views are what the templates render and what the JSON endpoints and
// the live stream send: plain values, built from one look at the
// scheduler and the recorder.

type countsView struct {
	Pending   int `json:"pending"`
	Ready     int `json:"ready"`
	Running   int `json:"running"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
	Skipped   int `json:"skipped"`
	Total     int `json:"total"`
}

func countsOf(c coordinator.Counts) countsView {
	return countsView{c.Pending, c.Ready, c.Running, c.Succeeded, c.Failed, c.Cancelled, c.Skipped, c.Total()}
}

func (c *countsView) add(o countsView) {
	c.Pending += o.Pending
	c.Ready += o.Ready
	c.Running += o.Running
	c.Succeeded += o.Succeeded
	c.Failed += o.Failed
	c.Cancelled += o.Cancelled
	c.Skipped += o.Skipped
	c.Total += o.Total
}

// statusCount is one status with its count, for the templates.
type statusCount struct {
	Name  string
	Count int
}

// List is the counts in status order, the total first.
func (c countsView) List() []statusCount {
	return []statusCount{{"total", c.Total}, {"pending", c.Pending}, {"ready", c.Ready}, {"running", c.Running},
		{"succeeded", c.Succeeded}, {"failed", c.Failed}, {"cancelled", c.Cancelled}, {"skipped", c.Skipped}}
}

type totalsView struct {
	Succeeded uint64 `json:"succeeded"`
	Failed    uint64 `json:"failed"`
	Cancelled uint64 `json:"cancelled"`
	Skipped   uint64 `json:"skipped"`
	Retries   uint64 `json:"retries"`
}

// poolView is one pool: its size, whether it is paused and its rate
// limit, its tasks now, its totals since the scheduler started and its
// rates over the last minute.
type poolView struct {
	Name           string       `json:"name"`
	Label          string       `json:"label"` // "default" for the default pool
	Size           int          `json:"size"`
	Paused         bool         `json:"paused"`    // Scheduler.Pause: it starts nothing until resumed
	RateLimit      float64      `json:"rateLimit"` // starts a second at most (Scheduler.RateLimit); 0 for none
	RateBurst      int          `json:"rateBurst"`
	LimitText      string       `json:"limitText"` // the rate limit in words: "none", "2/s, bursts of 5"
	Counts         countsView   `json:"counts"`
	Totals         totalsView   `json:"totals"`
	Waiting        int          `json:"waiting"`        // ready, not yet running
	Busy           int          `json:"busy"`           // percent of the pool's workers running an attempt
	StartedPerMin  float64      `json:"startedPerMin"`  // attempts started per minute, over the last minute
	FinishedPerMin float64      `json:"finishedPerMin"` // attempts ended per minute (success or failure)
	FailedPerMin   float64      `json:"failedPerMin"`   // attempts failed per minute (retried or not)
	TasksQuery     template.URL `json:"tasksQuery"`     // the tasks page's query for this pool (encoded: not to escape again)
}

type runningView struct {
	ID      string    `json:"id"`
	Pool    string    `json:"pool"`
	Attempt int       `json:"attempt"`
	Run     int       `json:"run"`
	Start   time.Time `json:"start"`
	For     float64   `json:"for"` // seconds it has run, at the view's At
}

type failureView struct {
	ID      string    `json:"id"`
	Pool    string    `json:"pool"`
	Attempt int       `json:"attempt"`
	Run     int       `json:"run"`
	Outcome string    `json:"outcome"`
	Err     string    `json:"err"`
	At      time.Time `json:"at"`
}

type rateView struct {
	T        time.Time `json:"t"`        // the bucket's start
	Finished uint64    `json:"finished"` // attempts that ended
	Failed   uint64    `json:"failed"`   // of which failed
	// The bars of the chart (a 600×120 box): x, and y and height of the
	// bar of attempts ended and of the bar of failures.
	X, Y, H, FY, FH int `json:"-"`
}

// overviewView is the overview page, and what the live stream sends.
type overviewView struct {
	At            time.Time     `json:"at"`
	Counts        countsView    `json:"counts"`
	Pools         []poolView    `json:"pools"`
	Running       []runningView `json:"running"`       // the longest running first
	RunningSeen   int           `json:"runningSeen"`   // attempts running that the dashboard saw start
	RunningUnseen int           `json:"runningUnseen"` // running, started before the dashboard (or not reported yet)
	Rate          []rateView    `json:"rate"`          // the last 10 minutes, a bar per bucketWidth
	RateMax       uint64        `json:"rateMax"`
	RateText      string        `json:"rateText"`    // what the chart shows, in words
	RunningText   string        `json:"runningText"` // how many run, how many are shown
	Failures      []failureView `json:"failures"`    // the newest first
	Paused        []string      `json:"paused"`      // the paused pools' labels, in name order
	Events        uint64        `json:"events"`      // events seen since the dashboard was made
}

const (
	runningShown  = 25
	runningLooked = 1 << 14 // running tasks a look (sample) takes in: more are counted, not listed
	failuresShown = 10
	rateBuckets   = 60 // 10 minutes
)

func poolLabel(name string) string {
	if name == "" {
		return "default"
	}
	return name
}

// overview builds the overview, or returns the one built less than half
// an interval ago (or, with no event since and the scheduler's totals
// as they were, less than a refresh ago), so that many open pages cost
// the scheduler what one does.
func (d *Dashboard) overview() *overviewView {
	d.ovMu.Lock()
	defer d.ovMu.Unlock()
	now := d.cfg.clk.Now()
	events, _ := d.rec.seen()
	totals := d.s.Totals()
	sum := totalsSum(totals)
	if d.ov != nil {
		age := now.Sub(d.ovAt)
		if age >= 0 && (age < d.cfg.interval/2 || (events == d.ovEvents && sum == d.ovTotals && age < d.cfg.refresh/2)) {
			return d.ov
		}
	}
	d.ov, d.ovAt, d.ovEvents, d.ovTotals = d.buildOverview(now, totals), now, events, sum
	return d.ov
}

// totalsSum sums the scheduler's totals over its pools and statuses: it
// grows with every attempt that ends.
func totalsSum(totals map[string]coordinator.Totals) uint64 {
	var n uint64
	for _, t := range totals {
		n += t.Succeeded + t.Failed + t.Cancelled + t.Skipped + t.Retries
	}
	return n
}

// forgetOverview drops the overview built last, so that the next page
// shows what an action just changed, even with no live page open (then
// the dashboard hears no event of it).
func (d *Dashboard) forgetOverview() {
	d.ovMu.Lock()
	d.ov = nil
	d.ovMu.Unlock()
}

func (d *Dashboard) buildOverview(now time.Time, totals map[string]coordinator.Totals) *overviewView {
	byPool := d.s.CountsByPool()
	sizes := d.s.PoolSizes()
	if d.subscribed() {
		d.sample(now, totals)
	}
	v := &overviewView{At: now, Pools: []poolView{}, Running: []runningView{}, Rate: []rateView{}, Failures: []failureView{}, Paused: []string{}}
	v.Events, _ = d.rec.seen()
	for name := range sizes {
		c := countsOf(byPool[name])
		t := totals[name]
		p := poolView{
			Name: name, Label: poolLabel(name), Size: sizes[name], Paused: byPool[name].Paused, Counts: c, Waiting: c.Ready,
			Totals:     totalsView{t.Succeeded, t.Failed, t.Cancelled, t.Skipped, t.Retries},
			TasksQuery: template.URL(taskQuery{Pool: name}.values(1).Encode()),
		}
		if p.Size > 0 {
			p.Busy = min(100, 100*c.Running/p.Size)
		}
		p.RateLimit, p.RateBurst = d.s.RateLimit(name)
		p.LimitText = limitText(p.RateLimit, p.RateBurst)
		p.StartedPerMin, p.FinishedPerMin, p.FailedPerMin = d.perMinute(name, now)
		v.Counts.add(c)
		v.Pools = append(v.Pools, p)
	}
	slices.SortFunc(v.Pools, func(a, b poolView) int { return cmp.Compare(a.Name, b.Name) })
	for _, p := range v.Pools {
		if p.Paused {
			v.Paused = append(v.Paused, p.Label)
		}
	}
	running, seen := d.rec.runningNow(runningShown)
	v.RunningSeen = seen
	v.RunningUnseen = max(0, v.Counts.Running-seen)
	for _, a := range running {
		v.Running = append(v.Running, runningView{ID: a.Task, Pool: a.Pool, Attempt: a.Attempt, Run: a.Run,
			Start: a.Start, For: a.Duration(now).Seconds()})
	}
	for _, b := range d.rec.rates("", true, now, rateBuckets) {
		r := rateView{T: time.Unix(0, b.stamp*int64(bucketWidth)), Finished: b.OK + b.Retried + b.Failed, Failed: b.Retried + b.Failed}
		v.RateMax = max(v.RateMax, r.Finished)
		v.Rate = append(v.Rate, r)
	}
	var ended, failed uint64
	for i := range v.Rate {
		r := &v.Rate[i]
		ended += r.Finished
		failed += r.Failed
		r.X = 10 * i
		if v.RateMax > 0 {
			r.H = int(120 * r.Finished / v.RateMax)
			r.FH = int(120 * r.Failed / v.RateMax)
		}
		r.Y, r.FY = 120-r.H, 120-r.FH
	}
	v.RateText = fmt.Sprintf("%d attempts ended in the last 10 minutes, %d of them failed; at most %d in 10 seconds", ended, failed, v.RateMax)
	v.RunningText = fmt.Sprintf("%d running", v.Counts.Running)
	if seen > len(running) {
		v.RunningText += fmt.Sprintf("; the %d longest running shown", len(running))
	}
	if v.RunningUnseen > 0 {
		v.RunningText += fmt.Sprintf("; %d started before the dashboard did, or have not reported their start yet", v.RunningUnseen)
	}
	v.RunningText += "."
	for _, a := range d.rec.recentFailures(failuresShown) {
		v.Failures = append(v.Failures, failureView{ID: a.Task, Pool: a.Pool, Attempt: a.Attempt, Run: a.Run,
			Outcome: a.Outcome.String(), Err: cut(a.Err, 300), At: a.End})
	}
	return v
}

// limitText is a rate limit in words.
func limitText(perSecond float64, burst int) string {
	if perSecond <= 0 {
		return "none"
	}
	r := strconv.FormatFloat(perSecond, 'g', 4, 64) + "/s"
	if burst > 1 {
		r += fmt.Sprintf(", bursts of %d", burst)
	}
	return r
}

// perMinute returns a pool's attempts started, ended and failed per
// minute over the last minute (the buckets that cover it, the current
// one partly).
func (d *Dashboard) perMinute(pool string, now time.Time) (started, finished, failed float64) {
	const n = int(time.Minute/bucketWidth) + 1
	bs := d.rec.rates(pool, false, now, n)
	var s, f, x uint64
	for _, b := range bs {
		s += b.Started
		f += b.OK + b.Retried + b.Failed
		x += b.Retried + b.Failed
	}
	window := now.Sub(time.Unix(0, bs[0].stamp*int64(bucketWidth))).Minutes()
	if window <= 0 {
		return 0, 0, 0
	}
	return float64(s) / window, float64(f) / window, float64(x) / window
}

// depView is a task next to another: one of its dependencies or dependents.
type depView struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Cause  string `json:"cause,omitempty"`
}

type attemptView struct {
	Run      int       `json:"run"`
	Attempt  int       `json:"attempt"`
	Outcome  string    `json:"outcome"`
	Start    time.Time `json:"start"` // zero: before the dashboard
	Duration string    `json:"duration"`
	Err      string    `json:"err,omitempty"`
}

// taskView is the task page, and what its live stream sends.
type taskView struct {
	ID         string        `json:"id"`
	Status     string        `json:"status"`
	Final      bool          `json:"final"`
	Pool       string        `json:"pool"`
	Key        string        `json:"key,omitempty"` // its flow-control key
	Slots      int           `json:"slots"`         // the workers of its pool an attempt takes
	Priority   int           `json:"priority"`
	When       string        `json:"when"`
	Attempts   int           `json:"attempts"`
	Runs       int           `json:"runs"`
	Err        string        `json:"err,omitempty"`
	Cause      string        `json:"cause,omitempty"`
	HasResult  bool          `json:"hasResult"`
	Result     string        `json:"result,omitempty"` // a preview: cut, and %v for anything but text
	Upstream   []depView     `json:"upstream"`
	UpMore     bool          `json:"upMore"`
	Dependents []depView     `json:"dependents"`
	DownMore   bool          `json:"downMore"`
	Parent     string        `json:"parent,omitempty"` // the task whose attempt spawned it
	ChildCount int           `json:"childCount"`       // the tasks its attempts spawned (TaskInfo.Children), live
	Joining    bool          `json:"joining"`          // its attempt returned; it waits for its children (TaskInfo.Joining)
	Children   []depView     `json:"children"`         // the first of them held, in the scheduler's order (Snapshot's); full only
	ChildMore  bool          `json:"childMore"`
	History    []attemptView `json:"history"`
	Unseen     int           `json:"unseen"` // attempts of the current run the dashboard has no record of
	CanCancel  bool          `json:"canCancel"`
}

const neighboursShown = 200

func (d *Dashboard) task(ctx context.Context, id string, full bool) (*taskView, bool, error) {
	info, ok := d.s.Info(id)
	if !ok {
		return nil, false, nil
	}
	now := d.cfg.clk.Now()
	v := &taskView{ID: info.ID, Status: info.Status.String(), Final: info.Status.Final(), Pool: info.Pool,
		Priority: info.Priority, When: info.When.String(), Attempts: info.Attempts, Runs: info.Runs,
		Cause: info.Cause, HasResult: info.Result != nil, Parent: info.Parent, ChildCount: info.Children, Joining: info.Joining, Key: info.Key, Slots: info.Slots}
	if info.Err != nil {
		v.Err = cut(info.Err.Error(), errTextLimit)
	}
	if v.HasResult {
		v.Result = preview(info.Result)
	}
	v.CanCancel = !d.cfg.readOnly && !v.Final
	hist := d.rec.history(id)
	lastRun, inRun := 0, 0
	for _, a := range hist {
		av := attemptView{Run: a.Run, Attempt: a.Attempt, Outcome: a.Outcome.String(), Start: a.Start, Err: a.Err}
		if a.Start.IsZero() {
			av.Duration = "?"
		} else {
			av.Duration = roundDuration(a.Duration(now)).String()
		}
		v.History = append(v.History, av)
		if a.Run > lastRun {
			lastRun, inRun = a.Run, 0
		}
		if a.Run == lastRun {
			inRun++
		}
	}
	// The attempts of the current (or last) run the dashboard did not see:
	// made before it subscribed, or forgotten (WithHistory).
	if lastRun == info.Runs || lastRun == info.Runs+1 {
		v.Unseen = max(0, info.Attempts-inRun)
	} else {
		v.Unseen = info.Attempts
	}
	if !full {
		return v, true, nil
	}
	var err error
	if v.Upstream, v.UpMore, err = d.neighbours(ctx, id, true); err == nil {
		v.Dependents, v.DownMore, err = d.neighbours(ctx, id, false)
	}
	if err == nil && v.ChildCount > 0 {
		v.Children, v.ChildMore, err = d.children(ctx, id)
	}
	if errors.Is(err, coordinator.ErrUnknownTask) {
		return nil, false, nil // forgotten by retention since Info
	}
	if err != nil {
		return nil, true, err
	}
	return v, true, nil
}

// neighbours returns a task's direct dependencies (up) or dependents, in
// the order the edges give them, at most neighboursShown.
func (d *Dashboard) neighbours(ctx context.Context, id string, up bool) ([]depView, bool, error) {
	f := coordinator.SnapshotFilter{Roots: []string{id}, Depth: 1, Limit: neighboursShown + 1}
	if up {
		f.Ancestors = true
	} else {
		f.Descendants = true
	}
	snap, err := d.s.Snapshot(ctx, f)
	if err != nil {
		return nil, false, err
	}
	byID := make(map[string]*coordinator.SnapshotTask, len(snap.Tasks))
	for i := range snap.Tasks {
		byID[snap.Tasks[i].ID] = &snap.Tasks[i]
	}
	out := []depView{}
	for _, e := range snap.Edges {
		other := e.From
		if !up {
			other = e.To
		}
		if (up && e.To != id) || (!up && e.From != id) {
			continue
		}
		t := byID[other]
		out = append(out, depView{ID: t.ID, Status: t.Status.String(), Cause: t.Cause})
	}
	more := snap.Truncated
	if len(out) > neighboursShown {
		out, more = out[:neighboursShown], true
	}
	return out, more, nil
}

// children returns the tasks a task's attempts spawned, in the order the
// scheduler holds them, at most neighboursShown.
func (d *Dashboard) children(ctx context.Context, id string) ([]depView, bool, error) {
	// One more than shown, and the task itself, to know whether there are more.
	snap, err := d.s.Snapshot(ctx, coordinator.SnapshotFilter{Roots: []string{id}, Children: true, Depth: 1, Limit: neighboursShown + 2})
	if err != nil {
		return nil, false, err
	}
	out := []depView{}
	for _, t := range snap.Tasks {
		if t.Parent == id {
			out = append(out, depView{ID: t.ID, Status: t.Status.String(), Cause: t.Cause})
		}
	}
	more := snap.Truncated
	if len(out) > neighboursShown {
		out, more = out[:neighboursShown], true
	}
	return out, more, nil
}

// roundDuration keeps three significant digits or so.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second)
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond / 10)
}

const previewLimit = 4000

// preview is a task's result as the task page shows it: text as it is,
// bytes as text if they are text (else their size and first bytes in
// hex), anything else as fmt's %+v, cut at previewLimit bytes. A String
// or Error method that panics gives a note, not a crash.
func preview(v any) (s string) {
	defer func() {
		if r := recover(); r != nil {
			s = fmt.Sprintf("(no preview: formatting the result panicked: %v)", r)
		}
	}()
	switch x := v.(type) {
	case string:
		s = x
	case []byte:
		if utf8.Valid(x) && !strings.ContainsFunc(string(x), func(r rune) bool { return !unicode.IsPrint(r) && !unicode.IsSpace(r) }) {
			s = string(x)
		} else {
			s = fmt.Sprintf("%d bytes: % x", len(x), x[:min(len(x), 64)])
		}
	default:
		s = fmt.Sprintf("%+v", v)
	}
	return cut(s, previewLimit)
}

// graphNode and graphView are the graph page's JSON.
type graphNode struct {
	ID       string `json:"id"`
	Status   string `json:"status"`
	Pool     string `json:"pool"`
	Attempts int    `json:"attempts"`
	Root     bool   `json:"root,omitempty"`
}

type graphView struct {
	Nodes     []graphNode `json:"nodes"`
	Edges     [][2]int    `json:"edges"` // indices into Nodes: from (the dependency), to
	Truncated bool        `json:"truncated"`
	Root      string      `json:"root,omitempty"`
	Depth     int         `json:"depth,omitempty"`
	Limit     int         `json:"limit"`
}

// graphQuery is the graph page's query: a task's neighbourhood, or the
// first tasks of a filter.
type graphQuery struct {
	Root     string
	Depth    int
	Statuses []coordinator.Status
	Pool     string
}

const (
	defaultDepth = 2
	maxDepth     = 10
)

func (d *Dashboard) graph(ctx context.Context, q graphQuery) (*graphView, error) {
	limit := d.cfg.graphLimit
	f := coordinator.SnapshotFilter{Statuses: q.Statuses, Limit: limit}
	if q.Root != "" {
		f.Roots, f.Ancestors, f.Descendants, f.Depth = []string{q.Root}, true, true, q.Depth
	}
	if q.Pool != anyPool {
		f.Limit = 0 // cut after the pool is filtered
	}
	snap, err := d.s.Snapshot(ctx, f)
	if err != nil {
		return nil, err
	}
	tasks := snap.Tasks
	v := &graphView{Root: q.Root, Depth: q.Depth, Limit: limit, Truncated: snap.Truncated, Edges: [][2]int{}, Nodes: []graphNode{}}
	if q.Pool != anyPool {
		tasks = slices.DeleteFunc(tasks, func(t coordinator.SnapshotTask) bool { return t.Pool != q.Pool })
		if len(tasks) > limit {
			tasks, v.Truncated = tasks[:limit], true
		}
	}
	index := make(map[string]int, len(tasks))
	for i, t := range tasks {
		index[t.ID] = i
		v.Nodes = append(v.Nodes, graphNode{ID: t.ID, Status: t.Status.String(), Pool: t.Pool, Attempts: t.Attempts, Root: t.ID == q.Root})
	}
	for _, e := range snap.Edges {
		from, ok1 := index[e.From]
		to, ok2 := index[e.To]
		if ok1 && ok2 {
			v.Edges = append(v.Edges, [2]int{from, to})
		}
	}
	return v, nil
}
