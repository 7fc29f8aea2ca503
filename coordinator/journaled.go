package coordinator

import (
	"context"
	"sort"
)

// Journaled submissions: a batch its caller has made durable already.
//
// On a durable scheduler a worker sees an attempt only once the iteration
// that handed it out is committed (outbox): a crash must never undo what
// a worker has seen. A batch that comes from a journal of the caller's
// own, which the caller replays after a crash until the batch's
// acceptance is committed (pgstore's inbox: the request row stays
// undecided until the scheduler's commit that stores the batch writes
// its acceptance), cannot be undone by a crash: the next scheduler on
// the store gets it again. Its tasks that depend on nothing may therefore
// start before that commit, and a task submitted to an idle scheduler
// starts one commit (an fsync) sooner.
//
// Only if a crash before the commit would leave exactly what the journal
// replays: the iteration's commit must hold nothing but the journaled
// batches' own records (earlyTo). An end, a start, a spawn joining, a
// reservation dropped, a task forgotten or a pool paused in the same
// iteration would be undone by the crash while the early task had run
// beside it: the batch could then be refused on replay (an ID the crash
// gave back to a task, a dependency it took away) although its task ran,
// or a task whose end freed a key's place or a worker would run again
// after the task that took its place. Then the iteration publishes as
// any other, after its commit.
//
// What goes out early: on each lane, the handed-out items from the first
// not yet published on, as long as each is a task of a journaled batch
// with no dependency, not fused behind another and not a careful start,
// of a batch that names no task outside itself (selfContained).
// A crash before the commit costs what a crash costs a running task: the
// next scheduler runs the task again (at least once, as always). A
// replay must not go out early (SubmitJournaled's doc): a function that
// kills its process would otherwise kill every process that replays it,
// its start never committed, never counted (careful.go).

// SubmitJournaled is SubmitContext for a batch the caller has made
// durable itself, in a journal it replays after a crash until it learns
// that the batch's acceptance was committed, and never afterwards (as
// pgstore's Service does with its inbox). On a durable scheduler the
// batch's tasks that depend on nothing may start before the commit that
// stores them (one commit sooner after a Submit to an idle scheduler,
// when nothing else was decided meanwhile); a crash before that commit
// loses nothing, since the caller submits the batch again, but the task
// may then run twice, as any task running at a crash may. Without a
// store it is SubmitContext. It blocks as SubmitContext does, is safe for
// concurrent use, and returns ErrClosed once Shutdown has begun.
//
// Replay with SubmitContext, never with SubmitJournaled, a batch that a
// process which has since crashed may have submitted: its function may
// be what crashed it, and a start that is never committed is never
// counted, so a function that kills its process would kill every
// process that replays it (SubmitContext commits first, and a restart's
// careful start bounds the crashes as for any task: a journaled batch's
// function that kills its process is called at most MaxAttempts + 2
// times, one more than a submitted one's). A caller whose
// journal does not keep the batch until its acceptance is committed must
// use SubmitContext: a task of a batch lost in a crash could have run.
//
// A batch that names a task submitted before it never goes out early. A
// replay can still be refused for what could have refused the batch the
// first time: an ID that a spawner restored by the next scheduler claims
// for a child before the replay comes (a journal's IDs and spawned
// children's race whatever the crash; keep them apart).
func (s *Scheduler) SubmitJournaled(ctx context.Context, tasks ...Task) error {
	return s.submit(ctx, &submission{tasks: tasks, journaled: true})
}

// seqRange is the sequences lo..hi-1 (durable.early).
type seqRange struct{ lo, hi uint64 }

// journal notes the record just given to task i of journaled batch b
// (submitted): its tasks count (journaled), and, if the batch may go out
// early (selfContained), those without a dependency do.
func (d *durable) journal(b *submission, i int, seq uint64, early bool) {
	d.journaled++
	if !early || len(b.tasks[i].Deps) > 0 || len(b.places(i)) > 0 {
		return
	}
	if n := len(d.early); n > 0 && d.early[n-1].hi == seq {
		d.early[n-1].hi = seq + 1
		return
	}
	d.early = append(d.early, seqRange{seq, seq + 1})
}

// selfContained reports whether batch b depends on nothing outside
// itself. A batch that names a task submitted before may go out early
// only if a crash cannot take that task away before the journal's replay
// comes, and it can: retention may forget it when the next scheduler
// starts (its time came while the process was down), and the replay is
// then refused (ErrUnknownDependency) although the batch's roots ran.
func selfContained(b *submission) bool {
	var ids map[string]bool
	for i := range b.tasks {
		for _, dep := range b.tasks[i].Deps {
			if ids == nil {
				ids = make(map[string]bool, len(b.tasks))
				for k := range b.tasks {
					ids[b.tasks[k].ID] = true
				}
			}
			if !ids[dep] {
				return false
			}
		}
	}
	return true
}

// journaledRoot reports whether task t is a root of a journaled batch of
// this iteration (d.early is in ascending order: sequences only grow).
func (d *durable) journaledRoot(t int32) bool {
	if int(t) >= len(d.seq) {
		return false
	}
	seq := d.seq[t]
	i := sort.Search(len(d.early), func(i int) bool { return d.early[i].hi > seq })
	return i < len(d.early) && d.early[i].lo <= seq
}

// onlyJournaled reports whether this iteration's commit holds nothing but
// the journaled batches' own records: each of their tasks is written
// once (touch), and nothing else is.
func (d *durable) onlyJournaled() bool {
	return d.failed == nil && len(d.dirty) == d.journaled && len(d.defs) == d.journaled &&
		len(d.histDirty) == 0 && len(d.deletes) == 0 && len(d.pools) == 0
}

// earlyTo returns the end of what lane ls may publish before this
// iteration's commit: shown if nothing.
func (s *state) earlyTo(ls *laneState) uint32 {
	d := s.dur
	if d == nil || len(d.early) == 0 || !d.onlyJournaled() {
		return ls.shown
	}
	seq := ls.shown
	for ; seq != ls.pub; seq++ {
		t := ls.l.Task(seq)
		if _, fused := ls.l.Fused(seq); fused || !d.journaledRoot(t) || (len(d.careful) > 0 && d.careful[t]) {
			break
		}
	}
	return seq
}
