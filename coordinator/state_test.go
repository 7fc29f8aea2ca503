package coordinator

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/lane"
)

// The pure state, driven by hand: the test is the coordinator's loop
// (ready) and every worker (Step runs one item, Drain runs a lane dry), so
// the interleavings are chosen, not raced.

func (r *rig) submit(t *testing.T, tasks ...Task) {
	t.Helper()
	if err := r.s.submit(&submission{tasks: tasks}, r.now); err != nil {
		t.Fatalf("submit = %v", err)
	}
}

// cheap makes pool p believe its attempts cost nothing: large lanes.
func (r *rig) cheap(p int) { r.s.pools[p].measured, r.s.pools[p].cost = true, time.Nanosecond }

// items lists lane li's items not yet applied, as "id" or "id:state" for
// items that are not free.
func (r *rig) items(li int) []string {
	ls := &r.s.lanes[li]
	var out []string
	for seq := ls.applied; seq != ls.n; seq++ {
		id := r.s.key(ls.l.Task(seq))
		switch ls.l.State(seq) {
		case lane.Free:
		case lane.Revoked:
			id += ":revoked"
		case lane.Passed:
			id += ":passed"
		default:
			id += ":ran"
		}
		out = append(out, id)
	}
	return out
}

// stepLane runs one item of lane li and applies what was reported.
func (r *rig) stepLane(t *testing.T, li int) {
	t.Helper()
	if !r.s.lanes[li].l.Step(r.env) {
		t.Fatalf("lane %d has nothing to run", li)
	}
	r.flush()
}

func (r *rig) status(t *testing.T, id string) Status {
	t.Helper()
	info, ok := r.s.info(id)
	if !ok {
		t.Fatalf("info(%s): unknown", id)
	}
	return info.Status
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

func fail(context.Context) error { return errors.New("planned") }

// A fill of a pool of several workers takes one priority level: better
// work released by the items ahead of a worse one must not find the worse
// one claimed first, and the next level goes to the next worker. A pool of
// one worker takes the levels in order: nobody could start them sooner.
func TestStateFillTakesOneLevel(t *testing.T) {
	r := newRig(2)
	r.cheap(0)
	r.submit(t, Task{ID: "busy", Run: noop, Priority: -1})
	r.step()
	r.submit(t, Task{ID: "p1a", Run: noop, Priority: 1}, Task{ID: "p0a", Run: noop},
		Task{ID: "p1b", Run: noop, Priority: 1}, Task{ID: "p0b", Run: noop})
	r.step()
	li := 1
	if slices.Contains(r.items(1), "busy") {
		li = 0
	}
	if got := r.items(li); !slices.Equal(got, []string{"p0a", "p0b"}) {
		t.Fatalf("lane = %v; want [p0a p0b]", got)
	}
	r.drain(li)
	r.step()
	if got := r.items(li); !slices.Equal(got, []string{"p1a", "p1b"}) {
		t.Fatalf("lane = %v; want [p1a p1b]", got)
	}

	one := newRig(1)
	one.cheap(0)
	one.submit(t, Task{ID: "p1a", Run: noop, Priority: 1}, Task{ID: "p0a", Run: noop},
		Task{ID: "p1b", Run: noop, Priority: 1}, Task{ID: "p0b", Run: noop})
	one.step()
	if got := one.items(0); !slices.Equal(got, []string{"p0a", "p0b", "p1a", "p1b"}) {
		t.Fatalf("lane of a pool of one worker = %v; want [p0a p0b p1a p1b]", got)
	}
}

// A slow pool keeps two attempts out per worker: the one running and the
// next, so the worker never waits for the coordinator between them.
func TestStateSlowPoolKeepsOneWaiting(t *testing.T) {
	r := newRig(1)
	r.s.pools[0].measured, r.s.pools[0].cost = true, time.Millisecond
	r.submit(t, Task{ID: "a", Run: noop}, Task{ID: "b", Run: noop}, Task{ID: "c", Run: noop}, Task{ID: "d", Run: noop})
	r.step()
	if got := r.items(0); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("lane = %v; want [a b]", got)
	}
	r.stepLane(t, 0) // a runs
	r.s.harvestAll(r.now)
	r.step()
	if got := r.items(0); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("lane once a ran = %v; want [b c]: b next, c waiting behind it", got)
	}
}

