package dashboard

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
)

// BenchmarkMirrorApply: what the copy costs the dashboard's goroutine per
// row, with a million rows held: a new task seen final at once (the most
// common row of a run of short tasks), and a change of status.
func BenchmarkMirrorApply(b *testing.B) {
	m := heldMirror(b, func(i int) coordinator.TaskRow {
		return coordinator.TaskRow{Slot: i, ID: fmt.Sprint("held", i), Status: coordinator.Succeeded, Attempts: 1}
	})
	b.Run("new-final", func(b *testing.B) {
		b.ReportAllocs()
		rows := make([]coordinator.TaskRow, 1000)
		slot := held
		for b.Loop() {
			for i := range rows {
				rows[i] = coordinator.TaskRow{Slot: slot, ID: fmt.Sprint("t", slot), Status: coordinator.Succeeded, Attempts: 1}
				slot++
			}
			m.apply(coordinator.FeedPage{Rows: rows, At: time.Now()})
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(rows)), "ns/row")
	})
	b.Run("status-change", func(b *testing.B) { statusChanges(b, m, func(slot int) string { return fmt.Sprint("held", slot) }) })
}

// BenchmarkLiveResult: a query of the tasks table beyond the copy's own
// indexes, a million rows held: built (the first request: one pass over
// the copy, a chunk at a time under its write lock), and what the copy's upkeep of the
// results kept costs per changed row with resultsKept of them.
func BenchmarkLiveResult(b *testing.B) {
	m := heldMirror(b, func(i int) coordinator.TaskRow {
		return coordinator.TaskRow{Slot: i, ID: fmt.Sprint("held", (i*7919)%held), Status: coordinator.Succeeded, Attempts: 1 + i%3}
	})
	queries := []taskQuery{
		{Pool: anyPool, Sort: "id"},
		{Pool: anyPool, Sort: "attempts", Desc: true},
		{Pool: anyPool, Sort: "attempts", Desc: true, Prefix: "held1"},
		{Pool: anyPool, Sort: "submitted", Desc: true, Statuses: []coordinator.Status{coordinator.Failed, coordinator.Skipped}},
	}
	for _, tq := range queries {
		b.Run("build/"+tq.values(1).Encode(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				m.mu.Lock()
				m.live = nil
				m.mu.Unlock()
				_ = m.readLive(b.Context(), tq, func(*liveResult) {})
			}
		})
	}
	m.mu.Lock()
	m.live = nil
	m.mu.Unlock()
	for _, tq := range queries {
		_ = m.readLive(b.Context(), tq, func(*liveResult) {})
	}
	b.Run("status-change-kept=4", func(b *testing.B) {
		statusChanges(b, m, func(slot int) string { return fmt.Sprint("held", (slot*7919)%held) })
	})
}

// held is how many rows the mirror benchmarks hold.
const held = 1_000_000

// heldMirror is a mirror holding held rows, row(i) in slot i.
func heldMirror(b *testing.B, row func(i int) coordinator.TaskRow) *mirror {
	m := testMirror(b)
	fill(m, held, row)
	return m
}

// testMirror is an empty copy of a new scheduler's tasks.
func testMirror(tb testing.TB) *mirror {
	s, err := coordinator.New()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Shutdown(context.Background()) })
	return newMirror(s, time.Now)
}

// fill applies n rows to m in one feed read, row(i) in slot i.
func fill(m *mirror, n int, row func(i int) coordinator.TaskRow) {
	page := coordinator.FeedPage{At: time.Now()}
	for i := range n {
		page.Rows = append(page.Rows, row(i))
	}
	m.apply(page)
}

// statusChanges times the copy applying changes of status (and
// attempts) to rows spread over its slots, 1,000 a read.
func statusChanges(b *testing.B, m *mirror, id func(slot int) string) {
	b.ReportAllocs()
	rows := make([]coordinator.TaskRow, 1000)
	k := 0
	for b.Loop() {
		for i := range rows {
			st := coordinator.Failed
			if k%2 == 0 {
				st = coordinator.Succeeded
			}
			slot := (k * 7919) % held
			rows[i] = coordinator.TaskRow{Slot: slot, ID: id(slot), Status: st, Attempts: 2 + k%2}
			k++
		}
		m.apply(coordinator.FeedPage{Rows: rows, At: time.Now()})
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(rows)), "ns/row")
}
