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
	OldestWait     string       `json:"oldestWait"`     // how long the oldest ready task has waited (queue latency); "" if none waits
	TasksQuery     template.URL `json:"tasksQuery"`     // the tasks page's query for this pool (encoded: not to escape again)
}

type runningView struct {
	ID    string    `json:"id"`
	Pool  string    `json:"pool"`
	Start time.Time `json:"start"` // zero: unknown (it ran before the dashboard, which has not looked it up yet)
	For   string    `json:"for"`   // how long it has run, in words ("" if unknown)
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
	X, Y, H, FY, FH int    `json:"-"`
	Title           string `json:"-"` // the values, shown on hover
}

// axisTick is a label of the chart's axes.
type axisTick struct {
	X, Y  int
	Label string
}

// overviewView is the overview page, and what the live stream sends.
type overviewView struct {
	At          time.Time     `json:"at"`
	Counts      countsView    `json:"counts"`
	Pools       []poolView    `json:"pools"`
	Running     []runningView `json:"running"` // the longest running first
	Rate        []rateView    `json:"rate"`    // the last 10 minutes, a bar per bucketWidth
	RateMax     uint64        `json:"rateMax"`
	RateText    string        `json:"rateText"`    // what the chart shows, in words
	XTicks      []axisTick    `json:"-"`           // the chart's time axis
	YTicks      []axisTick    `json:"-"`           // its count axis
	RunningText string        `json:"runningText"` // how many run, how many are shown
	Failures    []failureView `json:"failures"`    // the newest first
	Paused      []string      `json:"paused"`      // the paused pools' labels, in name order
	Loading     string        `json:"loading"`     // while the dashboard's first read of the tasks goes on: how far it is
	Version     uint64        `json:"version"`     // the copy's version it was built from
}

const (
	runningShown  = 25
	failuresShown = 10
	rateBuckets   = 60 // 10 minutes
)

func poolLabel(name string) string {
	if name == "" {
		return "default"
	}
	return name
}

// overview builds the overview, or returns the one built less than an
// interval ago from the same version of the copy (or, with no change,
// less than a refresh ago), so that many open pages cost what one does.
func (d *Dashboard) overview() *overviewView {
	d.ovMu.Lock()
	defer d.ovMu.Unlock()
	now := d.cfg.clk.Now()
	_, version := d.mir.watch()
	if d.ov != nil {
		age := now.Sub(d.ovAt)
		if age >= 0 && (age < d.cfg.interval/2 || (version == d.ovV && age < d.cfg.refresh/2)) {
			return d.ov
		}
	}
	d.ov, d.ovAt, d.ovV = d.buildOverview(now), now, version
	return d.ov
}

// forgetOverview drops the overview built last, so that the next page
// shows what an action just changed.
func (d *Dashboard) forgetOverview() {
	d.ovMu.Lock()
	d.ov = nil
	d.ovMu.Unlock()
}

