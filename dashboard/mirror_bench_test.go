package dashboard

import (
	"fmt"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
)

// BenchmarkMirrorApply: what the copy costs the dashboard's goroutine per
// row, with a million rows held: a new task seen final at once (the most
// common row of a run of short tasks), and a change of status.
func BenchmarkMirrorApply(b *testing.B) {
	s, err := coordinator.New()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Shutdown(b.Context())
	m := newMirror(s, time.Now)
	const held = 1_000_000
	page := coordinator.FeedPage{At: time.Now()}
	for i := range held {
		page.Rows = append(page.Rows, coordinator.TaskRow{Slot: i, ID: fmt.Sprint("held", i), Status: coordinator.Succeeded, Attempts: 1})
	}
	m.apply(page)
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
	b.Run("status-change", func(b *testing.B) {
		b.ReportAllocs()
		rows := make([]coordinator.TaskRow, 1000)
		k := 0
		for b.Loop() {
			for i := range rows {
				st := coordinator.Failed
				if k%2 == 0 {
					st = coordinator.Succeeded
				}
				rows[i] = coordinator.TaskRow{Slot: (k * 7919) % held, ID: fmt.Sprint("held", (k*7919)%held), Status: st, Attempts: 2}
				k++
			}
			m.apply(coordinator.FeedPage{Rows: rows, At: time.Now()})
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(rows)), "ns/row")
	})
}
