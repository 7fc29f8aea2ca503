package coordinator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/batonhq/baton/actor"
	"github.com/batonhq/baton/internal/lane"
)

// ErrUnknownTask: WaitTasks, or a Snapshot's Roots, named a task the
// scheduler does not know (never submitted, or forgotten by retention).
var ErrUnknownTask = errors.New("coordinator: unknown task")

// TasksError is WaitTasks' answer when a listed task did not succeed.
type TasksError struct {
	Tasks []TaskInfo // the listed tasks that did not succeed, in the order given, each once
}

// Unwrap returns the errors of the listed tasks that ended with one (the
// last failed attempt's, ErrCancelled or ErrClosed), so that errors.Is and
// errors.As see them: errors.Is(err, ErrCancelled) holds when one was
// cancelled, and errors.As finds a task's own error type. A Skipped task
// has none.
func (e *TasksError) Unwrap() []error {
	var errs []error
	for _, ti := range e.Tasks {
		if ti.Err != nil {
			errs = append(errs, ti.Err)
		}
	}
	return errs
}

func (e *TasksError) Error() string {
	var b strings.Builder
	b.WriteString("coordinator: ")
	for i, ti := range e.Tasks {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s %v", quoteID(ti.ID), ti.Status)
		switch {
		case ti.Status == Skipped && ti.Cause != "":
			fmt.Fprintf(&b, " because of %s", quoteID(ti.Cause))
		case ti.Status == Skipped:
			b.WriteString(" by its trigger rule")
		case ti.Err != nil:
			fmt.Fprintf(&b, ": %v", ti.Err)
		}
	}
	return b.String()
}

// WaitTasks blocks until every listed task is final. It returns nil if all
// of them succeeded, and otherwise a *TasksError listing those that did
// not, with how each ended: a Skipped task's Cause as bad as it had got
// when the call answers (a dependency of it that still runs may make it
// worse later: see Trigger; TaskInfo.Cause then tells). An ID the
// scheduler does not know is an error at once, naming it (errors.Is(err, ErrUnknownTask)); so is any ID of a
// call after a failed one: nothing is waited for. If ctx ends first it
// returns ctx.Err() and forgets the call; a ctx that has ended already
// gets ctx.Err() even for unknown IDs (nothing was looked at).
//
// Like Wait, it never returns while a listed task's function is still
// running, unless that attempt was abandoned at its timeout. It is safe
// for concurrent use, from a subscriber callback too, and from a task
// waiting for tasks that do not depend on it (waiting for itself, or for
// a task downstream, never returns). After Shutdown it answers as soon as
// no listed task's function runs (at once, unless a Shutdown whose
// context ended left one running).
func (s *Scheduler) WaitTasks(ctx context.Context, ids ...string) error {
	if c, ok := lane.Of(ctx); ok {
		if self, owner, ok := c.TaskID(); ok && owner == s && slices.Contains(ids, self) {
			return fmt.Errorf("%w: WaitTasks(%s) from that task's own attempt", ErrFromTask, quoteID(self))
		}
	}
	id := s.waitSeq.Add(1)
	reply := make(chan error, 1)
	if err := s.mailbox.Send(ctx, watchReq{id: id, ids: ids, reply: reply}); err != nil {
		if errors.Is(err, actor.ErrStopped) {
			<-s.loopDone
			return onFinal(s, func(st *state) error { return st.watchNow(ids) })
		}
		return err
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		s.mailbox.Send(context.Background(), unwatchReq{id: id}) // ErrStopped: nothing to forget
		return ctx.Err()
	}
}

// watch is one WaitTasks call, or one Batch.
type watch struct {
	id       uint64
	tasks    []int32  // the distinct listed tasks, in the order given
	left     int      // tasks not final yet
	bad      []badEnd // the listed tasks that ended other than Succeeded, in the order they ended
	reply    chan<- error
	answered bool // its answer is out, or nobody waits for it any more: rewatch leaves it
}

// badEnd is how a listed task ended, when not Succeeded: a success costs
// a watch nothing but a count.
type badEnd struct {
	at   int32 // its place in watch.tasks
	info TaskInfo
}

type unwatchReq struct{ id uint64 }

// watchRef is one task of a watch: the watch, and the task's place in it,
// in the list of the task's watches (state.watchOf).
type watchRef struct {
	w    *watch
	at   int32 // the task's place in w.tasks
	next int32 // the next ref of the same task, index+1 in state.wrefs (0: none)
}

// skipRef is a watch told of a Skipped task whose cause may still get
// worse: the entry of w.bad to update.
type skipRef struct {
	w   *watch
	bad int32
}