// buildOverview reads the copy, and asks the scheduler for its totals
// (a round trip that costs the same at any number of tasks), each pool's
// pause and rate limit (no round trip), and the start of each attempt
// running that the copy has no start for (one History each, only for
// tasks that ran before the dashboard started).
func (d *Dashboard) buildOverview(now time.Time) *overviewView {
	sizes := d.s.PoolSizes()
	totals := d.s.Totals()
	m := d.mir
	v := &overviewView{At: now, Pools: []poolView{}, Running: []runningView{}, Rate: []rateView{}, Failures: []failureView{}, Paused: []string{}}
	m.mu.RLock()
	v.Version = m.version
	if !m.synced {
		v.Loading = fmt.Sprintf("Reading the scheduler's tasks: %d so far.", m.loaded)
	}
	for name := range sizes {
		var c countsView
		if sc := m.counts[name]; sc != nil {
			c = countsOfStatus(sc)
		}
		t := totals[name]
		p := poolView{
			Name: name, Label: poolLabel(name), Size: sizes[name], Paused: d.s.Paused(name), Counts: c, Waiting: c.Ready,
			Totals:     totalsView{t.Succeeded, t.Failed, t.Cancelled, t.Skipped, t.Retries},
			TasksQuery: template.URL(taskQuery{Pool: name, Sort: "submitted", Desc: true}.values(1).Encode()),
		}
		if q := m.ready[name]; q != nil && q.Len() > 0 {
			if w, ok := q.Min(); ok && !w.r.since.IsZero() {
				r := w.r
				p.OldestWait = roundDuration(now.Sub(r.since)).String()
			} else if ok {
				p.OldestWait = "since before the dashboard"
			}
		}
		if p.Size > 0 {
			p.Busy = min(100, 100*c.Running/p.Size)
		}
		p.RateLimit, p.RateBurst = d.s.RateLimit(name)
		p.LimitText = limitText(p.RateLimit, p.RateBurst)
		p.StartedPerMin, p.FinishedPerMin, p.FailedPerMin = perMinute(m.rates(name, false, now, int(time.Minute/bucketWidth)+1), now)
		v.Counts.add(c)
		v.Pools = append(v.Pools, p)
	}
	running := make([]*row, 0, len(m.running))
	for r := range m.running {
		running = append(running, r)
	}
	slices.SortFunc(running, func(a, b *row) int {
		if c := cmp.Compare(b2i(a.since.IsZero()), b2i(b.since.IsZero())); c != 0 {
			return -c // unknown starts (before the dashboard) first: the longest
		}
		if c := a.since.Compare(b.since); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	for _, r := range running[:min(len(running), runningShown)] {
		v.Running = append(v.Running, runningView{ID: r.ID, Pool: r.Pool, Start: r.since})
	}
	buckets := m.rates("", true, now, rateBuckets)
	for _, f := range m.recentFailures(failuresShown) {
		v.Failures = append(v.Failures, failureView{ID: f.ID, Pool: f.Pool, Attempt: f.Attempt, Run: f.Run, Outcome: f.Outcome, Err: cut(f.Err, 300), At: f.At})
	}
	m.mu.RUnlock()
	// Attempts running since before the dashboard: their start from the
	// history, once (at most runningShown round trips, and only for tasks
	// the copy found running when it started), kept in the copy.
	for i := range v.Running {
		rv := &v.Running[i]
		if !rv.Start.IsZero() {
			continue
		}
		if h, ok := d.s.History(rv.ID); ok && len(h.Attempts) > 0 {
			if a := h.Attempts[len(h.Attempts)-1]; a.Ended.IsZero() && !a.Started.IsZero() {
				rv.Start = a.Started
				m.mu.Lock()
				if r := m.byID[rv.ID]; r != nil && r.Status == coordinator.Running && r.since.IsZero() {
					r.since = a.Started
				}
				m.mu.Unlock()
			}
		}
	}
	for i := range v.Running {
		if rv := &v.Running[i]; !rv.Start.IsZero() {
			rv.For = roundDuration(max(0, now.Sub(rv.Start))).String()
		}
	}
	// The longest running first; starts still unknown last.
	slices.SortStableFunc(v.Running, func(a, b runningView) int {
		if c := cmp.Compare(b2i(a.Start.IsZero()), b2i(b.Start.IsZero())); c != 0 {
			return c
		}
		return a.Start.Compare(b.Start)
	})
	slices.SortFunc(v.Pools, func(a, b poolView) int { return cmp.Compare(a.Name, b.Name) })
	for _, p := range v.Pools {
		if p.Paused {
			v.Paused = append(v.Paused, p.Label)
		}
	}
	for _, b := range buckets {
		r := rateView{T: time.Unix(0, b.stamp*int64(bucketWidth)), Finished: b.ended, Failed: b.failures}
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
		r.Title = fmt.Sprintf("%s–%s: %d ended, %d failed", r.T.UTC().Format("15:04:05"), r.T.Add(bucketWidth).UTC().Format("15:04:05"), r.Finished, r.Failed)
	}
	for i := 0; i <= rateBuckets; i += 12 {
		t := now.Add(-time.Duration(rateBuckets-i) * bucketWidth)
		v.XTicks = append(v.XTicks, axisTick{X: 10 * i, Y: 134, Label: t.UTC().Format("15:04")})
	}
	v.YTicks = []axisTick{{X: 0, Y: 4, Label: strconv.FormatUint(v.RateMax, 10)}, {X: 0, Y: 64, Label: strconv.FormatUint(v.RateMax/2, 10)}, {X: 0, Y: 124, Label: "0"}}
	v.RateText = fmt.Sprintf("%d attempts ended in the last 10 minutes, %d of them failed; at most %d in 10 seconds", ended, failed, v.RateMax)
	v.RunningText = fmt.Sprintf("%d running", v.Counts.Running)
	if v.Counts.Running > len(v.Running) {
		v.RunningText += fmt.Sprintf("; the %d longest running shown", len(v.Running))
	}
	v.RunningText += "."
	return v
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func countsOfStatus(c *statusCounts) countsView {
	v := countsView{c[coordinator.Pending], c[coordinator.Ready], c[coordinator.Running], c[coordinator.Succeeded],
		c[coordinator.Failed], c[coordinator.Cancelled], c[coordinator.Skipped], 0}
	for _, n := range c {
		v.Total += n
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

// perMinute returns attempts started, ended and failed per minute over
// the buckets that cover the last minute (the current one partly).
func perMinute(bs []endBucket, now time.Time) (started, finished, failed float64) {
	var st, f, x uint64
	for _, b := range bs {
		st += b.started
		f += b.ended
		x += b.failures
	}
	window := now.Sub(time.Unix(0, bs[0].stamp*int64(bucketWidth))).Minutes()
	if window <= 0 {
		return 0, 0, 0
	}
	return float64(st) / window, float64(f) / window, float64(x) / window
}

// depView is a task next to another: one of its dependencies or dependents.
type depView struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Cause  string `json:"cause,omitempty"`
	Err    string `json:"err,omitempty"`
}

type logView struct {
	Time  time.Time `json:"time"`
	Level string    `json:"level"`
	Msg   string    `json:"msg"`
	Attrs string    `json:"attrs,omitempty"`
}

type attemptView struct {
	Run       int       `json:"run"`
	Attempt   int       `json:"attempt"`
	Rerun     int       `json:"rerun"`
	Outcome   string    `json:"outcome"`
	Worker    string    `json:"worker,omitempty"`
	HandedOut time.Time `json:"handedOut"`
	Start     time.Time `json:"start"` // zero: unknown
	End       time.Time `json:"end"`   // zero: it runs
	Duration  string    `json:"duration"`
	Err       string    `json:"err,omitempty"`
	Logs      []logView `json:"logs"`
	Dropped   int       `json:"logsDropped"`
}

// childCount is the count of a spawner's children of one status.
type childCount struct {
	Status string       `json:"status"`
	Count  int          `json:"count"`
	Query  template.URL `json:"query"` // the tasks table's query of them
}

// taskView is the task page, and what its live stream sends.
type taskView struct {
	ID          string        `json:"id"`
	Status      string        `json:"status"`
	Final       bool          `json:"final"`
	Pool        string        `json:"pool"`
	Key         string        `json:"key,omitempty"` // its flow-control key
	Slots       int           `json:"slots"`         // the workers of its pool an attempt takes
	Priority    int           `json:"priority"`
	When        string        `json:"when"`
	Attempts    int           `json:"attempts"`
	Runs        int           `json:"runs"`
	Reruns      int           `json:"reruns"`
	Err         string        `json:"err,omitempty"`
	Cause       string        `json:"cause,omitempty"`
	HasResult   bool          `json:"hasResult"`
	Result      string        `json:"result,omitempty"` // a preview: cut, and %v for anything but text
	Submitted   string        `json:"submitted"`        // when the dashboard first saw it, in words
	Retry       string        `json:"retry"`            // its retry policy, in words
	Timeout     string        `json:"timeout,omitempty"`
	Delay       string        `json:"delay,omitempty"`    // not before …
	Schedule    string        `json:"schedule,omitempty"` // its series, in words
	Next        string        `json:"next,omitempty"`     // when it is due to start next (a delay, a backoff, a series), in words
	Upstream    []depView     `json:"upstream"`
	UpMore      bool          `json:"upMore"`
	Dependents  []depView     `json:"dependents"`
	DownMore    bool          `json:"downMore"`
	Parent      string        `json:"parent,omitempty"` // the task whose attempt spawned it
	ChildCount  int           `json:"childCount"`       // the tasks its attempts spawned (TaskInfo.Children), live
	Joining     bool          `json:"joining"`          // its attempt returned; it waits for its children (TaskInfo.Joining)
	Children    []depView     `json:"children"`         // the first of them, newest first; full only
	ChildMore   bool          `json:"childMore"`
	ChildCounts []childCount  `json:"childCounts"`           // by status, each a link to the table of them
	ChildFailed *depView      `json:"childFailed,omitempty"` // a failed child, with its error
	History     []attemptView `json:"history"`               // the newest first
	Dropped     int           `json:"dropped"`               // older attempts the scheduler no longer keeps (WithHistory)
	CanCancel   bool          `json:"canCancel"`
	CanRerun    bool          `json:"canRerun"`
}

const neighboursShown = 200

func (d *Dashboard) task(ctx context.Context, id string, full bool) (*taskView, bool, error) {
	info, ok := d.s.Info(id)
	if !ok {
		return nil, false, nil
	}
	now := d.cfg.clk.Now()
	v := &taskView{ID: info.ID, Status: info.Status.String(), Final: info.Status.Final(), Pool: info.Pool,
		Priority: info.Priority, When: info.When.String(), Attempts: info.Attempts, Runs: info.Runs, Reruns: info.Reruns,
		Cause: info.Cause, HasResult: info.Result != nil, Parent: info.Parent, ChildCount: info.Children, Joining: info.Joining, Key: info.Key, Slots: info.Slots,
		History: []attemptView{}, ChildCounts: []childCount{}}
	if info.Err != nil {
		v.Err = cut(info.Err.Error(), errTextLimit)
	}
	if v.HasResult {
		v.Result = preview(info.Result)
	}
	v.CanCancel = !d.cfg.readOnly && !v.Final
	v.CanRerun = !d.cfg.readOnly && (info.Status == coordinator.Failed || info.Status == coordinator.Cancelled || info.Status == coordinator.Skipped)
	if det, ok := d.s.Detail(id); ok {
		v.Retry = retryText(det.Retry)
		if det.Timeout > 0 {
			v.Timeout = det.Timeout.String() + " per attempt"
		}
		if !det.NotBefore.IsZero() {
			v.Delay = "not before " + stamp(det.NotBefore)
		}
		switch {
		case det.Every > 0:
			v.Schedule = "every " + det.Every.String()
		case det.Schedule != nil:
			v.Schedule = "on a schedule"
			if st, ok := det.Schedule.(fmt.Stringer); ok {
				v.Schedule = "on " + cut(st.String(), 200)
			}
		}
		if v.Schedule != "" && det.Times > 0 {
			v.Schedule += fmt.Sprintf(", %d runs in all", det.Times)
		}
		if !det.Next.IsZero() {
			v.Next = stamp(det.Next) + " (in " + roundDuration(max(0, det.Next.Sub(now))).String() + ")"
		}
	}
	d.mir.mu.RLock()
	if r := d.mir.byID[id]; r != nil && !r.seen.IsZero() {
		v.Submitted = stamp(r.seen) + " (as the dashboard saw it)"
	} else {
		v.Submitted = "before the dashboard started"
	}
	d.mir.mu.RUnlock()
	if h, ok := d.s.History(id); ok {
		v.Dropped = h.Dropped
		for i := len(h.Attempts) - 1; i >= 0; i-- {
			a := h.Attempts[i]
			av := attemptView{Run: a.Run, Attempt: a.Attempt, Rerun: a.Rerun, Outcome: a.Outcome.String(), Worker: a.Worker,
				HandedOut: a.HandedOut, Start: a.Started, End: a.Ended, Dropped: a.LogsDropped, Logs: []logView{}}
			switch {
			case a.Started.IsZero():
				av.Duration = "?"
			default:
				av.Duration = roundDuration(a.Duration(now)).String()
			}
			if a.Err != nil {
				av.Err = cut(a.Err.Error(), errTextLimit)
			}
			for _, l := range a.Logs {
				lv := logView{Time: l.Time, Level: l.Level.String(), Msg: cut(l.Message, 2000)}
				if len(l.Attrs) > 0 {
					lv.Attrs = cut(fmt.Sprint(l.Attrs), 500)
				}
				av.Logs = append(av.Logs, lv)
			}
			v.History = append(v.History, av)
		}
	}
	if !full {
		return v, true, nil
	}
	var err error
	if v.Upstream, v.UpMore, err = d.neighbours(ctx, id, true); err == nil {
		v.Dependents, v.DownMore, err = d.neighbours(ctx, id, false)
	}
	if errors.Is(err, coordinator.ErrUnknownTask) {
		return nil, false, nil // forgotten by retention since Info
	}
	if err != nil {
		return nil, true, err
	}
	if v.ChildCount > 0 {
		d.children(v)
	}
	return v, true, nil
}

// children fills in a spawner's children from the copy: their counts by
// status, each a link to the tasks table of them, the newest
// neighboursShown, and a failed one's error.
func (d *Dashboard) children(v *taskView) {
	m := d.mir
	m.mu.RLock()
	defer m.mu.RUnlock()
	kids := make([]*row, 0, len(m.kids[v.ID]))
	var counts statusCounts
	for r := range m.kids[v.ID] {
		kids = append(kids, r)
		counts[r.Status]++
	}
	slices.SortFunc(kids, func(a, b *row) int { return cmp.Compare(b.seq, a.seq) })
	for _, n := range statusNames {
		if counts[n.st] > 0 {
			q := taskQuery{Pool: anyPool, Parent: v.ID, Statuses: []coordinator.Status{n.st}, Sort: "submitted", Desc: true}
			v.ChildCounts = append(v.ChildCounts, childCount{Status: n.name, Count: counts[n.st], Query: template.URL(q.values(1).Encode())})
		}
	}
	v.Children = []depView{}
	for _, r := range kids {
		if r.Status == coordinator.Failed && v.ChildFailed == nil {
			v.ChildFailed = &depView{ID: r.ID, Status: r.Status.String(), Err: cut(r.errText, 1000)}
		}
		if len(v.Children) < neighboursShown {
			v.Children = append(v.Children, depView{ID: r.ID, Status: r.Status.String(), Cause: r.Cause})
		}
	}
	v.ChildMore = len(kids) > neighboursShown
}

// retryText is a retry policy in words.
func retryText(p coordinator.RetryPolicy) string {
	if p.MaxAttempts <= 1 {
		return "no retry: one attempt per run"
	}
	s := fmt.Sprintf("up to %d attempts per run", p.MaxAttempts)
	if p.BaseDelay > 0 {
		s += fmt.Sprintf(", waiting %v after the first failure, doubling", p.BaseDelay)
		if p.MaxDelay > 0 {
			s += fmt.Sprintf(" up to %v", p.MaxDelay)
		}
		if p.Jitter > 0 {
			s += fmt.Sprintf(", jitter %.0f%%", 100*p.Jitter)
		}
	}
	if p.RetryIf != nil {
		s += "; only the errors its RetryIf accepts"
	}
	return s
}

// stamp is a time as the pages show it.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000") }

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
	Parent   string `json:"parent,omitempty"` // the task that spawned it: the page draws a family as a group
}

type graphView struct {
	Nodes     []graphNode `json:"nodes"`
	Edges     [][2]int    `json:"edges"` // indices into Nodes: from (the dependency), to
	Truncated bool        `json:"truncated"`
	Root      string      `json:"root,omitempty"`
	Depth     int         `json:"depth,omitempty"`
	Limit     int         `json:"limit"`
	Roots     int         `json:"roots"` // the tasks it centres on
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

// graph reads a neighbourhood: around q.Root, or, without one, around
// the tasks an operator looks at first (those running and the latest
// failed, of the status and pool filter if any, from the copy), at most
// the graph limit, nearest first (SnapshotFilter.Limit cuts by distance):
// the coordinator visits what it returns.
func (d *Dashboard) graph(ctx context.Context, q graphQuery) (*graphView, error) {
	limit := d.cfg.graphLimit
	roots := []string{q.Root}
	if q.Root == "" {
		roots = d.focus(q, graphRoots)
	}
	v := &graphView{Root: q.Root, Depth: q.Depth, Limit: limit, Edges: [][2]int{}, Nodes: []graphNode{}, Roots: len(roots)}
	if len(roots) == 0 {
		return v, nil
	}
	f := coordinator.SnapshotFilter{Roots: roots, Ancestors: true, Descendants: true, Children: true, Depth: q.Depth, Limit: limit}
	snap, err := d.s.Snapshot(ctx, f)
	if errors.Is(err, coordinator.ErrUnknownTask) && q.Root == "" {
		return v, nil // a root forgotten since the copy listed it: the next update
	}
	if err != nil {
		return nil, err
	}
	v.Truncated = snap.Truncated
	isRoot := map[string]bool{}
	for _, r := range roots {
		isRoot[r] = true
	}
	index := make(map[string]int, len(snap.Tasks))
	for i, t := range snap.Tasks {
		index[t.ID] = i
		v.Nodes = append(v.Nodes, graphNode{ID: t.ID, Status: t.Status.String(), Pool: t.Pool, Attempts: t.Attempts, Root: isRoot[t.ID], Parent: t.Parent})
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

const graphRoots = 40 // tasks a graph without a root centres on, at most

// focus returns the tasks a graph without a root centres on: those
// running and the latest failed (or, with a status filter, the newest of
// those statuses), of the pool filter if any, at most n.
func (d *Dashboard) focus(q graphQuery, n int) []string {
	m := d.mir
	m.mu.RLock()
	defer m.mu.RUnlock()
	statuses := q.Statuses
	if len(statuses) == 0 {
		statuses = []coordinator.Status{coordinator.Running, coordinator.Failed}
	}
	var out []string
	for _, st := range statuses {
		per := max(1, n/len(statuses))
		m.byStatus[st].Reverse(func(e ent) bool {
			r := e.r
			if len(out) == n || per == 0 {
				return false
			}
			if q.Pool == anyPool || r.Pool == q.Pool {
				out = append(out, r.ID)
				per--
			}
			return true
		})
	}
	return out
}
