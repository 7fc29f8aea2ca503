package workertest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/worker"
	"github.com/batonhq/baton/worker/workertest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The default worker passes the suite.
func TestFuncConforms(t *testing.T) {
	workertest.Run(t, worker.Func{}, workertest.Jobs{
		OK:    worker.Job{ID: "ok", Run: func(context.Context) error { return nil }},
		Fail:  worker.Job{ID: "fail", Run: func(context.Context) error { return errors.New("no") }},
		Block: worker.Job{ID: "block", Run: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
	})
}

// A worker that ignores its context fails the suite with a message that
// says so, ReturnWithin after the cancel, rather than hanging the test
// until go test's -timeout. (The suite runs in a child process: its
// failure is what is checked.)
func TestDeafWorkerFailsClearly(t *testing.T) {
	if os.Getenv("WORKERTEST_DEAF") == "1" {
		release := make(chan struct{})
		defer close(release) // after the suite has failed: the deaf Do returns
		deaf := workerFunc(func(ctx context.Context, j worker.Job) error {
			if j.ID == "block" {
				<-release
				return nil
			}
			return j.Run(ctx)
		})
		workertest.Run(t, deaf, workertest.Jobs{
			OK:           worker.Job{ID: "ok", Run: func(context.Context) error { return nil }},
			Fail:         worker.Job{ID: "fail", Run: func(context.Context) error { return errors.New("no") }},
			Block:        worker.Job{ID: "block"},
			ReturnWithin: 50 * time.Millisecond,
		})
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDeafWorkerFailsClearly$")
	cmd.Env = append(os.Environ(), "WORKERTEST_DEAF=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "has not returned 50ms after its context ended") {
		t.Fatalf("the suite on a deaf worker: %v\n%s\nwant a failure that says Do has not returned", err, out)
	}
}

type workerFunc func(context.Context, worker.Job) error

func (f workerFunc) Do(ctx context.Context, j worker.Job) error { return f(ctx, j) }
