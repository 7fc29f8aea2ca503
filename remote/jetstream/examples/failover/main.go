// Command failover runs a replicated Baton scheduler through the loss of
// its leader: one command starts a three-server NATS JetStream cluster
// (TLS for clients, a user and least privileges per role), three
// coordinator replicas and two workers (this same binary, started again
// in replica or worker mode), submits a graph through a Client, kills the
// leading replica with SIGKILL mid-graph, and prints the takeover and the
// finished graph.
//
//	go run ./examples/failover    (from remote/jetstream)
//
// In production the cluster is yours, each replica is a process of your
// service (replica.New), every worker machine runs jetstream.Serve, and
// credentials come from a creds file (nats.UserCredentials) rather than
// the passwords this example makes up.
package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/batonhq/baton/coordinator"
	bjs "github.com/batonhq/baton/remote/jetstream"
	"github.com/batonhq/baton/remote/jetstream/replica"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// A process started with envRole set is a replica or a worker.
const (
	envRole = "BATON_FAILOVER_ROLE" // "replica NAME" or "worker NAME"
	envURL  = "BATON_FAILOVER_URL"  // the cluster's client URLs
	envCA   = "BATON_FAILOVER_CA"   // the CA certificate's file
)

const (
	store = "failover" // the replicated store's name
	pool  = "render"   // the remote workers' pool
	lease = time.Second
)

// users are the example's users: a password each (made up here), and
// the least privileges of the role (see the replica package doc).
var users = map[string]bjs.Permissions{
	"replica": replica.ReplicaPermissions(store, "_INBOX_replica", pool),
	"worker":  bjs.ServePermissions(pool, "_INBOX_worker"),
	"client":  replica.ClientPermissions(store, "_INBOX_client"),
}

func password(user string) string { return user + "-not-a-real-secret" }

func main() {
	if role := os.Getenv(envRole); role != "" {
		kind, name, _ := strings.Cut(role, " ")
		os.Exit(child(kind, name))
	}
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "failover:", err)
		os.Exit(1)
	}
}

// connect is how every process of the example reaches the cluster: TLS,
// checked against the cluster's CA; a user and its password; an inbox
// prefix of its own (its permissions allow no other); and reconnection
// for ever, to another server of the cluster when one goes.
func connect(user string) (*nats.Conn, error) {
	return nats.Connect(os.Getenv(envURL),
		nats.RootCAs(os.Getenv(envCA)),
		nats.UserInfo(user, password(user)),
		nats.CustomInboxPrefix("_INBOX_"+user),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		nats.Name(user),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			fmt.Fprintln(os.Stderr, user+":", err) // a permissions violation, a slow consumer
		}))
}

// child is a replica or a worker process: it runs until its standard
// input closes (or it is killed).
func child(kind, name string) int {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	nc, err := connect(kind)
	if err != nil {
		fmt.Fprintln(os.Stderr, name, err)
		return 1
	}
	defer nc.Close()
	if kind == "worker" {
		err := bjs.Serve(ctx, nc, pool, map[string]bjs.Handler{
			"tile": func(ctx context.Context, data []byte) ([]byte, error) {
				select { // stands for rendering a tile
				case <-time.After(300 * time.Millisecond):
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				}
				return fmt.Appendf(nil, "tile %s by %s", data, name), nil
			},
		}, bjs.WithWorkerName(name), bjs.WithConcurrency(2))
		if !errors.Is(err, context.Canceled) {
			fmt.Fprintln(os.Stderr, name, err)
			return 1
		}
		return 0
	}
	// A replica: the local function "merge" is registered on every
	// replica, so that whichever leads can run it.
	merge := coordinator.WithFunc("merge", func(ctx context.Context, p []byte) error {
		return coordinator.SetResult(ctx, append([]byte("merged by "+name+": "), p...))
	})
	r, err := replica.New(nc, store, replica.WithName(name), replica.WithLease(lease),
		replica.WithScheduler(merge),
		replica.WithRemotePool("tiles", 4, pool, bjs.WithReplicas(3), bjs.WithLease(time.Second)),
		replica.WithNotify(func(n replica.Notice) {
			switch {
			case n.Role == replica.Leader:
				fmt.Printf("%s leads (term %d): restored %d tasks in %v\n", name, n.Term, n.Tasks, n.Restore.Round(time.Millisecond))
			case n.Err != nil:
				fmt.Printf("%s stands by: %v\n", name, n.Err)
			}
		}))
	if err != nil {
		fmt.Fprintln(os.Stderr, name, err)
		return 1
	}
	<-ctx.Done()
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := r.Shutdown(sctx); err != nil {
		fmt.Fprintln(os.Stderr, name, err)
		return 1
	}
	return 0
}

// process is a child the example started.
type process struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan error
}

