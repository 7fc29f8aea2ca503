package coordinator_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/internal/refmodel"
	"github.com/batonhq/baton/worker"
	"pgregory.net/rapid"
)

// step is one action of a random program.
type step struct {
	submit   []refmodel.Task
	cancel   string
	free     string        // release a task that ignores its context
	advance  time.Duration // let fake time pass
	shutdown bool
	pause    int    // 1: Pause(pool), 2: Resume(pool)
	pool     string // of pause
	rerun    []string
	down     bool // of rerun: Downstream
}

func (s step) String() string {
	switch {
	case s.submit != nil:
		var parts []string
		for _, t := range s.submit {
			parts = append(parts, fmt.Sprintf("%s%v when %v p%d pool %q key %q slots %d %+v delay %v base %v every %v×%d",
				t.ID, t.Deps, coordinator.Trigger(t.When), t.Priority, t.Pool, t.Key, t.Slots, t.Do, t.Delay, t.BaseDelay, t.Every, t.Times))
		}
		return "submit " + strings.Join(parts, "; ")
	case s.cancel != "":
		return "cancel " + s.cancel
	case s.advance > 0:
		return "advance " + s.advance.String()
	case s.shutdown:
		return "shutdown"
	case s.pause == 1:
		return fmt.Sprintf("pause %q", s.pool)
	case s.pause == 2:
		return fmt.Sprintf("resume %q", s.pool)
	case s.rerun != nil:
		return fmt.Sprintf("rerun %v downstream %v", s.rerun, s.down)
	}
	return "release " + s.free
}

// program is a random program and the scheduler it runs on.
type program struct {
	steps   []step
	retain  bool           // WithRetention(keep)
	keep    time.Duration  // 0 or 1s
	weights map[string]int // WithKeys(KeyPolicy{Weights}), when tasks have keys
	limit   int            // WithKeys(KeyPolicy{Limit}), with two pools
	limits  map[string]int // WithKeys(KeyPolicy{Limits}): overrides of limit, with two pools
	rate    bool           // WithRateLimit(ratePool, perSecond, burst)
	// The rate limit: "gpu", 2, 1 with two pools; on the default pool,
	// 2 or 3 a second and bursts of 1 or 2, for the model.
	ratePool  string
	perSecond float64
	burst     int
}

// keyLimit is the cap on key's attempts at once (0: none).
func (p program) keyLimit(key string) int {
	if key == "" {
		return 0
	}
	if l, ok := p.limits[key]; ok {
		return l
	}
	return p.limit
}

func (p program) String() string {
	var b strings.Builder
	if p.retain {
		fmt.Fprintf(&b, "  retention %v\n", p.keep)
	}
	if p.weights != nil {
		fmt.Fprintf(&b, "  weights %v\n", p.weights)
	}
	if p.limit > 0 || p.limits != nil {
		fmt.Fprintf(&b, "  key limit %d, overrides %v\n", p.limit, p.limits)
	}
	if p.rate {
		fmt.Fprintf(&b, "  rate limit of %q: %v/s, burst %d\n", p.ratePool, p.perSecond, p.burst)
	}
	for k, st := range p.steps {
		fmt.Fprintf(&b, "  %d: %v\n", k, st)
	}
	return b.String()
}

// genProgram draws a program: batches of tasks (on two pools, with pools)
// with random
// dependencies (some unknown, some cyclic, some duplicate IDs, some IDs of
// tasks retention forgot), behaviours and priorities, cancels, releases,
// time passing, and at most one Shutdown, after which the program goes on
// (Submit and Cancel are refused, running tasks end).
func genProgram(t *rapid.T, twoPools bool) program {
	var ids []string
	p := program{retain: rapid.Bool().Draw(t, "retain")}
	if p.retain {
		p.keep = time.Duration(rapid.IntRange(0, 1).Draw(t, "keep")) * time.Second
	}
	timed := rapid.Bool().Draw(t, "timed") // delays, retry waits, recurring tasks, time passing
	keyed := rapid.Bool().Draw(t, "keyed") // tasks with keys, taking turns
	if keyed && rapid.Bool().Draw(t, "weighted") {
		p.weights = map[string]int{"a": rapid.IntRange(1, 3).Draw(t, "weightA"), "": rapid.IntRange(1, 2).Draw(t, "weightNone")}
	}
	pools := []string{""}
	if twoPools {
		// The invariant tests and TestModelFlow (three workers a pool)
		// run these.
		pools = append(pools, "gpu")
		if keyed {
			p.limit = rapid.IntRange(0, 2).Draw(t, "keyLimit")
			if rapid.IntRange(0, 2).Draw(t, "overrides") == 0 {
				p.limits = map[string]int{"a": rapid.IntRange(0, 3).Draw(t, "limitA")} // 0: a is not capped
			}
		}
		p.rate = rapid.IntRange(0, 3).Draw(t, "rate") == 0
		p.ratePool, p.perSecond, p.burst = "gpu", 2, 1
	} else if timed && rapid.IntRange(0, 2).Draw(t, "rate") == 0 {
		p.rate = true
		p.perSecond = float64(rapid.IntRange(2, 3).Draw(t, "perSecond"))
		p.burst = rapid.IntRange(1, 2).Draw(t, "burst")
	}
	second := func(label string, hi int) time.Duration {
		if !timed {
			return 0
		}
		return time.Duration(rapid.IntRange(0, hi).Draw(t, label)) * time.Second
	}
	shut := false
	// Some programs re-run often: what a re-run leaves (skips that keep
	// their class, families replaced) then meets later batches and rules.
	rerunAt := 14
	if !twoPools && rapid.IntRange(0, 3).Draw(t, "rerunny") == 0 {
		rerunAt = 10
	}
	n := rapid.IntRange(1, 25).Draw(t, "steps")
	for range n {
		switch k := rapid.IntRange(0, 15).Draw(t, "kind"); {
		case k >= rerunAt && !twoPools && len(ids) > 0:
			// Rerun: one or two tasks, mostly ones that may have ended badly.
			st := step{down: rapid.Bool().Draw(t, "down")}
			for range rapid.IntRange(1, 2).Draw(t, "nrerun") {
				st.rerun = append(st.rerun, rapid.SampledFrom(append(ids, "ghost")).Draw(t, "rerunID"))
			}
			p.steps = append(p.steps, st)
		case k == 13:
			p.steps = append(p.steps, step{pause: rapid.IntRange(1, 2).Draw(t, "pause"), pool: rapid.SampledFrom(pools).Draw(t, "pausePool")})
		case k == 12 && !shut:
			shut = true
			p.steps = append(p.steps, step{shutdown: true})
		case k >= 10 && timed:
			p.steps = append(p.steps, step{advance: time.Duration(rapid.IntRange(1, 8).Draw(t, "advance")) * 500 * time.Millisecond})
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
				pool := ""
				if twoPools && rapid.IntRange(0, 3).Draw(t, "pool") == 0 {
					pool = "gpu"
				}
				task := refmodel.Task{ID: id, Deps: deps, Priority: rapid.IntRange(0, 2).Draw(t, "prio"), Pool: pool, Do: do,
					Delay: second("delay", 3), BaseDelay: second("base", 2), Every: second("every", 2)}
				if len(deps) > 0 && rapid.IntRange(0, 2).Draw(t, "ruled") == 0 {
					task.When = refmodel.Trigger(rapid.IntRange(1, 4).Draw(t, "when"))
				}
				if task.Every > 0 {
					task.Times = rapid.IntRange(1, 3).Draw(t, "times")
				}
				if keyed {
					task.Key = rapid.SampledFrom([]string{"", "a", "a", "b", "c"}).Draw(t, "key")
				}
				if twoPools && rapid.IntRange(0, 3).Draw(t, "multi") == 0 {
					task.Slots = rapid.IntRange(2, 3).Draw(t, "slots")
				}
				if !twoPools { // the invariant tests do not follow spawns
					drawGrowth(t, &task, ids, growOpts{timed, keyed, p.retain})
				}
				batch = append(batch, task)
			}
			p.steps = append(p.steps, step{submit: batch})
			for range size {
				ids = append(ids, fmt.Sprintf("t%d", len(ids))) // named whether or not the batch is accepted
			}
			ids = append(ids, grownIDs(batch)...)
		case k < 8:
			p.steps = append(p.steps, step{cancel: rapid.SampledFrom(append(ids, "ghost")).Draw(t, "cancel")})
		default:
			p.steps = append(p.steps, step{free: rapid.SampledFrom(ids).Draw(t, "release")})
		}
	}
	chooseAmong(t, &p)
	return p
}