// A chain is fused into the lane, each link behind the one it waits for,
// and runs without a round trip per link.
func TestStateFusesChain(t *testing.T) {
	r := newRig(1)
	r.cheap(0)
	r.submit(t, Task{ID: "c1", Run: noop}, Task{ID: "c2", Run: noop, Deps: []string{"c1"}},
		Task{ID: "c3", Run: noop, Deps: []string{"c2"}})
	r.step()
	if got := r.items(0); !slices.Equal(got, []string{"c1", "c2", "c3"}) {
		t.Fatalf("lane = %v; want the whole chain [c1 c2 c3]", got)
	}
	for _, id := range []string{"c2", "c3"} {
		if st := r.status(t, id); st != Pending {
			t.Fatalf("status(%s) = %v; want pending: fused behind a link not yet done", id, st)
		}
	}
	r.drain(0)
	for _, id := range []string{"c1", "c2", "c3"} {
		if st := r.status(t, id); st != Succeeded {
			t.Fatalf("status(%s) = %v; want succeeded", id, st)
		}
	}
}

// A failure in a fused chain: the links behind it are passed over and
// skipped, blaming it, with no attempt counted.
func TestStateFusedChainFailure(t *testing.T) {
	r := newRig(1)
	r.cheap(0)
	r.submit(t, Task{ID: "c1", Run: noop}, Task{ID: "c2", Run: fail, Deps: []string{"c1"}},
		Task{ID: "c3", Run: noop, Deps: []string{"c2"}}, Task{ID: "c4", Run: noop, Deps: []string{"c3"}})
	r.runAll(t, 10)
	for _, id := range []string{"c3", "c4"} {
		info, _ := r.s.info(id)
		if info.Status != Skipped || info.Cause != "c2" || info.Attempts != 0 {
			t.Fatalf("info(%s) = %+v; want skipped, cause c2, no attempt", id, info)
		}
	}
}

// A retryable failure in a fused chain: the links behind it wait again and
// run once the retry succeeds.
func TestStateFusedChainRetry(t *testing.T) {
	r := newRig(1)
	r.cheap(0)
	tries := 0
	flaky := func(context.Context) error {
		if tries++; tries == 1 {
			return errors.New("once")
		}
		return nil
	}
	r.submit(t, Task{ID: "c1", Run: noop}, Task{ID: "c2", Run: flaky, Deps: []string{"c1"}, Retry: RetryPolicy{MaxAttempts: 2}},
		Task{ID: "c3", Run: noop, Deps: []string{"c2"}})
	r.runAll(t, 10)
	if info, _ := r.s.info("c3"); info.Status != Succeeded || info.Attempts != 1 {
		t.Fatalf("info(c3) = %+v; want succeeded after one attempt", info)
	}
	if info, _ := r.s.info("c2"); info.Status != Succeeded || info.Attempts != 2 {
		t.Fatalf("info(c2) = %+v; want succeeded on attempt 2", info)
	}
}

// Fusion never jumps the ready queue: a successor is not fused while a
// ready task of the same or a better priority waits.
func TestStateFusionRespectsReadyQueue(t *testing.T) {
	r := newRig(1)
	r.cheap(0)
	r.s.pools[0].maxTarget = 2 // room for two: the parent and one more
	r.submit(t, Task{ID: "parent", Run: noop}, Task{ID: "waiting", Run: noop}, Task{ID: "child", Run: noop, Deps: []string{"parent"}})
	r.step()
	if got := r.items(0); !slices.Equal(got, []string{"parent", "waiting"}) {
		t.Fatalf("lane = %v; want [parent waiting]: child must not be fused ahead of a ready task", got)
	}
}

