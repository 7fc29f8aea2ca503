package coordinator_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/batonhq/baton/coordinator"
)

// Graphs that grow and choose in TestConcurrentStress: some tasks spawn
// children (which may depend on each other and on tasks accepted before,
// and spawn in their turn), some choose which of their dependents in their
// batch run. Checked afterwards: families are whole (a spawner's
// dependents are never called before every task of its family returned
// for the last time, nor started before each ended), dependents a branch
// that succeeded did not choose never run, and every child that joined
// the graph is checked as any accepted task.

// stressGrowth is what a run's spawners and branches are known to do,
// written by the producers as they build them.
type stressGrowth struct {
	mu     sync.Mutex
	kids   map[string]stressTask // every child a spawner may spawn (it joins the graph if an attempt that spawns it succeeds)
	spawns map[string][]string   // spawner -> its children
	chosen map[string][]string   // branch -> the dependents it chooses
}

func newStressGrowth() *stressGrowth {
	return &stressGrowth{kids: map[string]stressTask{}, spawns: map[string][]string{}, chosen: map[string][]string{}}
}

// grow makes some tasks of batch (not recurring) spawners and some
// branches; outside are tasks accepted before, which children may depend
// on (one forgotten since makes the Spawn fail, and so the attempt); pool
// is the pool of batch's tasks that name none (their spawner's). It
// returns the IDs of the children it drew.
func (g *stressGrowth) grow(pr *rand.Rand, batch []coordinator.Task, pool string, outside []string, rec *calls, flow bool, depth int) []string {
	var drawn []string
	for k := range batch {
		tk := &batch[k]
		if tk.Every > 0 {
			continue
		}
		if depth < 2 && pr.IntN(5) == 0 {
			in := cmp.Or(tk.Pool, pool)
			kids := g.children(pr, tk.ID, in, outside, rec, flow)
			for _, c := range kids {
				drawn = append(drawn, c.ID)
			}
			drawn = append(drawn, g.grow(pr, kids, in, outside, rec, flow, depth+1)...)
			run := tk.Run
			tk.Run = func(ctx context.Context) error {
				if err := coordinator.Spawn(ctx, slices.Clone(kids)...); err != nil {
					return err
				}
				return run(ctx)
			}
		}
		if pr.IntN(5) == 0 {
			var chosen []string
			for _, d := range batch[k+1:] {
				if slices.Contains(d.Deps, tk.ID) && pr.IntN(2) == 0 {
					chosen = append(chosen, d.ID)
				}
			}
			g.mu.Lock()
			g.chosen[tk.ID] = chosen
			g.mu.Unlock()
			run := tk.Run
			tk.Run = func(ctx context.Context) error {
				if err := coordinator.Choose(ctx, chosen...); err != nil {
					return err
				}
				return run(ctx)
			}
		}
	}
	return drawn
}

// children draws the children of spawner: one to three, some depending on
// earlier siblings or on a task outside, with the bodies, retries,
// timeouts and delays of any stress task (in pool, the spawner's, which
// they inherit).
func (g *stressGrowth) children(pr *rand.Rand, spawner, pool string, outside []string, rec *calls, flow bool) []coordinator.Task {
	var kids []coordinator.Task
	for j := range 1 + pr.IntN(3) {
		id := fmt.Sprintf("%s/%d", spawner, j)
		run, blocks := stressRun(pr)
		c := coordinator.Task{ID: id}
		if pr.IntN(3) == 0 {
			c.Priority = pr.IntN(3) // else its spawner's
		}
		if j > 0 && pr.IntN(2) == 0 {
			c.Deps = append(c.Deps, kids[pr.IntN(j)].ID)
		}
		if len(outside) > 0 && pr.IntN(4) == 0 {
			c.Deps = append(c.Deps, outside[pr.IntN(len(outside))])
		}
		switch pr.IntN(6) {
		case 0:
			c.Retry = coordinator.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Duration(pr.IntN(500)) * time.Microsecond, Jitter: 0.5}
		case 1:
			c.Timeout = time.Duration(1+pr.IntN(2)) * time.Millisecond
		case 2:
			c.Delay = time.Duration(pr.IntN(1000)) * time.Microsecond
		}
		if blocks && pr.IntN(4) > 0 {
			c.Timeout = time.Duration(1+pr.IntN(3)) * time.Millisecond
		}
		if flow {
			c.Key = []string{"", "a", "b"}[pr.IntN(3)]
		}
		in := c
		in.Pool = pool // where it runs, for checkFlow
		c.Run = recordedFlow(rec, id, in, run)
		kids = append(kids, c)
		g.mu.Lock()
		g.kids[id] = stressTask{deps: c.Deps, timed: c.Timeout > 0}
		g.spawns[spawner] = append(g.spawns[spawner], id)
		g.mu.Unlock()
	}
	return kids
}