// modelWorker is the custom worker of the "gpu" pool: it runs the job's
// function, as a worker of a real device would run its payload.
type modelWorker struct{}

func (modelWorker) Do(ctx context.Context, j worker.Job) error { return j.Run(ctx) }

// calls records, without a subscriber, when task functions are called
// and return, on one sequence: a start is the call of the function.
type calls struct {
	mu  sync.Mutex
	log []call
}

type call struct {
	id, pool string
	key      string // the task's Key
	slots    int    // the task's Slots (0: 1)
	ret      bool   // a return; else a call
	ok       bool   // a return of nil
	at       time.Time
}

func (c *calls) add(e call) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.log = append(c.log, e)
	c.mu.Unlock()
}

func (c *calls) all() []call {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.log)
}

// schedTask builds the scheduler's version of a model task: its function
// fails, panics or blocks as the behaviour says (gate releases a task that
// ignores its context). rec, if not nil, records its calls and returns.
func schedTask(mt refmodel.Task, gate <-chan struct{}, rec *calls) coordinator.Task {
	do := mt.Do
	var n atomic.Int32
	body := func(ctx context.Context) error {
		calls := int(n.Add(1))
		if err := grow(ctx, mt.ID, do.Grow); err != nil {
			return err
		}
		switch {
		case calls <= do.Fails:
			return errors.New("planned failure")
		case do.Panics:
			panic("planned panic")
		case do.BlockCtx:
			<-ctx.Done()
		case do.BlockDeaf:
			<-gate
		}
		return nil
	}
	return coordinator.Task{ID: mt.ID, Deps: mt.Deps, Priority: mt.Priority, Pool: mt.Pool, Key: mt.Key, Slots: mt.Slots,
		Delay: mt.Delay, Every: mt.Every, Times: mt.Times, When: coordinator.Trigger(mt.When),
		Retry: coordinator.RetryPolicy{MaxAttempts: do.MaxAttempt, BaseDelay: mt.BaseDelay},
		Run: func(ctx context.Context) (err error) {
			rec.add(call{id: mt.ID, pool: mt.Pool, key: mt.Key, slots: max(mt.Slots, 1), at: time.Now()})
			returned := false // false in the deferred record: it panicked
			defer func() {
				rec.add(call{id: mt.ID, pool: mt.Pool, key: mt.Key, slots: max(mt.Slots, 1), ret: true, ok: returned && err == nil, at: time.Now()})
			}()
			err = body(ctx)
			returned = true
			return err
		}}
}

func programOptions(p program, workers, maxBatch int) []coordinator.Option {
	opts := []coordinator.Option{coordinator.WithWorkers(workers), coordinator.WithPool("gpu", workers, modelWorker{})}
	if maxBatch > 0 {
		opts = append(opts, coordinator.WithMaxBatch(maxBatch))
	}
	if p.retain {
		opts = append(opts, coordinator.WithRetention(p.keep))
	}
	if p.weights != nil || p.limit > 0 || p.limits != nil {
		opts = append(opts, coordinator.WithKeys(coordinator.KeyPolicy{Limit: p.limit, Limits: p.limits, Weights: p.weights}))
	}
	if p.rate {
		opts = append(opts, coordinator.WithRateLimit(p.ratePool, p.perSecond, p.burst))
	}
	return append(opts, coordinator.WithQueueCheck(queues.report))
}