// Cancel of an item handed out but not claimed is final at once: the item
// is revoked and the worker skips it.
func TestStateCancelUnclaimedIsFinalAtOnce(t *testing.T) {
	r := newRig(1)
	r.cheap(0)
	ran := false
	r.submit(t, Task{ID: "a", Run: noop}, Task{ID: "b", Run: func(context.Context) error { ran = true; return nil }},
		Task{ID: "after-b", Run: noop, Deps: []string{"b"}})
	r.step()
	if !r.s.cancel("b", r.now) {
		t.Fatalf("cancel(b) = false; want true")
	}
	if st := r.status(t, "b"); st != Cancelled {
		t.Fatalf("status(b) = %v right after cancel; want cancelled", st)
	}
	if info, _ := r.s.info("after-b"); info.Status != Skipped || info.Cause != "b" {
		t.Fatalf("info(after-b) = %+v; want skipped, cause b", info)
	}
	r.runAll(t, 10)
	if ran {
		t.Fatalf("b ran after it was cancelled")
	}
}

// A Cancel that lands after the attempt returned nil, but before it is
// applied, loses: the task succeeded.
func TestStateCancelAfterAttemptSucceeded(t *testing.T) {
	r := newRig(1)
	r.cheap(0)
	r.submit(t, Task{ID: "a", Run: noop}, Task{ID: "b", Run: noop})
	r.step()
	r.s.lanes[0].l.Step(r.env) // a returns nil; nothing applied yet
	if r.s.cancel("a", r.now) {
		t.Fatalf("cancel(a) = true after its attempt returned nil; want false")
	}
	r.runAll(t, 10)
	if st := r.status(t, "a"); st != Succeeded {
		t.Fatalf("status(a) = %v; want succeeded", st)
	}
}

// An idle worker takes about half of the work handed to another and not
// started, and every task still runs exactly once.
func TestStateStealHalf(t *testing.T) {
	r := newRig(2)
	r.cheap(0)
	runs := map[string]int{}
	count := func(id string) func(context.Context) error {
		return func(context.Context) error { runs[id]++; return nil }
	}
	r.submit(t, Task{ID: "blocker", Run: noop})
	r.step() // lane 0: blocker
	var tasks []Task
	for _, id := range ids("x", 100) {
		tasks = append(tasks, Task{ID: id, Run: count(id)})
	}
	r.submit(t, tasks...)
	r.step() // lane 1 (idle): all 100
	if n := len(r.items(1)); n != 100 {
		t.Fatalf("lane 1 holds %d; want 100", n)
	}
	r.drain(0) // lane 0 runs dry: idle
	r.step()   // steals for it
	if got := len(r.items(0)); got < 40 || got > 60 {
		t.Fatalf("lane 0 took %d items; want about half of 100", got)
	}
	r.runAll(t, 20)
	for _, id := range ids("x", 100) {
		if runs[id] != 1 {
			t.Fatalf("%s ran %d times; want 1", id, runs[id])
		}
	}
}

// A thief never takes the next item of a worker that runs nothing: that
// worker is about to claim it, and would only steal it back (a hub and its
// fused successors once went back and forth between two idle workers,
// rewalking the hub's successors at every move).
func TestStateStealLeavesAnIdleWorkersNextItem(t *testing.T) {
	for _, followers := range []int{0, 1, 6, 100} {
		r := newRig(2)
		r.cheap(0)
		tasks := []Task{{ID: "hub", Run: noop}}
		for _, id := range ids("s", followers) {
			tasks = append(tasks, Task{ID: id, Run: noop, Deps: []string{"hub"}})
		}
		r.submit(t, tasks...)
		r.step()
		holder := -1
		for li := range r.s.lanes {
			if got := r.items(li); len(got) > 0 && got[0] == "hub" {
				holder = li
			}
		}
		if holder < 0 {
			t.Fatalf("%d followers: no lane holds the hub first: %v, %v", followers, r.items(0), r.items(1))
		}
		other := 1 - holder
		for round := range 3 {
			r.drain(other) // whatever it holds, then idle
			r.step()       // steals for it, if anything may be stolen
			if got := r.items(holder); len(got) == 0 || got[0] != "hub" {
				t.Fatalf("%d followers, round %d: the idle holder's lane is %v; want it to keep the hub, its next item", followers, round, got)
			}
		}
		r.runAll(t, 50)
		for _, id := range append([]string{"hub"}, ids("s", followers)...) {
			if st := r.status(t, id); st != Succeeded {
				t.Fatalf("%d followers: %s is %v; want succeeded", followers, id, st)
			}
		}
	}
}

