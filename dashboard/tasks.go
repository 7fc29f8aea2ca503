package dashboard

import (
	"cmp"
	"container/heap"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/batonhq/baton/coordinator"
)

// taskRow is one row of the tasks table: a copy of the mirror's row.
type taskRow struct {
	ID       string
	Status   coordinator.Status
	Pool     string
	Key      string
	Priority int
	When     coordinator.Trigger
	Attempts int
	Runs     int
	Reruns   int
	Cause    string
	Parent   string
	Err      string
	Seen     time.Time // when the dashboard first saw it (zero: it was there when the dashboard started)
	Since    time.Time // when it entered its status, as the dashboard saw it (zero: before the dashboard)
}

func (r *row) copyOut() taskRow {
	return taskRow{ID: r.ID, Status: r.Status, Pool: r.Pool, Key: r.Key, Priority: r.Priority, When: r.When,
		Attempts: r.Attempts, Runs: r.Runs, Reruns: r.Reruns, Cause: r.Cause, Parent: r.Parent,
		Err: cut(r.errText, 300), Seen: r.seen, Since: r.since}
}

// taskPage is one page of the tasks table.
type taskPage struct {
	Rows    []taskRow
	Total   int          // rows matching, over every page
	Counts  statusCounts // the tasks matching every filter but the status one, by status
	Pages   int
	Loading bool      // the mirror's first pass is under way: the counts grow
	AsOf    time.Time // the order and the rows matching were taken then (a query sorted or filtered beyond status reuses them a while)
}

// matches reports whether r passes every filter of tq but its statuses.
func (tq *taskQuery) matches(r *row, needle string) bool {
	return (tq.Pool == anyPool || r.Pool == tq.Pool) && (tq.Key == "" || r.Key == tq.Key) &&
		(tq.Parent == "" || r.Parent == tq.Parent) && strings.HasPrefix(r.ID, tq.Prefix) &&
		(needle == "" || strings.Contains(strings.ToLower(r.errText), needle))
}

// cheap reports whether tq is answered from the indexes alone: at most a
// status filter, in the order the tasks came.
func (tq *taskQuery) cheap() bool {
	return tq.Pool == anyPool && tq.Prefix == "" && tq.Key == "" && tq.ErrText == "" && tq.Parent == "" &&
		tq.Sort == "submitted" && len(tq.Statuses) <= 1
}

// query answers tq from the mirror. At most a status filter, in the
// order the tasks came: from the counted trees, the page found in
// O(log n) and read. Anything else: one pass over every row, filtered
// and sorted (the first pages with a bounded heap) off the coordinator,
// kept in a cache and reused for later pages and repeats, for at least
// an update interval and twenty times what it took, so that a client
// repeating the most expensive query costs the dashboard at most about
// 5% of a core (and the scheduler nothing).
func (d *Dashboard) query(tq taskQuery) *taskPage {
	m := d.mir
	offset := (tq.Page - 1) * tq.Size
	if tq.cheap() {
		m.mu.RLock()
		defer m.mu.RUnlock()
		page := &taskPage{Loading: !m.synced, AsOf: m.lastRead}
		for _, c := range m.counts {
			for i := range c {
				page.Counts[i] += c[i]
			}
		}
		tree := m.all
		if len(tq.Statuses) == 1 {
			tree = m.byStatus[tq.Statuses[0]]
		}
		page.Total = tree.Len()
		page.Pages = max(1, (page.Total+tq.Size-1)/tq.Size)
		if offset >= page.Total {
			return page
		}
		take := func(e ent) bool {
			page.Rows = append(page.Rows, e.r.copyOut())
			return len(page.Rows) < tq.Size
		}
		if tq.Desc {
			pivot, _ := tree.GetAt(page.Total - 1 - offset)
			tree.Descend(pivot, take)
		} else {
			pivot, _ := tree.GetAt(offset)
			tree.Ascend(pivot, take)
		}
		return page
	}
	res := d.results(tq, offset+tq.Size)
	m.mu.RLock()
	defer m.mu.RUnlock()
	page := &taskPage{Total: res.total, Counts: res.counts, Loading: !m.synced, AsOf: res.at}
	page.Pages = max(1, (page.Total+tq.Size-1)/tq.Size)
	for i := offset; i < min(len(res.rows), offset+tq.Size); i++ {
		if r := res.rows[i]; m.byID[r.ID] == r { // not forgotten since
			page.Rows = append(page.Rows, r.copyOut())
		}
	}
	return page
}

