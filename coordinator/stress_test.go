package coordinator_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/worker"
	"go.uber.org/goleak"
)

var (
	stressRuns  = flag.Int("baton.stress", 3, "iterations of TestConcurrentStress")
	stressCheck = flag.Bool("baton.stresscheck", false, "TestConcurrentStress: check the ready and key queues' invariants after every coordinator iteration (WithQueueCheck; slower)")
	stressSeed  = flag.Uint64("baton.seed", 0, "seed of TestConcurrentStress (0: a new one, printed on failure)")
)

// stressWorker is a custom worker type for the second pool: it runs the
// job's function, as a device driver would run its payload.
type stressWorker struct{}

func (stressWorker) Do(ctx context.Context, j worker.Job) error { return j.Run(ctx) }

// Many goroutines use one scheduler at once, in real time, on random
// graphs with two pools, retries, timeouts (functions that honour their
// context and ones that do not), delays, panics, recurring tasks, tasks
// that spawn children (which spawn in their turn) and branches, while
// others cancel, query, subscribe and unsubscribe, and wait with short
// contexts; Shutdown comes at a random moment. Afterwards the event log
// must show exactly one final event per accepted task and child that
// joined, no start before every dependency succeeded nor before every
// task spawned under it ended (stress_spawn_test.go), no start after
// Shutdown's first cancellation, skip causes that are failed or cancelled
// tasks or branches not taken; a dependent a branch did not choose never
// runs; Info must agree with it;
// no goroutine may be left and the heap must be back near where it was.
// Seeded: a failure names the seed that reproduces it (-baton.seed). Run
// with -race.
func TestConcurrentStress(t *testing.T) {
	seed := *stressSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var tasks, events int
	for i := range *stressRuns {
		s := seed + uint64(i)
		// Every other run in the configuration most users run: no
		// subscriber, logger or middleware, checked from the functions'
		// calls and from Info.
		n, e, err := stressOnce(s, i%2 == 0)
		if err != nil {
			t.Fatalf("seed %d (-baton.seed=%d -baton.stress=1, observed %v): %v", s, s, i%2 == 0, err)
		}
		tasks, events = tasks+n, events+e
	}
	t.Logf("%d runs from seed %d: %d tasks accepted, %d events checked", *stressRuns, seed, tasks, events)
	if *stressRuns >= 3 && tasks == 0 {
		t.Fatalf("no task was accepted in %d runs: the test tests nothing", *stressRuns)
	}
	goleak.VerifyNone(t)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 8<<20 {
		t.Fatalf("heap grew %d bytes over %d runs; want it back near where it was", grew, *stressRuns)
	}
}

type stressTask struct {
	deps  []string
	timed bool // it has a Timeout: an abandoned attempt may return after the task ended
}

