// Command customworker shows a custom worker type in a named pool of size
// one (think "the GPU") beside the default pool: GPU-bound tasks queue for
// their pool, one at a time, while ordinary tasks run on the other workers.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/worker"
)

// Kernel is the payload a GPU task carries instead of a Run function.
type Kernel struct {
	Name  string
	Steps int
}

// gpu is a custom worker type: it runs Kernel payloads. One device means
// one job at a time, which the pool size of 1 guarantees; the counter
// proves it.
type gpu struct {
	busy    atomic.Int32
	overlap atomic.Bool
	mu      sync.Mutex
	log     []string
	// onFinish runs after each kernel, under mu.
	onFinish func()
}

// Do runs one kernel, honouring ctx between steps.
func (g *gpu) Do(ctx context.Context, j worker.Job) error {
	if g.busy.Add(1) > 1 {
		g.overlap.Store(true)
	}
	defer g.busy.Add(-1)
	k := j.Payload.(Kernel)
	if k.Steps < 0 {
		return fmt.Errorf("kernel %s: %d steps", k.Name, k.Steps)
	}
	for range k.Steps {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(2 * time.Millisecond):
		}
	}
	g.mu.Lock()
	g.log = append(g.log, k.Name)
	if g.onFinish != nil {
		g.onFinish()
	}
	g.mu.Unlock()
	return nil
}

// Validate rejects a GPU task without a Kernel, at Submit time.
func (g *gpu) Validate(j worker.Job) error {
	if _, ok := j.Payload.(Kernel); !ok {
		return errors.New("gpu tasks need a Kernel payload")
	}
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "customworker:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	device := &gpu{}
	s, err := coordinator.New(coordinator.WithWorkers(4), coordinator.WithPool("gpu", 1, device))
	if err != nil {
		return err
	}
	defer s.Shutdown(ctx)

	var cpuDone, cpuDoneBeforeFirstKernel atomic.Int32
	device.onFinish = func() {
		if len(device.log) == 1 {
			cpuDoneBeforeFirstKernel.Store(cpuDone.Load())
		}
	}
	var tasks []coordinator.Task
	for i, name := range []string{"train", "embed", "render"} {
		// Lower priority numbers start first within the gpu pool.
		tasks = append(tasks, coordinator.Task{ID: name, Pool: "gpu", Priority: i, Payload: Kernel{Name: name, Steps: 5}})
	}
	for i := range 8 {
		tasks = append(tasks, coordinator.Task{ID: fmt.Sprintf("cpu-%d", i), Run: func(context.Context) error {
			cpuDone.Add(1)
			return nil
		}})
	}
	tasks = append(tasks, coordinator.Task{ID: "report", Run: func(context.Context) error { return nil },
		Deps: []string{"train", "embed", "render"}})
	if err := s.Submit(tasks...); err != nil {
		return err
	}

	// A GPU task without a kernel is refused before anything is stored.
	err = s.Submit(coordinator.Task{ID: "bad", Pool: "gpu"})
	fmt.Println("gpu task without a kernel:", errors.Is(err, coordinator.ErrInvalidTask))

	if err := s.Wait(ctx); err != nil {
		return err
	}
	info, _ := s.Info("report")
	fmt.Println("gpu ran, in priority order:", device.log)
	fmt.Println("gpu jobs ever overlapped:", device.overlap.Load())
	fmt.Println("cpu tasks done:", cpuDone.Load(), "| done while the first kernel ran:", cpuDoneBeforeFirstKernel.Load())
	fmt.Println("report after the gpu jobs:", info.Status)
	return nil
}
