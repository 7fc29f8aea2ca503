// Package actor holds the small building blocks of a goroutine that owns
// some state and is driven only by messages: a Mailbox that many goroutines
// send to and one goroutine receives from, Call for a request that waits for
// its reply, a coalescing Signal, and Latest, a one-slot box that keeps only
// the newest value.
//
// The owner runs its own for-select loop over Mailbox.Receive and whatever
// other channels it serves, so the state needs no mutex. Serve is that loop
// for an actor with a single mailbox.
//
// # Usage
//
//  1. The owner creates the Mailbox and is the only goroutine that receives
//     from it and the only one that calls Stop.
//  2. Every request sent with Call must be answered exactly once by sending
//     on its reply channel; the channel has a buffer of one, so the owner
//     never blocks when it answers.
//  3. After Stop, Send and Call return ErrStopped: a message is either
//     received by the owner or refused, never silently dropped.
package actor

import (
	"context"
	"errors"
	"sync"
)

// ErrStopped is returned by Send, Call and Serve's senders once the mailbox
// has been stopped.
var ErrStopped = errors.New("actor: stopped")

// Mailbox carries messages of type M from any number of senders to the one
// goroutine that owns it. It has no buffer: Send returns only once the owner
// has taken the message, so a stopped owner never strands one.
type Mailbox[M any] struct {
	c       chan M        // immutable; unbuffered
	stopped chan struct{} // closed by Stop
	once    sync.Once     // guards close(stopped)
}

// NewMailbox returns an open mailbox.
func NewMailbox[M any]() *Mailbox[M] {
	return &Mailbox[M]{c: make(chan M), stopped: make(chan struct{})}
}

// Send hands msg to the owner. It blocks until the owner receives it, ctx
// ends (returning ctx.Err()) or the mailbox is stopped (returning
// ErrStopped). Safe for concurrent use.
func (m *Mailbox[M]) Send(ctx context.Context, msg M) error {
	select {
	case <-m.stopped:
		return ErrStopped
	default:
	}
	select {
	case m.c <- msg:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-m.stopped:
		return ErrStopped
	}
}

// Receive is the channel the owner selects on. Only the owner may receive
// from it.
func (m *Mailbox[M]) Receive() <-chan M { return m.c }

// Stop refuses every later message: blocked and future Sends return
// ErrStopped. It does not block, and calling it more than once is safe.
func (m *Mailbox[M]) Stop() { m.once.Do(func() { close(m.stopped) }) }

// Stopped is closed once Stop has been called.
func (m *Mailbox[M]) Stopped() <-chan struct{} { return m.stopped }

// Call sends the request build makes around a fresh reply channel (buffer
// one) and waits for the owner's answer. It blocks until the answer arrives,
// ctx ends (ctx.Err()) or the mailbox stops (ErrStopped). If ctx ends after
// the owner took the request, the request still takes effect; only the answer
// is lost. Safe for concurrent use.
func Call[M, R any](ctx context.Context, m *Mailbox[M], build func(reply chan<- R) M) (R, error) {
	var zero R
	reply := make(chan R, 1)
	if err := m.Send(ctx, build(reply)); err != nil {
		return zero, err
	}
	select {
	case r := <-reply:
		return r, nil
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-m.stopped:
		// The owner may have answered just before it stopped.
		select {
		case r := <-reply:
			return r, nil
		default:
			return zero, ErrStopped
		}
	}
}

// Serve is the loop of an actor with one mailbox: it calls handle for each
// message, in order, on the calling goroutine, until ctx ends. It stops the
// mailbox before it returns ctx.Err(). handle must not block on the mailbox
// itself.
func Serve[M any](ctx context.Context, m *Mailbox[M], handle func(M)) error {
	defer m.Stop()
	for {
		select {
		case msg := <-m.c:
			handle(msg)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Signal is a coalescing wake-up: any number of Notify calls made before the
// receiver takes the signal count as one. The zero value is not usable; call
// NewSignal.
type Signal struct{ c chan struct{} }

// NewSignal returns a signal with nothing pending.
func NewSignal() Signal { return Signal{c: make(chan struct{}, 1)} }

// Notify makes the signal pending. It never blocks and is safe for
// concurrent use.
func (s Signal) Notify() {
	select {
	case s.c <- struct{}{}:
	default:
	}
}

// C is the channel to receive the signal from.
func (s Signal) C() <-chan struct{} { return s.c }

// Latest is a one-slot box that holds only the newest value written to it:
// the receiver never sees a stale value once a newer one is set. It has one
// writer; the zero value is not usable, call NewLatest.
type Latest[T any] struct{ c chan T }

// NewLatest returns an empty box.
func NewLatest[T any]() Latest[T] { return Latest[T]{c: make(chan T, 1)} }

// Set replaces any value not yet received with v. It never blocks. Only one
// goroutine may call Set: with a single writer the drain-then-send below
// cannot be overtaken.
func (l Latest[T]) Set(v T) {
	select {
	case <-l.c:
	default:
	}
	l.c <- v
}

// C is the channel to receive the newest value from.
func (l Latest[T]) C() <-chan T { return l.c }
