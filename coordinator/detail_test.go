package coordinator_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
)

// Detail reports how a task was asked to run and when it runs next: a
// delay's end, then nothing once it ran.
func TestDetail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		start := time.Now()
		retry := coordinator.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Second}
		if err := s.Submit(coordinator.Task{ID: "later", Delay: time.Minute, Retry: retry, Timeout: 5 * time.Second, Run: ok},
			coordinator.Task{ID: "tick", Every: time.Hour, Times: 2, Run: ok}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		d, found := s.Detail("later")
		if !found || d.Retry.MaxAttempts != 3 || d.Timeout != 5*time.Second || !d.NotBefore.Equal(start.Add(time.Minute)) || !d.Next.Equal(start.Add(time.Minute)) {
			t.Errorf("Detail(later) = %+v, %v; want 3 attempts, 5s timeout, not before and next at +1m", d, found)
		}
		if d, _ := s.Detail("tick"); d.Every != time.Hour || d.Times != 2 || !d.Next.Equal(start.Add(time.Hour)) {
			t.Errorf("Detail(tick) = %+v; want every 1h, 2 times, next at +1h", d)
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if d, _ := s.Detail("later"); !d.Next.IsZero() {
			t.Errorf("Detail(later) once run: next %v; want zero", d.Next)
		}
		if _, found := s.Detail("nope"); found {
			t.Errorf("Detail(nope) found; want unknown")
		}
	})
}
