package coordinator

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/batonhq/baton/worker"
)

// The pure state, driven without goroutines or clocks: each step is a method
// call with an explicit now, and the dispatch log is what the loop would
// send to the workers.

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newTestState(workers int) *state {
	return newState(t0, []poolState{{name: "", size: workers}}, rand.New(rand.NewPCG(1, 1)))
}

func noop(context.Context) error { return nil }

// take returns the batches dispatch produced, as lists of task IDs.
func take(s *state, now time.Time) ([]*worker.Batch, [][]string) {
	s.dispatch(now)
	batches := slices.Clone(s.out)
	s.out = s.out[:0]
	var ids [][]string
	for _, b := range batches {
		var l []string
		for _, it := range b.Items {
			l = append(l, it.Job.ID)
		}
		ids = append(ids, l)
	}
	return batches, ids
}

// finishAll reports every item of b as ran with err.
func finishAll(s *state, b *worker.Batch, err error, now time.Time) {
	for i := range b.Items {
		b.Items[i].Outcome, b.Items[i].Err, b.Items[i].Retry = worker.Ran, err, err != nil
	}
	s.complete(b, now)
}

func TestStateDiamondDispatchLog(t *testing.T) {
	s := newTestState(1)
	err := s.submit([]Task{
		{ID: "A", Run: noop},
		{ID: "B", Run: noop, Deps: []string{"A"}},
		{ID: "C", Run: noop, Deps: []string{"A"}},
		{ID: "D", Run: noop, Deps: []string{"B", "C"}},
	}, t0)
	if err != nil {
		t.Fatalf("submit = %v", err)
	}
	var log [][]string
	for s.open > 0 {
		batches, ids := take(s, t0)
		if len(batches) != 1 {
			t.Fatalf("dispatch made %d batches with one idle worker; want 1", len(batches))
		}
		log = append(log, ids...)
		finishAll(s, batches[0], nil, t0)
	}
	// The first batch is unmeasured, so it holds one task; then B and C,
	// ready together, share one batch; D waits for both.
	want := [][]string{{"A"}, {"B", "C"}, {"D"}}
	if !slices.EqualFunc(log, want, slices.Equal) {
		t.Fatalf("dispatch log %v; want %v", log, want)
	}
}

func TestStateBatchCutAtPriorityLevel(t *testing.T) {
	s := newTestState(1)
	s.pools[0].measured = true // cheap tasks: batches as large as the backlog allows
	err := s.submit([]Task{
		{ID: "p1a", Run: noop, Priority: 1}, {ID: "p0a", Run: noop}, {ID: "p1b", Run: noop, Priority: 1}, {ID: "p0b", Run: noop},
	}, t0)
	if err != nil {
		t.Fatalf("submit = %v", err)
	}
	b, ids := take(s, t0)
	if want := [][]string{{"p0a", "p0b"}}; !slices.EqualFunc(ids, want, slices.Equal) {
		t.Fatalf("first dispatch %v; want %v", ids, want)
	}
	finishAll(s, b[0], nil, t0)
	if _, ids = take(s, t0); !slices.EqualFunc(ids, [][]string{{"p1a", "p1b"}}, slices.Equal) {
		t.Fatalf("second dispatch %v; want [[p1a p1b]]", ids)
	}
}

func TestStateSlowPoolDispatchesOneAtATime(t *testing.T) {
	s := newTestState(1)
	s.pools[0].measured, s.pools[0].cost = true, time.Millisecond // far above the budget
	err := s.submit([]Task{{ID: "a", Run: noop}, {ID: "b", Run: noop}, {ID: "c", Run: noop}}, t0)
	if err != nil {
		t.Fatalf("submit = %v", err)
	}
	if _, ids := take(s, t0); !slices.EqualFunc(ids, [][]string{{"a"}}, slices.Equal) {
		t.Fatalf("dispatch %v; want [[a]]: slow tasks go one per batch", ids)
	}
}

