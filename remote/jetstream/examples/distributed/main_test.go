package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The example starts its workers by running its own binary again:
	// under go test, that is this test binary.
	if name := os.Getenv(envWorker); name != "" {
		os.Exit(workerMain(name, os.Getenv(envURL)))
	}
	goleak.VerifyTestMain(m)
}

// The example runs its graph on worker processes and reports, for every
// task, the process that ran it.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("run = %v\n%s", err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	ran := 0
	for _, l := range lines {
		if strings.Contains(l, " ran on worker-") && strings.Contains(l, "(pid ") {
			ran++
		}
	}
	if ran != 10 {
		t.Fatalf("%d tasks reported a worker process; want 10:\n%s", ran, out.String())
	}
	if !strings.Contains(out.String(), "merged 9 tiles") {
		t.Errorf("merge's result missing:\n%s", out.String())
	}
}
