// Command dashboard runs a scheduler with a graph that keeps changing and
// serves Baton's dashboard for it:
//
//	go run ./examples/dashboard              # then open http://127.0.0.1:8080/admin/baton/
//	go run ./examples/dashboard -readonly    # no actions
//	DASHBOARD_USER=ops DASHBOARD_PASSWORD=secret go run ./examples/dashboard   # behind basic auth
//
// Every few seconds a wave of tasks arrives: fetch, five builds, a flaky
// test that retries, a package step, a deploy on a slow pool of one
// worker, a cleanup that runs whatever happened (AllDone), an alert that
// runs only on a failure (AnyFailed) and, now and then, a step that fails
// for good or a delayed report; each wave notifies three customers
// through a rate-limited pool (2 a second), one key (Task.Key) per
// customer. A heartbeat recurs every five seconds. The pools page pauses
// and resumes a pool.
// Finished tasks are forgotten after ten minutes (WithRetention).
package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/dashboard"
	"github.com/batonhq/baton/worker"
	"github.com/benbjohnson/clock"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	readOnly := flag.Bool("readonly", false, "serve the dashboard read-only (no cancel)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("dashboard: http://%s/admin/baton/ (Ctrl-C stops)\n", ln.Addr())
	if err := run(ctx, ln, os.Stdout, *readOnly); err != nil {
		log.Fatal(err)
	}
}

// run serves the demo on ln until ctx ends, then shuts everything down.
func run(ctx context.Context, ln net.Listener, out io.Writer, readOnly bool) error {
	clk := clock.New()
	s, err := coordinator.New(
		coordinator.WithClock(clk),
		coordinator.WithWorkers(4),
		coordinator.WithPool("slow", 1, worker.Func{}),
		coordinator.WithPool("notify", 2, worker.Func{}),
		coordinator.WithRateLimit("notify", 2, 2), // a third-party API: 2 calls a second
		coordinator.WithRetention(10*time.Minute),
	)
	if err != nil {
		return err
	}
	opts := []dashboard.Option{dashboard.WithPrefix("/admin/baton"), dashboard.WithClock(clk)}
	if readOnly {
		opts = append(opts, dashboard.WithReadOnly())
	}
	d := dashboard.New(s, opts...)
	defer d.Close()

	// The dashboard has no users of its own: put it behind your own
	// authentication, here HTTP basic auth when DASHBOARD_USER is set.
	var h http.Handler = d
	if user := os.Getenv("DASHBOARD_USER"); user != "" {
		h = basicAuth(h, user, os.Getenv("DASHBOARD_PASSWORD"))
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/baton/", h)
	mux.Handle("/{$}", http.RedirectHandler("/admin/baton/", http.StatusFound))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	w := &workload{s: s, clk: clk, rnd: rand.New(rand.NewPCG(1, 2))}
	err = w.run(ctx)
	fmt.Fprintln(out, "shutting down")
	d.Close() // ends the live streams, so that Shutdown below does not wait for them
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	if e := <-served; !errors.Is(e, http.ErrServerClosed) && err == nil {
		err = e
	}
	if e := s.Shutdown(shutdownCtx); e != nil && err == nil {
		err = e
	}
	return err
}

// basicAuth lets a request through only with the given user and password.
func basicAuth(next http.Handler, user, password string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(user)) != 1 || subtle.ConstantTimeCompare([]byte(p), []byte(password)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="baton"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// workload submits a wave of tasks every few seconds until ctx ends.
type workload struct {
	s   *coordinator.Scheduler
	clk clock.Clock
	rnd *rand.Rand // owned by run
}

func (w *workload) run(ctx context.Context) error {
	err := w.s.Submit(coordinator.Task{ID: "heartbeat", Every: 5 * time.Second,
		Run: w.work(20*time.Millisecond, 50*time.Millisecond, 0)})
	if err != nil {
		return err
	}
	tick := w.clk.Ticker(4 * time.Second)
	defer tick.Stop()
	for wave := 1; ; wave++ {
		if err := w.s.Submit(w.wave(wave)...); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// wave is one pipeline: fetch, builds, a flaky test, package, deploy on the
// slow pool, a cleanup (AllDone), an alert (AnyFailed), sometimes a step
// that fails for good and a delayed report.
func (w *workload) wave(n int) []coordinator.Task {
	id := func(name string) string { return fmt.Sprintf("wave-%d/%s", n, name) }
	retry := coordinator.RetryPolicy{MaxAttempts: 3, BaseDelay: 300 * time.Millisecond, Jitter: 0.2}
	tasks := []coordinator.Task{{ID: id("fetch"), Run: w.work(100*time.Millisecond, 400*time.Millisecond, 0)}}
	var builds []string
	for i := 1; i <= 5; i++ {
		b := id(fmt.Sprintf("build-%d", i))
		builds = append(builds, b)
		tasks = append(tasks, coordinator.Task{ID: b, Deps: []string{id("fetch")}, Priority: i % 2,
			Run: w.work(200*time.Millisecond, 1500*time.Millisecond, 0)})
	}
	tasks = append(tasks,
		coordinator.Task{ID: id("test"), Deps: builds, Retry: retry, Run: w.work(300*time.Millisecond, 900*time.Millisecond, 0.4)},
		coordinator.Task{ID: id("package"), Deps: []string{id("test")}, Run: w.result(id("package"))},
		coordinator.Task{ID: id("deploy"), Deps: []string{id("package")}, Pool: "slow", Run: w.work(2*time.Second, 5*time.Second, 0.1)},
		coordinator.Task{ID: id("cleanup"), Deps: []string{id("deploy")}, When: coordinator.AllDone, Run: w.work(50*time.Millisecond, 100*time.Millisecond, 0)},
		coordinator.Task{ID: id("alert"), Deps: []string{id("test"), id("deploy")}, When: coordinator.AnyFailed, Run: w.work(10*time.Millisecond, 20*time.Millisecond, 0)},
	)
	for _, customer := range []string{"acme", "globex", "initech"} {
		tasks = append(tasks, coordinator.Task{ID: id("notify-" + customer), Deps: []string{id("package")}, Pool: "notify", Key: customer,
			Run: w.work(50*time.Millisecond, 150*time.Millisecond, 0)})
	}
	if n%3 == 0 {
		tasks = append(tasks, coordinator.Task{ID: id("lint"), Deps: []string{id("fetch")}, Run: func(context.Context) error {
			return errors.New("lint: 3 problems in handlers.go")
		}}, coordinator.Task{ID: id("docs"), Deps: []string{id("lint")}, Run: w.work(10*time.Millisecond, 20*time.Millisecond, 0)})
	}
	if n%4 == 0 {
		tasks = append(tasks, coordinator.Task{ID: id("report"), Delay: 6 * time.Second, Run: w.work(100*time.Millisecond, 200*time.Millisecond, 0)})
	}
	return tasks
}

// work returns a task function that takes between lo and hi, and fails with
// probability failP.
func (w *workload) work(lo, hi time.Duration, failP float64) func(context.Context) error {
	d := lo + time.Duration(w.rnd.Int64N(int64(hi-lo)+1))
	fail := w.rnd.Float64() < failP
	return func(ctx context.Context) error {
		t := w.clk.Timer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
		}
		if fail {
			fail = false // the next attempt succeeds
			return errors.New("connection reset by peer")
		}
		return nil
	}
}

// result returns a task function that records an artifact name.
func (w *workload) result(name string) func(context.Context) error {
	return func(ctx context.Context) error {
		return coordinator.SetResult(ctx, map[string]any{"artifact": name + ".tar.gz", "bytes": 1 << 20})
	}
}