// queueChecks keeps the first violation of the ready queues' invariants
// (coordinator.WithQueueCheck) that a scheduler of the program being
// checked reports: checkPrograms fails the program on it.
type queueChecks struct {
	mu    sync.Mutex
	first string
}

var queues queueChecks

func (q *queueChecks) report(v string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.first == "" {
		q.first = v
	}
}

// take returns the first violation since the last take, and forgets it.
func (q *queueChecks) take() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	v := q.first
	q.first = ""
	return v
}

// checkPrograms runs check on random programs and, on a difference, fails
// with the shrunk program listed step by step.
func checkPrograms(t *testing.T, pools bool, check func(*testing.T, program) string) {
	rapid.Check(t, func(rt *rapid.T) {
		prog := genProgram(rt, pools)
		queues.take()
		diff := check(t, prog)
		if v := queues.take(); v != "" {
			diff = "the ready queues: " + v + "\n" + diff
		}
		if diff != "" {
			rt.Fatalf("%s\nprogram:\n%s", diff, prog)
		}
	})
}

// gates holds the gates of the tasks that ignore their context.
type gates struct {
	mu  sync.Mutex
	c   map[string][]chan struct{} // by ID: every task that had it
	all bool                       // freeAll was called: a gate added since is released at once
}

func (g *gates) add(id string, c chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.all {
		// The program is over: a task its end released (freeAll let a
		// blocked dependency return) may spawn a child that ignores its
		// context before Shutdown is applied; it must not hold Shutdown.
		if c != nil {
			close(c)
		}
		return
	}
	if g.c == nil {
		g.c = map[string][]chan struct{}{}
	}
	g.c[id] = append(g.c[id], c)
}

// free releases the latest task with id (the one a release step names).
func (g *gates) free(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if cs := g.c[id]; len(cs) > 0 {
		if c := cs[len(cs)-1]; c != nil {
			close(c)
			cs[len(cs)-1] = nil
		}
	}
}

func (g *gates) freeAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.all = true
	for _, cs := range g.c {
		for i, c := range cs {
			if c != nil {
				close(c)
				cs[i] = nil
			}
		}
	}
}

// runProgram runs prog on a scheduler with one worker per pool and lanes
// of one, and on the model, comparing after every step: start order per
// pool, every live task's status, attempts, runs and cause, every ID's
// events, forgotten IDs unknown, and whether Wait returns. Programs on one
// pool only: two pools run at once, and which of two outcomes of the same
// instant the coordinator applies first is not determined.
func runProgram(t *testing.T, prog program) string { return runProgramAs(t, prog, true) }

