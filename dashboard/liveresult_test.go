package dashboard

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
)

var (
	liveSteps = flag.Int("dashboard.live", 400, "TestLiveResultsMatchAPass: feed reads applied")
	liveSeed  = flag.Uint64("dashboard.seed", 0, "TestLiveResultsMatchAPass: the seed (0: a new one)")
)

// Every page of the tasks table, read from the live results kept as the
// copy changes, is what one pass over the copy and a sort give at that
// moment: its rows in order, its total and its counts by status. Random
// feed reads (new tasks, changes of every column a query filters or sorts
// by, tasks forgotten, slots reused by another task) between random
// queries (every filter and sort, either direction, any page), more
// distinct queries than are kept, and time that runs past resultIdle.
func TestLiveResultsMatchAPass(t *testing.T) {
	seed := *liveSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (-dashboard.seed=%d repeats this run)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 30))
	s, err := coordinator.New()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(t.Context())
	now := time.Unix(1_800_000_000, 0)
	m := newMirror(s, func() time.Time { return now })
	d := &Dashboard{mir: m}
	defer func(n int) { liveChunk = n }(liveChunk)
	liveChunk = 8 + rng.IntN(40) // several chunks a build, with feed reads between them (fewer new rows a read than a chunk scans: a build must catch up)

	const slots = 200
	pick := func(vs ...string) string { return vs[rng.IntN(len(vs))] }
	var live [slots]*coordinator.TaskRow
	made := 0
	randomRow := func(slot int) coordinator.TaskRow {
		made++
		tr := coordinator.TaskRow{Slot: slot, ID: fmt.Sprintf("t%d-%d", rng.IntN(3), made)}
		tr.Pool, tr.Key, tr.Parent = pick("", "p1", "p2"), pick("", "k1", "k2"), pick("", "", "t0-1")
		return tr
	}
	change := func(tr *coordinator.TaskRow) {
		tr.Status = coordinator.Status(rng.IntN(7))
		tr.Attempts, tr.Runs, tr.Priority = rng.IntN(4), rng.IntN(3), rng.IntN(5)-2
		tr.Err = nil
		if tr.Status == coordinator.Failed || rng.IntN(5) == 0 {
			tr.Err = errors.New(pick("boom", "Boom again", "timeout"))
		}
	}
	randomQuery := func() taskQuery {
		tq := taskQuery{Pool: anyPool, Page: 1 + rng.IntN(4), Size: 1 + rng.IntN(25), Sort: pick(sortKeys...), Desc: rng.IntN(2) == 0}
		for st := range coordinator.Status(7) {
			if rng.IntN(5) == 0 {
				tq.Statuses = append(tq.Statuses, st)
			}
		}
		switch rng.IntN(6) {
		case 0:
			tq.Pool = pick("", "p1", "p2")
		case 1:
			tq.Prefix = pick("t1", "t2-")
		case 2:
			tq.Key = pick("k1", "k2")
		case 3:
			tq.ErrText = pick("boom", "AGAIN")
		case 4:
			tq.Parent = "t0-1"
		}
		return tq
	}
	// A few queries asked again and again, and new ones.
	var asked []taskQuery
	step := 0
	read := func() {
		page := coordinator.FeedPage{At: now, More: step == 0}
		for range 1 + rng.IntN(30) {
			slot := rng.IntN(slots)
			var tr coordinator.TaskRow
			switch {
			case live[slot] == nil || rng.IntN(10) == 0: // new, or the slot reused by another task
				tr = randomRow(slot)
				change(&tr)
			case rng.IntN(8) == 0:
				tr = coordinator.TaskRow{Slot: slot, ID: live[slot].ID, Gone: true}
			default:
				tr = *live[slot]
				change(&tr)
			}
			if tr.Gone {
				live[slot] = nil
			} else {
				c := tr
				live[slot] = &c
			}
			page.Rows = append(page.Rows, tr)
		}
		m.apply(page)
		now = now.Add(time.Duration(rng.IntN(int(resultIdle/4))) + time.Millisecond)
	}
	m.betweenChunks = func() {
		if rng.IntN(2) == 0 {
			read()
		}
	}
	for ; step < *liveSteps; step++ {
		read()
		for range 3 {
			var tq taskQuery
			if len(asked) > 0 && rng.IntN(3) > 0 {
				tq = asked[rng.IntN(len(asked))]
				tq.Page = 1 + rng.IntN(4)
			} else {
				tq = randomQuery()
				asked = append(asked, tq)
				if len(asked) > 2*resultsKept {
					asked = asked[1:]
				}
			}
			checkPage(t, fmt.Sprintf("step %d", step), d, tq)
			if t.Failed() {
				t.Fatalf("seed %d", seed)
			}
		}
	}
	if made < *liveSteps {
		t.Fatalf("only %d rows made in %d steps", made, *liveSteps)
	}
}

