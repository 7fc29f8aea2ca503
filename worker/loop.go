package worker

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
)

// Clock is the part of a clock the pool loop needs. clock.Clock from
// github.com/benbjohnson/clock (real or mock) satisfies it.
type Clock interface {
	Now() time.Time
	Timer(d time.Duration) *clock.Timer
}

// Outcome says how an Item ended.
type Outcome uint8

const (
	// Ran: Do was called and returned; Err holds its result.
	Ran Outcome = iota
	// NotStarted: the item's context had ended before its turn came, so Do
	// was never called.
	NotStarted
	// TimedOut: the timeout passed first; Err is ErrTimeout and whatever Do
	// returns later is discarded.
	TimedOut
)

// Item is one attempt in a Batch. The coordinator fills the inputs; the
// loop fills the results.
type Item struct {
	// Inputs, written by the coordinator before dispatch.
	Job     Job
	Ctx     *Context         // the attempt's context; the loop cancels it with ErrTimeout
	Timeout time.Duration    // 0: none
	RetryIf func(error) bool // nil: every error may be retried
	Ref     int32            // opaque to the loop: the coordinator's task index
	// After, when not 0, names an earlier item of the batch (its index + 1)
	// that this one depends on: it runs only if that item returned nil and
	// was not cancelled (its Ctx is sealed); otherwise it is NotStarted.
	// This is how the coordinator fuses a chain into one batch.
	After int32

	// Results, written by the loop.
	Outcome Outcome
	Err     error
	// Retry is RetryIf(Err) for a failed attempt, evaluated here so that
	// user code never runs on the coordinator's goroutine. A RetryIf that
	// panics counts as false.
	Retry bool
}

// Batch is the unit of dispatch: a run of attempts that one worker goroutine
// executes in order. Between the coordinator's send and the loop's reply the
// loop owns the batch; otherwise the coordinator does.
type Batch struct {
	Items   []Item
	Pool    int           // opaque to the loop: the coordinator's pool index
	Elapsed time.Duration // written by the loop: time taken by the whole batch, on its Clock

	running atomic.Int32 // index+1 of the item whose function runs now; 0: none
}

// Running reports the index of the item whose function the loop is running
// now, if any. Safe to call while the loop owns the batch.
func (b *Batch) Running() (int, bool) {
	i := b.running.Load()
	return int(i) - 1, i > 0
}

// Loop is one worker goroutine of a pool.
type Loop struct {
	Worker Worker
	Clock  Clock
	In     <-chan *Batch // batches to run
	Out    chan<- *Batch // finished batches
	// Detached tracks the goroutines that run attempts with a timeout,
	// abandoned ones included; the scheduler waits for them at shutdown.
	Detached *Detached
}

// Run receives batches until ctx ends, runs them and sends them back. It
// returns nil when ctx ends; it has no error of its own to report, since
// attempt failures travel in the batch.
func (l *Loop) Run(ctx context.Context) error {
	for {
		select {
		case b := <-l.In:
			l.run(b)
			select {
			case l.Out <- b:
			case <-ctx.Done():
				return nil
			}
		case <-ctx.Done():
			return nil
		}
	}
}

func (l *Loop) run(b *Batch) {
	start := l.Clock.Now()
	for i := range b.Items {
		it := &b.Items[i]
		if it.Ctx.Cancelled() || (it.After > 0 && !b.Items[it.After-1].Ctx.Sealed()) {
			it.Outcome, it.Err = NotStarted, nil
			continue
		}
		b.running.Store(int32(i) + 1)
		if it.Timeout <= 0 {
			it.Outcome, it.Err = Ran, call(it.Ctx, l.Worker, it.Job)
		} else {
			l.runWithTimeout(it)
		}
		if it.Err != nil {
			it.Retry = retryable(it.RetryIf, it.Err)
		} else if it.Outcome == Ran {
			it.Ctx.Seal() // fails only if a cancel came first; the coordinator sees that
		}
	}
	b.running.Store(0)
	b.Elapsed = l.Clock.Now().Sub(start)
}

// runWithTimeout runs the attempt on its own goroutine so that the pool can
// walk away from a function that ignores its context: the slot is free the
// moment the timeout passes.
func (l *Loop) runWithTimeout(it *Item) {
	res := make(chan error, 1) // buffered: an abandoned attempt's late result must not block
	l.Detached.add(it.Ctx, it.Job.ID)
	go func(ctx *Context, j Job) {
		defer l.Detached.done(ctx)
		res <- call(ctx, l.Worker, j)
	}(it.Ctx, it.Job)
	t := l.Clock.Timer(it.Timeout)
	select {
	case err := <-res:
		t.Stop()
		it.Outcome, it.Err = Ran, err
	case <-t.C:
		err := fmt.Errorf("%w after %v", ErrTimeout, it.Timeout)
		it.Ctx.Cancel(err)
		it.Outcome, it.Err = TimedOut, err
	}
}

func retryable(retryIf func(error) bool, err error) (ok bool) {
	if retryIf == nil {
		return true
	}
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return retryIf(err)
}
