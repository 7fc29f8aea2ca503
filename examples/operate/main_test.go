package main

import (
	"bytes"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The example runs and what it checks holds: transform's three failed
// attempts are in its history with their errors and log lines, the re-run
// re-opens transform, load and report only, they succeed, and nothing that
// had succeeded runs again. Its output shows the history and who re-ran.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("run = %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"load      skipped   attempts 0 (because transform did not succeed)",
		`attempt 3 on worker`,
		`WARN schema check failed table=sales want=region`,
		"re-opened: transform, load, report",
		"transform succeeded attempts 1, re-run 1 time(s)",
		"re-run 1 attempt 1 on worker",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q:\n%s", want, out.String())
		}
	}
}
