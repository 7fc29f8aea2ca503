package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The example serves what a Prometheus user would query: scrape it over
// HTTP and look for the series by name and labels.
func TestScrape(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, "127.0.0.1:0", func(a net.Addr) { addrc <- a }) }()
	var addr net.Addr
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("run = %v before serving", err)
	}
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run = %v", err)
		}
	}()
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %v, %v", resp.Status, err)
	}
	series := map[string]string{} // `name{labels}` without scope labels -> value
	var excerpt []string
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "baton_") && !strings.HasPrefix(line, "# HELP baton_") && !strings.HasPrefix(line, "# TYPE baton_") {
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		series[stripScope(line[:i])] = line[i+1:]
		excerpt = append(excerpt, stripScope(line[:i])+" "+line[i+1:])
	}
	t.Logf("/metrics, baton series:\n%s", strings.Join(excerpt, "\n"))
	want := map[string]string{
		`baton_task_finished_total{baton_pool="",baton_task_status="succeeded"}`:         "3",
		`baton_task_finished_total{baton_pool="",baton_task_status="failed"}`:            "1",
		`baton_task_finished_total{baton_pool="",baton_task_status="skipped"}`:           "1",
		`baton_task_finished_total{baton_pool="",baton_task_status="cancelled"}`:         "1",
		`baton_task_retries_total{baton_pool=""}`:                                        "1",
		`baton_attempt_finished_total{baton_attempt_outcome="ok",baton_pool=""}`:         "3",
		`baton_attempt_finished_total{baton_attempt_outcome="error",baton_pool=""}`:      "2",
		`baton_attempt_duration_seconds_count{baton_attempt_outcome="ok",baton_pool=""}`: "3",
		`baton_attempt_queue_duration_seconds_count{baton_pool=""}`:                      "5",
		`baton_task_count{baton_pool="",baton_task_status="succeeded"}`:                  "3",
		`baton_task_count{baton_pool="",baton_task_status="running"}`:                    "0",
		`baton_worker_busy{baton_pool=""}`:                                               "0",
	}
	for k, v := range want {
		if got, ok := series[k]; !ok || got != v {
			t.Errorf("%s = %q (present: %v); want %s", k, got, ok, v)
		}
	}
	readme, err := os.ReadFile("../../../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`baton_task_finished_total{baton_pool="",baton_task_status="succeeded"} 3`,
		`baton_attempt_finished_total{baton_attempt_outcome="error",baton_pool=""} 2`} {
		if !strings.Contains(string(readme), k) {
			t.Errorf("docs/observability.md's /metrics excerpt lacks %s: update it", k)
		}
	}
}

// stripScope drops the otel_scope_* labels the exporter adds to every
// series, which a query rarely names.
func stripScope(series string) string {
	open := strings.IndexByte(series, '{')
	if open < 0 {
		return series
	}
	var kept []string
	for _, l := range strings.Split(series[open+1:len(series)-1], ",") {
		if !strings.HasPrefix(l, "otel_scope_") {
			kept = append(kept, l)
		}
	}
	return series[:open] + "{" + strings.Join(kept, ",") + "}"
}
