package dashboard

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/batonhq/baton/coordinator"
)

// statusNames maps the names a query uses to statuses, in their order.
var statusNames = []struct {
	name string
	st   coordinator.Status
}{
	{"pending", coordinator.Pending}, {"ready", coordinator.Ready}, {"running", coordinator.Running},
	{"succeeded", coordinator.Succeeded}, {"failed", coordinator.Failed},
	{"cancelled", coordinator.Cancelled}, {"skipped", coordinator.Skipped},
}

func parseStatus(s string) (coordinator.Status, bool) {
	for _, n := range statusNames {
		if n.name == s {
			return n.st, true
		}
	}
	return 0, false
}

// anyPool is the value of the pool parameter that takes every pool; an
// empty value is the default pool.
const anyPool = "*"

// sortKeys are the columns the tasks table sorts by.
var sortKeys = []string{"id", "status", "pool", "key", "priority", "attempts", "runs"}

const (
	defaultPageSize = 50
	maxPageSize     = 500
	maxErrorScan    = 20000 // tasks whose error an error-text filter reads, at most
)

// taskQuery is the tasks table's filter, sort and page, parsed from the
// URL. The zero value takes every task in the scheduler's order.
type taskQuery struct {
	Statuses []coordinator.Status // none: every status
	Pool     string               // anyPool: every pool
	Prefix   string               // of the ID
	Key      string               // the flow-control key (Task.Key), exactly; "" for any
	ErrText  string               // in the error's text, case-insensitive
	Sort     string               // a sortKeys column, or "" for the scheduler's order
	Desc     bool
	Page     int // 1-based
	Size     int
}

// badQuery is a query parameter the dashboard cannot honour: a 400.
type badQuery struct {
	param, value, want string
}

func (e *badQuery) Error() string {
	return fmt.Sprintf("dashboard: bad query parameter %s=%q: %s", e.param, e.value, e.want)
}

// parseTaskQuery reads a taskQuery from q; pools are the pools that
// exist.
func parseTaskQuery(q url.Values, pools map[string]int) (taskQuery, error) {
	tq := taskQuery{Pool: anyPool, Page: 1, Size: defaultPageSize}
	for _, v := range q["status"] {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s == "" || s == "any" {
				continue
			}
			st, ok := parseStatus(s)
			if !ok {
				return tq, &badQuery{"status", s, "want one of pending, ready, running, succeeded, failed, cancelled, skipped"}
			}
			if !slices.Contains(tq.Statuses, st) {
				tq.Statuses = append(tq.Statuses, st)
			}
		}
	}
	slices.Sort(tq.Statuses)
	if vs, ok := q["pool"]; ok && len(vs) > 0 && vs[0] != anyPool {
		if _, known := pools[vs[0]]; !known {
			return tq, &badQuery{"pool", vs[0], "no such pool"}
		}
		tq.Pool = vs[0]
	}
	tq.Prefix = q.Get("id")
	tq.Key = q.Get("key")
	tq.ErrText = q.Get("error")
	if s := q.Get("sort"); s != "" {
		key := strings.TrimPrefix(s, "-")
		if !slices.Contains(sortKeys, key) {
			return tq, &badQuery{"sort", s, "want one of " + strings.Join(sortKeys, ", ") + ", optionally with a leading - for descending"}
		}
		tq.Sort, tq.Desc = key, strings.HasPrefix(s, "-")
	}
	if s := q.Get("page"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1<<30 {
			return tq, &badQuery{"page", s, "want a whole number from 1"}
		}
		tq.Page = n
	}
	if s := q.Get("size"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxPageSize {
			return tq, &badQuery{"size", s, fmt.Sprintf("want a whole number from 1 to %d", maxPageSize)}
		}
		tq.Size = n
	}
	return tq, nil
}

// values is the query as URL parameters, with page set to page.
func (tq taskQuery) values(page int) url.Values {
	v := url.Values{}
	for _, st := range tq.Statuses {
		v.Add("status", st.String())
	}
	if tq.Pool != anyPool {
		v.Set("pool", tq.Pool)
	}
	if tq.Prefix != "" {
		v.Set("id", tq.Prefix)
	}
	if tq.Key != "" {
		v.Set("key", tq.Key)
	}
	if tq.ErrText != "" {
		v.Set("error", tq.ErrText)
	}
	if tq.Sort != "" {
		s := tq.Sort
		if tq.Desc {
			s = "-" + s
		}
		v.Set("sort", s)
	}
	if tq.Size != defaultPageSize && tq.Size != 0 {
		v.Set("size", strconv.Itoa(tq.Size))
	}
	if page > 1 {
		v.Set("page", strconv.Itoa(page))
	}
	return v
}

// hasStatus reports whether the query takes status st.
func (tq taskQuery) hasStatus(st coordinator.Status) bool {
	return len(tq.Statuses) == 0 || slices.Contains(tq.Statuses, st)
}

// taskRow is one row of the tasks table.
type taskRow struct {
	coordinator.SnapshotTask
	Err string // the last attempt's error, for the rows shown
}

