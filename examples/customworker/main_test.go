package main

import (
	"testing"

	"github.com/batonhq/baton/worker"
	"github.com/batonhq/baton/worker/workertest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The example's custom worker passes the conformance suite.
func TestGPUConforms(t *testing.T) {
	workertest.Run(t, &gpu{}, workertest.Jobs{
		OK:    worker.Job{ID: "ok", Payload: Kernel{Name: "ok", Steps: 1}},
		Fail:  worker.Job{ID: "fail", Payload: Kernel{Name: "bad", Steps: -1}},
		Block: worker.Job{ID: "block", Payload: Kernel{Name: "long", Steps: 1 << 30}},
	})
}

func TestRun(t *testing.T) {
	if err := run(); err != nil {
		t.Fatalf("run = %v", err)
	}
}
