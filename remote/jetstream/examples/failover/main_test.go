package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The example starts its replicas and workers by running its own
	// binary again: under go test, that is this test binary.
	if role := os.Getenv(envRole); role != "" {
		kind, name, _ := strings.Cut(role, " ")
		os.Exit(child(kind, name))
	}
	goleak.VerifyTestMain(m)
}

// The example's leader is killed mid-graph, another replica takes over,
// and the graph finishes: every tile rendered, merged by a replica.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster and five processes: not in -short")
	}
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("run = %v\n%s", err, out.String())
	}
	s := out.String()
	t.Log("\n" + s)
	for _, want := range []string{"killed replica-", "took over", "merge   succeeded", "merged by replica-"} {
		if !strings.Contains(s, want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	if n := strings.Count(s, "succeeded"); n != 9 {
		t.Errorf("%d tasks succeeded; want 9", n)
	}
}
