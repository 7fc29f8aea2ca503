package coordinator

import (
	"context"
	"time"
)

// Attempts abandoned at their timeout (WithAbandonAfter). Such an attempt
// ends for the scheduler (a timeout error, a retry if its policy allows)
// and its worker goes on to its next item, while its function may still
// run. Until that function returns, what the attempt held stays held: its
// key's place (a key's limit counts functions that run) and the workers a
// task of several slots keeps idle beside its own. The lane tells when the
// function returns (lane.Env.Returned, a returnedReq), which may come
// before the coordinator applies the attempt's end: then the end frees
// what it held at once.

// abandonHold is what one abandoned attempt holds.
type abandonHold struct {
	key  int32 // its key, still counted in keys[key].out (-1: the scheduler has no keys)
	pool int   // the pool of the lanes held for it
	held int   // lanes held for it: their holder is -(1 + its index)
}

// abandonTable is the state's abandoned attempts whose functions run; zero
// until an attempt is abandoned. Owned by the coordinator goroutine.
type abandonTable struct {
	holding  map[uint64]int32 // by item (abandonKey): the index of its hold in holds
	returned map[uint64]bool  // items whose functions returned before their ends were applied
	holds    []abandonHold
	freeHold []int32 // indexes of holds to reuse
}

func abandonKey(lane int, seq uint32) uint64 { return uint64(lane)<<32 | uint64(seq) }

// holdAbandoned is called as the end of t's attempt, the item at seq of ls
// that its worker abandoned, is applied: unless its function has returned
// already, it keeps what the attempt holds until it does, and reports
// true; false: free it now (leftLane).
func (s *state) holdAbandoned(ls *laneState, seq uint32, t int32) bool {
	k := abandonKey(ls.l.ID, seq)
	if s.returned[k] {
		delete(s.returned, k)
		return false
	}
	h := abandonHold{key: -1, pool: int(s.hot[t].pool)}
	if s.keyed {
		h.key = s.keyOf[t]
	}
	idx := int32(len(s.holds))
	if n := len(s.freeHold); n > 0 {
		idx, s.freeHold = s.freeHold[n-1], s.freeHold[:n-1]
	} else {
		s.holds = append(s.holds, abandonHold{})
	}
	p := &s.pools[h.pool]
	for _, li := range p.lanes {
		if o := &s.lanes[li]; o.holder == t+1 {
			o.holder = -(idx + 1)
			h.held++
		}
	}
	s.holds[idx] = h
	if s.holding == nil {
		s.holding = map[uint64]int32{}
	}
	s.holding[k] = idx
	return true
}

// abandonedReturned frees what the abandoned attempt at item seq of lane
// held: its function has returned. If its end has not been applied yet,
// the end frees it (holdAbandoned).
func (s *state) abandonedReturned(lane int, seq uint32, now time.Time) {
	k := abandonKey(lane, seq)
	idx, ok := s.holding[k]
	if !ok {
		if s.returned == nil {
			s.returned = map[uint64]bool{}
		}
		s.returned[k] = true
		return
	}
	delete(s.holding, k)
	h := s.holds[idx]
	s.holds[idx] = abandonHold{}
	s.freeHold = append(s.freeHold, idx)
	if h.key >= 0 {
		s.keyBackKey(h.key)
		if ks := &s.keys[h.key]; h.key != 0 && ks.refs == 0 && ks.out == 0 {
			s.forgetKey(h.key) // no record names it any more (unkey left it to this)
		}
	}
	if h.held > 0 {
		p := &s.pools[h.pool]
		for _, li := range p.lanes {
			if o := &s.lanes[li]; o.holder == -(idx + 1) {
				o.holder = 0
				p.idle++
			}
		}
	}
}

// returnedReq tells the coordinator that an abandoned attempt's function
// has returned (lane.Env.Returned).
type returnedReq struct {
	lane int
	seq  uint32
}

func (r returnedReq) apply(l *loop, now time.Time) { l.st.abandonedReturned(r.lane, r.seq, now) }

// abandonedReturned is lane.Env.Returned: it runs on the goroutine of the
// abandoned function, which has returned. After Shutdown's loop has
// stopped there is nothing to free.
func (s *Scheduler) abandonedReturned(lane int, seq uint32) {
	_ = s.mailbox.Send(context.Background(), returnedReq{lane: lane, seq: seq})
}
