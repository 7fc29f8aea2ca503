package coordinator

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A Rerun applied in the same coordinator iteration as the end it
// re-opens (the loop applies what the workers finished before a request)
// keeps what that task's next end will reach: its Skipped dependent stays
// held while the task is live again, and its record is not handed to a
// task submitted meanwhile, which that next end would otherwise skip (or
// release) as if it depended on the re-run task. Found by
// TestConcurrentStress: a task with no dependency skipped for another's
// failure; one run after its only dependency failed; a coordinator that
// spun for ever on a key queue counted ready with no ready task.
func TestRerunInTheIterationOfItsEndKeepsItsDependents(t *testing.T) {
	r := newRig(1)
	r.s.retain = true // WithRetention(0)
	boom := errors.New("boom")
	calls := 0
	r.submit(t, Task{ID: "t", Run: func(context.Context) error { calls++; return boom }},
		Task{ID: "d", Deps: []string{"t"}, Run: noop})
	r.step()   // t handed out
	r.drain(0) // t fails, its end applied: d skipped; no settle yet
	if st := r.status(t, "d"); st != Skipped {
		t.Fatalf("d = %v after t failed; want Skipped", st)
	}
	if _, err := r.s.rerun(&RerunRequest{IDs: []string{"t"}}, r.now); err != nil {
		t.Fatalf("rerun(t) = %v", err)
	}
	r.step() // settle: d must stay, held by t's next end
	if _, ok := r.s.info("d"); !ok {
		t.Fatal("d was forgotten while t, which it depends on, runs again")
	}
	r.submit(t, Task{ID: "x", Run: noop, Delay: time.Hour}) // would take a record retention freed
	r.runAll(t, 100)                                        // t fails again (then t and d are forgotten)
	if calls != 2 {
		t.Fatalf("t's function ran %d times; want 2", calls)
	}
	if st := r.status(t, "x"); st != Pending {
		t.Fatalf("x, which depends on nothing, is %v after t failed again; want Pending (its delay)", st)
	}
}
