package dashboard

import (
	"cmp"
	"context"
	"strings"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/tidwall/btree"
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
	AsOf    time.Time // the copy's last read of the scheduler: the rows are as of then
}

// matches reports whether r passes every filter of tq but its statuses.
func (tq *taskQuery) matches(r *row, needle string) bool {
	return (tq.Pool == anyPool || r.Pool == tq.Pool) && (tq.Key == "" || r.Key == tq.Key) &&
		(tq.Parent == "" || r.Parent == tq.Parent) && strings.HasPrefix(r.ID, tq.Prefix) &&
		(needle == "" || strings.Contains(r.errLow, needle))
}

// cheap reports whether tq is answered from the indexes alone: at most a
// status filter, in the order the tasks came.
func (tq *taskQuery) cheap() bool {
	return tq.Pool == anyPool && tq.Prefix == "" && tq.Key == "" && tq.ErrText == "" && tq.Parent == "" &&
		tq.Sort == "submitted" && len(tq.Statuses) <= 1
}

// query answers tq from the mirror. At most a status filter, in the
// order the tasks came: from the counted trees of the copy. Anything
// else: from the query's live result (liveresult.go), built by one pass
// over the copy the first time it is asked for and kept as rows change.
// Either way the page is found in O(log n) and read: no request costs
// the coordinator anything. It returns ctx's error if ctx ends while the
// query's live result is built.
func (d *Dashboard) query(ctx context.Context, tq taskQuery) (*taskPage, error) {
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
		tree := m.indexOf(tq)
		page.Total = tree.Len()
		page.Pages = max(1, (page.Total+tq.Size-1)/tq.Size)
		pageOf(tree, offset, tq.Size, tq.Desc, func(e ent) { page.Rows = append(page.Rows, e.r.copyOut()) })
		return page, nil
	}
	page := &taskPage{}
	return page, m.readLive(ctx, tq, func(lr *liveResult) {
		page.Total, page.Counts, page.Loading, page.AsOf = lr.rows.Len(), lr.counts, !m.synced, m.lastRead
		page.Pages = max(1, (page.Total+tq.Size-1)/tq.Size)
		pageOf(lr.rows, offset, tq.Size, tq.Desc, func(e rent) { page.Rows = append(page.Rows, e.r.copyOut()) })
	})
}

// indexOf is the copy's own index that answers cheap query tq: every task,
// or those of its one status, in the order they came. The caller holds
// m.mu.
func (m *mirror) indexOf(tq taskQuery) *btree.BTreeG[ent] {
	if len(tq.Statuses) == 1 {
		return m.byStatus[tq.Statuses[0]]
	}
	return m.all
}

// matching returns the IDs of the tasks matching tq that want takes (a
// bulk action's: those in a status it applies to), in tq's order, and how
// many match in all. It walks the matching rows alone, in the copy's own
// index or tq's live result (built if need be, in chunks, as for a page),
// under the copy's read lock (its write lock if this call finishes the
// build): no pass over the whole copy and sort, which stalled the copy's
// reads and every page for seconds on a large copy. It returns ctx's error
// if ctx ends first.
func (d *Dashboard) matching(ctx context.Context, tq taskQuery, want func(coordinator.Status) bool) (ids []string, total int, err error) {
	m := d.mir
	take := func(r *row) {
		total++
		if want(r.Status) {
			ids = append(ids, r.ID)
		}
	}
	if tq.cheap() {
		m.mu.RLock()
		defer m.mu.RUnlock()
		tree := m.indexOf(tq)
		pageOf(tree, 0, tree.Len(), tq.Desc, func(e ent) { take(e.r) })
		return ids, total, nil
	}
	err = m.readLive(ctx, tq, func(lr *liveResult) {
		pageOf(lr.rows, 0, lr.rows.Len(), tq.Desc, func(e rent) { take(e.r) })
	})
	return ids, total, err
}

// rent is a row's place in the order of a sortKeys column (sortEntry):
// the column's value inline, a number (n) or a text (s), the other left
// zero, then the order the tasks came in (seq), so that one comparison
// serves every column and a tree compares without reading the rows.
type rent struct {
	n   int64
	s   string
	seq uint64
	r   *row
}

// sortEntry is r's place in the order of column key ("submitted": the
// order the tasks came in alone).
func sortEntry(key string, r *row) rent {
	e := rent{seq: r.seq, r: r}
	switch key {
	case "id":
		e.s = r.ID
	case "pool":
		e.s = r.Pool
	case "key":
		e.s = r.Key
	case "status":
		e.n = int64(r.Status)
	case "priority":
		e.n = int64(r.Priority)
	case "attempts":
		e.n = int64(r.Attempts)
	case "runs":
		e.n = int64(r.Runs)
	}
	return e
}

// compareEntries orders the entries of one column.
func compareEntries(a, b rent) int {
	if c := cmp.Compare(a.n, b.n); c != 0 {
		return c
	}
	if c := strings.Compare(a.s, b.s); c != 0 {
		return c
	}
	return cmp.Compare(a.seq, b.seq)
}

// pageOf reads entries [offset, offset+size) of tree, in its order or
// (desc) the reverse, into take.
func pageOf[T any](tree *btree.BTreeG[T], offset, size int, desc bool, take func(T)) {
	total := tree.Len()
	if offset >= total {
		return
	}
	n := 0
	each := func(e T) bool {
		take(e)
		n++
		return n < size
	}
	if desc {
		pivot, _ := tree.GetAt(total - 1 - offset)
		tree.Descend(pivot, each)
	} else {
		pivot, _ := tree.GetAt(offset)
		tree.Ascend(pivot, each)
	}
}
