package main

import (
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The demo prints exactly these lines, in this order.
func TestDynamicOutput(t *testing.T) {
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatalf("run = %v", err)
	}
	want := `list succeeded
count joining its children
count/0 spawned by count
count/1 spawned by count
count/2 spawned by count
count/reduce spawned by count
count/0 succeeded
count/1 succeeded
count/2 succeeded
count/reduce succeeded
count succeeded
decide succeeded
archive skipped: not chosen by decide
publish succeeded
report succeeded
report: published 9 words from 3 files
`
	if got := out.String(); got != want {
		t.Fatalf("output:\n%s\nwant:\n%s", got, want)
	}
}
