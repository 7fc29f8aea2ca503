package pgstore

import (
	"context"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// listener holds one connection that LISTENs on the package's channels
// and wakes the goroutines waiting for a store's notifications. It never
// is the only way they learn: each waiter also looks every WithPoll, and
// a reconnection wakes them all (notifications sent meanwhile are lost).
type listener struct {
	pool  *pgxpool.Pool
	store string
	clk   clock.Clock

	mu    sync.Mutex
	waits map[string]chan struct{} // guarded by mu: by channel, closed at its next notification

	stop chan struct{} // closed by close
	done chan struct{} // closed when run has returned
}

func newListener(pool *pgxpool.Pool, store string, clk clock.Clock) *listener {
	l := &listener{pool: pool, store: store, clk: clk, waits: map[string]chan struct{}{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go l.run()
	return l
}

// wake returns a channel closed at the next notification on channel for
// the store (or at a reconnection). Take it before looking at the
// database, so that nothing between the look and the wait is missed.
func (l *listener) wake(channel string) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch, ok := l.waits[channel]
	if !ok {
		ch = make(chan struct{})
		l.waits[channel] = ch
	}
	return ch
}

func (l *listener) fire(channel string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ch, ok := l.waits[channel]; ok {
		close(ch)
		delete(l.waits, channel)
	}
}

func (l *listener) fireAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c, ch := range l.waits {
		close(ch)
		delete(l.waits, c)
	}
}

func (l *listener) run() {
	defer close(l.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-l.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		if err := l.listen(ctx); err == nil {
			backoff = 50 * time.Millisecond
		}
		l.fireAll()
		t := l.clk.Timer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// listen holds a connection until it fails or ctx ends.
func (l *listener) listen(ctx context.Context) error {
	pc, err := l.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	conn := pc.Hijack() // never handed back: it is closed below
	defer conn.Close(context.Background())
	for _, c := range []string{chanCommit, chanInbox, chanLead} {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{c}.Sanitize()); err != nil {
			return err
		}
	}
	l.fireAll() // anything sent before the LISTENs was missed
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if n.Payload == l.store {
			l.fire(n.Channel)
		}
	}
}

func (l *listener) close() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}

// await calls look until it says done or fails, again at each
// notification on channel and every poll, until ctx ends (ctx.Err()).
func await(ctx context.Context, l *listener, clk clock.Clock, poll time.Duration, channel string, look func() (bool, error)) error {
	for {
		woken := l.wake(channel)
		done, err := look()
		if done || err != nil {
			return err
		}
		t := clk.Timer(poll)
		select {
		case <-woken:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		t.Stop()
	}
}
