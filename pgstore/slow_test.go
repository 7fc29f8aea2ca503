package pgstore_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/internal/record"
	"github.com/batonhq/baton/pgstore"
)

// slowLink returns dbURL through a proxy that forwards what the client
// sends at rate bytes a second (a slow uplink), the replies at once.
func slowLink(t *testing.T, dbURL string, rate int) string {
	t.Helper()
	u, _ := url.Parse(dbURL)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", u.Host)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(c, s); c.Close() }()
			go func() {
				defer wg.Done()
				defer s.Close()
				buf := make([]byte, rate/20)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if _, err := s.Write(buf[:n]); err != nil {
							return
						}
						time.Sleep(time.Duration(n) * time.Second / time.Duration(rate)) // the link's pace, not a wait for an event
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	pu := *u
	pu.Host = ln.Addr().String()
	return pu.String()
}

// A leader alive but slow to send a long commit (a slow uplink: 1.5 MB at
// 512 KB/s, three times its lease) holds the store's row all along, and
// the server waits for it in ClientRead: a standby's claims must leave
// it alone (it beats), and its commit lands whole. Before baton.beats, a
// claim ended its session and rolled the commit back, and a next leader
// on the same link could loop so.
func TestClaimLeavesASlowLeaderAlone(t *testing.T) {
	const lease = time.Second
	name := uniqueName("slow")
	as := loginAs(t, "baton_scheduler")
	a, err := pgstore.NewStore(poolAs(t, slowLink(t, as, 512<<10)), name, pgstore.WithLease(lease), pgstore.WithInstance("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Load(func(k, v []byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	key := record.AppendTaskKey(nil, 1, 'x')
	if err := a.Commit(&coordinator.Changes{Puts: []coordinator.KV{{Key: key, Value: []byte("v")}}}); err != nil {
		t.Fatal(err) // statements prepared on the connection first
	}
	b, err := pgstore.NewStore(poolAs(t, as), name, pgstore.WithLease(lease), pgstore.WithInstance("b"), pgstore.WithLockWait(0))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	big := make([]byte, 3<<19)
	done := make(chan error, 1)
	go func() { done <- a.Commit(&coordinator.Changes{Puts: []coordinator.KV{{Key: key, Value: big}}}) }()
	claims := 0
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("a's long commit = %v after %d claims of b; want it landed", err, claims)
			}
			var n int
			if err := poolAs(t, as).QueryRow(context.Background(), `SELECT length(value) FROM baton.records WHERE store = $1`, name).Scan(&n); err != nil || n != len(big) {
				t.Fatalf("stored value: %d bytes, %v; want %d", n, err, len(big))
			}
			if claims == 0 {
				t.Fatal("b never tried to claim while a's commit was on its way; the test proves nothing")
			}
			return
		default:
		}
		// Each claim waits for the row a lease, then looks for a stuck
		// session to end.
		err := b.Load(func(k, v []byte) error { return nil })
		claims++
		if err == nil {
			// A commit longer than the lease uses the lease up: once it
			// has landed (b's claim then had the row), b may rightly lead;
			// a commit ended instead fails.
			if err := <-done; err != nil {
				t.Fatalf("b leads (term %d) and a's long commit = %v; want it landed, a left alone while sending", b.Term(), err)
			}
			done <- nil
			continue
		}
		if !errors.Is(err, coordinator.ErrStoreLocked) {
			t.Fatal(err)
		}
	}
}
