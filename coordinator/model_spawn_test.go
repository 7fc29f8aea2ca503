package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/internal/refmodel"
	"pgregory.net/rapid"
)

// Graphs that grow and choose in the model test: a task's function may
// spawn batches of children (which may spawn in their turn) and choose
// which of its dependents run, before it does what its behaviour says
// (fail, panic, block). A refused Spawn or Choose is returned: the attempt
// fails. The model (internal/refmodel/spawn.go) predicts every outcome, and
// what each Spawn and Choose returned.

// growOpts is what the program's other draws say about its children.
type growOpts struct {
	timed, keyed, retain bool
}

// drawGrowth gives task, about to be submitted, children to spawn (a
// fifth of the tasks) and a choice to make (a sixth; whom it chooses is
// drawn once the program is whole: chooseAmong). ids are the tasks named
// before it. A spawner recurs only now and then (its later runs' spawns
// are refused), and never with retention on (the model does not follow
// the families of a recurring spawner's runs).
func drawGrowth(t *rapid.T, task *refmodel.Task, ids []string, o growOpts) {
	drawGrowthAt(t, task, ids, o, 0)
}

func drawGrowthAt(t *rapid.T, task *refmodel.Task, ids []string, o growOpts, depth int) {
	if depth < 2 && rapid.IntRange(0, 3).Draw(t, "spawns") == 0 {
		var kids []string // the children named so far, over the batches
		for range rapid.IntRange(1, 2).Draw(t, "batches") {
			var batch []refmodel.Task
			size := rapid.IntRange(1, 3).Draw(t, "kids")
			for i := range size {
				id := fmt.Sprintf("%s.%d", task.ID, len(kids)+i)
				if rapid.IntRange(0, 39).Draw(t, "kidDup") == 20 {
					id = rapid.SampledFrom(append(slices.Clone(ids), append(kids, task.ID)...)).Draw(t, "kidDupID")
				}
				batch = append(batch, drawChild(t, task.ID, id, len(kids), i, size, kids, ids, o, depth))
			}
			task.Do.Grow.Spawn = append(task.Do.Grow.Spawn, batch)
			n := len(kids)
			for i := range size {
				kids = append(kids, fmt.Sprintf("%s.%d", task.ID, n+i)) // named whether or not the batch is accepted
			}
		}
		if o.retain || rapid.IntRange(0, 2).Draw(t, "recurringSpawner") > 0 {
			task.Every, task.Times = 0, 0 // a recurring spawner's later runs spawn IDs taken: refused
		}
	}
	if rapid.IntRange(0, 5).Draw(t, "chooses") == 0 {
		task.Do.Grow.Chooses = true
	}
	if (len(task.Do.Grow.Spawn) > 0 || task.Do.Grow.Chooses) && rapid.Bool().Draw(t, "grows") {
		// Most attempts that grow the graph succeed (or wait to be
		// released): their children join it, their choice is applied.
		task.Do.Fails, task.Do.Panics, task.Do.BlockCtx = 0, false, false
	}
}