func TestStateRetryThroughWheel(t *testing.T) {
	s := newTestState(1)
	err := s.submit([]Task{{ID: "r", Run: noop, Retry: RetryPolicy{MaxAttempts: 2, BaseDelay: time.Second}}}, t0)
	if err != nil {
		t.Fatalf("submit = %v", err)
	}
	b, _ := take(s, t0)
	finishAll(s, b[0], errors.New("no"), t0)
	if st := s.hot[0].status; st != Pending {
		t.Fatalf("status after a retryable failure = %v; want pending", st)
	}
	if due, ok := s.wheel.NextDue(); !ok || !due.Equal(t0.Add(time.Second)) {
		t.Fatalf("NextDue = %v, %v; want t0+1s", due, ok)
	}
	s.advance(t0.Add(time.Second - 1))
	if _, ids := take(s, t0.Add(time.Second-1)); len(ids) != 0 {
		t.Fatalf("dispatch before the backoff passed: %v", ids)
	}
	s.advance(t0.Add(time.Second))
	b, ids := take(s, t0.Add(time.Second))
	if !slices.EqualFunc(ids, [][]string{{"r"}}, slices.Equal) || b[0].Items[0].Job.Attempt != 2 {
		t.Fatalf("dispatch at t0+1s = %v; want attempt 2 of r", ids)
	}
	finishAll(s, b[0], errors.New("still no"), t0.Add(time.Second))
	if st := s.hot[0].status; st != Failed || s.open != 0 {
		t.Fatalf("status = %v, open = %d; want failed, 0", st, s.open)
	}
}

// A Cancel that lands after the attempt returned nil, but before its batch
// came back, loses: the task succeeded.
func TestStateCancelAfterAttemptSucceeded(t *testing.T) {
	s := newTestState(1)
	if err := s.submit([]Task{{ID: "a", Run: noop}, {ID: "b", Run: noop, Deps: []string{"a"}}}, t0); err != nil {
		t.Fatalf("submit = %v", err)
	}
	b, _ := take(s, t0)
	b[0].Items[0].Ctx.Seal() // what the worker does when Run returns nil
	if s.cancel("a", t0) {
		t.Fatalf("cancel(sealed attempt) = true; want false")
	}
	finishAll(s, b[0], nil, t0)
	if st := s.hot[0].status; st != Succeeded {
		t.Fatalf("status(a) = %v; want succeeded", st)
	}
	if st := s.hot[1].status; st != Ready {
		t.Fatalf("status(b) = %v; want ready", st)
	}
}

func chainTasks(ids ...string) []Task {
	var tasks []Task
	for i, id := range ids {
		t := Task{ID: id, Run: noop}
		if i > 0 {
			t.Deps = []string{ids[i-1]}
		}
		tasks = append(tasks, t)
	}
	return tasks
}

// A chain is fused into one batch, each link after the one it waits for.
func TestStateFusesChain(t *testing.T) {
	s := newTestState(2)
	s.pools[0].measured = true
	if err := s.submit(chainTasks("a", "b", "c", "d"), t0); err != nil {
		t.Fatalf("submit = %v", err)
	}
	b, ids := take(s, t0)
	if !slices.EqualFunc(ids, [][]string{{"a", "b", "c", "d"}}, slices.Equal) {
		t.Fatalf("dispatch %v; want the whole chain in one batch", ids)
	}
	for i, it := range b[0].Items {
		if want := int32(i); it.After != want {
			t.Fatalf("item %d After = %d; want %d", i, it.After, want)
		}
	}
}

// A failure in the middle of a fused chain: the links behind it did not
// run; they are skipped, blaming the failed link.
func TestStateFusedChainFailure(t *testing.T) {
	s := newTestState(1)
	s.pools[0].measured = true
	if err := s.submit(chainTasks("a", "b", "c", "d"), t0); err != nil {
		t.Fatalf("submit = %v", err)
	}
	b, _ := take(s, t0)
	items := b[0].Items
	items[0].Outcome, items[0].Ctx = worker.Ran, sealed(items[0].Ctx)
	items[1].Outcome, items[1].Err = worker.Ran, errors.New("b broke")
	items[2].Outcome, items[3].Outcome = worker.NotStarted, worker.NotStarted
	s.complete(b[0], t0)
	want := []Status{Succeeded, Failed, Skipped, Skipped}
	for i, w := range want {
		if got := s.hot[i].status; got != w {
			t.Fatalf("status(%s) = %v; want %v", s.tasks[i].id, got, w)
		}
	}
	if s.tasks[3].cause != 1 || s.tasks[2].attempts != 0 || s.open != 0 || s.running != 0 {
		t.Fatalf("d cause %d, c attempts %d, open %d, running %d; want 1, 0, 0, 0",
			s.tasks[3].cause, s.tasks[2].attempts, s.open, s.running)
	}
}