// taskPage is one page of the tasks table.
type taskPage struct {
	Rows    []taskRow
	Total   int  // rows matching, over every page
	Exact   bool // Total is exact (false: an error-text search stopped at maxErrorScan)
	Scanned int  // tasks whose error was read, for an error-text filter
	Pages   int
}

// mayHaveError reports whether a task in this state can have an error
// for an error-text filter to find: it failed, was cancelled, or failed
// an attempt of its current run.
func mayHaveError(t *coordinator.SnapshotTask) bool {
	switch t.Status {
	case coordinator.Failed, coordinator.Cancelled:
		return true
	case coordinator.Pending, coordinator.Ready, coordinator.Running:
		return t.Attempts > 0
	}
	return false
}

// queryTasks runs tq against s. Without a pool, ID, key, error or sort, it
// asks the scheduler for the page alone (Snapshot with a Limit, Counts
// for the total); otherwise it takes every task of the chosen statuses
// and filters, sorts and pages them here, so that the coordinator's
// share stays one Snapshot.
func queryTasks(ctx context.Context, s *coordinator.Scheduler, tq taskQuery) (*taskPage, error) {
	offset := (tq.Page - 1) * tq.Size
	cheap := tq.Pool == anyPool && tq.Prefix == "" && tq.Key == "" && tq.ErrText == "" && tq.Sort == ""
	f := coordinator.SnapshotFilter{Statuses: tq.Statuses}
	if cheap {
		f.Limit = offset + tq.Size
	}
	snap, err := s.Snapshot(ctx, f)
	if err != nil {
		return nil, err
	}
	page := &taskPage{Exact: true}
	rows := snap.Tasks
	if cheap {
		counts := s.Counts()
		for _, n := range statusNames {
			if tq.hasStatus(n.st) {
				page.Total += counts.Of(n.st)
			}
		}
		page.Total = max(page.Total, len(rows)) // counts come a moment later
	} else {
		rows = slices.DeleteFunc(rows, func(t coordinator.SnapshotTask) bool {
			return (tq.Pool != anyPool && t.Pool != tq.Pool) || (tq.Key != "" && t.Key != tq.Key) || !strings.HasPrefix(t.ID, tq.Prefix)
		})
		if tq.ErrText != "" {
			needle := strings.ToLower(tq.ErrText)
			kept := rows[:0]
			for _, t := range rows {
				if !mayHaveError(&t) {
					continue
				}
				if page.Scanned == maxErrorScan {
					page.Exact = false
					break
				}
				page.Scanned++
				if info, ok := s.Info(t.ID); ok && info.Err != nil && strings.Contains(strings.ToLower(info.Err.Error()), needle) {
					kept = append(kept, t)
				}
			}
			rows = kept
		}
		page.Total = len(rows)
		if tq.Sort != "" {
			rows = topK(rows, offset+tq.Size, compareBy(tq.Sort, tq.Desc))
		}
	}
	page.Pages = max(1, (page.Total+tq.Size-1)/tq.Size)
	if offset >= len(rows) {
		return page, nil
	}
	rows = rows[offset:min(len(rows), offset+tq.Size)]
	page.Rows = make([]taskRow, len(rows))
	for i, t := range rows {
		page.Rows[i].SnapshotTask = t
		if mayHaveError(&t) {
			if info, ok := s.Info(t.ID); ok && info.Err != nil {
				page.Rows[i].Err = cut(info.Err.Error(), 300)
			}
		}
	}
	return page, nil
}

// compareBy orders tasks by a sortKeys column, ties by ID.
func compareBy(key string, desc bool) func(a, b coordinator.SnapshotTask) int {
	by := func(a, b coordinator.SnapshotTask) int {
		switch key {
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
	return func(a, b coordinator.SnapshotTask) int {
		c := by(a, b)
		if c == 0 {
			c = cmp.Compare(a.ID, b.ID)
		}
		if desc {
			c = -c
		}
		return c
	}
}

// topK returns the first k of rows in the order of less, sorted: a full
// sort when k is most of rows, else a bounded heap, O(n log k), so that
// the first pages of a million rows cost far less than sorting them.
func topK(rows []coordinator.SnapshotTask, k int, less func(a, b coordinator.SnapshotTask) int) []coordinator.SnapshotTask {
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
	rows []coordinator.SnapshotTask
	less func(a, b coordinator.SnapshotTask) int
}

func (h *worstFirst) Len() int           { return len(h.rows) }
func (h *worstFirst) Less(i, j int) bool { return h.less(h.rows[i], h.rows[j]) > 0 }
func (h *worstFirst) Swap(i, j int)      { h.rows[i], h.rows[j] = h.rows[j], h.rows[i] }
func (h *worstFirst) Push(x any)         { h.rows = append(h.rows, x.(coordinator.SnapshotTask)) }
func (h *worstFirst) Pop() any {
	x := h.rows[len(h.rows)-1]
	h.rows = h.rows[:len(h.rows)-1]
	return x
}
