// Command prometheus runs a small graph on a Baton scheduler instrumented
// with otelbaton, and serves its metrics on /metrics through the
// OpenTelemetry Prometheus exporter, for Prometheus to scrape:
//
//	go run . -addr 127.0.0.1:9464
//	curl -s 127.0.0.1:9464/metrics | grep ^baton_
//
// It runs until interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/otelbaton"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9464", "where to serve /metrics")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := run(ctx, *addr, func(a net.Addr) { log.Printf("serving http://%s/metrics", a) })
	if err != nil {
		log.Fatal(err)
	}
}

// run starts the scheduler, runs the graph, serves /metrics on addr
// (calling ready with the address bound, once the graph has run) and
// returns when ctx ends.
func run(ctx context.Context, addr string, ready func(net.Addr)) error {
	// Prometheus side: a registry, and the OpenTelemetry exporter
	// registered in it as a metric reader.
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.Background())

	// Baton side: the middleware on every pool, and Observe for what no
	// attempt sees.
	obs, err := otelbaton.New(otelbaton.WithMeterProvider(mp), otelbaton.WithoutTracing())
	if err != nil {
		return err
	}
	s, err := coordinator.New(coordinator.WithWorkers(2), coordinator.WithMiddleware(obs.Middleware))
	if err != nil {
		return err
	}
	defer s.Shutdown(context.Background())
	stopObserving, err := obs.Observe(s)
	if err != nil {
		return err
	}
	defer stopObserving()

	if err := runGraph(ctx, s); err != nil {
		return err
	}

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	ready(ln.Addr())
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// runGraph runs fetch -> build, a task that fails once and is retried, a
// failing lint that skips report, and a nightly task that is cancelled.
func runGraph(ctx context.Context, s *coordinator.Scheduler) error {
	ok := func(context.Context) error { return nil }
	tries := 0
	err := s.SubmitContext(ctx,
		coordinator.Task{ID: "fetch", Run: ok},
		coordinator.Task{ID: "build", Run: ok, Deps: []string{"fetch"}},
		coordinator.Task{ID: "flaky", Run: func(context.Context) error {
			if tries++; tries == 1 {
				return errors.New("connection reset")
			}
			return nil
		}, Retry: coordinator.RetryPolicy{MaxAttempts: 2}},
		coordinator.Task{ID: "lint", Run: func(context.Context) error { return errors.New("style") }},
		coordinator.Task{ID: "report", Run: ok, Deps: []string{"lint"}},
		coordinator.Task{ID: "nightly", Run: ok, Delay: 24 * time.Hour},
	)
	if err != nil {
		return err
	}
	if err := s.WaitTasks(ctx, "build", "flaky", "report"); err != nil && !errors.As(err, new(*coordinator.TasksError)) {
		return err
	}
	s.Cancel("nightly")
	if err := s.Wait(ctx); err != nil {
		return fmt.Errorf("waiting for the graph: %w", err)
	}
	return nil
}
