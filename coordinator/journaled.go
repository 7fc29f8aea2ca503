package coordinator

import "context"

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
// What may go out early, an iteration at a time (earlyPubs): on each
// lane, the handed-out items from the first not yet published on, as long
// as each is a task of a journaled batch of this iteration with no
// dependency (nothing that an uncommitted end released), not fused
// behind another and not a careful start. Nothing goes out early in an
// iteration that forgets a task (its ID may be the one a journaled task
// reuses: a crash would bring the old task back and the batch would be
// refused although its task ran) or changes a pool's pause. A crash
// before the commit then costs what a crash costs a running task: the
// next scheduler runs the task again (at least once, as always).

// SubmitJournaled is SubmitContext for a batch the caller has made
// durable itself, in a journal it replays after a crash until it learns
// that the batch's acceptance was committed, and never afterwards (as
// pgstore's Service does with its inbox). On a durable scheduler the
// batch's tasks that depend on nothing may start before the commit that
// stores them (one commit sooner after a Submit to an idle scheduler); a
// crash before that commit loses nothing, since the caller submits the
// batch again, but the task may then run twice, as any task running at
// a crash may. Without a store it is SubmitContext. It blocks as
// SubmitContext does, is safe for concurrent use, and returns ErrClosed
// once Shutdown has begun.
//
// A caller whose journal does not keep the batch until its acceptance is
// committed must use SubmitContext: a task of a batch lost in a crash
// could have run.
func (s *Scheduler) SubmitJournaled(ctx context.Context, tasks ...Task) error {
	return s.submit(ctx, &submission{tasks: tasks, journaled: true})
}

// seqRange is the sequences lo..hi-1 (durable.early).
type seqRange struct{ lo, hi uint64 }

// journal notes the records just given to journaled batch b's tasks
// (submitted): the tasks without a dependency may go out early.
func (d *durable) journal(b *submission, i int, seq uint64) {
	if len(b.tasks[i].Deps) > 0 || len(b.places(i)) > 0 {
		return
	}
	if n := len(d.early); n > 0 && d.early[n-1].hi == seq {
		d.early[n-1].hi = seq + 1
		return
	}
	d.early = append(d.early, seqRange{seq, seq + 1})
}

// journaledRoot reports whether task t is a root of a journaled batch of
// this iteration.
func (d *durable) journaledRoot(t int32) bool {
	if int(t) >= len(d.seq) {
		return false
	}
	seq := d.seq[t]
	for _, r := range d.early {
		if seq >= r.lo && seq < r.hi {
			return true
		}
	}
	return false
}

// earlyTo returns the end of what lane ls may publish before this
// iteration's commit: shown if nothing.
func (s *state) earlyTo(ls *laneState) uint32 {
	d := s.dur
	if d == nil || len(d.early) == 0 || d.failed != nil || len(d.deletes) > 0 || len(d.pools) > 0 {
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
