package coordinator_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/internal/refmodel"
)

// flowWorkers is the size of each pool of the flow programs: room for
// tasks of 2 and 3 slots.
const flowWorkers = 3

// flowProgram makes prog (drawn with two pools: key limits, slots, the
// rate limit of gpu) a program whose tasks return only when a step makes
// them: a task that fails, panics or blocks until released blocks until
// released and then succeeds, once (it does not recur); every other task
// blocks until cancelled. On pools of several workers the start order of
// attempts handed out together is not determined (their workers race),
// nor, if several returned at once, the order in which their ends are
// applied: with these tasks, what starts at each step is one set, which
// the model predicts.
func flowProgram(prog program) program {
	out := prog
	out.steps = nil
	for _, st := range prog.steps {
		if st.submit != nil {
			batch := slices.Clone(st.submit)
			for i := range batch {
				do := &batch[i].Do
				deaf := do.BlockDeaf || do.Fails > 0 || do.Panics
				*do = refmodel.Behaviour{BlockDeaf: deaf, BlockCtx: !deaf, MaxAttempt: do.MaxAttempt}
				if deaf {
					batch[i].Every, batch[i].Times = 0, 0
				}
			}
			st.submit = batch
		}
		out.steps = append(out.steps, st)
	}
	return out
}

// runFlowProgram runs prog (see flowProgram) on two pools of flowWorkers
// workers with lanes of one, and on the model with as many, comparing
// after every step: the set of attempts started by the step, with their
// pools and times; every live task's status, attempts, runs and cause;
// forgotten IDs unknown; whether Wait returns. A release step releases a
// task only if it runs (released before it starts, it would return at
// once, perhaps together with another).
func runFlowProgram(t *testing.T, prog program) (diff string) {
	prog = flowProgram(prog)
	synctest.Test(t, func(t *testing.T) {
		s, err := coordinator.New(programOptions(prog, flowWorkers, 1)...)
		if err != nil {
			diff = err.Error()
			return
		}
		t0 := time.Now()
		m := refmodel.New(prog.retain, prog.keep)
		m.Weights = prog.weights
		m.SetWorkers("", flowWorkers)
		m.SetWorkers("gpu", flowWorkers)
		m.SetKeyLimits(prog.limit, prog.limits)
		if prog.rate {
			m.SetRate(prog.ratePool, prog.perSecond, prog.burst)
		}
		rec := &calls{}
		var g gates
		sh := newShutter()
		defer func() {
			g.freeAll()
			if d := sh.end(s); d != "" && diff == "" {
				diff = d
			}
		}()
		seen, mseen := 0, 0 // calls, and the model's starts, compared so far
		for k, st := range prog.steps {
			where := fmt.Sprintf("step %d (%v)", k, st)
			switch {
			case st.submit != nil:
				tasks, chans := schedTasks(st.submit, rec)
				got, want := s.Submit(tasks...), m.Submit(st.submit)
				if (got == nil) != (want == nil) {
					diff = fmt.Sprintf("%s: Submit = %v; model: %v", where, got, want)
					return
				}
				if got == nil {
					for _, mt := range st.submit {
						g.add(mt.ID, chans[mt.ID])
					}
				}
			case st.cancel != "" || st.advance > 0 || st.shutdown || st.pause != 0:
				if d := sh.step(s, m, st); d != "" {
					diff = where + ": " + d
					return
				}
			default:
				if i, ok := m.ByID[st.free]; ok && m.Tasks[i].Status == refmodel.Running {
					g.free(st.free)
					m.Release(st.free)
				}
			}
			// Let the step settle before Wait's request wakes the
			// coordinator: a request that comes between a released task's
			// end and its worker's report that it is idle has the end
			// applied while that worker is not yet idle, and another pool
			// may then take the key's place the model gives to the
			// released worker's pool (the model's workers end and go idle
			// as one step). That order is the scheduler's to choose (it
			// hands out to the workers it has); the model's is one of them.
			synctest.Wait()
			waited := make(chan struct{})
			go func() { s.Wait(context.Background()); close(waited) }()
			synctest.Wait()
			// The starts of this step, as one set.
			var got, want []string
			log := rec.all()
			for _, c := range log[seen:] {
				if !c.ret {
					got = append(got, fmt.Sprintf("%s@%q@%v", c.id, c.pool, c.at.Sub(t0)))
				}
			}
			seen = len(log)
			at := m.StartedAt()
			for i := mseen; i < len(m.Started); i++ {
				want = append(want, fmt.Sprintf("%s@%q@%v", m.Started[i], m.StartIn[i], at[i]))
			}
			mseen = len(m.Started)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				diff = fmt.Sprintf("%s: started %v; model %v", where, got, want)
				return
			}
			var mu sync.Mutex
			if d := compare(s, m, &mu, modelStarts(m), nil, where); d != "" {
				diff = d
				return
			}
			if d := waitAgrees(waited, m); d != "" {
				diff = where + ": " + d
				return
			}
		}
	})
	return diff
}

// modelStarts is the model's start order by pool (compare checks the rest).
func modelStarts(m *refmodel.Model) map[string][]string {
	by := map[string][]string{}
	for i, id := range m.Started {
		by[m.StartIn[i]] = append(by[m.StartIn[i]], id)
	}
	return by
}

// The model-based property test on pools of several workers: random
// programs on two pools of three workers (tasks of one to three slots,
// a limit per key across pools, a rate limit on one pool, keys taking
// turns, priorities, delays, pauses, cancels, retention, Shutdown),
// compared step by step with the model: which attempts each step starts,
// where and when, and every task's state (see runFlowProgram).
func TestModelFlow(t *testing.T) { checkPrograms(t, true, runFlowProgram) }
