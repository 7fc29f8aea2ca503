package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/coordinator/refmodel"
	"pgregory.net/rapid"
)

// step is one action of a random program.
type step struct {
	submit  []refmodel.Task
	cancel  string
	free    string        // release a task that ignores its context
	advance time.Duration // let fake time pass
}

func (s step) String() string {
	switch {
	case s.submit != nil:
		var parts []string
		for _, t := range s.submit {
			parts = append(parts, fmt.Sprintf("%s%v p%d %+v delay %v base %v every %v×%d",
				t.ID, t.Deps, t.Priority, t.Do, t.Delay, t.BaseDelay, t.Every, t.Times))
		}
		return "submit " + strings.Join(parts, "; ")
	case s.cancel != "":
		return "cancel " + s.cancel
	case s.advance > 0:
		return "advance " + s.advance.String()
	}
	return "release " + s.free
}

// genProgram draws a program: batches of tasks with random dependencies
// (some unknown, some cyclic, some duplicate IDs), behaviours and
// priorities, cancels and releases.
func genProgram(t *rapid.T) []step {
	var ids []string
	var prog []step
	timed := rapid.Bool().Draw(t, "timed") // delays, retry waits, recurring tasks, time passing
	second := func(label string, hi int) time.Duration {
		if !timed {
			return 0
		}
		return time.Duration(rapid.IntRange(0, hi).Draw(t, label)) * time.Second
	}
	n := rapid.IntRange(1, 25).Draw(t, "steps")
	for range n {
		switch k := rapid.IntRange(0, 11).Draw(t, "kind"); {
		case k >= 10 && timed:
			prog = append(prog, step{advance: time.Duration(rapid.IntRange(1, 8).Draw(t, "advance")) * 500 * time.Millisecond})
			continue
		case k < 6 || len(ids) == 0:
			size := rapid.IntRange(1, 4).Draw(t, "size")
			var batch []refmodel.Task
			for i := range size {
				id := fmt.Sprintf("t%d", len(ids)+i)
				if len(ids) > 0 && rapid.IntRange(0, 19).Draw(t, "dup") == 0 {
					id = rapid.SampledFrom(ids).Draw(t, "dupID")
				}
				var deps []string
				for range rapid.IntRange(0, 3).Draw(t, "ndeps") {
					switch c := rapid.IntRange(0, 19).Draw(t, "dep"); {
					case c == 0:
						deps = append(deps, "ghost")
					case c <= 2 && size > 1:
						deps = append(deps, fmt.Sprintf("t%d", len(ids)+rapid.IntRange(0, size-1).Draw(t, "inBatch")))
					case len(ids) > 0:
						deps = append(deps, rapid.SampledFrom(ids).Draw(t, "earlier"))
					}
				}
				do := refmodel.Behaviour{MaxAttempt: rapid.IntRange(0, 3).Draw(t, "attempts")}
				switch rapid.IntRange(0, 9).Draw(t, "behaviour") {
				case 0, 1:
					do.Fails = rapid.IntRange(1, 3).Draw(t, "fails")
				case 2:
					do.Panics = true
				case 3:
					do.BlockCtx = true
				case 4:
					do.BlockDeaf = true
				}
				task := refmodel.Task{ID: id, Deps: deps, Priority: rapid.IntRange(0, 2).Draw(t, "prio"), Do: do,
					Delay: second("delay", 3), BaseDelay: second("base", 2), Every: second("every", 2)}
				if task.Every > 0 {
					task.Times = rapid.IntRange(1, 3).Draw(t, "times")
				}
				batch = append(batch, task)
			}
			prog = append(prog, step{submit: batch})
			for range size {
				ids = append(ids, fmt.Sprintf("t%d", len(ids))) // named whether or not the batch is accepted
			}
		case k < 8:
			prog = append(prog, step{cancel: rapid.SampledFrom(append(ids, "ghost")).Draw(t, "cancel")})
		case k < 10:
			prog = append(prog, step{free: rapid.SampledFrom(ids).Draw(t, "release")})
		}
	}
	return prog
}

// schedTask builds the scheduler's version of a model task: its function
// fails, panics or blocks as the behaviour says (gate releases a task that
// ignores its context).
func schedTask(mt refmodel.Task, gate <-chan struct{}) coordinator.Task {
	do := mt.Do
	var calls atomic.Int32
	return coordinator.Task{ID: mt.ID, Deps: mt.Deps, Priority: mt.Priority,
		Delay: mt.Delay, Every: mt.Every, Times: mt.Times,
		Retry: coordinator.RetryPolicy{MaxAttempts: do.MaxAttempt, BaseDelay: mt.BaseDelay},
		Run: func(ctx context.Context) error {
			switch {
			case int(calls.Add(1)) <= do.Fails:
				return errors.New("planned failure")
			case do.Panics:
				panic("planned panic")
			case do.BlockCtx:
				<-ctx.Done()
			case do.BlockDeaf:
				<-gate
			}
			return nil
		}}
}

