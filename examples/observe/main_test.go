package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wantLog = `level=WARN msg="task retrying" task=vet attempt=1 run=1 error="connection reset" wait=10ms
level=ERROR msg="task failed" task=lint attempt=1 run=1 error=style
level=INFO msg="task skipped" task=docs cause=lint
level=INFO msg="task cancelled" task=nightly cause="coordinator: task cancelled"
`

const wantGraph = `flowchart LR
    t0["fetch<br/>succeeded"]:::succeeded
    t1["build<br/>succeeded"]:::succeeded
    t2["test<br/>running"]:::running
    t3["package<br/>pending"]:::pending
    t4["vet<br/>succeeded"]:::succeeded
    t5["lint<br/>failed"]:::failed
    t6["docs<br/>skipped"]:::skipped
    t7["nightly<br/>cancelled"]:::cancelled
    t0 --> t1
    t1 --> t2
    t2 --> t3
    t4 --> t5
    t5 --> t6
    classDef pending fill:#eeeeee,stroke:#757575
    classDef running fill:#bbdefb,stroke:#1565c0
    classDef succeeded fill:#c8e6c9,stroke:#2e7d32
    classDef failed fill:#ffcdd2,stroke:#c62828
    classDef cancelled fill:#ffe0b2,stroke:#ef6c00
    classDef skipped fill:#f5f5f5,stroke:#9e9e9e,stroke-dasharray:4 3
`

// The program prints these log lines and this graph, and docs/observability.md shows
// both verbatim (the graph as a mermaid block, which GitHub draws).
func TestOutputAndREADME(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	want := "log:\n" + wantLog + "\ngraph while test ran:\n" + wantGraph
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
	readme, err := os.ReadFile("../../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```\n"+wantLog+"```") {
		t.Errorf("docs/observability.md does not show the log lines of examples/observe: update it")
	}
	if !strings.Contains(string(readme), "```mermaid\n"+wantGraph+"```") {
		t.Errorf("docs/observability.md does not show the graph of examples/observe in a mermaid block: update it")
	}
}