func stressOnce(seed uint64, observe bool) (tasks, events int, err error) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	opts := []coordinator.Option{coordinator.WithWorkers(1 + r.IntN(4)),
		coordinator.WithPool("dev", 1+r.IntN(2), stressWorker{}), coordinator.WithAbandonAfter(time.Millisecond)}
	retain := r.IntN(2) == 0
	if retain {
		opts = append(opts, coordinator.WithRetention(0))
	}
	// Flow control, in some runs: keys with a limit, a rate limit on
	// "dev", tasks of two slots in the default pool (when it has two
	// workers), and a goroutine that pauses and resumes the pools.
	workers := 1 + r.IntN(4)
	opts[0] = coordinator.WithWorkers(workers)
	flow := r.IntN(2) == 0
	keyLimit := 0
	if flow {
		keyLimit = 1 + r.IntN(2)
		opts = append(opts, coordinator.WithKeys(coordinator.KeyPolicy{Limit: keyLimit}))
		if r.IntN(2) == 0 {
			opts = append(opts, coordinator.WithRateLimit("dev", float64(2000+r.IntN(5000)), 1+r.IntN(5)))
		}
	}
	var violation struct {
		sync.Mutex
		first string
	}
	if *stressCheck {
		opts = append(opts, coordinator.WithQueueCheck(func(v string) {
			violation.Lock()
			defer violation.Unlock()
			if violation.first == "" {
				violation.first = v
				fmt.Fprintf(os.Stderr, "seed %d: the ready queues: %s\n", seed, v) // at once: a run may hang after it
			}
		}))
	}
	s, err := coordinator.New(opts...)
	if err != nil {
		return 0, 0, err
	}
	var mu sync.Mutex
	var log []coordinator.Event
	if observe {
		s.Subscribe(func(e coordinator.Event) {
			mu.Lock()
			log = append(log, e)
			mu.Unlock()
		})
	}
	rec := &calls{} // the functions' calls and returns, in either mode
	ops := &opLog{rec: rec}
	if observe {
		ops.events = func() []coordinator.Event {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(log)
		}
	}
	stressOps = ops
	g := newStressGrowth()
	accepted := map[string]stressTask{}
	var ids []string    // accepted, for dependencies and cancels
	var kidIDs []string // children of accepted spawners, which may join the graph: the same, now and then
	var stop atomic.Bool
	var wg sync.WaitGroup
	producers := 2 + r.IntN(4)
	for p := range producers {
		pr := rand.New(rand.NewPCG(seed, uint64(p)))
		wg.Go(func() {
			for b := 0; !stop.Load() && b < 40; b++ {
				var batch []coordinator.Task
				for k := range 1 + pr.IntN(6) {
					id := fmt.Sprintf("p%d-%d-%d", p, b, k)
					run, blocks := stressRun(pr)
					tk := coordinator.Task{ID: id, Priority: pr.IntN(3)}
					if pr.IntN(4) == 0 {
						tk.Pool = "dev"
					}
					if flow {
						tk.Key = []string{"", "a", "b"}[pr.IntN(3)]
						if tk.Pool == "" && workers >= 2 && pr.IntN(6) == 0 {
							tk.Slots = 2
						}
					}
					mu.Lock()
					for range pr.IntN(3) {
						if len(ids) > 0 {
							tk.Deps = append(tk.Deps, ids[len(ids)-1-pr.IntN(min(len(ids), 50))])
						}
					}
					if len(kidIDs) > 0 && pr.IntN(8) == 0 {
						tk.Deps = append(tk.Deps, kidIDs[len(kidIDs)-1-pr.IntN(min(len(kidIDs), 20))]) // refused if it has not joined
					}
					mu.Unlock()
					if k > 0 && pr.IntN(3) == 0 {
						tk.Deps = append(tk.Deps, batch[pr.IntN(len(batch))].ID)
					}
					switch pr.IntN(8) {
					case 0:
						tk.Retry = coordinator.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Duration(pr.IntN(500)) * time.Microsecond, Jitter: 0.5}
					case 1:
						tk.Timeout = time.Duration(1+pr.IntN(2)) * time.Millisecond
					case 2:
						tk.Delay = time.Duration(pr.IntN(2000)) * time.Microsecond
					case 3:
						tk.Every, tk.Times = time.Duration(100+pr.IntN(500))*time.Microsecond, 1+pr.IntN(3)
					}
					if blocks && pr.IntN(4) > 0 {
						tk.Timeout = time.Duration(1+pr.IntN(3)) * time.Millisecond // most blockers end by timing out
					}
					tk.Run = recordedFlow(rec, id, tk, run)
					batch = append(batch, tk)
				}
				mu.Lock()
				outside := slices.Clone(ids[max(0, len(ids)-50):])
				mu.Unlock()
				kids := g.grow(pr, batch, "", outside, rec, flow, 0)
				err := s.Submit(batch...)
				switch {
				case err == nil:
					for _, tk := range batch {
						ops.add(fmt.Sprintf("submitted %s deps %v pool %q prio %d key %q slots %d retry %+v timeout %v delay %v every %v×%d", tk.ID, tk.Deps,
							tk.Pool, tk.Priority, tk.Key, tk.Slots, tk.Retry, tk.Timeout, tk.Delay, tk.Every, tk.Times), append([]string{tk.ID}, tk.Deps...)...)
					}
					mu.Lock()
					for _, tk := range batch {
						accepted[tk.ID] = stressTask{deps: tk.Deps, timed: tk.Timeout > 0}
						ids = append(ids, tk.ID)
					}
					kidIDs = append(kidIDs, kids...)
					mu.Unlock()
				case errors.Is(err, coordinator.ErrClosed):
					return
				case errors.Is(err, coordinator.ErrUnknownDependency):
					// a dependency forgotten by retention: fine
				default:
					panic(fmt.Sprintf("Submit = %v", err))
				}
			}
		})
	}
	// Cancellers, queriers, subscribers, waiters, with flow control a
	// pauser, and in some runs an operator who re-runs tasks (Rerun), alone
	// or with their downstream.
	roles := []string{"cancel", "info", "subscribe", "wait"}
	if flow {
		roles = append(roles, "pause")
	}
	reopened := map[string]bool{} // every task a Rerun re-opened
	if r.IntN(2) == 0 {
		roles = append(roles, "rerun")
	}
	for c, role := range roles {
		cr := rand.New(rand.NewPCG(seed, uint64(100+c)))
		wg.Go(func() {
			for !stop.Load() {
				mu.Lock()
				var id string
				if len(ids) > 0 {
					id = ids[cr.IntN(len(ids))]
				}
				if len(kidIDs) > 0 && cr.IntN(4) == 0 {
					id = kidIDs[cr.IntN(len(kidIDs))]
				}
				mu.Unlock()
				switch role {
				case "cancel":
					if s.Cancel(id) {
						ops.add("cancelled "+id, id)
					}
				case "info":
					s.Info(id)
				case "subscribe":
					if !observe {
						s.Counts() // a query of every task: no subscriber in this mode
						break
					}
					unsub := s.Subscribe(func(coordinator.Event) {})
					runtime.Gosched()
					unsub()
				case "wait":
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(cr.IntN(200))*time.Microsecond)
					s.Wait(ctx)
					cancel()
				case "pause":
					pool := []string{"", "dev"}[cr.IntN(2)]
					if err := s.Pause(pool); err != nil && !errors.Is(err, coordinator.ErrClosed) {
						panic(fmt.Sprintf("Pause = %v", err))
					}
					time.Sleep(time.Duration(cr.IntN(300)) * time.Microsecond) // paused a while: the test's input
					if err := s.Resume(pool); err != nil && !errors.Is(err, coordinator.ErrClosed) {
						panic(fmt.Sprintf("Resume = %v", err))
					}
				case "rerun":
					if id == "" {
						break
					}
					res, err := s.Rerun(context.Background(), coordinator.RerunRequest{IDs: []string{id}, Downstream: cr.IntN(2) == 0, By: "stress"})
					switch {
					case err == nil:
						ops.add(fmt.Sprintf("Rerun(%s) re-opened %v", id, res.Reopened), append([]string{id}, res.Reopened...)...)
						mu.Lock()
						for _, x := range res.Reopened {
							reopened[x] = true
						}
						mu.Unlock()
					case errors.Is(err, coordinator.ErrNotRerunnable), errors.Is(err, coordinator.ErrUnknownTask), errors.Is(err, coordinator.ErrClosed):
					default:
						panic(fmt.Sprintf("Rerun(%s) = %v", id, err))
					}
					time.Sleep(time.Duration(cr.IntN(500)) * time.Microsecond) // an operator's pace: the test's input
				}
				runtime.Gosched()
			}
		})
	}
	// Shutdown at a random moment.
	time.Sleep(time.Duration(5+r.IntN(60)) * time.Millisecond) // how long before Shutdown: real time, the test's input
	stop.Store(true)
	if err := s.Shutdown(context.Background()); err != nil {
		return 0, 0, fmt.Errorf("Shutdown = %v", err)
	}
	wg.Wait()
	if err := s.Shutdown(context.Background()); err != nil {
		return 0, 0, fmt.Errorf("second Shutdown = %v", err)
	}
	violation.Lock()
	v := violation.first
	violation.Unlock()
	if v != "" {
		return 0, 0, fmt.Errorf("the ready queues: %s", v)
	}
	all := g.joined(s, accepted, rec.all(), log, observe) // with the children that joined the graph
	redone := g.redone(reopened)
	if err := checkCalls(s, all, rec.all(), retain, redone); err != nil {
		return 0, 0, err
	}
	if err := checkFlow(rec.all(), keyLimit, workers); err != nil {
		return 0, 0, err
	}
	if err := g.check(s, all, rec.all(), log, redone); err != nil {
		return 0, 0, err
	}
	if !observe {
		return len(all), 0, nil
	}
	return len(all), len(log), checkLog(s, all, log, rec.all(), retain, reopened, redone)
}

