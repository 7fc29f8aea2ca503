package pgstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/pgstore"
)

// The attempt history and a re-run are kept in PostgreSQL as in any
// store: a task fails on the leader, is re-run there (committed like a
// Submit) and fails again; the instance that takes over has both attempts,
// the re-run and the task's log lines, and re-runs it once more.
func TestHistoryAndRerunSurviveATakeover(t *testing.T) {
	ctx := testCtx(t)
	name := uniqueName("hist")
	logged := pgstore.WithScheduler(coordinator.WithFunc("noisy", func(ctx context.Context, p []byte) error {
		coordinator.Logger(ctx).Info("about to fail", "payload", string(p))
		return errors.New("noisy failed")
	}))
	a := startService(t, name, pgstore.WithInstance("a"), logged)
	<-a.Leading()
	b := startService(t, name, pgstore.WithInstance("b"), logged)
	if err := b.Submit(ctx, coordinator.Task{ID: "n", Func: "noisy", Payload: []byte("p")},
		coordinator.Task{ID: "after", Func: "echo", Deps: []string{"n"}}); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitTasks(ctx, "n"); err == nil {
		t.Fatal("n succeeded; want it failed")
	}
	s := a.Scheduler()
	if s == nil {
		t.Fatal("a does not lead")
	}
	if _, err := s.Rerun(ctx, coordinator.RerunRequest{IDs: []string{"n"}, Downstream: true, By: "ops"}); err != nil {
		t.Fatalf("Rerun = %v", err)
	}
	if err := s.WaitTasks(ctx, "n", "after"); err == nil {
		t.Fatal("n succeeded after its re-run; want it failed again")
	}
	handOver(ctx, t, a, b)
	s = b.Scheduler()
	if s == nil {
		t.Fatal("b leads without a scheduler")
	}
	info, _ := s.Info("n")
	h, ok := s.History("n")
	if !ok || info.Reruns != 1 || len(h.Attempts) != 2 || h.Attempts[1].Rerun != 1 {
		t.Fatalf("on the next leader: Info(n) %+v, History(n) %+v; want 1 re-run and both attempts", info, h)
	}
	for i, at := range h.Attempts {
		if at.Outcome != coordinator.OutcomeFailed || at.Err == nil || at.Err.Error() != "noisy failed" ||
			len(at.Logs) != 1 || at.Logs[0].Message != "about to fail" || at.Logs[0].Attrs != "payload=p" {
			t.Errorf("attempt %d on the next leader = %+v; want failed, noisy failed, its log line", i+1, at)
		}
	}
	if st, _ := s.Info("after"); st.Status != coordinator.Skipped || st.Cause != "n" {
		t.Errorf("Info(after) = %v cause %q; want skipped because of n", st.Status, st.Cause)
	}
	res, err := s.Rerun(ctx, coordinator.RerunRequest{IDs: []string{"n"}, Downstream: true})
	if err != nil || len(res.Reopened) != 2 {
		t.Fatalf("Rerun on the next leader = %+v, %v; want n and after re-opened", res, err)
	}
	_ = s.WaitTasks(ctx, "n", "after")
	if h, _ := s.History("n"); len(h.Attempts) != 3 || h.Attempts[2].Rerun != 2 {
		t.Errorf("History(n) after a second re-run = %+v; want 3 attempts, the last of re-run 2", h)
	}
}
