package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/batonhq/baton/internal/lane"
)

// Branching: a task chooses which of its direct dependents run (Airflow's
// @task.branch, Taskflow's condition tasks). Like a spawn, the choice is
// part of the attempt's outcome: Choose checks it at once and the
// coordinator applies it when the attempt succeeds (pending, spawn.go).
// A branch's success releases the dependents it chose and skips the
// others (notChosen), with the branch as their cause: a skip by a rule,
// as trigger rules see it, which NoneFailed and NoneFailedMinOneSuccess
// let through.

// Errors of Choose, and of the tasks it leaves out.
var (
	// ErrNotDependent: Choose named a task that does not depend directly
	// on the choosing task (or is not known).
	ErrNotDependent = errors.New("coordinator: not a direct dependent")
	// ErrNotChosen is the error (TaskInfo.Err, Event.Err) of a task
	// skipped because a branch upstream, its Cause, did not choose the
	// path it is on.
	ErrNotChosen = errors.New("coordinator: not chosen by its branch")
)

// Choose makes the task whose attempt runs with ctx a branch: once that
// attempt succeeds, only the named direct dependents of the task run
// (each as its own trigger rule says); every other dependent, those
// submitted later included, ends Skipped, its Cause the branch and its
// Err ErrNotChosen, and what depends on those follows its trigger rule
// (a skip by a rule: NoneFailed, or NoneFailedMinOneSuccess, is the join
// after a branch). A dependent that has already started or ended (an
// AnyFailed task started by another dependency) is left as it is.
// Choose with no names chooses none. A later call replaces an earlier
// one; an attempt that fails chooses nothing (its retry chooses again). A
// recurring task's choice is its last run's. A task that spawns
// (Spawn) and chooses applies its choice when its join succeeds.
//
// It returns an error wrapping ErrNotDependent naming a task that is not
// a direct dependent (and then changes nothing), ErrNoAttempt if ctx is
// not a running attempt's context, the context's cause if the attempt
// was cancelled or timed out, and ErrClosed after Shutdown. It blocks for
// a round trip to the coordinator and is safe for concurrent use. Remote
// handlers (remote/jetstream) cannot choose; see Spawn.
func Choose(ctx context.Context, successors ...string) error {
	a, err := graphAttempt(ctx)
	if err != nil {
		return err
	}
	reply := make(chan error, 1)
	return a.call(ctx, chooseReq{task: a.task, ctx: a.c, laneID: a.laneID, slot: a.slot, ids: slices.Clone(successors), reply: reply}, reply)
}

type chooseReq struct {
	task   int32
	ctx    *lane.Context
	laneID int
	slot   uint32
	ids    []string
	reply  chan<- error
}

func (r chooseReq) apply(l *loop, now time.Time) {
	r.reply <- l.st.choose(r.task, r.ctx, r.laneID, r.slot, r.ids)
}

// choose implements Choose.
func (s *state) choose(t int32, ctx *lane.Context, laneID int, slot uint32, ids []string) error {
	for _, id := range ids {
		j, ok := s.findLive(id)
		if !ok || s.hot[j].status == dropped || !containsTask(s.edges(&s.tasks[j], s.tasks[j].deps), t) {
			return fmt.Errorf("%w: %s does not depend on %s", ErrNotDependent, quoteID(id), quoteID(s.key(t)))
		}
	}
	p, err := s.attempt(t, ctx, laneID, slot)
	if err != nil {
		return err
	}
	slices.Sort(ids)
	p.chose, p.chosen = true, slices.Compact(ids)
	return nil
}

// isBranch reports whether t, which succeeded, chose its dependents.
func (s *state) isBranch(t int32) bool {
	return s.hot[t].flags&fExtra != 0 && s.tasks[t].x.branched
}

// chose reports whether branch t chose c.
func (s *state) chose(t, c int32) bool {
	_, found := slices.BinarySearch(s.tasks[t].x.chosen, s.key(c))
	return found
}

// releaseChosen is release for a branch: the dependents it chose are
// released, the others skipped.
func (s *state) releaseChosen(t int32, now time.Time) {
	for c := range s.successors(t) {
		if s.chose(t, c) {
			s.released(c, now)
		} else {
			s.notChosen(c, t, now)
		}
	}
}

// notChosen skips c, a dependent of branch t (which has succeeded) that t
// did not choose, if it still waits, and reports whether it did.
func (s *state) notChosen(c, t int32, now time.Time) bool {
	if hc := &s.hot[c]; (hc.status == Pending && hc.unmet == 0) || !s.takeBack(c) {
		// Started by its rule (AnyFailed: running, or waiting for its
		// delay, a retry or its next run), or final (skipped since by
		// another dependency): it hears of t's success as any dependent.
		s.released(c, now)
		return false
	}
	// From its skip on, its unmet count is its dependencies whose ends are
	// not settled (cascade.go), t's is: each will tell it once (every
	// other end is heard already: settleBatch skips last).
	r := &s.tasks[c]
	n := int32(0)
	for _, d := range s.edges(r, r.deps) {
		if !s.settledEnd(d) {
			n++
		}
	}
	s.hot[c].unmet = n
	s.skip(c, t, endBenign, now) // a branch that succeeded
	s.cascade(now)
	return true
}

// notChosenCause reports whether cause, the cause of Skipped task t, is a
// branch that did not choose its path: the only Succeeded cause, unless a
// Rerun re-opened it since t was skipped. Then t's class, kept
// (causeclass.go), tells: a failed or cancelled one names a cause that
// failed or was cancelled then, and is not "not chosen" unless the cause
// is a branch now (a skip can be worse than its cause: another dependency
// failed). What is not kept is why a benign skip was benign: a skip behind
// a task its own rule skipped reads as not chosen once that task is
// re-run and succeeds (telling it from a branch's skip, which stays not
// chosen when its branch is re-run without choosing again, needs that
// fact stored with the skip).
func (s *state) notChosenCause(t, cause int32) bool {
	return cause != noTask && s.hot[cause].status == Succeeded && (s.isBranch(cause) || s.classOfEnd(t) == endBenign)
}