// recordedFlow wraps a task's function to record its calls and returns,
// with the task's key and slots in each record; a task with a Timeout
// records neither (an abandoned attempt's function
// may run on after its attempt ended, holding no worker and no key).
func recordedFlow(rec *calls, id string, tk coordinator.Task, run func(context.Context) error) func(context.Context) error {
	key, slots := tk.Key, max(tk.Slots, 1)
	if tk.Timeout > 0 {
		key, slots = "", 0
	}
	return func(ctx context.Context) (err error) {
		rec.add(call{id: id, pool: tk.Pool, key: key, slots: slots})
		returned := false
		defer func() {
			rec.add(call{id: id, pool: tk.Pool, key: key, slots: slots, ret: true, ok: returned && err == nil})
		}()
		err = run(ctx)
		returned = true
		return err
	}
}

// checkFlow checks flow control's caps from the functions' calls: the
// calls of a key out at once are at most its limit, and the slots of the
// default pool's calls out at once at most its workers.
func checkFlow(log []call, keyLimit, workers int) error {
	keys := map[string]int{}
	slots := 0
	for _, c := range log {
		d := 1
		if c.ret {
			d = -1
		}
		if c.key != "" {
			keys[c.key] += d
			if keyLimit > 0 && keys[c.key] > keyLimit {
				return fmt.Errorf("%s called with %d calls of key %q out; the limit is %d", c.id, keys[c.key], c.key, keyLimit)
			}
		}
		if c.pool == "" {
			slots += d * c.slots
			if slots > workers {
				return fmt.Errorf("%s called with %d slots of the default pool in use; it has %d workers", c.id, slots, workers)
			}
		}
	}
	return nil
}

