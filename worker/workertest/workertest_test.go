package workertest_test

import (
	"context"
	"errors"
	"testing"

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
