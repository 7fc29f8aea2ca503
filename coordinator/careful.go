package coordinator

import "github.com/batonhq/baton/internal/lane"

// Careful starts: a durable scheduler counts an attempt that a crash
// interrupted once its start is committed, which happens within a commit
// of its claim; a function that kills its process sooner (a log.Fatal on
// a bad payload, within microseconds of its start) was never counted, and
// crashed every process that restored it, for ever.
//
// So a task that may have been started by the process that crashed (one
// New finds ready to run, or running: its attempt counted as interrupted)
// starts carefully once: its worker claims it, reports the claim, and
// calls nothing until the coordinator has committed that start (lane
// SetCareful, Go). A task that kills its process at once therefore ends
// Failed (ErrInterrupted) after at most MaxAttempts + 1 crashes: the first
// crash may go uncounted, every later one is counted. The price is paid
// after a restart only, by the tasks that were ready or running at the
// crash: each waits for one commit before its function runs (about one
// fsync per worker per task, until they have started once; see
// docs/durable.md). A scheduler that never restarted pays nothing;
// WithCarefulRestart(false) gives the bound up for speed.

// goItem is a careful item whose start this iteration commits: the loop
// lets it start once the commit is done.
type goItem struct {
	l   *lane.Lane
	seq uint32
}

// markCareful makes restored task t's next start careful.
func (s *state) markCareful(t int32) {
	d := s.dur
	if d.rash {
		return
	}
	if d.careful == nil {
		d.careful = map[int32]bool{}
	}
	d.careful[t] = true
}

// handOutCarefully marks the item at seq of ls, t's attempt just put, a
// careful start if t's is to be careful.
func (s *state) handOutCarefully(ls *laneState, seq uint32, t int32) {
	if d := s.dur; d != nil && len(d.careful) > 0 && d.careful[t] {
		ls.l.SetCareful(seq)
	}
}

// startedCarefully is called as t's start, the item at link, is recorded
// (it is committed in this iteration): a careful item may then start.
func (s *state) startedCarefully(t, link int32) {
	if d := s.dur; d != nil && len(d.careful) > 0 && d.careful[t] {
		ls, seq := s.locate(link)
		s.goes = append(s.goes, goItem{l: ls.l, seq: seq})
	}
}

// carefulDone is called when t's attempt has ended (or t was forgotten):
// its next start is an ordinary one.
func (s *state) carefulDone(t int32) {
	if d := s.dur; d != nil && len(d.careful) > 0 {
		delete(d.careful, t)
	}
}