// checkCalls checks, from the functions' own calls and from Info, what
// must hold without any subscriber: a function is called only when no
// call of each dependency is out and the last one returned nil (unless
// that dependency has a timeout: an abandoned attempt returns late), and,
// unless a Rerun ran either again (redone), once each dependency's
// function has returned for the last time and ended Succeeded; never twice
// at once; every accepted task is final; a Succeeded task ran and a
// Skipped one did not, unless it was redone.
func checkCalls(s *coordinator.Scheduler, accepted map[string]stressTask, log []call, retain bool, redone map[string]bool) error {
	lastRet := map[string]int{}
	for i, c := range log {
		if c.ret {
			lastRet[c.id] = i
		}
	}
	infos := map[string]coordinator.TaskInfo{}
	for id := range accepted {
		if ti, ok := s.Info(id); ok {
			infos[id] = ti
		} else if !retain && !redone[id] { // a re-run spawner's new attempt may not spawn what its old one did
			return fmt.Errorf("Info(%s): unknown, without retention", id)
		}
	}
	ran := map[string]bool{}
	out := map[string]bool{}
	lastOK := map[string]bool{} // each task's last return so far returned nil
	for i, c := range log {
		if c.ret {
			out[c.id], lastOK[c.id] = false, c.ok
			continue
		}
		if out[c.id] && !accepted[c.id].timed {
			return fmt.Errorf("%s was called while an earlier call of it was out", c.id)
		}
		for _, d := range accepted[c.id].deps {
			if accepted[d].timed {
				continue
			}
			switch {
			case out[d]:
				return fmt.Errorf("%s was called while its dependency %s was running:\n%s", c.id, d, about(s, log, c.id, d))
			case ran[d] && !lastOK[d]:
				return fmt.Errorf("%s was called after its dependency %s's last call failed:\n%s", c.id, d, about(s, log, c.id, d))
			}
			if redone[c.id] || redone[d] {
				continue
			}
			if at, ok := lastRet[d]; ok && at > i {
				return fmt.Errorf("%s was called before its dependency %s returned for the last time:\n%s", c.id, d, about(s, log, c.id, d))
			}
			if ti, ok := infos[d]; ok && ti.Status != coordinator.Succeeded {
				return fmt.Errorf("%s ran though its dependency %s ended %v:\n%s", c.id, d, ti.Status, about(s, log, c.id, d))
			}
		}
		out[c.id], ran[c.id] = true, true
	}
	for id, ti := range infos {
		switch {
		case !ti.Status.Final():
			return fmt.Errorf("Info(%s) = %v after Shutdown; want final", id, ti.Status)
		case ti.Status == coordinator.Succeeded && !ran[id]:
			return fmt.Errorf("%s succeeded without its function being called", id)
		case ti.Status == coordinator.Skipped && ran[id] && !redone[id]:
			return fmt.Errorf("%s was skipped after its function was called", id)
		}
	}
	return nil
}

