package pgstore_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/pgstore"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The process tests run instances of a service as child processes: this
// test binary re-executed with childEnv set. A child runs a Service of
// store BATON_PGSTORE_NAME with function "work" (payload: the task's ID),
// which appends "start ID INSTANCE" and "end ID INSTANCE" to the log
// file BATON_PGSTORE_LOG, and "fatal", which appends its start and kills
// its process; it prints each Notice on stdout ("leader TERM",
// "standby TERM ERR"), and shuts down when its stdin closes.

const childEnv = "BATON_PGSTORE_CHILD"

func childMain(mode string) int {
	ctx := context.Background()
	inst := os.Getenv("BATON_PGSTORE_INSTANCE")
	lease, err := time.ParseDuration(os.Getenv("BATON_PGSTORE_LEASE"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	cfg, err := pgxpool.ParseConfig(os.Getenv("BATON_PGSTORE_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = inst
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	logf, err := os.OpenFile(os.Getenv("BATON_PGSTORE_LOG"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	var mu sync.Mutex
	write := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		logf.Write([]byte(s + "\n")) // one write: a whole line, even at a SIGKILL
	}
	work := func(ctx context.Context, p []byte) error {
		write("start " + string(p) + " " + inst)
		write("end " + string(p) + " " + inst)
		return nil
	}
	var out sync.Mutex
	sv, err := pgstore.New(pool, os.Getenv("BATON_PGSTORE_NAME"),
		pgstore.WithLease(lease), pgstore.WithInstance(inst), pgstore.WithPoll(100*time.Millisecond),
		pgstore.WithNotify(func(n pgstore.Notice) {
			out.Lock()
			defer out.Unlock()
			fmt.Printf("%v %d %v\n", n.Role, n.Term, n.Err)
		}),
		pgstore.WithScheduler(coordinator.WithFunc("work", work), coordinator.WithWorkers(4),
			coordinator.WithFunc("fatal", func(ctx context.Context, p []byte) error {
				write("start " + string(p) + " " + inst)
				os.Exit(3) // as a log.Fatal on a bad payload
				return nil
			})))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	io.Copy(io.Discard, os.Stdin)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := sv.Shutdown(sctx); err != nil {
		fmt.Fprintln(os.Stderr, "child: Shutdown:", err)
	}
	pool.Close()
	return 0
}

// child is a running child process.
type child struct {
	inst  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan childLine // its stdout, closed when it ends
	done  chan struct{}  // closed when it has exited
}

type childLine struct {
	text string
	at   time.Time // when the parent read it
}

// startChild starts an instance of store name.
func startChild(t *testing.T, dbURL, name, inst, logPath string, lease time.Duration) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=service", "BATON_PGSTORE_URL="+dbURL, "BATON_PGSTORE_NAME="+name,
		"BATON_PGSTORE_INSTANCE="+inst, "BATON_PGSTORE_LOG="+logPath, "BATON_PGSTORE_LEASE="+lease.String())
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{inst: inst, cmd: cmd, stdin: stdin, lines: make(chan childLine, 100), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- childLine{text: sc.Text(), at: time.Now()}
		}
		close(c.lines)
		cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() { c.kill() })
	return c
}

// kill SIGKILLs the child (and SIGCONTs it, if stopped) and waits for it.
func (c *child) kill() {
	c.cmd.Process.Signal(syscall.SIGKILL)
	c.cmd.Process.Signal(syscall.SIGCONT)
	for range c.lines {
	}
	<-c.done
}

// stop closes the child's stdin (a Shutdown) and waits for it.
func (c *child) stop(t *testing.T) {
	c.stdin.Close()
	for range c.lines {
	}
	<-c.done
	if code := c.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("child %s exited with %d", c.inst, code)
	}
}

// waitLine returns the child's next line that starts with prefix, or
// fails the test if the child ends or ctx does first.
func (c *child) waitLine(ctx context.Context, t *testing.T, prefix string) childLine {
	t.Helper()
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("child %s ended before saying %q", c.inst, prefix)
			}
			if strings.HasPrefix(l.text, prefix) {
				return l
			}
		case <-ctx.Done():
			t.Fatalf("child %s did not say %q: %v", c.inst, prefix, ctx.Err())
		}
	}
}