// checkPage compares d's page of tq with one pass over the copy.
func checkPage(t *testing.T, at string, d *Dashboard, tq taskQuery) {
	t.Helper()
	got, err := d.query(t.Context(), tq)
	if err != nil {
		t.Fatalf("%s: query = %v", at, err)
	}
	m := d.mir
	var counts statusCounts
	var rows []*row
	needle := strings.ToLower(tq.ErrText)
	m.mu.RLock()
	m.all.Scan(func(e ent) bool {
		if tq.matches(e.r, needle) {
			counts[e.r.Status]++
			if tq.hasStatus(e.r.Status) {
				rows = append(rows, e.r)
			}
		}
		return true
	})
	// The order, written here again on purpose: the code under test
	// (sortEntry) must not be its own reference.
	slices.SortFunc(rows, func(a, b *row) int {
		var c int
		switch tq.Sort {
		case "id":
			c = cmp.Compare(a.ID, b.ID)
		case "status":
			c = cmp.Compare(a.Status, b.Status)
		case "pool":
			c = cmp.Compare(a.Pool, b.Pool)
		case "key":
			c = cmp.Compare(a.Key, b.Key)
		case "priority":
			c = cmp.Compare(a.Priority, b.Priority)
		case "attempts":
			c = cmp.Compare(a.Attempts, b.Attempts)
		case "runs":
			c = cmp.Compare(a.Runs, b.Runs)
		}
		if c == 0 {
			c = cmp.Compare(a.seq, b.seq)
		}
		if tq.Desc {
			c = -c
		}
		return c
	})
	all := make([]string, len(rows))
	for i, r := range rows {
		all[i] = r.ID
	}
	m.mu.RUnlock()
	if bulk, total, err := d.matching(context.Background(), tq, func(coordinator.Status) bool { return true }); err != nil || total != len(all) || !slices.Equal(bulk, all) {
		t.Errorf("%s: %s: a bulk action's tasks %v of %d (%v); a pass gives %v", at, tq.values(tq.Page).Encode(), bulk, total, err, all)
	}
	from := min(len(all), (tq.Page-1)*tq.Size)
	want := all[from:min(len(all), from+tq.Size)]
	var ids []string
	for _, r := range got.Rows {
		ids = append(ids, r.ID)
	}
	q := tq.values(tq.Page).Encode()
	if !slices.Equal(ids, want) {
		t.Errorf("%s: %s: rows %v; a pass gives %v", at, q, ids, want)
	}
	if got.Total != len(all) {
		t.Errorf("%s: %s: total %d; a pass gives %d", at, q, got.Total, len(all))
	}
	if got.Counts != counts {
		t.Errorf("%s: %s: counts %v; a pass gives %v", at, q, got.Counts, counts)
	}
	if len(d.mir.live) > resultsKept {
		t.Errorf("%s: %d live results kept; want at most %d", at, len(d.mir.live), resultsKept)
	}
}

