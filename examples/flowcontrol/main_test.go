package main

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The example runs, and what it checks holds: tenants took turns, no
// tenant ran more than its limit at once, the rate held, nothing started
// while the pool was paused, the 4-slot task did not wait behind the
// small ones that came after it.
func TestRun(t *testing.T) {
	if err := run(); err != nil {
		t.Fatalf("run = %v", err)
	}
}