// joined returns accepted with the children that joined the graph: those
// the events say were spawned (observed), or that Info knows or whose
// functions were called.
func (g *stressGrowth) joined(s *coordinator.Scheduler, accepted map[string]stressTask, log []call, events []coordinator.Event, observe bool) map[string]stressTask {
	all := maps.Clone(accepted)
	called := map[string]bool{}
	for _, c := range log {
		called[c.id] = true
	}
	for id, spec := range g.kids {
		if observe {
			continue
		}
		if _, found := s.Info(id); found || called[id] {
			all[id] = spec
		}
	}
	for _, e := range events {
		if e.Kind == coordinator.EventSpawned {
			all[e.TaskID] = g.kids[e.TaskID]
		}
	}
	return all
}

// family lists the tasks spawned under p, theirs included.
func (g *stressGrowth) family(p string) []string {
	var out []string
	for _, c := range g.spawns[p] {
		out = append(out, c)
		out = append(out, g.family(c)...)
	}
	return out
}

// redone returns the tasks a Rerun ran again: those it re-opened and
// every task of their families, which a re-run spawner replaces.
func (g *stressGrowth) redone(reopened map[string]bool) map[string]bool {
	out := maps.Clone(reopened)
	for id := range reopened {
		for _, m := range g.family(id) {
			out[m] = true
		}
	}
	return out
}

// check checks that families are whole and that what a branch did not
// choose never ran, from the functions' calls, Info and, if observed, the
// events; all holds the accepted tasks and the children that joined, and
// redone those a Rerun ran again (whose earlier calls are checked only
// against what ran at their time).
func (g *stressGrowth) check(s *coordinator.Scheduler, all map[string]stressTask, log []call, events []coordinator.Event, redone map[string]bool) error {
	lastRet := map[string]int{}
	ran := map[string]bool{}
	for i, c := range log {
		if c.ret {
			lastRet[c.id] = i
		} else {
			ran[c.id] = true
		}
	}
	out := map[string]bool{}
	for i, c := range log {
		if c.ret {
			out[c.id] = false
			continue
		}
		for _, d := range all[c.id].deps {
			for _, m := range g.family(d) {
				if all[m].timed {
					continue
				}
				if out[m] {
					return fmt.Errorf("%s was called while %s, spawned under its dependency %s, was running: a family split", c.id, m, d)
				}
				if at, ok := lastRet[m]; ok && at > i && !redone[c.id] && !redone[m] {
					return fmt.Errorf("%s was called before %s, spawned under its dependency %s, returned for the last time: a family split", c.id, m, d)
				}
			}
		}
		out[c.id] = true
	}
	finalAt := map[string]int{}
	succeeded := map[string]bool{}
	for i, e := range events {
		switch e.Kind {
		case coordinator.EventStarted:
			for _, d := range all[e.TaskID].deps {
				for _, m := range g.family(d) {
					if _, joined := all[m]; joined && !hasKey(finalAt, m) {
						return fmt.Errorf("%s started (event %d) before %s, spawned under its dependency %s, ended: a family split", e.TaskID, i, m, d)
					}
				}
			}
		case coordinator.EventReopened:
			delete(finalAt, e.TaskID)
			delete(succeeded, e.TaskID)
		case coordinator.EventSucceeded, coordinator.EventFailed, coordinator.EventCancelled, coordinator.EventSkipped:
			finalAt[e.TaskID] = i
			succeeded[e.TaskID] = e.Kind == coordinator.EventSucceeded
		case coordinator.EventSpawned:
			delete(finalAt, e.TaskID) // joined again, in a family that replaces one (Rerun)
			delete(succeeded, e.TaskID)
			if want := parentOf(e.TaskID); e.Parent != want {
				return fmt.Errorf("%s spawned (event %d) with parent %q; want %q", e.TaskID, i, e.Parent, want)
			}
		}
	}
	for b, chosen := range g.chosen {
		ok := succeeded[b]
		if info, found := s.Info(b); found {
			ok = info.Status == coordinator.Succeeded
		}
		if !ok {
			continue
		}
		for id, spec := range all {
			if !slices.Contains(spec.deps, b) || slices.Contains(chosen, id) {
				continue
			}
			if ran[id] {
				return fmt.Errorf("%s ran though its branch %s succeeded without choosing it", id, b)
			}
			info, found := s.Info(id)
			if found && info.Status != coordinator.Skipped && info.Status != coordinator.Cancelled {
				return fmt.Errorf("Info(%s) = %v; its branch %s succeeded without choosing it: want skipped (or cancelled before)", id, info.Status, b)
			}
			if found && info.Status == coordinator.Skipped && info.Cause == b && !errors.Is(info.Err, coordinator.ErrNotChosen) {
				return fmt.Errorf("Info(%s) = %+v: skipped because of branch %s without ErrNotChosen", id, info, b)
			}
		}
	}
	return nil
}

func hasKey[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}

// parentOf is the spawner a child's ID names.
func parentOf(child string) string {
	if i := strings.LastIndexByte(child, '/'); i >= 0 {
		return child[:i]
	}
	return ""
}
