package coordinator_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/coordinator/storetest"
)

// Shutdown mid-run on a durable scheduler: what returned nil as it was
// stopped is a plain first success, kept; what returned the context's
// error runs again in the next process, as attempt 1, told once.
func TestHistoryOfAttemptsShutdownStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := storetest.NewMemory()
		second := false
		opts := func(st coordinator.Store) []coordinator.Option {
			return []coordinator.Option{coordinator.WithStore(st), coordinator.WithWorkers(4), coordinator.WithHistory(3, 100),
				coordinator.WithFunc("nil", func(ctx context.Context, _ []byte) error {
					if !second {
						<-ctx.Done()
					}
					return nil
				}),
				coordinator.WithFunc("err", func(ctx context.Context, _ []byte) error {
					if !second {
						<-ctx.Done()
						return ctx.Err()
					}
					return nil
				})}
		}
		s1, err := coordinator.New(opts(mem.Open())...)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for i := range 4 {
			fn := "nil"
			if i%2 == 1 {
				fn = "err"
			}
			id := fmt.Sprint(fn, i)
			ids = append(ids, id)
			if err := s1.Submit(coordinator.Task{ID: id, Func: fn}); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		if err := s1.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			h, _ := s1.History(id)
			t.Logf("s1 %s: %+v", id, h.Attempts)
		}
		second = true
		s2, err := coordinator.New(opts(mem.Open())...)
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Shutdown(context.Background())
		f := s2.Feed()
		defer f.Close()
		s2.Wait(context.Background())
		synctest.Wait()
		told, _, es := drain(t, f, 2)
		for _, id := range ids {
			h, _ := s2.History(id)
			if len(h.Attempts) != 1 || h.Attempts[0].Attempt != 1 || h.Attempts[0].Outcome != coordinator.OutcomeSucceeded || h.Dropped != 0 {
				t.Errorf("s2 History(%s) = %+v", id, h)
			}
		}
		if told != 4 {
			t.Errorf("s2's feed told %d: %+v", told, es)
		}
	})
}