// Stealing never separates a fused item from the item it follows.
func TestStateStealKeepsFollowersWithParents(t *testing.T) {
	r := newRig(2)
	r.cheap(0)
	var order []string
	rec := func(id string) func(context.Context) error {
		return func(context.Context) error { order = append(order, id); return nil }
	}
	r.submit(t, Task{ID: "blocker", Run: noop})
	r.step()
	var tasks []Task
	for _, id := range ids("x", 10) {
		tasks = append(tasks, Task{ID: id, Run: rec(id)})
	}
	tasks = append(tasks, Task{ID: "p", Run: rec("p")}, Task{ID: "f1", Run: rec("f1"), Deps: []string{"p"}},
		Task{ID: "f2", Run: rec("f2"), Deps: []string{"f1"}})
	r.submit(t, tasks...)
	r.step()
	if got := r.items(1); !slices.Equal(got[len(got)-3:], []string{"p", "f1", "f2"}) {
		t.Fatalf("lane 1 = %v; want the chain fused at its end", got)
	}
	r.drain(0)
	r.step()
	stolen := r.items(0)
	for _, f := range []string{"f1", "f2"} {
		if slices.Contains(stolen, f) && !slices.Contains(stolen, "p") {
			t.Fatalf("stolen %v: %s without p, the item it follows", stolen, f)
		}
	}
	r.runAll(t, 20)
	if i, j, k := slices.Index(order, "p"), slices.Index(order, "f1"), slices.Index(order, "f2"); !(i < j && j < k) {
		t.Fatalf("run order %v; want p, f1, f2 in that order", order)
	}
}

// A better task that becomes ready while worse work is handed out waits
// revokeDelay, then the worse work not started is taken back and the
// better task goes first.
func TestStatePriorityRevokesAfterDelay(t *testing.T) {
	r := newRig(1)
	r.cheap(0)
	var order []string
	rec := func(id string) func(context.Context) error {
		return func(context.Context) error { order = append(order, id); return nil }
	}
	var tasks []Task
	for _, id := range ids("w", 20) {
		tasks = append(tasks, Task{ID: id, Run: rec(id), Priority: 5})
	}
	r.submit(t, tasks...)
	r.step()
	r.stepLane(t, 0) // w0 runs
	r.submit(t, Task{ID: "urgent", Run: rec("urgent")})
	r.step()
	if got := r.items(0); slices.Contains(got, "w19:revoked") {
		t.Fatalf("lane = %v; revoked at once, want after revokeDelay", got)
	}
	if due, ok := r.s.nextDue(); !ok || !due.Equal(r.now.Add(revokeDelay)) {
		t.Fatalf("nextDue = %v, %v; want the revocation at now+%v", due, ok, revokeDelay)
	}
	r.now = r.now.Add(revokeDelay - time.Nanosecond)
	r.step()
	if got := r.items(0); slices.Contains(got, "w19:revoked") {
		t.Fatalf("revoked before revokeDelay passed")
	}
	r.now = r.now.Add(time.Nanosecond)
	r.step()
	r.runAll(t, 20)
	if len(order) < 2 || order[1] != "urgent" {
		t.Fatalf("run order %v; want urgent right after w0, the one running when it came", order)
	}
	if len(order) != 21 {
		t.Fatalf("%d ran; want 21, each once", len(order))
	}
}

// The coordinator applies finished items without waiting for a report:
// the claim word alone says an item's outcome may be read.
func TestStateHarvestWithoutReport(t *testing.T) {
	r := newRig(1)
	r.cheap(0)
	r.submit(t, Task{ID: "a", Run: noop}, Task{ID: "b", Run: fail}, Task{ID: "c", Run: noop})
	r.step()
	l := r.s.lanes[0].l
	l.Step(r.env)
	l.Step(r.env)
	for { // drop whatever the worker reported
		select {
		case <-r.reports:
			continue
		default:
		}
		break
	}
	r.s.harvestAll(r.now)
	if st := r.status(t, "a"); st != Succeeded {
		t.Fatalf("status(a) = %v; want succeeded, harvested", st)
	}
	if info, _ := r.s.info("b"); info.Status != Failed || info.Err == nil || !strings.Contains(info.Err.Error(), "planned") {
		t.Fatalf("info(b) = %+v; want failed with its error, harvested", info)
	}
	if st := r.status(t, "c"); st != Ready {
		t.Fatalf("status(c) = %v; want ready: handed out, not claimed", st)
	}
}

