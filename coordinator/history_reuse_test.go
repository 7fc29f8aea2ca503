package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/batonhq/baton/coordinator"
)

// Retention 0 reuses the records of forgotten tasks for new submissions
// while a Feed reads (small max): an entry's ID names a task that ran that
// attempt; the successes add up.
func TestFeedNamesOnlyTasksThatRanWhenRecordsAreReused(t *testing.T) {
	s := newScheduler(t, coordinator.WithWorkers(2), coordinator.WithRetention(0), coordinator.WithHistory(3, 1<<20))
	f := s.Feed()
	defer f.Close()
	okN, succeeded := 0, 0
	var bad []string
	read := func() bool {
		p, err := f.Next(context.Background(), 5)
		if err != nil {
			t.Error(err)
			return false
		}
		for _, e := range p.Ended {
			if e.Outcome == coordinator.OutcomeSucceeded {
				succeeded += e.Tasks
			}
			if e.ID == "" {
				continue
			}
			wantFail := strings.HasSuffix(e.ID, "f")
			if wantFail != (e.Outcome == coordinator.OutcomeFailed) || e.Tasks != 1 {
				bad = append(bad, fmt.Sprintf("%+v", e))
			}
		}
		return p.More
	}
	fail := func(context.Context) error { return errors.New("planned") }
	for round := range 40 {
		var tasks []coordinator.Task
		for i := range 200 {
			tk := coordinator.Task{ID: fmt.Sprintf("r%d-%d", round, i), Run: ok}
			if i%5 == 0 {
				tk.ID += "f"
				tk.Run = fail
			} else {
				okN++
			}
			if i >= 10 {
				tk.Deps = []string{fmt.Sprintf("r%d-%d", round, i%10)}
				if (i%10)%5 == 0 {
					tk.Deps[0] += "f"
				}
				tk.When = coordinator.AllDone
			}
			tasks = append(tasks, tk)
		}
		if err := s.Submit(tasks...); err != nil {
			t.Fatal(err)
		}
		read()
		read()
		if err := s.Wait(context.Background()); err != nil {
			t.Logf("Wait = %v", err)
		}
	}
	for read() {
	}
	if succeeded != okN {
		t.Errorf("the feed told %d successes; %d tasks succeeded", succeeded, okN)
	}
	if len(bad) > 0 {
		t.Errorf("%d entries name a task that did not end so: %v", len(bad), bad[:min(10, len(bad))])
	}
}
