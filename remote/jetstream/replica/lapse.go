package replica

import (
	"context"
	"errors"
	"time"
)

// ErrLeaseLapsed is the cause with which a leader's lease gate
// (Store.Middleware) cancels the context of every attempt still running
// when the leader's lease lapses: it could not renew it (cut off from the
// servers, or they could not replicate its sign of life), and a standby
// may take over a lease after the leader's last append. The gate counts
// its lease from when it sent that append, less an eighth, so the
// attempts' contexts end at least an eighth of a lease before any standby
// may claim the store: a function that returns within that grace never
// runs beside the next leader's run of its attempt. A function that
// takes longer to honour its context overlaps by the excess, at most.
// The attempt then fails with this error (errors.Is holds), and is
// retried under its task's policy if the lease is renewed, or restored as
// interrupted by the next leader. A Replica leaves its remote pools'
// attempts running (the next leader resumes them).
var ErrLeaseLapsed = errors.New("replica: the leader's lease lapsed: its running attempts were stopped")

// track registers an attempt to be stopped when the lease lapses, if it
// holds now: its context, and the function that unregisters it once it
// returned. ok is false if the lease has lapsed (the attempt must wait).
func (s *Store) track(ctx context.Context) (actx context.Context, untrack func(), ok bool) {
	actx, cancel := context.WithCancelCause(ctx)
	s.lmu.Lock()
	defer s.lmu.Unlock()
	if s.lapsed || s.doneAt != nil {
		cancel(nil)
		return nil, nil, false
	}
	if s.running == nil {
		s.running = map[*context.CancelCauseFunc]struct{}{}
	}
	s.running[&cancel] = struct{}{}
	return actx, func() {
		s.lmu.Lock()
		delete(s.running, &cancel)
		s.lmu.Unlock()
		cancel(nil)
	}, true
}

// watch stops the tracked attempts when the lease lapses: at its last
// renewal's send plus the lease, less the margin, unless a renewal comes
// first; until the Store stops leading.
func (s *Store) watch() {
	for {
		s.lmu.Lock()
		sentAt, renewed := s.sentAt, s.renewc
		s.lmu.Unlock()
		t := time.NewTimer(time.Until(sentAt.Add(s.cfg.lease - s.leaseMargin())))
		select {
		case <-t.C:
			s.lmu.Lock()
			n := -1
			if s.sentAt.Equal(sentAt) && s.doneAt == nil {
				s.lapsed, n = true, len(s.running)
				for cancel := range s.running {
					(*cancel)(ErrLeaseLapsed)
				}
				clear(s.running)
			}
			s.lmu.Unlock()
			if n >= 0 {
				s.cfg.logger.Warn("replica: the lease lapsed: running attempts stopped", "store", s.name, "term", s.Term(), "attempts", n)
			}
			select { // the next renewal, or the end
			case <-renewed:
			case <-s.done:
				return
			case <-s.quit:
				return
			}
		case <-renewed:
			t.Stop()
		case <-s.done:
			t.Stop()
			return
		case <-s.quit:
			t.Stop()
			return
		}
	}
}