// checkPrograms runs check on random programs and, on a difference, fails
// with the shrunk program listed step by step.
func checkPrograms(t *testing.T, check func(*testing.T, []step) string) {
	rapid.Check(t, func(rt *rapid.T) {
		prog := genProgram(rt)
		if diff := check(t, prog); diff != "" {
			var listing strings.Builder
			for k, st := range prog {
				fmt.Fprintf(&listing, "  %d: %v\n", k, st)
			}
			rt.Fatalf("%s\nprogram:\n%s", diff, listing.String())
		}
	})
}

// runProgram runs prog on a one-worker scheduler without batching and on
// the model, comparing after every step. It returns the first difference.
func runProgram(t *testing.T, prog []step) (diff string) {
	synctest.Test(t, func(t *testing.T) {
		s, err := coordinator.New(coordinator.WithWorkers(1), coordinator.WithMaxBatch(1))
		if err != nil {
			diff = err.Error()
			return
		}
		m := refmodel.New()
		var mu sync.Mutex
		var started []string
		events := map[string][]string{}
		s.Subscribe(func(e coordinator.Event) {
			mu.Lock()
			defer mu.Unlock()
			events[e.TaskID] = append(events[e.TaskID], e.Kind.String())
			if e.Kind == coordinator.EventStarted {
				started = append(started, e.TaskID)
			}
		})
		release := map[string]chan struct{}{}
		var releaseOnce = map[string]*sync.Once{}
		freeTask := func(id string) {
			if o := releaseOnce[id]; o != nil {
				o.Do(func() { close(release[id]) })
			}
		}
		defer func() {
			for id := range release {
				freeTask(id)
			}
			if err := s.Shutdown(context.Background()); err != nil && diff == "" {
				diff = fmt.Sprintf("Shutdown = %v", err)
			}
		}()
		for k, st := range prog {
			where := fmt.Sprintf("step %d (%v)", k, st)
			switch {
			case st.submit != nil:
				var tasks []coordinator.Task
				gates := map[string]chan struct{}{}
				for _, mt := range st.submit {
					gate := make(chan struct{})
					if mt.Do.BlockDeaf {
						gates[mt.ID] = gate
					}
					tasks = append(tasks, schedTask(mt, gate))
				}
				got, want := s.Submit(tasks...), m.Submit(st.submit)
				sameErr := (got == nil && want == nil) ||
					(errors.Is(want, refmodel.ErrDuplicate) && errors.Is(got, coordinator.ErrDuplicateID)) ||
					(errors.Is(want, refmodel.ErrUnknown) && errors.Is(got, coordinator.ErrUnknownDependency)) ||
					(errors.Is(want, refmodel.ErrCycle) && errors.Is(got, coordinator.ErrCycle))
				if !sameErr {
					diff = fmt.Sprintf("%s: Submit = %v; model: %v", where, got, want)
					return
				}
				if got == nil {
					for id, gate := range gates {
						release[id], releaseOnce[id] = gate, &sync.Once{}
					}
				}
			case st.cancel != "":
				if got, want := s.Cancel(st.cancel), m.Cancel(st.cancel); got != want {
					diff = fmt.Sprintf("%s: Cancel = %v; model: %v", where, got, want)
					return
				}
			case st.advance > 0:
				time.Sleep(st.advance) // fake time: every timer on the way fires
				m.Advance(st.advance)
			default:
				freeTask(st.free)
				m.Release(st.free)
			}
			waited := make(chan struct{})
			go func() { s.Wait(context.Background()); close(waited) }()
			synctest.Wait()
			mu.Lock()
			gotStarted, gotEvents := slices.Clone(started), events
			mu.Unlock()
			if !slices.Equal(gotStarted, m.Started) {
				diff = fmt.Sprintf("%s: start order %v; model %v", where, gotStarted, m.Started)
				return
			}
			for _, r := range m.Tasks {
				info, found := s.Info(r.ID)
				if !found || int(info.Status) != int(r.Status) || info.Attempts != r.Attempts || info.Runs != r.Runs || info.Cause != r.Cause {
					diff = fmt.Sprintf("%s: Info(%s) = %v %v attempts %d runs %d cause %q; model %v attempts %d runs %d cause %q",
						where, r.ID, found, info.Status, info.Attempts, info.Runs, info.Cause, coordinator.Status(r.Status), r.Attempts, r.Runs, r.Cause)
					return
				}
				mu.Lock()
				ev := slices.Clone(gotEvents[r.ID])
				mu.Unlock()
				if !slices.Equal(ev, r.Events) {
					diff = fmt.Sprintf("%s: events of %s %v; model %v", where, r.ID, ev, r.Events)
					return
				}
			}
			select {
			case <-waited:
				if !m.Final() {
					diff = where + ": Wait returned while the model has tasks not final"
					return
				}
			default:
				if m.Final() {
					diff = where + ": Wait blocks while the model has every task final"
					return
				}
			}
		}
	})
	return diff
}