// runProgramAs runs prog as runProgram does; without observe, in the
// configuration most users run: no subscriber, logger or middleware,
// starts read from the functions' own calls, and no events compared.
func runProgramAs(t *testing.T, prog program, observe bool) (diff string) {
	synctest.Test(t, func(t *testing.T) {
		s, err := coordinator.New(programOptions(prog, 1, 1)...)
		if err != nil {
			diff = err.Error()
			return
		}
		m := refmodel.New(prog.retain, prog.keep)
		m.Weights = prog.weights
		if prog.rate {
			m.SetRate(prog.ratePool, prog.perSecond, prog.burst)
		}
		var mu sync.Mutex
		started := map[string][]string{} // by pool
		var events map[string][]string   // nil: not observed
		var rec *calls                   // not nil: starts are the functions' calls
		if observe {
			events = map[string][]string{}
			s.Subscribe(func(e coordinator.Event) {
				mu.Lock()
				defer mu.Unlock()
				events[e.TaskID] = append(events[e.TaskID], e.Kind.String())
			})
		} else {
			rec = &calls{}
		}
		var g gates
		env := &growEnv{rec: rec, g: &g}
		sh := newShutter()
		defer func() {
			g.freeAll()
			if d := sh.end(s); d != "" && diff == "" {
				diff = d
			}
		}()
		if observe {
			s.Subscribe(func(e coordinator.Event) {
				if e.Kind == coordinator.EventStarted {
					mu.Lock()
					started[e.Pool] = append(started[e.Pool], e.TaskID)
					mu.Unlock()
				}
			})
		}
		for k, st := range prog.steps {
			where := fmt.Sprintf("step %d (%v)", k, st)
			switch {
			case st.submit != nil:
				tasks, chans := schedTasks(st.submit, rec)
				got, want := submitGrowing(s, env, st.submit, tasks), m.Submit(st.submit)
				sameErr := (got == nil && want == nil) ||
					(errors.Is(want, refmodel.ErrDuplicate) && errors.Is(got, coordinator.ErrDuplicateID)) ||
					(errors.Is(want, refmodel.ErrUnknown) && errors.Is(got, coordinator.ErrUnknownDependency)) ||
					(errors.Is(want, refmodel.ErrCycle) && errors.Is(got, coordinator.ErrCycle)) ||
					(errors.Is(want, refmodel.ErrClosed) && errors.Is(got, coordinator.ErrClosed))
				if !sameErr {
					diff = fmt.Sprintf("%s: Submit = %v; model: %v", where, got, want)
					return
				}
				if got == nil {
					for _, mt := range st.submit {
						g.add(mt.ID, chans[mt.ID])
					}
				}
			case st.cancel != "" || st.advance > 0 || st.shutdown || st.pause != 0 || st.rerun != nil:
				if d := sh.step(s, m, st); d != "" {
					diff = where + ": " + d
					return
				}
			default:
				g.free(st.free)
				m.Release(st.free)
			}
			waited := make(chan struct{})
			go func() { s.Wait(context.Background()); close(waited) }()
			synctest.Wait()
			if rec != nil {
				mu.Lock()
				clear(started)
				for _, c := range rec.all() {
					if !c.ret {
						started[c.pool] = append(started[c.pool], c.id)
					}
				}
				mu.Unlock()
			}
			if d := compare(s, m, &mu, started, events, where); d != "" {
				diff = d
				return
			}
			if d := compareGrowth(s, env, m, where); d != "" {
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

// schedTasks are the scheduler's tasks of a submit step, and the gates of
// those that block until released (given to gates once accepted).
func schedTasks(batch []refmodel.Task, rec *calls) ([]coordinator.Task, map[string]chan struct{}) {
	var tasks []coordinator.Task
	chans := map[string]chan struct{}{}
	for _, mt := range batch {
		gate := make(chan struct{})
		if mt.Do.BlockDeaf {
			chans[mt.ID] = gate
		}
		tasks = append(tasks, schedTask(mt, gate, rec))
	}
	return tasks, chans
}

// shutter runs a program's Shutdown: at its step, or at the end if it has
// none, on a goroutine of its own (it waits for blocked tasks).
type shutter struct {
	called bool
	done   chan error
}

func newShutter() *shutter { return &shutter{done: make(chan error, 1)} }

func (sh *shutter) start(s *coordinator.Scheduler) {
	sh.called = true
	go func() { sh.done <- s.Shutdown(context.Background()) }()
}

// end shuts s down if no step did and says how Shutdown returned.
func (sh *shutter) end(s *coordinator.Scheduler) string {
	if !sh.called {
		sh.start(s)
	}
	if err := <-sh.done; err != nil {
		return fmt.Sprintf("Shutdown = %v", err)
	}
	return ""
}

// step applies a cancel, advance, shutdown or pause step to s and m, and
// says how they disagreed ("" if they did not).
func (sh *shutter) step(s *coordinator.Scheduler, m *refmodel.Model, st step) string {
	switch {
	case st.cancel != "":
		if got, want := s.Cancel(st.cancel), m.Cancel(st.cancel); got != want {
			return fmt.Sprintf("Cancel = %v; model: %v", got, want)
		}
	case st.advance > 0:
		time.Sleep(st.advance) // fake time: every timer on the way fires
		m.Advance(st.advance)
	case st.shutdown:
		sh.start(s)
		m.Shutdown()
	case st.pause != 0:
		if d := pauseStep(s, st, sh.called); d != "" {
			return d
		}
		if st.pause == 1 {
			m.Pause(st.pool)
		} else {
			m.Resume(st.pool)
		}
	case st.rerun != nil:
		res, err := s.Rerun(context.Background(), coordinator.RerunRequest{IDs: st.rerun, Downstream: st.down})
		want, werr := m.Rerun(st.rerun, st.down)
		same := (err == nil && werr == nil) ||
			(errors.Is(werr, refmodel.ErrUnknownTask) && errors.Is(err, coordinator.ErrUnknownTask)) ||
			(errors.Is(werr, refmodel.ErrNotRerunnable) && errors.Is(err, coordinator.ErrNotRerunnable)) ||
			(errors.Is(werr, refmodel.ErrClosed) && errors.Is(err, coordinator.ErrClosed))
		if !same {
			return fmt.Sprintf("Rerun = %v; model: %v", err, werr)
		}
		if !slices.Equal(res.Reopened, want) {
			return fmt.Sprintf("Rerun re-opened %v; model %v", res.Reopened, want)
		}
	}
	return ""
}

// waitAgrees says how a Wait begun after a step disagrees with the model
// ("" if it does not): it has returned exactly when every task the model
// holds is final.
func waitAgrees(waited <-chan struct{}, m *refmodel.Model) string {
	select {
	case <-waited:
		if !m.Final() {
			return "Wait returned while the model has tasks not final"
		}
	default:
		if m.Final() {
			return "Wait blocks while the model has every task final"
		}
	}
	return ""
}

// flowInvariants checks the calls of a program's functions against flow
// control's rules: a pool's calls out at once take at most its 3 workers'
// slots; a key's calls out at once are at most its limit; the rate-limited
// pool starts at most perSecond·T + burst attempts in any window of
// length T.
func flowInvariants(prog program, log []call) string {
	slots := map[string]int{}
	keys := map[string]int{}
	var rated []time.Time
	for _, c := range log {
		if c.ret {
			slots[c.pool] -= c.slots
			keys[c.key]--
			continue
		}
		slots[c.pool] += c.slots
		keys[c.key]++
		if slots[c.pool] > 3 {
			return fmt.Sprintf("%s called with %d slots of pool %q in use; the pool has 3", c.id, slots[c.pool], c.pool)
		}
		if l := prog.keyLimit(c.key); l > 0 && keys[c.key] > l {
			return fmt.Sprintf("%s called with %d calls of key %q out; the limit is %d", c.id, keys[c.key], c.key, l)
		}
		if prog.rate && c.pool == prog.ratePool {
			rated = append(rated, c.at)
		}
	}
	for i := range rated {
		for j := i; j < len(rated); j++ {
			if n, allowed := j-i+1, prog.perSecond*rated[j].Sub(rated[i]).Seconds()+float64(prog.burst); float64(n) > allowed+1e-9 {
				return fmt.Sprintf("pool %q started %d attempts from %v to %v; rate %v/s, burst %d allow %.1f", prog.ratePool, n, rated[i], rated[j], prog.perSecond, prog.burst, allowed)
			}
		}
	}
	return ""
}

// pauseStep pauses or resumes st.pool; after Shutdown it must refuse
// with ErrClosed.
func pauseStep(s *coordinator.Scheduler, st step, shut bool) string {
	var err error
	if st.pause == 1 {
		err = s.Pause(st.pool)
	} else {
		err = s.Resume(st.pool)
	}
	switch {
	case shut && !errors.Is(err, coordinator.ErrClosed):
		return fmt.Sprintf("after Shutdown: %v; want ErrClosed", err)
	case !shut && err != nil:
		return err.Error()
	}
	return ""
}

// compare checks the scheduler against the model after a step.
func compare(s *coordinator.Scheduler, m *refmodel.Model, mu *sync.Mutex, started, events map[string][]string, where string) string {
	mu.Lock()
	defer mu.Unlock()
	for _, pool := range []string{"", "gpu"} {
		var want []string
		for i, id := range m.Started {
			if m.StartIn[i] == pool {
				want = append(want, id)
			}
		}
		if got := started[pool]; !slices.Equal(got, want) {
			return fmt.Sprintf("%s: pool %q start order %v; model %v", where, pool, got, want)
		}
	}
	byID := map[string][]*refmodel.Record{}
	for _, r := range m.Tasks {
		byID[r.ID] = append(byID[r.ID], r)
	}
	for id, rs := range byID {
		info, found := s.Info(id)
		live, ok := m.ByID[id]
		if !ok {
			if found {
				return fmt.Sprintf("%s: Info(%s) found; model forgot it", where, id)
			}
		} else {
			r := m.Tasks[live]
			if !found || int(info.Status) != int(r.Status) || info.Attempts != r.Attempts || info.Runs != r.Runs || info.Cause != r.Cause || info.Reruns != r.Reruns {
				return fmt.Sprintf("%s: Info(%s) = %v %v attempts %d runs %d cause %q reruns %d; model %v attempts %d runs %d cause %q reruns %d",
					where, id, found, info.Status, info.Attempts, info.Runs, info.Cause, info.Reruns, coordinator.Status(r.Status), r.Attempts, r.Runs, r.Cause, r.Reruns)
			}
		}
		if ok {
			if d := sameHistory(s, id, m.Tasks[live].History); d != "" {
				return where + ": " + d
			}
		}
		if events == nil {
			continue // not observed
		}
		var want []string
		for _, r := range rs {
			want = append(want, r.Events...)
		}
		if got := events[id]; !slices.Equal(got, want) {
			return fmt.Sprintf("%s: events of %s %v; model %v", where, id, got, want)
		}
	}
	return ""
}

// sameHistory says how the scheduler's History of id differs from the
// model's ("" if it does not): the newest attempts (WithHistory's default
// per task), and how many older ones were dropped.
func sameHistory(s *coordinator.Scheduler, id string, want []string) string {
	h, _ := s.History(id)
	var got []string
	for _, a := range h.Attempts {
		if a.Outcome != coordinator.OutcomeRunning {
			got = append(got, fmt.Sprintf("a%d r%d x%d %v", a.Attempt, a.Run, a.Rerun, a.Outcome))
		}
	}
	dropped := max(len(want)-coordinator.DefaultHistoryPerTask, 0)
	if !slices.Equal(got, want[dropped:]) || h.Dropped != dropped {
		return fmt.Sprintf("History(%s) = %v, %d dropped; model %v", id, got, h.Dropped, want)
	}
	return ""
}

// The model-based property test: random programs on one worker with lanes
// of one, compared step by step with the reference model (start order,
// statuses, attempts, runs, skip causes, events, retention and ID reuse,
// Shutdown at any step, and when Wait returns); half of the programs use
// delays, retry waits and recurring tasks and let fake time pass, half
// forget final tasks. A failure is shrunk to a short program. More
// programs: -rapid.checks=N.
func TestModel(t *testing.T) { checkPrograms(t, false, runProgram) }

// The same, in the configuration most users run: no subscriber, logger or
// middleware (a subscriber changes what the scheduler does: it asks every
// outcome to be reported at once). Starts are read from the functions'
// calls; statuses, attempts, runs and causes from Info.
func TestModelDefaultConfig(t *testing.T) {
	checkPrograms(t, false, func(t *testing.T, p program) string { return runProgramAs(t, p, false) })
}

// checkInvariants runs prog with batching, look-ahead and fusion on, on
// pools of several workers, where the order is not fixed, and checks on the
// event stream what must hold whatever the order: a task starts only after
// every dependency succeeded, never before its delay has passed, never
// while an attempt of it is still out, never after Shutdown's first
// cancellation; every accepted task ends in exactly one final event, and a
// skip names a failed or cancelled task upstream; Info agrees with the
// events; Wait returns.
func checkInvariants(t *testing.T, prog program) (diff string) {
	synctest.Test(t, func(t *testing.T) {
		s, err := coordinator.New(programOptions(prog, 3, 0)...)
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
		// Per ID, the accepted tasks in order (retention lets an ID come back).
		type accepted struct {
			deps      []string
			when      coordinator.Trigger
			notBefore time.Time
		}
		tasks := map[string][]accepted{}
		var g gates
		shutdownDone := make(chan error, 1)
		shut := false
		for _, st := range prog.steps {
			switch {
			case st.submit != nil:
				var batch []coordinator.Task
				chans := map[string]chan struct{}{}
				for _, mt := range st.submit {
					gate := make(chan struct{})
					chans[mt.ID] = gate
					batch = append(batch, schedTask(mt, gate, nil))
				}
				if s.Submit(batch...) == nil {
					for _, mt := range st.submit {
						tasks[mt.ID] = append(tasks[mt.ID], accepted{mt.Deps, coordinator.Trigger(mt.When), time.Now().Add(mt.Delay)})
						g.add(mt.ID, chans[mt.ID])
					}
				}
			case st.cancel != "":
				s.Cancel(st.cancel)
			case st.advance > 0:
				time.Sleep(st.advance)
			case st.shutdown:
				shut = true
				go func() { shutdownDone <- s.Shutdown(context.Background()) }()
			case st.pause != 0:
				if d := pauseStep(s, st, shut); d != "" {
					diff = d
					return
				}
			default:
				g.free(st.free)
			}
			synctest.Wait()
		}
		g.freeAll()
		if !shut {
			s.ResumeAll() // what a paused pool holds runs, or is cancelled
		}
		for id := range tasks {
			s.Cancel(id) // ends the tasks that block until cancelled
		}
		if err := s.Wait(context.Background()); err != nil {
			diff = fmt.Sprintf("Wait = %v", err)
		}
		infos := map[string]coordinator.TaskInfo{}
		for id := range tasks {
			if info, found := s.Info(id); found {
				infos[id] = info
			}
		}
		if !shut {
			go func() { shutdownDone <- s.Shutdown(context.Background()) }()
		}
		if err := <-shutdownDone; err != nil && diff == "" {
			diff = fmt.Sprintf("Shutdown = %v", err)
		}
		if diff != "" {
			return
		}
		final := map[string]coordinator.EventKind{} // the last final event per ID
		gen := map[string]int{}                     // which accepted task of the ID the events are about
		succeeded := map[string]bool{}
		ended := map[string]bool{}
		causeOf := map[string]string{} // of a Skipped task
		// rootKind is how the end of d is seen by a rule: the final event of
		// its root cause (Skipped: skipped by a rule upstream).
		// A Skipped task's class may get worse after its event (a dependency
		// that ends later fails): the rules that tell classes apart wait
		// until it cannot, so its final cause (Info) is the one they saw.
		// Retention may have forgotten d (no Info): its class is then the
		// worst end among its dependencies (a failure outranks a cancel,
		// which outranks a skip by a rule), seen as they ended before the
		// event being checked, as the scheduler's rules see it once they
		// decide (the first cause, the event's, may have got worse since).
		rank := map[coordinator.EventKind]int{coordinator.EventSkipped: 1, coordinator.EventCancelled: 2, coordinator.EventFailed: 3}
		var rootKind func(d string) coordinator.EventKind
		seen := map[string]bool{}
		rootKind = func(d string) coordinator.EventKind {
			if final[d] != coordinator.EventSkipped {
				return final[d]
			}
			cause := causeOf[d]
			if ti, ok := infos[d]; ok && len(tasks[d]) == 1 && ti.Status == coordinator.Skipped {
				cause = ti.Cause
			} else if cause != "" && len(tasks[d]) > 0 && !seen[d] {
				seen[d] = true
				defer delete(seen, d)
				worst := final[cause]
				for _, x := range tasks[d][min(gen[d], len(tasks[d])-1)].deps {
					if ended[x] && !succeeded[x] {
						if k := rootKind(x); rank[k] > rank[worst] {
							worst = k
						}
					}
				}
				return worst
			}
			if cause != "" {
				return final[cause]
			}
			return final[d]
		}
		out := map[string]bool{}
		finals := map[string]int{}
		closedAt := -1
		for i, e := range events {
			id := e.TaskID
			switch e.Kind {
			case coordinator.EventStarted:
				if closedAt >= 0 {
					diff = fmt.Sprintf("%s started (event %d) after Shutdown's first cancellation (event %d)", id, i, closedAt)
					return
				}
				acc := tasks[id][min(gen[id], len(tasks[id])-1)]
				anyFailed := false
				for _, d := range acc.deps {
					k := rootKind(d)
					anyFailed = anyFailed || (ended[d] && k == coordinator.EventFailed)
					switch {
					case acc.when == coordinator.AllSucceeded && !succeeded[d]:
						diff = fmt.Sprintf("%s started before its dependency %s succeeded", id, d)
					case (acc.when == coordinator.AllDone || acc.when >= coordinator.NoneFailed) && !ended[d]:
						diff = fmt.Sprintf("%s (%v) started before its dependency %s ended", id, acc.when, d)
					case acc.when >= coordinator.NoneFailed && (k == coordinator.EventFailed || k == coordinator.EventCancelled):
						diff = fmt.Sprintf("%s (%v) started although %s ended %v", id, acc.when, d, k)
					}
					if diff != "" {
						return
					}
				}
				if acc.when == coordinator.AnyFailed && !anyFailed {
					diff = fmt.Sprintf("%s (AnyFailed) started with no dependency failed", id)
					return
				}
				if acc.when == coordinator.NoneFailedMinOneSuccess && !slices.ContainsFunc(acc.deps, func(d string) bool { return succeeded[d] }) {
					diff = fmt.Sprintf("%s (NoneFailedMinOneSuccess) started with no dependency succeeded", id)
					return
				}
				if e.At.Before(acc.notBefore) {
					diff = fmt.Sprintf("%s started at %v, before its delay passed (%v)", id, e.At, acc.notBefore)
					return
				}
				if out[id] {
					diff = fmt.Sprintf("%s started while an attempt of it was out", id)
					return
				}
				out[id] = true
			case coordinator.EventRetrying, coordinator.EventRecurred:
				out[id] = false
			default:
				if e.Kind == coordinator.EventCancelled && errors.Is(e.Err, coordinator.ErrClosed) && closedAt < 0 {
					closedAt = i
				}
				if e.Kind == coordinator.EventSkipped && e.Cause != "" {
					k, ok := final[e.Cause]
					if !ok || (k != coordinator.EventFailed && k != coordinator.EventCancelled && (k != coordinator.EventSkipped || causeOf[e.Cause] != "")) {
						diff = fmt.Sprintf("%s skipped because of %s, which had not failed, been cancelled or been skipped by its own rule", id, e.Cause)
						return
					}
				}
				if e.Kind == coordinator.EventSkipped {
					causeOf[id] = e.Cause
				}
				ended[id] = true
				out[id] = false
				finals[id]++
				gen[id]++
				final[id] = e.Kind
				succeeded[id] = e.Kind == coordinator.EventSucceeded
			}
		}
		for id, accs := range tasks {
			if finals[id] != len(accs) {
				diff = fmt.Sprintf("%s: %d final events for %d accepted tasks; want one each", id, finals[id], len(accs))
				return
			}
			if info, found := infos[id]; found {
				want := map[coordinator.EventKind]coordinator.Status{coordinator.EventSucceeded: coordinator.Succeeded,
					coordinator.EventFailed: coordinator.Failed, coordinator.EventCancelled: coordinator.Cancelled,
					coordinator.EventSkipped: coordinator.Skipped}[final[id]]
				if info.Status != want {
					diff = fmt.Sprintf("Info(%s) = %v; its last final event says %v", id, info.Status, final[id])
					return
				}
			}
		}
	})
	return diff
}

// The same random programs, on two pools (one of a custom worker type),
// with batching, look-ahead and fusion on, on three workers per pool,
// checked for what must hold in any order (see checkInvariants).
func TestModelInvariantsManyWorkers(t *testing.T) { checkPrograms(t, true, checkInvariants) }

// checkInvariantsQuiet is checkInvariants in the configuration most users
// run: no subscriber, logger or middleware. What must hold is read from
// the functions' own calls and returns, on one sequence, and from Info at
// the end: a function is called only once every dependency's function
// has returned for the last time (AnyFailed aside, which starts at the
// first failure), and then only as its rule allows (by the dependencies'
// final states), never before its delay, never while an earlier call of
// the task is out, never after Shutdown; every accepted task ends final;
// a task that succeeded ran, one that was skipped never did; Wait returns.
func checkInvariantsQuiet(t *testing.T, prog program) (diff string) {
	synctest.Test(t, func(t *testing.T) {
		s, err := coordinator.New(programOptions(prog, 3, 0)...)
		if err != nil {
			diff = err.Error()
			return
		}
		type accepted struct {
			deps      []string
			when      coordinator.Trigger
			notBefore time.Time
		}
		tasks := map[string][]accepted{}
		rec := &calls{}
		var g gates
		shutdownDone := make(chan error, 1)
		shut, shutCalls := false, -1 // calls made by the time Shutdown had settled
		for _, st := range prog.steps {
			switch {
			case st.submit != nil:
				var batch []coordinator.Task
				chans := map[string]chan struct{}{}
				for _, mt := range st.submit {
					gate := make(chan struct{})
					chans[mt.ID] = gate
					batch = append(batch, schedTask(mt, gate, rec))
				}
				if s.Submit(batch...) == nil {
					for _, mt := range st.submit {
						tasks[mt.ID] = append(tasks[mt.ID], accepted{mt.Deps, coordinator.Trigger(mt.When), time.Now().Add(mt.Delay)})
						g.add(mt.ID, chans[mt.ID])
					}
				}
			case st.cancel != "":
				s.Cancel(st.cancel)
			case st.advance > 0:
				time.Sleep(st.advance)
			case st.shutdown:
				shut = true
				go func() { shutdownDone <- s.Shutdown(context.Background()) }()
			case st.pause != 0:
				if d := pauseStep(s, st, shut); d != "" {
					diff = d
					return
				}
			default:
				g.free(st.free)
			}
			synctest.Wait()
			if shut && shutCalls < 0 {
				shutCalls = len(rec.all())
			}
		}
		g.freeAll()
		if !shut {
			s.ResumeAll() // what a paused pool holds runs, or is cancelled
		}
		for id := range tasks {
			s.Cancel(id)
		}
		if err := s.Wait(context.Background()); err != nil {
			diff = fmt.Sprintf("Wait = %v", err)
		}
		infos := map[string]coordinator.TaskInfo{}
		for id := range tasks {
			if info, found := s.Info(id); found {
				infos[id] = info
			}
		}
		if !shut {
			go func() { shutdownDone <- s.Shutdown(context.Background()) }()
		}
		if err := <-shutdownDone; err != nil && diff == "" {
			diff = fmt.Sprintf("Shutdown = %v", err)
		}
		if diff != "" {
			return
		}
		log := rec.all()
		if shutCalls >= 0 {
			for _, c := range log[shutCalls:] {
				if !c.ret {
					diff = fmt.Sprintf("%s was called after Shutdown had begun and settled", c.id)
					return
				}
			}
		}
		if d := flowInvariants(prog, log); d != "" {
			diff = d
			return
		}
		// The last return of each ID, by position: a dependent's call comes
		// after it (for IDs accepted once: retention may reuse an ID).
		lastRet := map[string]int{}
		for i, c := range log {
			if c.ret {
				lastRet[c.id] = i
			}
		}
		ran := map[string]bool{}
		out := map[string]bool{}
		for i, c := range log {
			if c.ret {
				out[c.id] = false
				continue
			}
			if out[c.id] {
				diff = fmt.Sprintf("%s was called while an earlier call of it was out", c.id)
				return
			}
			out[c.id] = true
			ran[c.id] = true
			accs := tasks[c.id]
			if len(accs) != 1 {
				continue // an ID accepted again after retention forgot it: which one is ambiguous
			}
			acc := accs[0]
			if c.at.Before(acc.notBefore) {
				diff = fmt.Sprintf("%s was called at %v, before its delay passed (%v)", c.id, c.at, acc.notBefore)
				return
			}
			if acc.when == coordinator.AnyFailed {
				continue
			}
			for _, d := range acc.deps {
				if len(tasks[d]) != 1 {
					continue
				}
				if at, ok := lastRet[d]; ok && at > i {
					diff = fmt.Sprintf("%s (%v) was called before its dependency %s returned for the last time", c.id, acc.when, d)
					return
				}
			}
		}
		// By the final states, where retention kept them.
		class := func(d string) string { // how a rule sees d's end
			ti, ok := infos[d]
			switch {
			case !ok:
				return "?"
			case ti.Status == coordinator.Succeeded:
				return "ok"
			case ti.Status == coordinator.Skipped && ti.Cause != "":
				if root, ok := infos[ti.Cause]; ok && root.Status != coordinator.Skipped {
					return root.Status.String()
				} else if !ok {
					return "?"
				}
				return "benign"
			case ti.Status == coordinator.Skipped:
				return "benign"
			}
			return ti.Status.String()
		}
		for id, accs := range tasks {
			ti, ok := infos[id]
			if !ok || len(accs) != 1 {
				continue
			}
			if !ti.Status.Final() {
				diff = fmt.Sprintf("Info(%s) = %v after Wait; want final", id, ti.Status)
				return
			}
			switch {
			case ti.Status == coordinator.Succeeded && !ran[id]:
				diff = fmt.Sprintf("%s succeeded without its function being called", id)
			case ti.Status == coordinator.Skipped && ran[id]:
				diff = fmt.Sprintf("%s was skipped after its function was called", id)
			}
			if diff != "" {
				return
			}
			if !ran[id] {
				continue
			}
			acc := accs[0]
			anyFailed := false
			for _, d := range acc.deps {
				k := class(d)
				anyFailed = anyFailed || k == "failed"
				switch {
				case k == "?":
				case acc.when == coordinator.AllSucceeded && k != "ok":
					diff = fmt.Sprintf("%s ran though its dependency %s ended %s", id, d, k)
				case acc.when >= coordinator.NoneFailed && (k == "failed" || k == "cancelled"):
					diff = fmt.Sprintf("%s (%v) ran though its dependency %s ended %s", id, acc.when, d, k)
				}
				if diff != "" {
					return
				}
			}
			if acc.when == coordinator.AnyFailed && !anyFailed && !slices.ContainsFunc(acc.deps, func(d string) bool { return class(d) == "?" }) {
				diff = fmt.Sprintf("%s (AnyFailed) ran with no dependency failed", id)
				return
			}
			if acc.when == coordinator.NoneFailedMinOneSuccess && !slices.ContainsFunc(acc.deps, func(d string) bool { k := class(d); return k == "ok" || k == "?" }) {
				diff = fmt.Sprintf("%s (NoneFailedMinOneSuccess) ran with no dependency succeeded", id)
				return
			}
		}
	})
	return diff
}

// The invariants of TestModelInvariantsManyWorkers, checked without a
// subscriber (see checkInvariantsQuiet).
func TestModelInvariantsDefaultConfig(t *testing.T) { checkPrograms(t, true, checkInvariantsQuiet) }

// TestModelRegressions runs again every program that once broke TestModel
// (testdata/regressions/model-*.fail):
// model-deaf-child-spawned-after-every-gate-was-released broke the
// harness, not the scheduler: at the end of a program the harness
// released every task that ignores its context and then called Shutdown;
// in between, a task one of them had held back started and spawned a
// child that ignores its context, whose gate came after the release, so
// that Shutdown waited for it forever (synctest: "deadlock: all
// goroutines in bubble are blocked"). It failed about one replay in
// eight; gates added after the release are now released at once.
func TestModelRegressions(t *testing.T) {
	checkFailfiles(t, "testdata/regressions/model-*.fail", false, 10, runProgram)
}

// TestModelInvariantsRegressions runs again every program that once broke
// checkInvariants (rapid's failfiles, kept in testdata/regressions as
// invariants-*.fail): invariants-anyfailed-after-a-forgotten-skip is an
// AnyFailed task whose dependency was skipped first for a cancel, then
// for a failure, and forgotten by retention (the checker took the first
// cause, the scheduler rightly the worst).
func TestModelInvariantsRegressions(t *testing.T) {
	checkFailfiles(t, "testdata/regressions/invariants-*.fail", true, 1, checkInvariants)
}

// TestModelFlowRegressions runs again every program that once broke
// runFlowProgram (testdata/regressions/flow-*.fail):
// flow-stale-turn-of-a-key-whose-tasks-left is a key whose only ready
// task was cancelled before any hand-out met its turn; a task of that key
// submitted later started ahead of one submitted before it in its batch
// (TestKeyWhoseTasksLeftHasNoTurn).
// flow-a-request-between-an-end-and-its-worker-going-idle broke the
// harness, not the scheduler: Wait's request, sent as a step released a
// task of three slots, had the coordinator apply its end before its
// worker said it was idle, so that its pool could not take the key's
// place and another pool's task of the key did (a start the model, whose
// workers end and go idle in one step, gives to the first pool); the
// harness now lets each step settle before Wait. It failed about one run
// in seven under -race (one in twenty replays by this test): each
// program is replayed 40 times.
func TestModelFlowRegressions(t *testing.T) {
	checkFailfiles(t, "testdata/regressions/flow-*.fail", true, 40, runFlowProgram)
}

// TestModelDefaultConfigRegressions runs again every program that once
// broke TestModelDefaultConfig (testdata/regressions/default-*.fail):
// default-turn-of-a-key-whose-tasks-left-an-idle-pool is key ""'s last
// ready task at a level cancelled (with its spawner) while its pool had
// nothing else ready; the model kept the key's turn there, which no look
// had met, and started a task of that key submitted later ahead of one of
// key "a" submitted before it in its batch; the scheduler rightly ends
// the turn as its last ready task leaves (TestKeyWhoseTasksLeftHasNoTurn).
// default-rerun-of-a-spawner-with-a-dependency-of-its-family is a re-run
// of a spawner and of a child whose join re-opens a task the spawner's
// family depends on, in one request: that task counted the forgotten
// family's records among its dependents again (an earlier re-run of it
// had added them to its successors), the new family took those records,
// and its success released them twice: a child started while its
// dependency, a sibling, had not succeeded.
// default-keyed-three-tasks-failed-once-under-load spawns children that
// ignore their context: it, and the random programs after it, deadlocked
// now and then in the harness's end (see TestModelRegressions).
func TestModelDefaultConfigRegressions(t *testing.T) {
	checkFailfiles(t, "testdata/regressions/default-*.fail", false, 1, func(t *testing.T, p program) string { return runProgramAs(t, p, false) })
}

// checkFailfiles runs check on the program of each rapid failfile that
// pattern matches, drawn as the tests that wrote them did (with or
// without pools), replays times (rapid's random checks follow the first
// only: some programs broke a test only in some interleavings).
func checkFailfiles(t *testing.T, pattern string, pools bool, replays int, check func(*testing.T, program) string) {
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		t.Fatalf("no failfiles match %s (%v)", pattern, err)
	}
	oldFile := flag.Lookup("rapid.failfile").Value.String()
	defer flag.Set("rapid.failfile", oldFile)
	oldChecks := flag.Lookup("rapid.checks").Value.String()
	defer flag.Set("rapid.checks", oldChecks)
	for _, f := range files {
		for k := range max(replays, 1) {
			t.Run(filepath.Base(f), func(t *testing.T) {
				checks := oldChecks
				if k > 0 {
					checks = "0"
				}
				if err := errors.Join(flag.Set("rapid.failfile", f), flag.Set("rapid.checks", checks)); err != nil {
					t.Fatal(err)
				}
				checkPrograms(t, pools, check)
			})
		}
	}
}
