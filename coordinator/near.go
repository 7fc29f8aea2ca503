package coordinator

// near marks the roots of f and the tasks around them as f asks, by
// distance: the roots, then every task one edge (or generation) away in
// a direction f asks for, then two, and so on, until f.Limit tasks are
// marked; it reports whether it stopped there. A task reached as an
// ancestor is followed up, as a descendant down, as a child to its
// children, as Snapshot's walks do. So a Limit cuts a neighbourhood by
// distance, not by the order the tasks were submitted in, and the
// coordinator visits at most the tasks it takes plus the edges it looks
// at to find them (SnapshotFilter.Limit).
func (s *state) near(roots []int32, f *SnapshotFilter, picked bitset) (cut bool) {
	const (
		up = 1 << iota
		down
		kids
	)
	dirs := 0
	if f.Ancestors {
		dirs |= up
	}
	if f.Descendants {
		dirs |= down
	}
	if f.Children && s.fam != nil {
		dirs |= kids
	}
	type step struct {
		t   int32
		dir int
	}
	taken := 0
	var level, next []step
	for _, t := range roots {
		if !picked.has(t) {
			picked.set(t)
			taken++
		}
		for _, d := range []int{up, down, kids} {
			if dirs&d != 0 {
				level = append(level, step{t, d})
			}
		}
	}
	visit := func(t int32, dir int) bool {
		if picked.has(t) || hidden(s.hot[t].status) {
			return true
		}
		if taken == f.Limit {
			cut = true
			return false
		}
		picked.set(t)
		taken++
		next = append(next, step{t, dir})
		return true
	}
	for d := 0; len(level) > 0 && (f.Depth <= 0 || d < f.Depth); d++ {
		for _, st := range level {
			t := st.t
			switch st.dir {
			case up:
				r := &s.tasks[t]
				for _, x := range s.edges(r, r.deps) {
					if !visit(x, up) {
						return true
					}
				}
			case down:
				for k := range s.successors(t) {
					if containsTask(s.edges(&s.tasks[k], s.tasks[k].deps), t) && !visit(k, down) {
						return true
					}
				}
			case kids:
				if x := s.tasks[t].x; x != nil {
					for _, c := range x.children {
						if s.fam[c].parent == t && !visit(c, kids) {
							return true
						}
					}
				}
			}
		}
		level, next = next, level[:0]
	}
	return cut
}