// A retryable failure in a fused chain: the links behind it wait again and
// run after the retry succeeds.
func TestStateFusedChainRetry(t *testing.T) {
	s := newTestState(1)
	s.pools[0].measured = true
	tasks := chainTasks("a", "b", "c")
	tasks[0].Retry = RetryPolicy{MaxAttempts: 2, BaseDelay: time.Second}
	if err := s.submit(tasks, t0); err != nil {
		t.Fatalf("submit = %v", err)
	}
	b, _ := take(s, t0)
	items := b[0].Items
	items[0].Outcome, items[0].Err, items[0].Retry = worker.Ran, errors.New("flaky"), true
	items[1].Outcome, items[2].Outcome = worker.NotStarted, worker.NotStarted
	s.complete(b[0], t0)
	if st := []Status{s.hot[1].status, s.hot[2].status}; !slices.Equal(st, []Status{Pending, Pending}) {
		t.Fatalf("b, c = %v after a's retryable failure; want pending", st)
	}
	s.advance(t0.Add(time.Second))
	if _, ids := take(s, t0.Add(time.Second)); !slices.EqualFunc(ids, [][]string{{"a", "b", "c"}}, slices.Equal) {
		t.Fatalf("dispatch after the backoff %v; want [[a b c]]", ids)
	}
}

// Fusion never jumps the ready queue: a successor is not fused while a
// ready task of the same or a better priority waits.
func TestStateFusionRespectsReadyQueue(t *testing.T) {
	s := newTestState(1)
	s.pools[0].measured = true
	tasks := append(chainTasks("a", "b"), Task{ID: "other", Run: noop})
	if err := s.submit(tasks, t0); err != nil {
		t.Fatalf("submit = %v", err)
	}
	// One idle worker, backlog of two: the batch takes a and other, which
	// empties the ready queue, so b is fused behind a: it jumps nothing.
	if _, ids := take(s, t0); !slices.EqualFunc(ids, [][]string{{"a", "other", "b"}}, slices.Equal) {
		t.Fatalf("dispatch %v; want [[a other b]]", ids)
	}
	s2 := newTestState(2)
	s2.pools[0].measured = true
	tasks = append(chainTasks("a", "b"), Task{ID: "x", Run: noop}, Task{ID: "y", Run: noop})
	if err := s2.submit(tasks, t0); err != nil {
		t.Fatalf("submit = %v", err)
	}
	// Two idle workers, backlog of three: [a x] then [y]. b is not fused
	// behind a: when the first batch was cut, y (ready first, same priority)
	// was still waiting.
	if _, ids := take(s2, t0); !slices.EqualFunc(ids, [][]string{{"a", "x"}, {"y"}}, slices.Equal) {
		t.Fatalf("dispatch %v; want [[a x] [y]]", ids)
	}
}

func sealed(c *worker.Context) *worker.Context {
	c.Seal()
	return c
}

// A million delayed tasks cancelled before they fire leave nothing behind
// in the delayed set.
func TestStateMillionDelayedCancelled(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000,000 tasks")
	}
	s := newTestState(1)
	const n = 1_000_000
	tasks := make([]Task, n)
	for i := range tasks {
		tasks[i] = Task{ID: "d" + strconv.Itoa(i), Run: noop, Delay: time.Hour + time.Duration(i)*time.Millisecond}
	}
	if err := s.submit(tasks, t0); err != nil {
		t.Fatalf("submit = %v", err)
	}
	if got := s.wheel.Len(); got != n {
		t.Fatalf("wheel holds %d; want %d", got, n)
	}
	for i := range tasks {
		if !s.cancel(tasks[i].ID, t0) {
			t.Fatalf("cancel(%s) = false", tasks[i].ID)
		}
	}
	if got := s.wheel.Len(); got != 0 {
		t.Fatalf("wheel holds %d after cancelling all; want 0", got)
	}
	if _, ok := s.wheel.NextDue(); ok {
		t.Fatalf("NextDue reports an entry after cancelling all")
	}
	if s.open != 0 {
		t.Fatalf("open = %d; want 0", s.open)
	}
}
