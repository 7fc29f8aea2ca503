package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
)

// How a dependency can end, and what a rule sees of it.
type depEnd string

const (
	endOK     depEnd = "succeeded"
	endFail   depEnd = "failed"
	endCancel depEnd = "cancelled"
	endSkipF  depEnd = "skipped after a failure"
	endSkipB  depEnd = "skipped by a rule"
)

var allEnds = []depEnd{endOK, endFail, endCancel, endSkipF, endSkipB}

// depTasks returns the tasks that make a dependency called id end as e,
// the tasks to cancel after submission, and the root cause a skip blames
// ("" for none).
func depTasks(id string, e depEnd) (tasks []coordinator.Task, cancel []string, root string) {
	failing := func(context.Context) error { return errors.New("planned") }
	switch e {
	case endOK:
		return []coordinator.Task{{ID: id, Run: ok}}, nil, ""
	case endFail:
		return []coordinator.Task{{ID: id, Run: failing}}, nil, id
	case endCancel:
		return []coordinator.Task{{ID: id, Run: ok, Delay: time.Hour}}, []string{id}, id
	case endSkipF:
		return []coordinator.Task{{ID: id + "-root", Run: failing}, {ID: id, Run: ok, Deps: []string{id + "-root"}}}, nil, id + "-root"
	default: // endSkipB: AnyFailed over a success
		return []coordinator.Task{{ID: id + "-up", Run: ok}, {ID: id, Run: ok, When: coordinator.AnyFailed, Deps: []string{id + "-up"}}}, nil, id
	}
}

// expect is the rules, written out independently of the scheduler: does
// the task run, and if not, which causes may it name.
func expect(rule coordinator.Trigger, ends []depEnd, roots []string) (runs bool, causes []string) {
	failed := func(e depEnd) bool { return e == endFail || e == endSkipF }
	cancelled := func(e depEnd) bool { return e == endCancel }
	var bad []string
	switch rule {
	case coordinator.AllDone:
		return true, nil
	case coordinator.AnyFailed:
		for _, e := range ends {
			if failed(e) {
				return true, nil
			}
		}
		return false, []string{""}
	case coordinator.NoneFailed, coordinator.NoneFailedMinOneSuccess:
		for i, e := range ends {
			if failed(e) || cancelled(e) {
				bad = append(bad, roots[i])
			}
		}
		if rule == coordinator.NoneFailedMinOneSuccess && len(bad) == 0 && !slices.Contains(ends, endOK) {
			return false, []string{""} // none succeeded: its own rule
		}
	default:
		for i, e := range ends {
			if e != endOK {
				bad = append(bad, roots[i])
			}
		}
	}
	return len(bad) == 0, bad
}

// Every rule against every combination of one or two dependency ends,
// with the dependencies ended before the task is submitted and ending
// while it waits; and the task's own dependent follows from its end.
func TestTriggerRulesTable(t *testing.T) {
	rules := []coordinator.Trigger{coordinator.AllSucceeded, coordinator.AllDone, coordinator.AnyFailed, coordinator.NoneFailed,
		coordinator.NoneFailedMinOneSuccess}
	var combos [][]depEnd
	for _, a := range allEnds {
		combos = append(combos, []depEnd{a})
		for _, b := range allEnds {
			combos = append(combos, []depEnd{a, b})
		}
	}
	for _, rule := range rules {
		for _, ends := range combos {
			for _, before := range []bool{true, false} {
				name := fmt.Sprintf("%v/%v/before=%v", rule, ends, before)
				t.Run(name, func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						checkRule(t, rule, ends, before)
					})
				})
			}
		}
	}
}