// watchers is what the state keeps of WaitTasks calls and Batches. A
// watched task costs an entry in a reused slice, not a map entry of its
// own: a Batch of 100,000 tasks is watched in two flat arrays.
type watchers struct {
	watchOf []int32             // per task (parallel to tasks, grown on first use): its first ref, index+1 in wrefs (0: not watched)
	wrefs   []watchRef          // refs, linked per task; free ones linked from free
	free    int32               // the first free ref, index+1 (0: none)
	byID    map[uint64]*watch   // WaitTasks watches not answered, by id (unwatch); a Batch is not here
	skips   map[int32][]skipRef // by Skipped task not settled: the watches its worse cause updates (rewatch)
	done    []*watch            // watches whose tasks are all final: answered at the end of the iteration
}

func (ws *watchers) watchedTask(t int32) bool {
	return int(t) < len(ws.watchOf) && ws.watchOf[t] != 0
}

// link adds w's task at place at, task t, to t's list.
func (ws *watchers) link(t int32, w *watch, at int32) {
	ref := watchRef{w: w, at: at, next: ws.watchOf[t]}
	var r int32
	if r = ws.free; r != 0 {
		ws.free = ws.wrefs[r-1].next
		ws.wrefs[r-1] = ref
	} else {
		ws.wrefs = append(ws.wrefs, ref)
		r = int32(len(ws.wrefs))
	}
	ws.watchOf[t] = r
}

// release frees ref r (index+1) and returns the next ref of its list.
func (ws *watchers) release(r int32) int32 {
	next := ws.wrefs[r-1].next
	ws.wrefs[r-1] = watchRef{next: ws.free}
	ws.free = r
	return next
}

// resolve finds the distinct tasks of a WaitTasks call, in the order given.
func (s *state) resolve(ids []string) ([]int32, error) {
	tasks := make([]int32, 0, len(ids))
	for _, name := range ids {
		t, ok := s.findLive(name)
		if !ok {
			return nil, &TaskError{ID: name, Err: ErrUnknownTask}
		}
		tasks = append(tasks, t)
	}
	return distinct(tasks), nil
}

// distinct drops the repeats of a list of tasks, keeping the first of
// each, in order: by scanning a short list, through a set for a long one
// (a watch of a 100,000-task batch must not cost n²).
func distinct(tasks []int32) []int32 {
	if len(tasks) <= 16 {
		out := tasks[:0]
		for _, t := range tasks {
			if !containsTask(out, t) {
				out = append(out, t)
			}
		}
		return out
	}
	seen := make(map[int32]struct{}, len(tasks))
	out := tasks[:0]
	for _, t := range tasks {
		if _, dup := seen[t]; !dup {
			seen[t] = struct{}{}
			out = append(out, t)
		}
	}
	return out
}

// watch registers a WaitTasks call, or answers it at once.
func (s *state) watch(id uint64, ids []string, reply chan<- error) {
	tasks, err := s.resolve(ids)
	if err != nil {
		s.answer(reply, err)
		return
	}
	s.watchTasks(id, tasks, reply)
}

// watchTasks registers a watch of distinct tasks, or answers it at once;
// id 0 is a Batch's, which nobody unwatches. The watch owns tasks.
func (s *state) watchTasks(id uint64, tasks []int32, reply chan<- error) {
	ws := &s.watchers
	w := &watch{id: id, reply: reply, tasks: tasks}
	if n := len(s.tasks); len(ws.watchOf) < n {
		ws.watchOf = append(ws.watchOf, make([]int32, n-len(ws.watchOf))...)
	}
	for i, t := range w.tasks {
		if st := s.hot[t].status; st.Final() {
			if st != Succeeded {
				info, _ := s.infoOf(t)
				w.bad = append(w.bad, badEnd{int32(i), info})
			}
			continue
		}
		w.left++
		ws.link(t, w, int32(i))
		s.hurry(t)
	}
	if w.left == 0 {
		ws.done = append(ws.done, w)
		return
	}
	if id == 0 {
		return // a Batch: nobody unwatches it
	}
	if ws.byID == nil {
		ws.byID = map[uint64]*watch{}
	}
	ws.byID[id] = w
}

// watchNow answers a WaitTasks call on the state a stopped loop left, whose
// tasks are all final and whose ends are committed. It only reads the
// state: calls after Shutdown may run it concurrently.
func (s *state) watchNow(ids []string) error {
	tasks, err := s.resolve(ids)
	if err != nil {
		return err
	}
	if s.dur != nil && s.dur.failed != nil {
		return s.dur.failed // the ends in memory were not all committed
	}
	w := watch{tasks: tasks}
	for i, t := range tasks {
		if info, _ := s.infoOf(t); info.Status != Succeeded {
			w.bad = append(w.bad, badEnd{int32(i), info})
		}
	}
	return w.result()
}