// stressRun draws a task body: instant, slow, failing, panicking, honouring
// its context until cancelled (blocks), or ignoring it for a while.
func stressRun(r *rand.Rand) (run func(context.Context) error, blocks bool) {
	d := time.Duration(r.IntN(300)) * time.Microsecond
	switch r.IntN(8) {
	case 0:
		return func(context.Context) error { return errors.New("planned") }, false
	case 1:
		return func(context.Context) error { panic("planned") }, false
	case 2:
		var n atomic.Int32
		return func(context.Context) error {
			if n.Add(1) == 1 {
				return errors.New("once")
			}
			return nil
		}, false
	case 3:
		return func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, true
	case 4:
		return func(context.Context) error { time.Sleep(3 * d); return nil }, false // ignores its context for a while
	case 5:
		return func(ctx context.Context) error {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
			return nil
		}, false
	}
	return func(context.Context) error { return nil }, false
}

// checkLog checks the events: each task's are in order (started only
// once its dependencies succeeded, never twice at once, nothing started
// after Shutdown began cancelling), it ends once, and again after each
// EventReopened (a Rerun, which re-opens only final tasks that did not
// succeed, each named in reopened) or a new EventSpawned (a family a
// re-run spawner spawned again, redone), and its last end is what Info
// says.
func checkLog(s *coordinator.Scheduler, accepted map[string]stressTask, log []coordinator.Event, calls []call, retain bool, reopened, redone map[string]bool) error {
	finals := map[string]coordinator.EventKind{}
	count := map[string]int{}
	succeeded := map[string]bool{}
	endedBadly := map[string]bool{} // failed or cancelled once
	out := map[string]bool{}
	closedAt := -1
	for i, e := range log {
		id := e.TaskID
		if e.Kind == coordinator.EventPaused || e.Kind == coordinator.EventResumed {
			if id != "" {
				return fmt.Errorf("event %d: %v names task %q; want none", i, e.Kind, id)
			}
			continue // a pool's
		}
		if _, ok := accepted[id]; !ok {
			return fmt.Errorf("event %d for %s, which was never accepted", i, id)
		}
		switch e.Kind {
		case coordinator.EventStarted:
			if closedAt >= 0 {
				return fmt.Errorf("%s started (event %d) after Shutdown's first cancellation (event %d)", id, i, closedAt)
			}
			for _, d := range accepted[id].deps {
				if !succeeded[d] {
					return fmt.Errorf("%s started (event %d) before its dependency %s succeeded; their events:\n%s%s", id, i, d, eventsOf(log[:i+1], id, d), about(s, calls, id, d))
				}
			}
			if out[id] {
				return fmt.Errorf("%s started (event %d) while an attempt of it was out", id, i)
			}
			out[id] = true
		case coordinator.EventRetrying, coordinator.EventRecurred, coordinator.EventJoining:
			out[id] = false
		case coordinator.EventSpawned:
			if count[id] > 0 && redone[id] { // joined again, in a family that replaces one (Rerun)
				count[id], succeeded[id] = 0, false
			}
		case coordinator.EventReopened:
			switch {
			case count[id] != 1 || succeeded[id]:
				return fmt.Errorf("%s re-opened (event %d) after %d final events, the last %v: want one, not a success", id, i, count[id], finals[id])
			case !reopened[id] || e.Cause != "stress":
				return fmt.Errorf("%s re-opened (event %d) by %q; Rerun did not say it re-opened it (%v)", id, i, e.Cause, reopened[id])
			}
			count[id] = 0
		default:
			if count[id]++; count[id] > 1 {
				ids := append([]string{id, parentOf(id)}, accepted[id].deps...)
				for _, f := range log[:i] {
					if f.TaskID == id && f.Cause != "" && !slices.Contains(ids, f.Cause) {
						ids = append(ids, f.Cause) // whom it blamed
					}
				}
				return fmt.Errorf("%s: a second final event (%d: %v); its events:\n%s%s", id, i, e.Kind, eventsOf(log[:i+1], ids...), about(s, calls, ids...))
			}
			out[id] = false
			finals[id] = e.Kind
			succeeded[id] = e.Kind == coordinator.EventSucceeded
			if e.Kind == coordinator.EventFailed || e.Kind == coordinator.EventCancelled {
				endedBadly[id] = true
			}
			switch e.Kind {
			case coordinator.EventCancelled:
				if errors.Is(e.Err, coordinator.ErrClosed) && closedAt < 0 {
					closedAt = i
				}
			case coordinator.EventSkipped:
				// The cause failed or was cancelled, or is a branch not
				// taken; or it did once, and a Rerun re-opened it since:
				// a skip that blames it keeps its end (the cause named by
				// a later skip downstream of it too).
				k := finals[e.Cause]
				notChosen := k == coordinator.EventSucceeded && errors.Is(e.Err, coordinator.ErrNotChosen) // a branch not taken
				if k != coordinator.EventFailed && k != coordinator.EventCancelled && !notChosen && !(reopened[e.Cause] && endedBadly[e.Cause]) {
					return fmt.Errorf("%s skipped (event %d) because of %q, which had not failed or been cancelled, nor was a branch not taken (%v); their events:\n%s", id, i, e.Cause, k, eventsOf(log[:i+1], append([]string{id, e.Cause}, accepted[id].deps...)...))
				}
			}
		}
	}
	want := map[coordinator.EventKind]coordinator.Status{coordinator.EventSucceeded: coordinator.Succeeded,
		coordinator.EventFailed: coordinator.Failed, coordinator.EventCancelled: coordinator.Cancelled,
		coordinator.EventSkipped: coordinator.Skipped}
	for id := range accepted {
		if count[id] != 1 {
			return fmt.Errorf("%s: %d final events; want 1", id, count[id])
		}
		info, found := s.Info(id)
		if !found {
			if !retain && !redone[id] {
				return fmt.Errorf("Info(%s): unknown, without retention", id)
			}
			continue
		}
		if info.Status != want[finals[id]] {
			return fmt.Errorf("Info(%s) = %v; its final event says %v", id, info.Status, finals[id])
		}
	}
	return nil
}

