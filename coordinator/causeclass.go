package coordinator

// Where a skip keeps its class when its cause is re-run.
//
// A Skipped task blames a root cause (its link) and is seen by trigger
// rules by that cause's class (cascade.go): failed, cancelled, or benign,
// read from the cause's status. A Rerun may re-open a cause while tasks
// it skipped stay skipped (Rerun without Downstream, or tasks downstream
// of it that a re-run did not reach): the cause is Pending again and may
// end otherwise, but their ends did not change. So before a cause is
// re-opened, each Skipped task that blames it keeps its class here, and
// so does every task skipped because of one of them, later: what depends
// on a skip is decided by the skip's own end (README rule 4), whatever
// its cause did since, and names the same cause. The table is empty (nil)
// until a re-run re-opens a cause, so it costs a scheduler that never
// re-runs one nil check where a class is read; a durable scheduler
// stores each entry with its task (record.State.CauseClass).

// classOfEnd is how a trigger rule sees final task t that did not succeed.
func (s *state) classOfEnd(t int32) endClass {
	if s.causeClass != nil {
		if c, ok := s.causeClass[t]; ok {
			return c
		}
	}
	return s.classOf(s.root(t))
}

// blamed records that Skipped task t now blames cause (its link) with
// class c: c is kept if it is not what cause's status says.
func (s *state) blamed(t, cause int32, c endClass) {
	live := endBenign
	if cause != noTask {
		live = s.classOf(cause)
	}
	if c != live {
		if s.causeClass == nil {
			s.causeClass = map[int32]endClass{}
		}
		s.causeClass[t] = c
		return
	}
	s.unfreeze(t)
}

// unfreeze forgets t's kept class: it is no longer skipped, or forgotten.
func (s *state) unfreeze(t int32) {
	if s.causeClass != nil {
		delete(s.causeClass, t)
	}
}

// freezeBlamers keeps, before the tasks of causes are re-opened, the class
// of every Skipped task that blames one of them and is not re-opened with
// them (a look at every task: a re-run is rare).
func (s *state) freezeBlamers(causes map[int32]bool) {
	for t := range s.hot {
		t := int32(t)
		if s.hot[t].status != Skipped || causes[t] {
			continue
		}
		if c := s.tasks[t].link; c != noTask && causes[c] {
			if _, kept := s.causeClass[t]; !kept {
				s.blamedFrozen(t, s.classOf(c))
				s.touched(t) // a durable scheduler writes the class with it
			}
		}
	}
}

// blamedFrozen keeps class c for t.
func (s *state) blamedFrozen(t int32, c endClass) {
	if s.causeClass == nil {
		s.causeClass = map[int32]endClass{}
	}
	s.causeClass[t] = c
}

// keptClass returns t's kept class for its record: 0 for none, else the
// class plus one (record.State.CauseClass).
func (s *state) keptClass(t int32) uint8 {
	if c, ok := s.causeClass[t]; ok {
		return uint8(c) + 1
	}
	return 0
}