func checkRule(t *testing.T, rule coordinator.Trigger, ends []depEnd, before bool) {
	s := newScheduler(t, coordinator.WithWorkers(2))
	var deps, cancels, roots []string
	var setup []coordinator.Task
	for i, e := range ends {
		id := fmt.Sprint("d", i)
		tasks, cancel, root := depTasks(id, e)
		setup = append(setup, tasks...)
		cancels = append(cancels, cancel...)
		deps = append(deps, id)
		roots = append(roots, root)
	}
	ran := false
	task := coordinator.Task{ID: "t", When: rule, Deps: deps, Run: func(ctx context.Context) error {
		ran = true
		up, err := coordinator.Upstream(ctx)
		if err != nil || len(up) != len(deps) {
			return fmt.Errorf("Upstream = %v, %v", up, err)
		}
		return nil
	}}
	after := coordinator.Task{ID: "after", Deps: []string{"t"}, Run: ok}
	if before {
		if err := s.Submit(setup...); err != nil {
			t.Fatalf("Submit(setup) = %v", err)
		}
		for _, id := range cancels {
			s.Cancel(id)
		}
		settle(t, s)
		if err := s.Submit(task, after); err != nil {
			t.Fatalf("Submit(t) = %v", err)
		}
	} else {
		if err := s.Submit(append(setup, task, after)...); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		for _, id := range cancels {
			s.Cancel(id)
		}
	}
	settle(t, s)
	wantRun, causes := expect(rule, ends, roots)
	info, _ := s.Info("t")
	if wantRun {
		if !ran || info.Status != coordinator.Succeeded {
			t.Fatalf("t: ran=%v, %+v; want it to run and succeed", ran, info)
		}
		if a, _ := s.Info("after"); a.Status != coordinator.Succeeded {
			t.Fatalf("after: %+v; want succeeded (t succeeded)", a)
		}
		return
	}
	if ran || info.Status != coordinator.Skipped || !slices.Contains(causes, info.Cause) {
		t.Fatalf("t: ran=%v, %+v; want skipped, cause one of %q", ran, info, causes)
	}
	wantCause := info.Cause
	if wantCause == "" {
		wantCause = "t" // t's own rule was not met: t is the root
	}
	if a, _ := s.Info("after"); a.Status != coordinator.Skipped || a.Cause != wantCause {
		t.Fatalf("after: %+v; want skipped, cause %q", a, wantCause)
	}
}

// AnyFailed starts as soon as one dependency fails, while the others
// still run; their later ends change nothing.
func TestAnyFailedStartsAtTheFirstFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(3))
		rec := record(s)
		g := newGate()
		running := make(chan struct{}) // slow runs before bad fails (else Upstream may see it Ready, handed out)
		err := s.Submit(
			coordinator.Task{ID: "slow", Run: func(ctx context.Context) error { close(running); return g.run(ctx) }},
			coordinator.Task{ID: "bad", Run: func(context.Context) error { <-running; return errors.New("boom") }},
			coordinator.Task{ID: "alert", When: coordinator.AnyFailed, Deps: []string{"slow", "bad"}, Run: func(ctx context.Context) error {
				up, err := coordinator.Upstream(ctx)
				if err != nil {
					return err
				}
				return coordinator.SetResult(ctx, fmt.Sprintf("%s %v, %s %v", up[0].ID, up[0].Status, up[1].ID, up[1].Status))
			}},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		synctest.Wait()
		if info, _ := s.Info("alert"); info.Status != coordinator.Succeeded || info.Result != "slow running, bad failed" {
			t.Fatalf("alert while slow runs: %+v; want succeeded, having seen slow running and bad failed", info)
		}
		g.release()
		settle(t, s)
		if n := len(rec.of("alert")); n != 2 {
			t.Fatalf("alert events %v; want started and succeeded, once", rec.of("alert"))
		}
	})
}

// A cleanup task (AllDone) runs after a failure, and what depends on it
// runs if it succeeds; a sibling under the default rule is skipped.
func TestCleanupRunsAfterFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(2))
		err := s.Submit(
			coordinator.Task{ID: "build", Run: func(context.Context) error { return errors.New("compile error") }},
			coordinator.Task{ID: "deploy", Deps: []string{"build"}, Run: ok},
			coordinator.Task{ID: "cleanup", When: coordinator.AllDone, Deps: []string{"build", "deploy"}, Run: ok},
			coordinator.Task{ID: "report", Deps: []string{"cleanup"}, Run: ok},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		want := map[string]coordinator.Status{"build": coordinator.Failed, "deploy": coordinator.Skipped,
			"cleanup": coordinator.Succeeded, "report": coordinator.Succeeded}
		for id, st := range want {
			if got := status(t, s, id); got != st {
				t.Errorf("%s is %v; want %v", id, got, st)
			}
		}
	})
}

// A rule over a dependency that fails after retries and one that is
// delayed: the rule waits for final ends, not for attempts.
func TestRulesWaitForFinalEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(2))
		start := time.Now()
		var ranAt time.Duration
		err := s.Submit(
			coordinator.Task{ID: "flaky", Run: func(context.Context) error { return errors.New("no") },
				Retry: coordinator.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Second}},
			coordinator.Task{ID: "later", Run: ok, Delay: 10 * time.Second},
			coordinator.Task{ID: "done", When: coordinator.AllDone, Deps: []string{"flaky", "later"}, Delay: time.Second,
				Run: func(context.Context) error { ranAt = time.Since(start); return nil }},
		)
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		settle(t, s)
		if ranAt != 10*time.Second {
			t.Fatalf("done ran at %v; want 10s (when later ended; its own Delay had passed)", ranAt)
		}
	})
}