func run(out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}
	dir, err := os.MkdirTemp("", "baton-failover-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// 1. A three-server cluster: TLS for clients, users with least
	// privileges, file storage.
	servers, urls, caFile, err := startCluster(dir)
	defer func() {
		for _, s := range servers {
			s.Shutdown()
			s.WaitForShutdown()
		}
	}()
	if err != nil {
		return err
	}
	os.Setenv(envURL, strings.Join(urls, ","))
	os.Setenv(envCA, caFile)
	say("cluster of %d servers up: %s (TLS, a user per role)", len(servers), strings.Join(urls, " "))

	// 2. Two workers and three replicas, each a process of this binary.
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	leading := make(chan string, 16) // names of replicas that say they lead
	var procs []*process
	defer func() {
		for _, p := range procs {
			p.stdin.Close()
		}
		for _, p := range procs {
			select {
			case <-p.done:
			case <-time.After(15 * time.Second):
				p.cmd.Process.Kill()
				<-p.done
			}
		}
	}()
	start := func(kind, name string) (*process, error) {
		cmd := exec.Command(exe, "-test.run=^$") // the flag is for `go test` of this example; main ignores it
		cmd.Env = append(os.Environ(), envRole+"="+kind+" "+name)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		p := &process{name: name, cmd: cmd, stdin: stdin, done: make(chan error, 1)}
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				line := sc.Text()
				say("  %s", line)
				if n, _, ok := strings.Cut(line, " leads "); ok {
					leading <- n
				}
			}
			p.done <- cmd.Wait()
		}()
		procs = append(procs, p)
		return p, nil
	}
	for i := range 2 {
		if _, err := start("worker", fmt.Sprintf("worker-%d", i+1)); err != nil {
			return err
		}
	}
	replicas := map[string]*process{}
	for i := range 3 {
		name := fmt.Sprintf("replica-%d", i+1)
		p, err := start("replica", name)
		if err != nil {
			return err
		}
		replicas[name] = p
	}

	// 3. A client submits a graph: eight tiles on the workers, merged
	// by a local function on the leader.
	nc, err := connect("client")
	if err != nil {
		return err
	}
	defer nc.Close()
	client, err := replica.NewClient(nc, store)
	if err != nil {
		return err
	}
	defer client.Close()
	var tiles []string
	var tasks []coordinator.Task
	for i := range 8 {
		id := fmt.Sprintf("tile-%d", i)
		tiles = append(tiles, id)
		tasks = append(tasks, coordinator.Task{ID: id, Pool: "tiles", Timeout: time.Minute,
			Retry:   coordinator.RetryPolicy{MaxAttempts: 3},
			Payload: bjs.Payload{Kind: "tile", Data: []byte(strconv.Itoa(i))}.Encode()})
	}
	tasks = append(tasks, coordinator.Task{ID: "merge", Func: "merge", Deps: tiles, Payload: []byte("8 tiles")})
	if err := client.Submit(ctx, tasks...); err != nil {
		return err
	}
	leader, term, err := client.Leader(ctx)
	if err != nil {
		return err
	}
	say("submitted %d tasks through the leader, %s (term %d)", len(tasks), leader, term)

	// 4. Mid-graph (the first tile done, others running), kill the
	// leader.
	if err := client.WaitTasks(ctx, "tile-0"); err != nil {
		return err
	}
	victim := replicas[leader]
	killed := time.Now()
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-victim.done
	victim.done <- nil // for the deferred stop
	say("killed %s, the leader, with SIGKILL", leader)
	for {
		select {
		case n := <-leading:
			if n == leader {
				continue
			}
			say("%s took over %v after the kill (lease %v)", n, time.Since(killed).Round(time.Millisecond), lease)
		case <-ctx.Done():
			return errors.New("no replica took over")
		}
		break
	}

	// 5. The graph finishes.
	if err := client.Wait(ctx); err != nil {
		return err
	}
	say("the finished graph:")
	for _, t := range tasks {
		ti, _, err := client.Info(ctx, t.ID)
		if err != nil {
			return err
		}
		res, _ := ti.Result.([]byte)
		say("  %-7s %-9v attempts %d  %s", t.ID, ti.Status, ti.Attempts, res)
	}
	return nil
}

// startCluster starts three servers on loopback: a cluster with
// JetStream, TLS for clients (a CA and a server certificate made here,
// the CA written to a file for the clients), and the example's users.
func startCluster(dir string) ([]*server.Server, []string, string, error) {
	cert, caFile, err := makeTLS(dir)
	if err != nil {
		return nil, nil, "", err
	}
	var us []*server.User
	for name, p := range users {
		perms := &server.Permissions{Publish: &server.SubjectPermission{Allow: p.Publish},
			Subscribe: &server.SubjectPermission{Allow: p.Subscribe}}
		if p.AllowResponses {
			perms.Response = &server.ResponsePermission{MaxMsgs: 1, Expires: time.Minute}
		}
		us = append(us, &server.User{Username: name, Password: password(name), Permissions: perms})
	}
	ports, err := freePorts(6)
	if err != nil {
		return nil, nil, "", err
	}
	var servers []*server.Server
	var urls []string
	for i := range 3 {
		var routes []string
		for j := range 3 {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[3+j]))
			}
		}
		s, err := server.NewServer(&server.Options{ServerName: fmt.Sprintf("s%d", i+1), Host: "127.0.0.1", Port: ports[i],
			JetStream: true, StoreDir: filepath.Join(dir, fmt.Sprintf("s%d", i+1)), NoLog: true, NoSigs: true,
			TLS: true, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
			TLSTimeout: 2, Users: us,
			Cluster: server.ClusterOpts{Name: "baton", Host: "127.0.0.1", Port: ports[3+i]},
			Routes:  server.RoutesFromStr(strings.Join(routes, ","))})
		if err != nil {
			return servers, nil, "", err
		}
		s.Start()
		servers = append(servers, s)
		urls = append(urls, fmt.Sprintf("tls://127.0.0.1:%d", ports[i]))
	}
	for _, s := range servers {
		if !s.ReadyForConnections(10 * time.Second) {
			return servers, nil, "", errors.New("a server is not ready")
		}
	}
	return servers, urls, caFile, nil
}

// makeTLS makes a CA and a certificate for 127.0.0.1 signed by it, and
// writes the CA to a file.
func makeTLS(dir string) (tls.Certificate, string, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "baton example CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		return tls.Certificate{}, "", err
	}
	return tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key}, caFile, nil
}

// freePorts returns n ports free on loopback now.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
