package pgstore_test

import (
	"context"
	"errors"
	"sync/atomic"
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

// Any process reads a task's attempts from baton.tasks as the leader
// tells them (Client.History, with only the reader's privileges): each
// attempt's times, worker, outcome, error and log lines, a plain success
// from last_attempt alone; a task never submitted is unknown.
func TestClientHistoryIsTheLeaders(t *testing.T) {
	ctx := testCtx(t)
	name := uniqueName("chist")
	var calls atomic.Int32
	flaky := pgstore.WithScheduler(coordinator.WithFunc("flaky", func(ctx context.Context, p []byte) error {
		n := calls.Add(1)
		coordinator.Logger(ctx).Warn("trying", "n", n)
		if n < 3 {
			return errors.New("not yet")
		}
		return nil
	}))
	a := startService(t, name, pgstore.WithInstance("a"), flaky)
	<-a.Leading()
	reader, err := pgstore.NewClient(poolAs(t, loginAs(t, "baton_reader")), name)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if err := a.Submit(ctx,
		coordinator.Task{ID: "flaky", Func: "flaky", Retry: coordinator.RetryPolicy{MaxAttempts: 3}},
		coordinator.Task{ID: "plain", Func: "echo", Payload: []byte("p")},
		coordinator.Task{ID: "bad", Func: "fail", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	var te *coordinator.TasksError
	if err := a.WaitTasks(ctx, "flaky", "plain", "bad"); !errors.As(err, &te) || len(te.Tasks) != 1 || te.Tasks[0].ID != "bad" {
		t.Fatalf("WaitTasks = %v; want bad alone failed", err)
	}
	s := a.Scheduler()
	if s == nil {
		t.Fatal("a does not lead")
	}
	for _, id := range []string{"flaky", "plain", "bad"} {
		want, _ := s.History(id)
		got, ok, err := reader.History(ctx, id)
		if err != nil || !ok {
			t.Fatalf("History(%s) = %v, %v", id, ok, err)
		}
		if len(got.Attempts) != len(want.Attempts) || got.Dropped != want.Dropped || len(want.Attempts) == 0 {
			t.Fatalf("History(%s) = %+v; the leader's %+v", id, got, want)
		}
		for i, w := range want.Attempts {
			g := got.Attempts[i]
			if g.Attempt != w.Attempt || g.Run != w.Run || g.Rerun != w.Rerun || g.Pool != w.Pool || g.Worker != w.Worker ||
				g.Outcome != w.Outcome || !g.HandedOut.Equal(w.HandedOut) || !g.Started.Equal(w.Started) || !g.Ended.Equal(w.Ended) ||
				(g.Err == nil) != (w.Err == nil) || (g.Err != nil && g.Err.Error() != w.Err.Error()) ||
				len(g.Logs) != len(w.Logs) || g.LogsDropped != w.LogsDropped {
				t.Errorf("History(%s) attempt %d = %+v; the leader's %+v", id, i+1, g, w)
				continue
			}
			for j, wl := range w.Logs {
				if gl := g.Logs[j]; !gl.Time.Equal(wl.Time) || gl.Level != wl.Level || gl.Message != wl.Message || gl.Attrs != wl.Attrs {
					t.Errorf("History(%s) attempt %d line %d = %+v; the leader's %+v", id, i+1, j, gl, wl)
				}
			}
		}
	}
	if h, _, _ := reader.History(ctx, "flaky"); len(h.Attempts) != 3 || h.Attempts[0].Err == nil || h.Attempts[2].Outcome != coordinator.OutcomeSucceeded || len(h.Attempts[2].Logs) != 1 {
		t.Errorf("History(flaky) = %+v; want two failures and a success, each with its line", h)
	}
	// docs/postgres.md's queries, as the reader.
	rpool := poolAs(t, loginAs(t, "baton_reader"))
	for id, want := range map[string]int{"flaky": 3, "plain": 1, "bad": 1} {
		var n int
		if err := rpool.QueryRow(ctx, `SELECT count(*) FROM baton.tasks,
			jsonb_array_elements(coalesce(history->'attempts', jsonb_build_array(last_attempt))) a
			WHERE store = $1 AND id = $2`, name, id).Scan(&n); err != nil || n != want {
			t.Errorf("attempts of %s by SQL = %d, %v; want %d", id, n, err, want)
		}
	}
	var lines int
	if err := rpool.QueryRow(ctx, `SELECT count(*) FROM baton.tasks, jsonb_array_elements(history->'attempts') a,
		jsonb_array_elements(a->'logs') l WHERE store = $1 AND id = 'flaky' AND l->>'level' = 'WARN'`, name).Scan(&lines); err != nil || lines != 3 {
		t.Errorf("flaky's log lines by SQL = %d, %v; want 3", lines, err)
	}
	if _, ok, err := reader.History(ctx, "never"); ok || err != nil {
		t.Errorf("History(never) = %v, %v; want unknown", ok, err)
	}
}
