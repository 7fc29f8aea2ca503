package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/coordinator/storetest"
)

// A durable scheduler restarted (ring large enough): every task's History
// is as it was; a Feed of the new scheduler tells each kept attempt once.
func TestHistoryIsTheSameAfterARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := storetest.NewMemory()
		open := make(chan struct{})
		calls := 0
		opts := func(st coordinator.Store) []coordinator.Option {
			return []coordinator.Option{coordinator.WithStore(st), coordinator.WithWorkers(2), coordinator.WithHistory(2, 1000),
				coordinator.WithFunc("gate", func(context.Context, []byte) error { <-open; return nil }),
				coordinator.WithFunc("ok", func(context.Context, []byte) error { return nil }),
				coordinator.WithFunc("flaky", func(context.Context, []byte) error {
					calls++
					if calls < 2 {
						return errors.New("once")
					}
					return nil
				}),
			}
		}
		s1, err := coordinator.New(opts(mem.Open())...)
		if err != nil {
			t.Fatal(err)
		}
		tasks := []coordinator.Task{{ID: "gate", Func: "gate"}}
		ids := []string{"gate"}
		for i := range 600 {
			tasks = append(tasks, coordinator.Task{ID: fmt.Sprint(i), Deps: []string{"gate"}, Func: "ok"})
			ids = append(ids, fmt.Sprint(i))
		}
		tasks = append(tasks,
			coordinator.Task{ID: "series", Deps: []string{"gate"}, Every: time.Minute, Times: 4, Func: "ok"},
			coordinator.Task{ID: "flaky", Deps: []string{"gate"}, Func: "flaky", Retry: coordinator.RetryPolicy{MaxAttempts: 3}},
			coordinator.Task{ID: "after", Deps: []string{"flaky"}, Func: "ok"},
		)
		ids = append(ids, "series", "flaky", "after")
		if err := s1.Submit(tasks...); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		close(open)
		settle(t, s1)
		before := map[string]coordinator.History{}
		for _, id := range ids {
			before[id], _ = s1.History(id)
		}
		if err := s1.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		s2, err := coordinator.New(opts(mem.Open())...)
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Shutdown(context.Background())
		kept := 0
		for _, id := range ids {
			got, _ := s2.History(id)
			want := before[id]
			kept += len(want.Attempts)
			if len(got.Attempts) != len(want.Attempts) || got.Dropped != want.Dropped {
				t.Errorf("History(%s): before %+v, after %+v", id, want, got)
				continue
			}
			for i := range want.Attempts {
				g, w := got.Attempts[i], want.Attempts[i]
				if g.Attempt != w.Attempt || g.Run != w.Run || g.Rerun != w.Rerun || g.Outcome != w.Outcome || g.Worker != w.Worker ||
					!g.HandedOut.Equal(w.HandedOut) || !g.Started.Equal(w.Started) || !g.Ended.Equal(w.Ended) {
					t.Errorf("History(%s)[%d]: before %+v, after %+v", id, i, w, g)
				}
			}
		}
		f := s2.Feed()
		defer f.Close()
		told, dropped, es := drain(t, f, 50)
		seen := map[string]int{}
		for _, e := range es {
			if e.ID != "" {
				seen[fmt.Sprint(e.ID, e.Attempt, e.Run)]++
			}
		}
		for k, n := range seen {
			if n > 1 {
				t.Errorf("%s told %d times", k, n)
			}
		}
		t.Logf("s2's feed: %d entries, %d attempts, %d dropped; histories keep %d", len(es), told, dropped, kept)
		if told != kept {
			t.Errorf("s2's feed told %d attempts; the histories keep %d", told, kept)
		}
	})
}