// A million delayed tasks cancelled before they fire leave nothing behind
// in the delayed set.
func TestStateMillionDelayedCancelled(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000,000 tasks")
	}
	r := newRig(1)
	const n = 1_000_000
	tasks := make([]Task, n)
	for i := range tasks {
		tasks[i] = Task{ID: "d" + strconv.Itoa(i), Run: noop, Delay: time.Hour + time.Duration(i)*time.Millisecond}
	}
	r.submit(t, tasks...)
	if got := r.s.wheel.Len(); got != n {
		t.Fatalf("wheel holds %d; want %d", got, n)
	}
	for i := range tasks {
		if !r.s.cancel(tasks[i].ID, r.now) {
			t.Fatalf("cancel(%s) = false", tasks[i].ID)
		}
	}
	if got := r.s.wheel.Len(); got != 0 {
		t.Fatalf("wheel holds %d after cancelling all; want 0", got)
	}
	if _, ok := r.s.wheel.NextDue(); ok {
		t.Fatalf("NextDue reports an entry after cancelling all")
	}
	if r.s.open != 0 {
		t.Fatalf("open = %d; want 0", r.s.open)
	}
}

// A Cancel that lands on a recurring task whose run has returned nil but
// is not applied yet stops the series after that run: the run counts, and
// no other starts.
func TestStateCancelAfterSealedRunStopsSeries(t *testing.T) {
	r := newRig(1)
	r.cheap(0)
	r.submit(t, Task{ID: "tick", Run: noop, Every: time.Second, Times: 5}, Task{ID: "other", Run: noop})
	r.step()
	r.s.lanes[0].l.Step(r.env) // tick's run 1 returns nil; nothing applied yet
	if !r.s.cancel("tick", r.now) {
		t.Fatalf("cancel(tick) = false; want true: runs were still to come")
	}
	r.runAll(t, 10)
	info, _ := r.s.info("tick")
	if info.Status != Cancelled || info.Runs != 1 {
		t.Fatalf("info(tick) = %+v; want cancelled after 1 run", info)
	}
	if _, ok := r.s.nextDue(); ok {
		t.Fatalf("a next run is still planned")
	}
}

// Shutdown tells every start before its first cancellation (shutdown's
// doc: what finished is applied and what was claimed is reported started;
// only then come the cancellations), also when what finished is a
// spawner's success: its children join the graph as Shutdown comes and are
// cancelled with every other task, after the starts. They were once
// cancelled as they joined, before the start of an attempt claimed on
// another lane (found by TestConcurrentStress).
func TestStateShutdownTellsStartsBeforeCancellingChildren(t *testing.T) {
	r := newRig(2)
	r.s.setObserved(allKinds, 0)
	var events []Event
	spawn := func(ctx context.Context) error { // Spawn, without a Scheduler: the rig is the coordinator
		c, _ := lane.Of(ctx)
		laneID, slot, _ := c.Item()
		p, _ := r.s.find("p")
		return r.s.spawn(p, c, laneID, slot, &submission{tasks: []Task{{ID: "p/c", Run: noop}}}, noTask, r.now)
	}
	r.submit(t, Task{ID: "p", Run: spawn}, Task{ID: "q", Run: func(context.Context) error {
		r.s.shutdown(r.now) // while q is claimed and not yet told started, and p's success is not applied
		events = append(events, r.s.events...)
		return nil
	}})
	r.step()
	if got := [][]string{r.items(0), r.items(1)}; !slices.Equal(got[0], []string{"p"}) || !slices.Equal(got[1], []string{"q"}) {
		t.Fatalf("lanes hold %v; want p, then q", got)
	}
	if !r.s.lanes[0].l.Step(r.env) || !r.s.lanes[1].l.Step(r.env) {
		t.Fatal("a lane had nothing to run")
	}
	var got []string
	for _, e := range events {
		got = append(got, e.TaskID+" "+e.Kind.String())
	}
	want := []string{"p started", "p joining", "p/c spawned", "q started", "p/c cancelled", "p cancelled"}
	if !slices.Equal(got, want) {
		t.Fatalf("events %v; want %v", got, want)
	}
}

