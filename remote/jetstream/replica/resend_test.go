package replica_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/remote/jetstream/replica"
	"github.com/nats-io/nats.go"
)

// downProxy: when the server sends the client a chunk containing
// trigger (armed), it delivers it, then drops the connection and refuses
// new ones for down.
type downProxy struct {
	ln      net.Listener
	trigger []byte
	down    time.Duration
	armed   atomic.Bool
	until   atomic.Int64
	mu      sync.Mutex
	conns   []net.Conn
	fired   chan struct{}
	// read, if set before armed, waits until the client has read what
	// was delivered before the proxy drops the connection (a reset
	// could discard it unread).
	read func()
	once sync.Once
}

func newDownProxy(t *testing.T, target, trigger string, down time.Duration) *downProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &downProxy{ln: ln, trigger: []byte(trigger), down: down, fired: make(chan struct{})}
	t.Cleanup(func() { ln.Close(); p.closeAll() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if time.Now().UnixNano() < p.until.Load() {
				c.Close()
				continue
			}
			s, err := net.Dial("tcp", strings.TrimPrefix(target, "nats://"))
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { io.Copy(s, c); s.Close() }()
			go func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := s.Read(buf)
					if n > 0 {
						c.Write(buf[:n])
						if p.armed.Load() && bytes.Contains(buf[:n], p.trigger) {
							p.armed.Store(false)
							p.until.Store(time.Now().Add(p.down).UnixNano())
							if p.read != nil {
								p.read()
							}
							p.closeAll()
							p.once.Do(func() { close(p.fired) })
							return
						}
					}
					if err != nil {
						c.Close()
						return
					}
				}
			}()
		}
	}()
	return p
}

func (p *downProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// A copy sent while the leader reconnects (its server stopped) meets no
// interest on its own server (503): that is not a move of the lead, and
// the call waits on for the answer. It used to fail with ErrLeaderLost
// after a second though the lead never moved and the batch was stored (an
// adversarial review's reproduction).
func TestResendDuringLeaderReconnectIsNotALeadMove(t *testing.T) {
	c := startCluster(t, 3, nil)
	nc := c.connect(t)
	waitReady(t, nc)
	release := make(chan struct{})
	funcs := replica.WithScheduler(
		coordinator.WithFunc("noop", func(context.Context, []byte) error { return nil }),
		coordinator.WithFunc("hold", func(ctx context.Context, _ []byte) error {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return ctx.Err()
		}))
	p := newDownProxy(t, c.servers[0].ClientURL(), "baton.gap.api.", 4*time.Second)
	lnc, err := nats.Connect("nats://"+p.ln.Addr().String(), nats.IgnoreDiscoveredServers(),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lnc.Close)
	na, aNotices := notices()
	r := startReplica(t, lnc, "gap", "a", funcs, na, replica.WithLease(20*time.Second))
	n := waitRole(t, aNotices, replica.Leader)
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	cnc, err := nats.Connect(c.servers[1].ClientURL(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cnc.Close)
	cl, err := replica.NewClient(cnc, "gap")
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, _, err := cl.Leader(ctx); err != nil {
		t.Fatal(err)
	}
	begun := r.HandlersBegun()
	p.read = func() { // the leader has read the Submit: its handler began
		if err := r.HandlerBegun(ctx, begun); err != nil {
			t.Errorf("the leader never began to handle the Submit: %v", err)
		}
	}
	p.armed.Store(true)
	if err := cl.Submit(ctx, coordinator.Task{ID: "s1", Func: "hold"}); err != nil {
		t.Fatalf("Submit while the leader reconnects = %v; want nil (the lead did not move)", err)
	}
	select {
	case <-p.fired:
	default:
		t.Fatal("the leader's connection was never cut: the test did not test")
	}
	if _, ok, err := cl.Info(ctx, "s1"); !ok || err != nil {
		t.Fatalf("Info(s1) = %v, %v; want it stored", ok, err)
	}
	if name, term, err := cl.Leader(ctx); err != nil || name != "a" || term != n.Term {
		t.Fatalf("Leader = %s, %d, %v; want a, %d", name, term, err, n.Term)
	}
}
