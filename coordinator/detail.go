package coordinator

import (
	"context"
	"time"
)

// TaskDetail is what a task's page shows beyond TaskInfo: how it was
// asked to run, and when it runs next. Detail reports it.
type TaskDetail struct {
	Retry     RetryPolicy   // Task.Retry as submitted (RetryIf included)
	Timeout   time.Duration // Task.Timeout; 0: none
	NotBefore time.Time     // submission time + Task.Delay; zero without a delay
	Every     time.Duration // Task.Every; 0 if not a fixed-rate series
	Schedule  Schedule      // Task.Cron (parsed) or Task.Schedule; nil if none
	Times     int           // Task.Times: runs in all of a series (0: no end)
	// Next is when the task is due to be started next: a delay's end, a
	// retry's backoff, or a series' next start; zero if it waits for
	// nothing timed (for its dependencies, a worker, or nothing: final).
	Next time.Time
}

// Detail returns task id's TaskDetail; false if the id is unknown. It
// blocks for a round trip to the coordinator, which reads the task's
// record alone. Safe for concurrent use; after Shutdown it reports the
// final state.
func (s *Scheduler) Detail(id string) (TaskDetail, bool) {
	r, _ := query(context.Background(), s, func(reply chan<- detailReply) request {
		return detailReq{id: id, reply: reply}
	}, func(st *state) detailReply {
		d, ok := st.detail(id)
		return detailReply{d, ok}
	})
	return r.d, r.ok
}

type detailReply struct {
	d  TaskDetail
	ok bool
}

type detailReq struct {
	id    string
	reply chan<- detailReply
}

func (r detailReq) apply(l *loop, now time.Time) {
	d, ok := l.st.detail(r.id)
	r.reply <- detailReply{d, ok}
}

func (s *state) detail(id string) (TaskDetail, bool) {
	t, ok := s.findLive(id)
	if !ok || s.hot[t].status == dropped {
		return TaskDetail{}, false
	}
	var d TaskDetail
	if x := s.spec(t).X; x != nil {
		d.Timeout = x.Timeout
	}
	if x := s.tasks[t].x; x != nil {
		d.Retry, d.NotBefore, d.Every, d.Schedule, d.Times = x.retry, x.notBefore, x.every, x.sched, x.times
		if x.inWheel {
			d.Next = x.due
		}
	}
	return d, true
}