// Requests that build (a chunk at a time), read and evict live results
// at once, more distinct queries than are kept, while the copy applies
// changes: no race (-race), every request answered, and once the changes
// stop every query's page is what a pass gives.
func TestLiveResultsConcurrent(t *testing.T) {
	m, d := liveMirror(t, 64)
	queries := []taskQuery{}
	for _, key := range sortKeys {
		queries = append(queries, taskQuery{Pool: anyPool, Sort: key, Desc: true, Page: 1, Size: 20},
			taskQuery{Pool: anyPool, Sort: key, Prefix: "t1", Page: 2, Size: 7, Statuses: []coordinator.Status{coordinator.Failed, coordinator.Running}})
	}
	const slots = 3000
	rng := rand.New(rand.NewPCG(rand.Uint64(), 31))
	apply := func(first bool) {
		var rows []coordinator.TaskRow
		for range 50 {
			slot := rng.IntN(slots)
			rows = append(rows, coordinator.TaskRow{Slot: slot, ID: fmt.Sprintf("t%d", slot), Status: coordinator.Status(rng.IntN(7)),
				Attempts: rng.IntN(3), Gone: rng.IntN(10) == 0})
		}
		m.apply(coordinator.FeedPage{Rows: rows, At: time.Now(), More: first})
	}
	for i := range slots / 10 {
		apply(i == 0)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for i := g; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := d.query(t.Context(), queries[i%len(queries)]); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for range 300 {
		apply(false)
	}
	close(stop)
	wg.Wait()
	for _, tq := range queries {
		checkPage(t, "after the changes", d, tq)
	}
}

// More requests for distinct queries at once than results are kept, each
// needing several chunks to build: each is answered after about one pass
// of its own (a build is never dropped for another, which would start it
// again, and again: none finished). A request whose client went away
// leaves no build behind.
func TestLiveResultsMoreThanKept(t *testing.T) {
	m, d := liveMirror(t, 100)
	const rows = 20_000
	fill(m, rows, func(i int) coordinator.TaskRow {
		return coordinator.TaskRow{Slot: i, ID: fmt.Sprint("held", i), Status: coordinator.Succeeded, Attempts: 1 + i%3}
	})
	var chunks atomic.Int64
	m.betweenChunks = func() { chunks.Add(1) }
	const requests = 3 * resultsKept
	var wg sync.WaitGroup
	for g := range requests {
		wg.Go(func() {
			tq := taskQuery{Pool: anyPool, Sort: "id", Prefix: fmt.Sprint("held", g), Page: 1, Size: 50}
			if _, err := d.query(t.Context(), tq); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got, want := chunks.Load(), int64(requests*(rows/liveChunk+1)); got > want {
		t.Errorf("%d chunks built for %d queries; want at most %d (one pass each)", got, requests, want)
	}
	// A client that goes away while its query is built: its build is
	// dropped, and the others kept are built ones.
	ctx, cancel := context.WithCancel(t.Context())
	m.betweenChunks = cancel
	if _, err := d.query(ctx, taskQuery{Pool: anyPool, Sort: "key", Page: 1, Size: 5}); !errors.Is(err, context.Canceled) {
		t.Fatalf("query whose context ends while it is built = %v; want context.Canceled", err)
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, lr := range m.live {
		if !lr.done() {
			t.Errorf("a result of %s left half built", lr.key)
		}
	}
}

// liveMirror is an empty copy of a scheduler's tasks, read by d, whose
// live results are built chunk rows at a time until the test ends.
func liveMirror(t *testing.T, chunk int) (*mirror, *Dashboard) {
	m := testMirror(t)
	saved := liveChunk
	liveChunk = chunk
	t.Cleanup(func() { liveChunk = saved })
	return m, &Dashboard{mir: m}
}

// A build that several requests drive goes on when one of them goes
// away: it is dropped only once none drives it (a client repeating a
// query with a timeout shorter than its build kept every other client
// of it from an answer).
func TestLiveResultsSharedBuildOutlivesARequest(t *testing.T) {
	m, d := liveMirror(t, 100)
	const rows = 10_000
	fill(m, rows, func(i int) coordinator.TaskRow {
		return coordinator.TaskRow{Slot: i, ID: fmt.Sprint("held", i), Status: coordinator.Succeeded, Attempts: 1 + i%3}
	})
	tq := taskQuery{Pool: anyPool, Sort: "id", Page: 1, Size: 10}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	chunks, inB := 0, false
	m.betweenChunks = func() {
		chunks++
		switch {
		case inB:
			cancel() // the second request goes away after one chunk of its own
		case chunks == rows/liveChunk/2:
			inB = true
			if _, err := d.query(ctx, tq); !errors.Is(err, context.Canceled) {
				t.Errorf("the request that went away: %v; want context.Canceled", err)
			}
			inB = false
		}
	}
	if _, err := d.query(t.Context(), tq); err != nil {
		t.Fatal(err)
	}
	if want := rows/liveChunk + 2; chunks > want {
		t.Errorf("%d chunks built; want at most %d: the build started again when one of its requests went away", chunks, want)
	}
	checkPage(t, "after the build", d, tq)
}