// drawChild draws child id, place i of a batch of size whose first child
// is named at kids[first] (after the children of earlier batches, kids),
// spawned by the task spawner.
func drawChild(t *rapid.T, spawner, id string, first, i, size int, kids, ids []string, o growOpts, depth int) refmodel.Task {
	var deps []string
	for range rapid.IntRange(0, 2).Draw(t, "kidDeps") {
		// The rare cases are drawn in the middle of the range: rapid draws
		// its ends more often than the rest.
		switch c := rapid.IntRange(0, 39).Draw(t, "kidDep"); {
		case c == 20:
			deps = append(deps, "ghost")
		case c == 21:
			deps = append(deps, spawner) // a cycle through the join
		case c == 22 && size > 1:
			deps = append(deps, fmt.Sprintf("%s.%d", spawner, first+rapid.IntRange(0, size-1).Draw(t, "anySibling"))) // a cycle, perhaps
		case c <= 16 && i > 0:
			deps = append(deps, fmt.Sprintf("%s.%d", spawner, first+rapid.IntRange(0, i-1).Draw(t, "sibling")))
		case c <= 29 && len(kids) > 0:
			deps = append(deps, rapid.SampledFrom(kids).Draw(t, "earlierKid"))
		case len(ids) > 0:
			// A task submitted mostly: another's child may not be there.
			outside := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return strings.Contains(id, ".") })
			if len(outside) == 0 || rapid.IntRange(0, 7).Draw(t, "outsideKid") == 3 {
				outside = ids
			}
			deps = append(deps, rapid.SampledFrom(outside).Draw(t, "outside"))
		}
	}
	do := refmodel.Behaviour{MaxAttempt: rapid.IntRange(0, 2).Draw(t, "kidAttempts")}
	switch rapid.IntRange(0, 19).Draw(t, "kidBehaviour") {
	case 0, 1, 2:
		do.Fails = rapid.IntRange(1, 2).Draw(t, "kidFails")
	case 3:
		do.BlockCtx = true
	case 4, 5:
		do.BlockDeaf = true
	}
	c := refmodel.Task{ID: id, Deps: deps, Do: do}
	if rapid.IntRange(0, 3).Draw(t, "kidPrio") == 0 {
		c.Priority = rapid.IntRange(1, 2).Draw(t, "kidPriority") // else its spawner's
	}
	if len(deps) > 0 && rapid.IntRange(0, 2).Draw(t, "kidRuled") == 0 {
		c.When = refmodel.Trigger(rapid.IntRange(1, 4).Draw(t, "kidWhen"))
	}
	if o.timed {
		c.Delay = time.Duration(rapid.IntRange(0, 2).Draw(t, "kidDelay")) * time.Second
		c.BaseDelay = time.Duration(rapid.IntRange(0, 1).Draw(t, "kidBase")) * time.Second
	}
	if o.keyed {
		c.Key = rapid.SampledFrom([]string{"", "a", "b"}).Draw(t, "kidKey")
	}
	drawGrowthAt(t, &c, append(slices.Clone(ids), kids...), o, depth+1)
	return c
}

// grownIDs lists the children batch may spawn, and theirs.
func grownIDs(batch []refmodel.Task) []string {
	var out []string
	for _, t := range batch {
		for _, b := range t.Do.Grow.Spawn {
			for _, c := range b {
				out = append(out, c.ID)
			}
			out = append(out, grownIDs(b)...)
		}
	}
	return out
}

// chooseAmong draws, for each task of p that chooses, more tasks of its
// batch that depend on it (its paths), and the tasks it names: some of
// those of its own batch that depend on it (there when it runs),
// now and then one of a later batch that depends on it (there or not),
// and now and then one that does not depend on it (Choose refuses it).
func chooseAmong(t *rapid.T, p *program) {
	var all []*refmodel.Task
	var batches [][]refmodel.Task
	var walk func(batch []refmodel.Task)
	walk = func(batch []refmodel.Task) {
		batches = append(batches, batch)
		for i := range batch {
			all = append(all, &batch[i])
			for _, b := range batch[i].Do.Grow.Spawn {
				walk(b)
			}
		}
	}
	for _, st := range p.steps {
		walk(st.submit)
	}
	for _, batch := range batches {
		for i := range batch {
			br := &batch[i]
			if !br.Do.Grow.Chooses {
				continue
			}
			for j := i + 1; j < len(batch); j++ {
				if o := &batch[j]; !slices.Contains(o.Deps, br.ID) && rapid.IntRange(0, 2).Draw(t, "onBranch") == 1 {
					o.Deps = append(o.Deps, br.ID) // a path it may choose, or not
				}
			}
			var names []string
			for _, o := range batch {
				if slices.Contains(o.Deps, br.ID) && rapid.IntRange(0, 2).Draw(t, "chosen") > 0 {
					names = append(names, o.ID)
				}
			}
			if rapid.IntRange(0, 3).Draw(t, "laterChoice") == 0 {
				for _, o := range all {
					if slices.Contains(o.Deps, br.ID) && !slices.Contains(names, o.ID) && rapid.Bool().Draw(t, "chosenLater") {
						names = append(names, o.ID)
						break
					}
				}
			}
			if rapid.IntRange(0, 9).Draw(t, "strayChoice") == 5 {
				names = append(names, rapid.SampledFrom(all).Draw(t, "stray").ID)
			}
			br.Do.Grow.Choose = names
		}
	}
}