// The model-based property test: random programs, one worker, compared
// step by step with the reference model (start order, statuses, attempts,
// runs, skip causes, per-task events, and when Wait returns); half of the
// programs use delays, retry waits and recurring tasks and let fake time
// pass. A failure is shrunk to a short program. More programs:
// -rapid.checks=N.
func TestModel(t *testing.T) { checkPrograms(t, runProgram) }

// checkInvariants runs prog on a scheduler with several workers and
// batching on, where the order is not fixed, and checks on the event
// stream what must hold whatever the order: a task starts only after every
// dependency succeeded, never before its delay has passed, never while an
// attempt of it is still out; every accepted task ends in exactly one final
// state; Wait returns.
func checkInvariants(t *testing.T, prog []step) (diff string) {
	synctest.Test(t, func(t *testing.T) {
		s, err := coordinator.New(coordinator.WithWorkers(3))
		if err != nil {
			diff = err.Error()
			return
		}
		var mu sync.Mutex
		var events []coordinator.Event
		s.Subscribe(func(e coordinator.Event) {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		})
		deps := map[string][]string{}
		notBefore := map[string]time.Time{}
		var gates []chan struct{}
		for _, st := range prog {
			switch {
			case st.submit != nil:
				var tasks []coordinator.Task
				for _, mt := range st.submit {
					gate := make(chan struct{})
					gates = append(gates, gate)
					tasks = append(tasks, schedTask(mt, gate))
				}
				if s.Submit(tasks...) == nil {
					for _, mt := range st.submit {
						deps[mt.ID], notBefore[mt.ID] = mt.Deps, time.Now().Add(mt.Delay)
					}
				}
			case st.cancel != "":
				s.Cancel(st.cancel)
			case st.advance > 0:
				time.Sleep(st.advance)
			}
			synctest.Wait()
		}
		for _, g := range gates {
			close(g)
		}
		for id := range deps {
			s.Cancel(id) // ends the tasks that block until cancelled
		}
		if err := s.Wait(context.Background()); err != nil {
			diff = fmt.Sprintf("Wait = %v", err)
		}
		if err := s.Shutdown(context.Background()); err != nil && diff == "" {
			diff = fmt.Sprintf("Shutdown = %v", err)
		}
		succeeded := map[string]bool{}
		out := map[string]bool{}
		finals := map[string]int{}
		for _, e := range events {
			switch e.Kind {
			case coordinator.EventStarted:
				for _, d := range deps[e.TaskID] {
					if !succeeded[d] {
						diff = fmt.Sprintf("%s started before its dependency %s succeeded", e.TaskID, d)
						return
					}
				}
				if e.At.Before(notBefore[e.TaskID]) {
					diff = fmt.Sprintf("%s started at %v, before its delay passed (%v)", e.TaskID, e.At, notBefore[e.TaskID])
					return
				}
				if out[e.TaskID] {
					diff = fmt.Sprintf("%s started while an attempt of it was out", e.TaskID)
					return
				}
				out[e.TaskID] = true
			case coordinator.EventRetrying, coordinator.EventRecurred:
				out[e.TaskID] = false
			default:
				out[e.TaskID] = false
				finals[e.TaskID]++
				succeeded[e.TaskID] = e.Kind == coordinator.EventSucceeded
			}
		}
		for id := range deps {
			if finals[id] != 1 {
				diff = fmt.Sprintf("%s has %d final events; want 1", id, finals[id])
				return
			}
		}
	})
	return diff
}

// The same random programs on several workers, checked for what must hold
// in any order (see checkInvariants).
func TestModelInvariantsManyWorkers(t *testing.T) { checkPrograms(t, checkInvariants) }
