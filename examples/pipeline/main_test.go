package main

import (
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The demo prints exactly these lines, in this order.
func TestPipelineOutput(t *testing.T) {
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatalf("run = %v", err)
	}
	want := `checkout succeeded
build succeeded
test retry in 0.05s (ConnectionError: test db not up yet)
lint succeeded
docs succeeded
test retry in 0.10s (ConnectionError: test db not up yet)
test succeeded
package succeeded
deploy succeeded
rejected: a cycle leaves [a b c d] unable to start
cancel report: true | again: false
report cancelled
email skipped
migrate retry in 0.05s (RuntimeError: disk full)
migrate failed (RuntimeError: disk full)
notify skipped
heartbeat run 1
heartbeat run 2
heartbeat succeeded
40 tasks on 4 workers: all succeeded = true | dependencies respected = true
`
	if got := out.String(); got != want {
		t.Fatalf("output:\n%s\nwant:\n%s", got, want)
	}
}
