package otelbaton_test

import (
	"context"
	"testing"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/otelbaton"
)

// A spawned task's attempt span is a child of its spawner's attempt span
// (Spawn hands the spawner's context values down), and so are its own
// children's, three levels deep.
func TestSpawnedSpansNest(t *testing.T) {
	r := newRig(t, 2)
	leaf := coordinator.Task{ID: "p/1/1", Run: func(context.Context) error { return nil }}
	mid := coordinator.Task{ID: "p/1", Run: func(ctx context.Context) error { return coordinator.Spawn(ctx, leaf) }}
	err := r.s.Submit(coordinator.Task{ID: "p", Run: func(ctx context.Context) error { return coordinator.Spawn(ctx, mid) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.s.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	byTask := map[string][2]string{} // task -> its span ID, its parent span ID
	for _, sp := range r.spans.Ended() {
		if sp.Name() != otelbaton.SpanName {
			continue
		}
		for _, a := range sp.Attributes() {
			if a.Key == otelbaton.AttrTaskID {
				byTask[a.Value.AsString()] = [2]string{sp.SpanContext().SpanID().String(), sp.Parent().SpanID().String()}
			}
		}
	}
	for child, parent := range map[string]string{"p/1": "p", "p/1/1": "p/1"} {
		if got, want := byTask[child][1], byTask[parent][0]; got != want || want == "" {
			t.Fatalf("span of %s has parent %s; want %s's span %s (spans %v)", child, got, parent, want, byTask)
		}
	}
}
