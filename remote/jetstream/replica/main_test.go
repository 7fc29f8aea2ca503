package replica_test

import (
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// long bounds every wait of these tests: it only turns a hang into a
// failure, it never paces anything.
const long = 30 * time.Second

func TestMain(m *testing.M) {
	if code, ok := childMain(); ok {
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}
