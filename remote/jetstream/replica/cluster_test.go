package replica_test

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// cluster is a JetStream cluster of embedded servers on loopback, started
// by a test: each server keeps its ports and its store directory, so that
// one stopped can be started again as itself.
type cluster struct {
	t       testing.TB
	name    string
	dirs    []string
	ports   []int // client ports
	routes  []int // cluster ports
	servers []*server.Server
	tweak   func(i int, o *server.Options)
}

// freePorts returns n ports free on loopback now, chosen below the
// kernel's ephemeral range: a port the kernel hands out (listen on port 0)
// may, once closed, be taken as the local port of any outgoing
// connection, and a server stopped and started again on it (a test of a
// server's loss) or started a moment later then fails to listen (seen:
// "server 2 not ready after 30s" after 25 runs under load). No outgoing
// connection takes a port below the range.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	lo, hi := 10000, ephemeralLow()-1
	var ls []net.Listener
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			t.Fatalf("no %d free ports in [%d, %d)", n, lo, hi)
		}
		p := lo + rand.IntN(hi-lo)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue // in use
		}
		ls = append(ls, l)
		ports = append(ports, p)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// ip_local_port_range; 32768, Linux's default, where it cannot be read).
func ephemeralLow() int {
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if lo, err := strconv.Atoi(f[0]); err == nil && lo > 11000 {
				return lo
			}
		}
	}
	return 32768
}

// startCluster starts n servers forming one JetStream cluster, and shuts
// them down at cleanup. tweak, if not nil, changes each server's options
// (users, permissions, TLS).
func startCluster(t testing.TB, n int, tweak func(i int, o *server.Options)) *cluster {
	t.Helper()
	c := &cluster{t: t, name: "baton", ports: freePorts(t, n), routes: freePorts(t, n), tweak: tweak,
		servers: make([]*server.Server, n)}
	dir := t.TempDir()
	for i := range n {
		c.dirs = append(c.dirs, filepath.Join(dir, fmt.Sprintf("s%d", i)))
	}
	for i := range n {
		c.start(i)
	}
	for i := range n {
		if !c.servers[i].ReadyForConnections(long) {
			t.Fatalf("server %d not ready after %v", i, long)
		}
	}
	t.Cleanup(func() {
		for i := range c.servers {
			c.stop(i)
		}
	})
	return c
}

func (c *cluster) options(i int) *server.Options {
	var routes []string
	for j, p := range c.routes {
		if j != i {
			routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
		}
	}
	o := &server.Options{ServerName: fmt.Sprintf("s%d", i), Host: "127.0.0.1", Port: c.ports[i],
		JetStream: true, StoreDir: c.dirs[i], NoLog: true, NoSigs: true,
		Cluster: server.ClusterOpts{Name: c.name, Host: "127.0.0.1", Port: c.routes[i]},
		Routes:  server.RoutesFromStr(strings.Join(routes, ","))}
	if c.tweak != nil {
		c.tweak(i, o)
	}
	return o
}

// start starts server i (again).
func (c *cluster) start(i int) {
	c.t.Helper()
	s, err := server.NewServer(c.options(i))
	if err != nil {
		c.t.Fatalf("server.NewServer(%d) = %v", i, err)
	}
	s.Start()
	c.servers[i] = s
}

// stop shuts server i down (a no-op if it is down).
func (c *cluster) stop(i int) {
	if s := c.servers[i]; s != nil {
		s.Shutdown()
		s.WaitForShutdown()
		c.servers[i] = nil
	}
}

// url lists every server's client URL, for a connection that fails over.
func (c *cluster) url() string {
	var urls []string
	for _, p := range c.ports {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	return strings.Join(urls, ",")
}

// connect opens a connection to the cluster that reconnects forever,
// closed at cleanup.
func (c *cluster) connect(t testing.TB, opts ...nats.Option) *nats.Conn {
	t.Helper()
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, opts...)
	nc, err := nats.Connect(c.url(), opts...)
	if err != nil {
		t.Fatalf("nats.Connect(%s) = %v", c.url(), err)
	}
	t.Cleanup(nc.Close)
	return nc
}