// Shutdown meets every kind of task: delayed, waiting for a retry, between
// runs, handed out and not claimed, running, and a run just returned. All
// end final, and nothing more is handed out.
func TestStateShutdownMeetsEveryKind(t *testing.T) {
	r := newRig(1)
	r.cheap(0)
	r.submit(t,
		Task{ID: "run1", Run: noop},
		Task{ID: "sealed-series", Run: noop, Every: time.Second, Times: 5},
		Task{ID: "running", Run: noop},
		Task{ID: "handed", Run: noop},
		Task{ID: "delayed", Run: noop, Delay: time.Hour},
		Task{ID: "retrying", Run: fail, Retry: RetryPolicy{MaxAttempts: 3, BaseDelay: time.Hour}},
		Task{ID: "between", Run: noop, Every: time.Hour, Times: 3},
	)
	r.runAll(t, 3)
	r.submit(t, Task{ID: "late", Run: noop})
	r.step()
	r.s.shutdown(r.now)
	r.runAll(t, 10)
	for _, tk := range []string{"run1", "sealed-series", "running", "handed", "delayed", "retrying", "between", "late"} {
		if st := r.status(t, tk); !st.Final() {
			t.Fatalf("status(%s) = %v after shutdown; want final", tk, st)
		}
	}
	if r.s.open != 0 || !r.s.settled() {
		t.Fatalf("open = %d, settled = %v; want 0, true", r.s.open, r.s.settled())
	}
	if err := r.s.submit(&submission{tasks: []Task{{ID: "after", Run: noop}}}, r.now); !errors.Is(err, ErrClosed) {
		t.Fatalf("submit after shutdown = %v; want ErrClosed", err)
	}
}

// A task whose delay has passed is ready before anything is handed out,
// whatever message woke the coordinator: a rate limit's token due at the
// same instant as a better task's delay goes to that task, not to worse
// work that waited for the token (the coordinator woken at that instant
// by a request, before the timer's wake, gave it to the worse task; the
// model test found it).
func TestStateTokenGoesToTheBestTaskDueByThen(t *testing.T) {
	r := newRig(1)
	r.s.pools[0].rate = newRateLimit(1, 1, r.now)
	var order []string
	rec := func(id string) func(context.Context) error {
		return func(context.Context) error { order = append(order, id); return nil }
	}
	r.submit(t, Task{ID: "first", Run: rec("first")})
	r.runAll(t, 3) // first takes the token: the next one comes at t0+1s
	r.submit(t, Task{ID: "worse", Priority: 1, Run: rec("worse")}, Task{ID: "better", Delay: time.Second, Run: rec("better")})
	r.step()
	if got := r.items(0); len(got) != 0 {
		t.Fatalf("lane = %v before the token; want nothing", got)
	}
	r.now = r.now.Add(time.Second) // the token and better's delay are due; a request, not the timer, wakes the loop
	r.step()
	if got := r.items(0); !slices.Equal(got, []string{"better"}) {
		t.Fatalf("lane = %v at the token's instant; want [better], due by then and better than worse", got)
	}
}

