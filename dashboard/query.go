package dashboard

import (
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
var sortKeys = []string{"id", "submitted", "status", "pool", "key", "priority", "attempts", "runs"}

const (
	defaultPageSize = 50
	maxPageSize     = 500
)

// taskQuery is the tasks table's filter, sort and page, parsed from the
// URL. The zero value takes every task in the scheduler's order.
type taskQuery struct {
	Statuses []coordinator.Status // none: every status
	Pool     string               // anyPool: every pool
	Prefix   string               // of the ID
	Key      string               // the flow-control key (Task.Key), exactly; "" for any
	ErrText  string               // in the error's text, case-insensitive
	Parent   string               // the task whose attempts spawned them, exactly; "" for any
	Sort     string               // a sortKeys column; "submitted" by default
	Desc     bool                 // descending: by default (newest first)
	Page     int                  // 1-based
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
	tq := taskQuery{Pool: anyPool, Page: 1, Size: defaultPageSize, Sort: "submitted", Desc: true}
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
	tq.Parent = q.Get("parent")
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
	if tq.Parent != "" {
		v.Set("parent", tq.Parent)
	}
	if tq.Sort != "" && (tq.Sort != "submitted" || !tq.Desc) {
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