// A bad When is refused at Submit, with nothing stored.
func TestTriggerBadInput(t *testing.T) {
	s := newScheduler(t)
	for _, tc := range []struct {
		task coordinator.Task
		want string
	}{
		{coordinator.Task{ID: "x", Run: ok, When: 7}, "unknown When 7"},
		{coordinator.Task{ID: "x", Run: ok, When: -1}, "unknown When -1"},
		{coordinator.Task{ID: "x", Run: ok, When: coordinator.AnyFailed}, "without dependencies"},
		{coordinator.Task{ID: "x", Run: ok, When: coordinator.NoneFailedMinOneSuccess}, "without dependencies"},
	} {
		err := s.Submit(tc.task)
		var te *coordinator.TaskError
		if !errors.Is(err, coordinator.ErrInvalidTask) || !errors.As(err, &te) || te.ID != "x" || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Submit(When %v) = %v; want ErrInvalidTask naming x and saying %q", tc.task.When, err, tc.want)
		}
		if _, found := s.Info("x"); found {
			t.Fatalf("x stored after a refused Submit")
		}
	}
	if got := coordinator.Trigger(9).String(); got != "Trigger(9)" {
		t.Errorf("Trigger(9).String() = %q", got)
	}
}

// The outcome of every task is a function of the graph and of the ends
// alone, never of the order the ends came in: two dependencies of C end
// (succeeded, failed, cancelled, or skipped by a rule) in one order and
// then in the other, with C and its dependent D under every pair of
// rules; C and D end the same way both times, and a skip names a cause of
// the same kind (a failure outranks a cancel, which outranks a skip by a
// rule). C used to take as its cause whichever bad end came first, so a
// NoneFailed D ran after a skip by a rule and was skipped after a cancel.
func TestSkipOutcomeIsAFunctionOfTheEnds(t *testing.T) {
	ends := []depEnd{endOK, endFail, endCancel, endSkipB}
	rules := []coordinator.Trigger{coordinator.AllSucceeded, coordinator.AllDone, coordinator.AnyFailed, coordinator.NoneFailed,
		coordinator.NoneFailedMinOneSuccess}
	for _, e1 := range ends {
		for _, e2 := range ends {
			for _, r1 := range rules {
				for _, r2 := range rules {
					name := fmt.Sprintf("%v,%v/C=%v/D=%v", e1, e2, r1, r2)
					t.Run(name, func(t *testing.T) {
						first := endInOrder(t, [2]depEnd{e1, e2}, r1, r2, false)
						second := endInOrder(t, [2]depEnd{e1, e2}, r1, r2, true)
						if first != second {
							t.Fatalf("a then b: %s\nb then a: %s\nwant the same outcome", first, second)
						}
					})
				}
			}
		}
	}
}

// endInOrder builds a, b -> C (rule r1) -> D (rule r2), ends a and b as
// ends says, b first if reversed, and describes how C and D ended: status
// and the kind of end their causes name.
func endInOrder(t *testing.T, ends [2]depEnd, r1, r2 coordinator.Trigger, reversed bool) (out string) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, coordinator.WithWorkers(4))
		var tasks []coordinator.Task
		var finish [2]func()
		for i, e := range ends {
			id := string(rune('a' + i))
			g := newGate()
			body := func(ctx context.Context) error {
				select {
				case <-g.c:
				case <-ctx.Done():
					return ctx.Err()
				}
				if e == endFail {
					return errors.New("planned")
				}
				return nil
			}
			switch e {
			case endSkipB: // an AnyFailed task over a success: skipped by its own rule
				tasks = append(tasks, coordinator.Task{ID: id + "-up", Run: body},
					coordinator.Task{ID: id, Run: ok, When: coordinator.AnyFailed, Deps: []string{id + "-up"}})
				finish[i] = g.release
			case endCancel:
				tasks = append(tasks, coordinator.Task{ID: id, Run: body})
				finish[i] = func() { s.Cancel(id) }
			default:
				tasks = append(tasks, coordinator.Task{ID: id, Run: body})
				finish[i] = g.release
			}
		}
		tasks = append(tasks, coordinator.Task{ID: "C", Run: ok, When: r1, Deps: []string{"a", "b"}},
			coordinator.Task{ID: "D", Run: ok, When: r2, Deps: []string{"C"}})
		if err := s.Submit(tasks...); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		order := []int{0, 1}
		if reversed {
			order = []int{1, 0}
		}
		for _, i := range order {
			finish[i]()
			synctest.Wait()
		}
		settle(t, s)
		for _, id := range []string{"C", "D"} {
			ti, _ := s.Info(id)
			out += fmt.Sprintf("%s %v", id, ti.Status)
			if ti.Status == coordinator.Skipped {
				kind := "its own rule"
				if ti.Cause != "" {
					c, _ := s.Info(ti.Cause)
					kind = c.Status.String()
				}
				out += " (cause: " + kind + ")"
			}
			out += "; "
		}
	})
	return out
}
