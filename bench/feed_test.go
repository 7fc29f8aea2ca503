package bench

import (
	"context"
	"testing"
)

// BenchmarkFeed: what a change feed's read costs the coordinator with
// -baton.n tasks held (the dashboard reads 1,000 rows at a time): a read
// of the first pass, and a read when nothing changed (the scan of a bit
// per task and of the lanes). A read is a round trip, during which the
// coordinator does nothing else.
func BenchmarkFeed(b *testing.B) {
	s := heldGraph(b)
	ctx := context.Background()
	b.Run("first-pass-1000-rows", func(b *testing.B) {
		f := s.Feed()
		for b.Loop() {
			p, err := f.Next(ctx, 1000)
			if err != nil {
				b.Fatal(err)
			}
			if !p.More {
				f.Close()
				f = s.Feed()
			}
		}
		f.Close()
	})
	b.Run("nothing-changed", func(b *testing.B) {
		f := s.Feed()
		defer f.Close()
		for p, err := f.Next(ctx, 100_000); p.More; p, err = f.Next(ctx, 100_000) {
			if err != nil {
				b.Fatal(err)
			}
		}
		for b.Loop() {
			if _, err := f.Next(ctx, 1000); err != nil {
				b.Fatal(err)
			}
		}
	})
}
