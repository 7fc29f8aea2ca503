package actor_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/batonhq/baton/actor"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type counterMsg struct {
	add   int
	reply chan<- int // nil for a plain add
}

// A counter owned by one goroutine, driven from many.
func TestServeAndCall(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	mb := actor.NewMailbox[counterMsg]()
	done := make(chan error)
	total := 0
	go func() {
		done <- actor.Serve(ctx, mb, func(m counterMsg) {
			total += m.add
			if m.reply != nil {
				m.reply <- total
			}
		})
	}()
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if err := mb.Send(context.Background(), counterMsg{add: 2}); err != nil {
				t.Errorf("Send = %v; want nil", err)
			}
		})
	}
	wg.Wait()
	got, err := actor.Call(context.Background(), mb, func(r chan<- int) counterMsg { return counterMsg{reply: r} })
	if got != 100 || err != nil {
		t.Fatalf("Call = %d, %v; want 100, nil", got, err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Serve = %v; want context.Canceled", err)
	}
	if err := mb.Send(context.Background(), counterMsg{add: 1}); !errors.Is(err, actor.ErrStopped) {
		t.Fatalf("Send after stop = %v; want ErrStopped", err)
	}
	if _, err := actor.Call(context.Background(), mb, func(r chan<- int) counterMsg { return counterMsg{reply: r} }); !errors.Is(err, actor.ErrStopped) {
		t.Fatalf("Call after stop = %v; want ErrStopped", err)
	}
	mb.Stop() // idempotent
}

func TestSendHonoursContext(t *testing.T) {
	mb := actor.NewMailbox[int]()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := mb.Send(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Send(cancelled ctx) = %v; want context.Canceled", err)
	}
	if _, err := actor.Call(ctx, mb, func(chan<- int) int { return 0 }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Call(cancelled ctx) = %v; want context.Canceled", err)
	}
}

func TestCallAnsweredBeforeStop(t *testing.T) {
	mb := actor.NewMailbox[chan<- string]()
	go func() {
		r := <-mb.Receive()
		r <- "last words"
		mb.Stop()
	}()
	got, err := actor.Call(context.Background(), mb, func(r chan<- string) chan<- string { return r })
	if got != "last words" || err != nil {
		t.Fatalf("Call = %q, %v; want the answer given before Stop", got, err)
	}
}

func TestSignalCoalesces(t *testing.T) {
	s := actor.NewSignal()
	for range 5 {
		s.Notify()
	}
	<-s.C()
	select {
	case <-s.C():
		t.Fatalf("second receive got a signal; want five Notify calls to coalesce into one")
	default:
	}
}

func TestLatestKeepsNewest(t *testing.T) {
	l := actor.NewLatest[int]()
	l.Set(1)
	l.Set(2)
	if got := <-l.C(); got != 2 {
		t.Fatalf("received %d; want the newest value 2", got)
	}
}

func ExampleServe() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type get struct{ reply chan<- []string }
	mb := actor.NewMailbox[any]()
	go actor.Serve(ctx, mb, func() func(any) {
		var log []string // owned by the Serve goroutine: no mutex
		return func(m any) {
			switch m := m.(type) {
			case string:
				log = append(log, m)
			case get:
				m.reply <- append([]string(nil), log...)
			}
		}
	}())
	mb.Send(ctx, "hello")
	mb.Send(ctx, "world")
	got, _ := actor.Call(ctx, mb, func(r chan<- []string) any { return get{r} })
	fmt.Println(got)
	// Output: [hello world]
}