// growEnv is what the functions of a program that grows share: they read
// it from their context (submitted with SubmitContext, handed down to the
// children).
type growEnv struct {
	rec *calls // nil: calls not recorded
	g   *gates
	mu  sync.Mutex
	log []string // what each Spawn and Choose returned, as the model says it
}

type growKey struct{}

// submitGrowing submits tasks, the scheduler's version of batch; a batch
// that grows carries env in its context.
func submitGrowing(s *coordinator.Scheduler, env *growEnv, batch []refmodel.Task, tasks []coordinator.Task) error {
	if !slices.ContainsFunc(batch, func(t refmodel.Task) bool { return len(t.Do.Grow.Spawn) > 0 || t.Do.Grow.Chooses }) {
		return s.Submit(tasks...)
	}
	return s.SubmitContext(context.WithValue(context.Background(), growKey{}, env), tasks...)
}

// grow does what gr says in the attempt of task id whose context is ctx:
// its spawns, then its choice; it returns the first error.
func grow(ctx context.Context, id string, gr refmodel.Growth) error {
	if len(gr.Spawn) == 0 && !gr.Chooses {
		return nil
	}
	env := ctx.Value(growKey{}).(*growEnv)
	for k, batch := range gr.Spawn {
		var tasks []coordinator.Task
		chans := map[string]chan struct{}{}
		for _, c := range batch {
			gate := make(chan struct{})
			if c.Do.BlockDeaf {
				chans[c.ID] = gate
			}
			tasks = append(tasks, schedTask(c, gate, env.rec))
		}
		err := coordinator.Spawn(ctx, tasks...)
		env.logged(fmt.Sprintf("%s spawn %d", id, k), err)
		if err != nil {
			return err
		}
		for _, c := range batch {
			env.g.add(c.ID, chans[c.ID])
		}
	}
	if !gr.Chooses {
		return nil
	}
	err := coordinator.Choose(ctx, gr.Choose...)
	env.logged(id+" choose", err)
	return err
}

// logged notes what a Spawn or Choose returned, in the model's words.
func (e *growEnv) logged(what string, err error) {
	said := "ok"
	switch {
	case err == nil:
	case errors.Is(err, coordinator.ErrDuplicateID):
		said = refmodel.ErrDuplicate.Error()
	case errors.Is(err, coordinator.ErrUnknownDependency):
		said = refmodel.ErrUnknown.Error()
	case errors.Is(err, coordinator.ErrCycle):
		said = refmodel.ErrCycle.Error()
	case errors.Is(err, coordinator.ErrNotDependent):
		said = refmodel.ErrNotDependent.Error()
	default:
		said = err.Error()
	}
	e.mu.Lock()
	e.log = append(e.log, what+": "+said)
	e.mu.Unlock()
}

// compareGrowth checks what the Spawn and Choose calls returned, and each
// live task's Parent and Joining, against the model.
func compareGrowth(s *coordinator.Scheduler, env *growEnv, m *refmodel.Model, where string) string {
	env.mu.Lock()
	defer env.mu.Unlock()
	if got, want := env.log, m.SpawnLog(); !slices.Equal(got, want) {
		return fmt.Sprintf("%s: Spawn and Choose returned\n  %s\nmodel:\n  %s", where, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	for id := range m.ByID {
		parent, joining := m.Family(id)
		if info, found := s.Info(id); found && (info.Parent != parent || info.Joining != joining) {
			return fmt.Sprintf("%s: Info(%s) parent %q joining %v; model parent %q joining %v", where, id, info.Parent, info.Joining, parent, joining)
		}
	}
	return ""
}
