package coordinator

// The requests: every call of the API that needs the coordinator is a
// message to its loop (the Scheduler's mailbox), a struct with the reply
// channel (buffer 1) the caller waits on. apply runs on the loop's
// goroutine: it changes or reads the state through its methods and
// answers, at once for what reads memory (Info, Counts, Snapshot), or at
// the end of the iteration, after its commit on a durable scheduler,
// through the state's outbox (state.later: Submit, Cancel, Wait,
// WaitTasks).

import (
	"time"

	"github.com/batonhq/baton/internal/lane"
)

// request is a message to the loop. apply runs on the loop's goroutine.
type request interface {
	apply(l *loop, now time.Time)
}

type submitReq struct {
	b     *submission
	reply chan<- error
}

func (r submitReq) apply(l *loop, now time.Time) {
	if err := l.st.submit(r.b, now); err != nil {
		r.reply <- err // nothing is stored
		return
	}
	l.st.submitted(r.b)
	l.st.later(answer{err: r.reply}) // once committed, on a durable scheduler
}

type cancelReq struct {
	id    string
	reply chan<- bool
}

func (r cancelReq) apply(l *loop, now time.Time) {
	if !l.st.cancel(r.id, now) {
		r.reply <- false
		return
	}
	l.st.later(answer{ok: r.reply}) // once committed, on a durable scheduler
}

type infoReq struct {
	id    string
	reply chan<- infoReply
}

func (r infoReq) apply(l *loop, now time.Time) {
	ti, ok := l.st.info(r.id)
	r.reply <- infoReply{ti, ok}
}

type subscribeReq struct {
	sub   *subscriber
	reply chan<- bool
}

func (r subscribeReq) apply(l *loop, now time.Time) {
	l.subs = append(l.subs, r.sub)
	l.observed()
	l.s.startSubscriber(r.sub)
	r.reply <- true
}

type waitReq struct {
	id    uint64
	reply chan<- struct{}
}

func (r waitReq) apply(l *loop, now time.Time) {
	if l.st.settledAll() {
		l.st.later(answer{done: r.reply}) // the last ends may have been decided in this iteration: once committed
		return
	}
	l.waiters[r.id] = r.reply
}

func (r unwaitReq) apply(l *loop, now time.Time) { delete(l.waiters, r.id) }

type watchReq struct {
	id    uint64
	ids   []string
	reply chan<- error
}

func (r watchReq) apply(l *loop, now time.Time) { l.st.watch(r.id, r.ids, r.reply) }

func (r unwatchReq) apply(l *loop, now time.Time) { l.st.unwatch(r.id) }

func (r runningReq) apply(l *loop, now time.Time) { r.reply <- l.st.runningIDs() }

type censusReq struct {
	f     func(*state, time.Time) census
	reply chan<- census
}

func (r censusReq) apply(l *loop, now time.Time) { r.reply <- r.f(l.st, now) }

type totalsReq struct {
	f     func(*state) map[string]Totals
	reply chan<- map[string]Totals
}

func (r totalsReq) apply(l *loop, now time.Time) { r.reply <- r.f(l.st) }

type snapshotReq struct {
	f     *SnapshotFilter
	reply chan<- snapshotReply
}

func (r snapshotReq) apply(l *loop, now time.Time) {
	snap, err := l.st.snapshot(r.f, now)
	r.reply <- snapshotReply{snap, err}
}

type depsReq struct {
	task  int32
	ctx   *lane.Context // the attempt's context: the task must still run with it (runsWith)
	dep   string
	all   bool
	errs  bool // how each dependency ended, as an error (Map's reducer)
	reply chan<- depsReply
}

func (r depsReq) apply(l *loop, now time.Time) {
	if !l.st.runsWith(r.task, r.ctx) {
		r.reply <- depsReply{err: ErrNoAttempt}
		return
	}
	if r.errs {
		r.reply <- l.st.depErrs(r.task)
		return
	}
	r.reply <- l.st.deps(r.task, r.dep, r.all)
}