// eventsOf lists the events of log about the tasks ids, one a line, for
// a failure's message.
func eventsOf(log []coordinator.Event, ids ...string) string {
	var b strings.Builder
	for i, e := range log {
		if slices.Contains(ids, e.TaskID) {
			fmt.Fprintf(&b, "  %d: %s %v cause=%q err=%v\n", i, e.TaskID, e.Kind, e.Cause, e.Err)
		}
	}
	return b.String()
}

// opLog is what a stress run's producers and operators did, each entry
// placed among the functions' calls (the length of the call log then),
// for a failure's message.
type opLog struct {
	rec    *calls
	mu     sync.Mutex
	ops    []opEntry
	events func() []coordinator.Event // the run's events, if observed (nil: not)
}

type opEntry struct {
	at   int // calls logged before it
	text string
	ids  []string
}

func (o *opLog) add(text string, ids ...string) {
	o.rec.mu.Lock()
	at := len(o.rec.log)
	o.rec.mu.Unlock()
	o.mu.Lock()
	o.ops = append(o.ops, opEntry{at, text, ids})
	o.mu.Unlock()
}

// stressOps is the running stress run's opLog (TestConcurrentStress runs
// one at a time).
var stressOps *opLog

// about tells what is known of the tasks ids after a run, for a failure's
// message: their calls and what was done to them, Info and History.
func about(s *coordinator.Scheduler, log []call, ids ...string) string {
	var b strings.Builder
	var ops []opEntry
	var events []coordinator.Event
	if stressOps != nil {
		stressOps.mu.Lock()
		ops = slices.Clone(stressOps.ops)
		stressOps.mu.Unlock()
		if stressOps.events != nil {
			events = stressOps.events()
		}
	}
	k := 0
	for i, c := range log {
		for ; k < len(ops) && ops[k].at <= i; k++ {
			if slices.ContainsFunc(ops[k].ids, func(id string) bool { return slices.Contains(ids, id) }) {
				fmt.Fprintf(&b, "  op: %s\n", ops[k].text)
			}
		}
		if slices.Contains(ids, c.id) {
			fmt.Fprintf(&b, "  call %d: %s ret=%v ok=%v\n", i, c.id, c.ret, c.ok)
		}
	}
	for ; k < len(ops); k++ {
		if slices.ContainsFunc(ops[k].ids, func(id string) bool { return slices.Contains(ids, id) }) {
			fmt.Fprintf(&b, "  op: %s\n", ops[k].text)
		}
	}
	for i, e := range events {
		if slices.Contains(ids, e.TaskID) {
			fmt.Fprintf(&b, "  event %d: %s %v attempt %d run %d err=%v cause=%q\n", i, e.TaskID, e.Kind, e.Attempt, e.Run, e.Err, e.Cause)
		}
	}
	for _, id := range ids {
		if id == "" {
			continue
		}
		info, found := s.Info(id)
		if !found {
			fmt.Fprintf(&b, "  %s: unknown (forgotten)\n", id)
			continue
		}
		fmt.Fprintf(&b, "  %s: %v cause=%q err=%v reruns=%d parent=%q\n", id, info.Status, info.Cause, info.Err, info.Reruns, info.Parent)
		h, _ := s.History(id)
		for _, a := range h.Attempts {
			fmt.Fprintf(&b, "    rerun %d run %d attempt %d: %v %v\n", a.Rerun, a.Run, a.Attempt, a.Outcome, a.Err)
		}
	}
	return b.String()
}
