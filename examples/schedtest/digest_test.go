package schedtest

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Inside a synctest bubble, time is fake: the scheduler's default clock
// reads it, time.Sleep jumps to the next event at once, and
// synctest.Wait returns when every goroutine of the bubble (the
// scheduler's included) is blocked: nothing left to do until time moves.
func TestDigestRunsHourlyAndRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := coordinator.New() // created inside the bubble: its goroutines belong to it
		if err != nil {
			t.Fatal(err)
		}
		defer s.Shutdown(context.Background())

		start := time.Now() // 2000-01-01 00:00:00 UTC in every bubble
		var sent []time.Duration
		calls := 0
		send := func(ctx context.Context) error {
			calls++
			if calls == 2 { // the 02:00 digest fails once
				return errors.New("mail server down")
			}
			sent = append(sent, time.Since(start))
			return nil
		}
		if err := StartDigest(s, send); err != nil {
			t.Fatal(err)
		}

		time.Sleep(24 * time.Hour) // a day passes, instantly
		synctest.Wait()

		// Submitted at 00:00, the series starts at its first start after
		// that, 01:00 (as robfig/cron would): a cron task submitted on one
		// of its slots waits for the next. 02:00 failed, retried at 02:01.
		want := []time.Duration{time.Hour, 2*time.Hour + time.Minute}
		for h := 3; h <= 24; h++ {
			want = append(want, time.Duration(h)*time.Hour)
		}
		if len(sent) != len(want) {
			t.Fatalf("%d digests sent in a day; want %d: %v", len(sent), len(want), sent)
		}
		for i := range want {
			if sent[i] != want[i] {
				t.Fatalf("digest %d sent at +%v; want +%v", i, sent[i], want[i])
			}
		}
		s.Cancel("digest") // an endless series ends by Cancel (or Shutdown)
		if err := s.WaitTasks(context.Background(), "digest"); !errors.As(err, new(*coordinator.TasksError)) {
			t.Fatalf("WaitTasks = %v; want the digest cancelled", err)
		}
	})
}