// unwatch forgets a WaitTasks call whose context ended.
func (s *state) unwatch(id uint64) {
	ws := &s.watchers
	w := ws.byID[id]
	if w == nil {
		return // answered already
	}
	delete(ws.byID, id)
	w.answered = true
	for _, t := range w.tasks {
		prev := &ws.watchOf[t]
		for r := *prev; r != 0; r = *prev {
			if ws.wrefs[r-1].w == w {
				*prev = ws.release(r)
				break
			}
			prev = &ws.wrefs[r-1].next
		}
	}
}

// watched records the end of t, which is watched: how it ended is taken
// now, before retention may forget it, and a watch with nothing left is
// answered at the end of the iteration (answerWatches). A Skipped task's
// cause may still get worse until it is settled (cascade.go): its
// watches are told (rewatch).
func (s *state) watched(t int32) {
	ws := &s.watchers
	r := ws.watchOf[t]
	ws.watchOf[t] = 0
	st := s.hot[t].status
	var info TaskInfo
	if st != Succeeded {
		info, _ = s.infoOf(t)
	}
	unsettled := st == Skipped && s.hot[t].unmet > 0
	for r != 0 {
		ref := &ws.wrefs[r-1]
		w := ref.w
		if st != Succeeded {
			w.bad = append(w.bad, badEnd{ref.at, info})
			if unsettled {
				if ws.skips == nil {
					ws.skips = map[int32][]skipRef{}
				}
				ws.skips[t] = append(ws.skips[t], skipRef{w, int32(len(w.bad) - 1)})
			}
		}
		if w.left--; w.left == 0 {
			ws.done = append(ws.done, w)
			delete(ws.byID, w.id)
		}
		r = ws.release(r)
	}
}

// rewatch tells the watches of Skipped task t, not settled, its worse
// cause; once t is settled (gone: true) its cause is final.
func (s *state) rewatch(t int32, gone bool) {
	refs, ok := s.watchers.skips[t]
	if !ok {
		return
	}
	if gone {
		delete(s.watchers.skips, t)
		return
	}
	info, _ := s.infoOf(t)
	for _, ref := range refs {
		if !ref.w.answered {
			ref.w.bad[ref.bad].info = info
		}
	}
}

// answerWatches answers the WaitTasks calls (and Batches) whose tasks
// are all final, with what is known at the end of the iteration (a cause
// that got worse in a cascade after the last end included). On a durable
// scheduler the answer waits for the commit (answer).
func (s *state) answerWatches() {
	ws := &s.watchers
	for _, w := range ws.done {
		w.answered = true
		s.answer(w.reply, w.result())
	}
	clear(ws.done)
	ws.done = ws.done[:0]
}

// result is the watch's answer: nil, or the tasks that did not succeed in
// the order given.
func (w *watch) result() error {
	if len(w.bad) == 0 {
		return nil
	}
	slices.SortFunc(w.bad, func(a, b badEnd) int { return cmp.Compare(a.at, b.at) })
	bad := make([]TaskInfo, len(w.bad))
	for i := range w.bad {
		bad[i] = w.bad[i].info
	}
	return &TasksError{Tasks: bad}
}

// Batch is a batch of tasks that SubmitBatch or SubmitGraphBatch accepted,
// watched from the moment it was stored: Wait tells how its tasks ended,
// even once retention has forgotten them (WaitTasks after Submit could
// not tell a task that ended and was forgotten from one never submitted).
type Batch struct {
	reply <-chan error  // buffer 1: the watch's answer, received once
	ready chan struct{} // closed once err is set
	once  sync.Once
	err   error // set once, before ready closes
}

func newBatch() (*Batch, chan<- error) {
	reply := make(chan error, 1)
	return &Batch{reply: reply, ready: make(chan struct{})}, reply
}

// Wait blocks until every task of the batch is final, and returns nil if
// all of them succeeded, or a *TasksError listing those that did not, as
// WaitTasks does; on a durable scheduler, once their ends are committed.
// It returns ctx.Err() if ctx ends first: the batch is still watched, and
// a later Wait tells how it ended. Safe for concurrent use, and after
// Shutdown (Shutdown ends every task). Like Wait, called from inside one
// of the batch's tasks it would wait for itself.
func (b *Batch) Wait(ctx context.Context) error {
	select {
	case err := <-b.reply:
		b.once.Do(func() { b.err = err; close(b.ready) })
	case <-b.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	return b.err
}

// SubmitBatch is SubmitContext, and returns the accepted batch, whose
// Wait tells how its tasks ended, whatever retention forgot in between: a
// race-free submit and wait. On error nothing is stored and the *Batch is
// nil.
func (s *Scheduler) SubmitBatch(ctx context.Context, tasks ...Task) (*Batch, error) {
	b, reply := newBatch()
	if err := s.submit(ctx, &submission{tasks: tasks, watch: reply}); err != nil {
		return nil, err
	}
	return b, nil
}