// result is a filtered, sorted list of rows, kept for reuse.
type result struct {
	rows   []*row // the first k in order (all, if k covered them)
	k      int
	total  int
	counts statusCounts
	at     time.Time // when it was computed (the dashboard's clock)
	took   time.Duration
}

// resultCache keeps the last few results, by query without its page.
type resultCache struct {
	mu      sync.Mutex
	entries map[string]*result
	order   []string // least recently computed first
}

const resultsKept = 8

// results returns the rows matching tq, in its order, at least the first
// k: from the cache if it holds enough of them, computed no longer ago
// than max(interval, 20 × what computing them took); else computed now.
func (d *Dashboard) results(tq taskQuery, k int) *result {
	q := tq
	q.Page, q.Size = 1, 0
	key := q.values(1).Encode()
	now := d.cfg.clk.Now()
	c := &d.cache
	c.mu.Lock()
	defer c.mu.Unlock() // one computation at a time: a burst of requests waits for it, and takes it
	if r, ok := c.entries[key]; ok && r.k >= min(k, r.total) && now.Sub(r.at) < max(d.cfg.interval, 20*r.took) {
		return r
	}
	r := d.compute(tq, k)
	r.at = now
	r.took = d.cfg.clk.Now().Sub(now)
	if c.entries == nil {
		c.entries = map[string]*result{}
	}
	if _, ok := c.entries[key]; !ok {
		c.order = append(c.order, key)
		if len(c.order) > resultsKept {
			delete(c.entries, c.order[0])
			c.order = c.order[1:]
		}
	}
	c.entries[key] = r
	return r
}

// compute runs tq over every row: one pass, then a bounded heap for the
// first k (a full sort when k is most of them).
func (d *Dashboard) compute(tq taskQuery, k int) *result {
	m := d.mir
	m.mu.RLock()
	defer m.mu.RUnlock()
	needle := strings.ToLower(tq.ErrText)
	res := &result{}
	var rows []*row
	m.all.Scan(func(e ent) bool {
		r := e.r
		if !tq.matches(r, needle) {
			return true
		}
		res.counts[r.Status]++
		if tq.hasStatus(r.Status) {
			rows = append(rows, r)
		}
		return true
	})
	res.total = len(rows)
	k = max(k, 4*defaultPageSize)
	res.rows = topK(rows, k, compareBy(tq.Sort, tq.Desc))
	res.k = len(res.rows)
	if res.k >= res.total {
		res.k = res.total
	}
	return res
}

// compareBy orders rows by a sortKeys column, ties by the order they came.
func compareBy(key string, desc bool) func(a, b *row) int {
	by := func(a, b *row) int {
		switch key {
		case "id":
			return cmp.Compare(a.ID, b.ID)
		case "status":
			return cmp.Compare(a.Status, b.Status)
		case "pool":
			return cmp.Compare(a.Pool, b.Pool)
		case "key":
			return cmp.Compare(a.Key, b.Key)
		case "priority":
			return cmp.Compare(a.Priority, b.Priority)
		case "attempts":
			return cmp.Compare(a.Attempts, b.Attempts)
		case "runs":
			return cmp.Compare(a.Runs, b.Runs)
		}
		return 0
	}
	return func(a, b *row) int {
		c := by(a, b)
		if c == 0 {
			c = cmp.Compare(a.seq, b.seq)
		}
		if desc {
			c = -c
		}
		return c
	}
}

// topK returns the first k of rows in the order of less, sorted: a full
// sort when k is most of rows, else a bounded heap, O(n log k).
func topK(rows []*row, k int, less func(a, b *row) int) []*row {
	if k >= len(rows)/4 {
		slices.SortFunc(rows, less)
		return rows
	}
	h := &worstFirst{less: less}
	for _, t := range rows {
		if len(h.rows) < k {
			heap.Push(h, t)
		} else if less(t, h.rows[0]) < 0 {
			h.rows[0] = t
			heap.Fix(h, 0)
		}
	}
	out := h.rows
	slices.SortFunc(out, less)
	return out
}

// worstFirst is a heap whose top is the row that sorts last.
type worstFirst struct {
	rows []*row
	less func(a, b *row) int
}

func (h *worstFirst) Len() int           { return len(h.rows) }
func (h *worstFirst) Less(i, j int) bool { return h.less(h.rows[i], h.rows[j]) > 0 }
func (h *worstFirst) Swap(i, j int)      { h.rows[i], h.rows[j] = h.rows[j], h.rows[i] }
func (h *worstFirst) Push(x any)         { h.rows = append(h.rows, x.(*row)) }
func (h *worstFirst) Pop() any {
	x := h.rows[len(h.rows)-1]
	h.rows = h.rows[:len(h.rows)-1]
	return x
}
