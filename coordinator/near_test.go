package coordinator_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/batonhq/baton/coordinator"
)

// A Limit around a root keeps the tasks nearest to it, breadth first both
// ways, and says it cut; tasks submitted earlier, unrelated, are not
// taken.
func TestSnapshotLimitCutsByDistance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		g := newGate()
		defer g.release()
		var tasks []coordinator.Task
		for i := range 500 {
			tasks = append(tasks, coordinator.Task{ID: fmt.Sprintf("other%03d", i), Run: g.run})
		}
		for i := range 10 {
			task := coordinator.Task{ID: fmt.Sprintf("x%d", i), Run: ok}
			if i > 0 {
				task.Deps = []string{fmt.Sprintf("x%d", i-1)}
			}
			tasks = append(tasks, task)
		}
		if err := s.Submit(tasks...); err != nil {
			t.Fatal(err)
		}
		snap, err := s.Snapshot(context.Background(), coordinator.SnapshotFilter{Roots: []string{"x5"}, Ancestors: true, Descendants: true, Depth: 10, Limit: 5})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, st := range snap.Tasks {
			ids = append(ids, st.ID)
		}
		slices.Sort(ids)
		if want := []string{"x3", "x4", "x5", "x6", "x7"}; !slices.Equal(ids, want) || !snap.Truncated || len(snap.Edges) != 4 {
			t.Errorf("Snapshot(x5, depth 10, limit 5) = %v (%d edges), truncated %v; want %v, 4 edges, truncated", ids, len(snap.Edges), snap.Truncated, want)
		}
		snap, _ = s.Snapshot(context.Background(), coordinator.SnapshotFilter{Roots: []string{"x5"}, Ancestors: true, Descendants: true, Depth: 2, Limit: 50})
		if len(snap.Tasks) != 5 || snap.Truncated {
			t.Errorf("Snapshot(x5, depth 2, limit 50) = %d tasks, truncated %v; want 5, not truncated", len(snap.Tasks), snap.Truncated)
		}
	})
}