// Tasks taken back from several lanes come out again in the order they
// became ready, whichever lane gave them back first: a steal takes an
// older lane's tail, a pull for another worker then takes a newer lane's
// items, and the newer ones must not jump ahead of the older (README rule
// 2: ties start in the order they became ready, per hand-out). Put back
// at the front of their level, the later ones went ahead. With keys, the
// same within a key's queue.
func TestStateTakenBackTasksKeepTheirReadyOrder(t *testing.T) {
	for _, keyed := range []bool{false, true} {
		r := newRig(3)
		r.cheap(0)
		tasks := make([]Task, 0, 60)
		for i, id := range ids("x", 60) {
			tasks = append(tasks, Task{ID: id, Run: noop})
			if keyed {
				tasks[i].Key = "k"
			}
		}
		r.submit(t, tasks...)
		r.step()
		// The lanes holding work, oldest work first, and their free items.
		type held struct {
			li    int
			first int
			seqs  []uint32
		}
		var lanes []held
		for li := range r.s.lanes {
			ls := &r.s.lanes[li]
			h := held{li: li, first: -1}
			for seq := ls.applied; seq != ls.n; seq++ {
				if ls.l.State(seq) == lane.Free {
					if h.first < 0 {
						h.first, _ = strconv.Atoi(r.s.key(ls.l.Task(seq))[1:])
					}
					h.seqs = append(h.seqs, seq)
				}
			}
			if len(h.seqs) > 0 {
				lanes = append(lanes, h)
			}
		}
		slices.SortFunc(lanes, func(a, b held) int { return a.first - b.first })
		if len(lanes) < 2 {
			t.Fatalf("keyed %v: %d lanes hold work; want at least 2", keyed, len(lanes))
		}
		// The oldest lane's items first, each lane's from its last (as
		// steal and pull take them), then the next lane's.
		for _, h := range lanes {
			for i := len(h.seqs) - 1; i >= 0; i-- {
				if !r.s.revokeItem(&r.s.lanes[h.li], h.seqs[i]) {
					t.Fatalf("keyed %v: item %d of lane %d not taken back", keyed, h.seqs[i], h.li)
				}
			}
		}
		if got := r.popAll(); !slices.Equal(got, ids("x", 60)) {
			t.Errorf("keyed %v: taken back from lanes oldest first, they come out as %v; want each once, in the order they became ready", keyed, got)
		}
	}
}

// popAll pops every live ready task of pool 0, by ID.
func (r *rig) popAll() []string {
	var got []string
	p := &r.s.pools[0]
	for {
		tk, ok := r.s.popReady(p, r.now)
		if !ok {
			return got
		}
		got = append(got, r.s.key(tk))
	}
}

// laneOf returns the lane holding id's attempt, and its item's sequence.
func (r *rig) laneOf(t *testing.T, id string) (*laneState, uint32) {
	t.Helper()
	tk, ok := r.s.findLive(id)
	if !ok || r.s.hot[tk].status != dispatched {
		t.Fatalf("%s is not handed out", id)
	}
	return r.s.locate(r.s.tasks[tk].link)
}

// A task a trigger rule started on one dependency's end, handed out and
// not yet claimed when another dependency succeeds, keeps the place it
// became ready at: taken back, it comes out before the tasks that became
// ready after it (the success does not make it ready again, as it does a
// follower fused behind that dependency).
func TestStateTakenBackRuleStartedTaskKeepsItsPlace(t *testing.T) {
	r := newRig(3)
	r.cheap(0)
	r.submit(t, Task{ID: "a", Run: fail}, Task{ID: "b", Run: noop})
	r.step()
	la, _ := r.laneOf(t, "a")
	lb, _ := r.laneOf(t, "b")
	if la == lb {
		t.Fatalf("a and b in one lane: %v", r.items(0))
	}
	r.submit(t, Task{ID: "c", Run: noop, When: AnyFailed, Deps: []string{"a", "b"}})
	if !la.l.Step(r.env) { // a fails: c is ready
		t.Fatal("a did not run")
	}
	r.flush()
	r.step()
	r.laneOf(t, "c")
	r.submit(t, Task{ID: "x0", Run: noop}, Task{ID: "x1", Run: noop}, Task{ID: "x2", Run: noop})
	r.step()
	if lc, sc := r.laneOf(t, "c"); lc.l.State(sc) != lane.Free {
		t.Fatalf("c was claimed")
	}
	if !lb.l.Step(r.env) { // b succeeds while c waits in its lane
		t.Fatal("b did not run")
	}
	r.flush()
	r.s.harvest(lb, r.now)
	if st := r.status(t, "b"); st != Succeeded {
		t.Fatalf("b is %v; want succeeded", st)
	}
	for li := range r.s.lanes {
		ls := &r.s.lanes[li]
		for seq := ls.n; seq != ls.applied; {
			seq--
			if ls.l.State(seq) == lane.Free {
				r.s.revokeItem(ls, seq)
			}
		}
	}
	if got, want := r.popAll(), []string{"c", "x0", "x1", "x2"}; !slices.Equal(got, want) {
		t.Errorf("taken back, they come out as %v; want %v (the order they became ready)", got, want)
	}
}
