// Command flowcontrol shows Baton's flow control: six tenants call one
// rate-limited service through the pool "api", one of them (noisy) with
// 300 tasks submitted first and five quiet ones with 8 tasks each after
// it. Keys make the tenants take turns, so the quiet tenants finish long
// before the noisy one; a key limit keeps each tenant to 2 calls at once;
// the rate limit keeps the service under 150 calls a second whatever the
// number of workers; and a pause in the middle starts nothing until the
// resume, losing nothing. A task that takes all four workers of the pool
// "batch" (Slots) runs in between a stream of small ones.
//
// Run it with: go run ./examples/flowcontrol
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/worker"
)

const (
	rate  = 150 // calls a second to the service
	burst = 5
	pause = 300 * time.Millisecond
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "flowcontrol:", err)
		os.Exit(1)
	}
}

// tracker records, per tenant, the calls running and done, and every
// start's time.
type tracker struct {
	mu      sync.Mutex
	running map[string]int
	most    map[string]int // the most calls of a tenant running at once
	done    map[string]int
	total   map[string]int
	starts  []time.Time
	paused  time.Time      // when Pause returned (zero: not paused)
	inPause int            // calls started while the pool was paused
	finish  map[string]int // the call count at which each tenant finished
}

func (tr *tracker) call(tenant string, d time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		tr.mu.Lock()
		tr.running[tenant]++
		tr.most[tenant] = max(tr.most[tenant], tr.running[tenant])
		tr.starts = append(tr.starts, time.Now())
		if !tr.paused.IsZero() && time.Since(tr.paused) > 5*time.Millisecond {
			tr.inPause++ // (a call claimed before Pause returned may begin a moment after)
		}
		tr.mu.Unlock()
		select { // the call to the service
		case <-time.After(d):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		tr.mu.Lock()
		tr.running[tenant]--
		tr.done[tenant]++
		if tr.done[tenant] == tr.total[tenant] {
			tr.finish[tenant] = len(tr.starts)
		}
		tr.mu.Unlock()
		return nil
	}
}

func (tr *tracker) progress() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	s := ""
	for _, t := range tenants() {
		s += fmt.Sprintf(" %s %3d/%d", t, tr.done[t], tr.total[t])
	}
	return s
}

func tenants() []string {
	return []string{"noisy", "acme", "globex", "initech", "hooli", "umbrella"}
}

func run() error {
	s, err := coordinator.New(
		coordinator.WithWorkers(2),
		coordinator.WithPool("api", 8, worker.Func{}), // 8 workers, but the service takes 150 calls a second
		coordinator.WithRateLimit("api", rate, burst),
		coordinator.WithPool("batch", 4, worker.Func{}),
		coordinator.WithKeys(coordinator.KeyPolicy{Limit: 2}), // at most 2 calls of a tenant at once
	)
	if err != nil {
		return err
	}
	defer s.Shutdown(context.Background())

	tr := &tracker{running: map[string]int{}, most: map[string]int{}, done: map[string]int{},
		total: map[string]int{}, finish: map[string]int{}}
	submit := func(tenant string, n int) error {
		tasks := make([]coordinator.Task, n)
		for i := range tasks {
			d := time.Millisecond
			if i%10 == 3 {
				d = 15 * time.Millisecond // a slow call now and then
			}
			tasks[i] = coordinator.Task{ID: fmt.Sprintf("%s/%d", tenant, i), Pool: "api", Key: tenant, Run: tr.call(tenant, d)}
		}
		tr.mu.Lock()
		tr.total[tenant] += n
		tr.mu.Unlock()
		return s.Submit(tasks...)
	}
	start := time.Now()
	if err := submit("noisy", 300); err != nil {
		return err
	}
	for _, t := range tenants()[1:] {
		if err := submit(t, 8); err != nil {
			return err
		}
	}

	// A job that needs all of "batch" (Slots 4) among small ones: it
	// waits only for the small ones already running.
	var batch []coordinator.Task
	var order []string
	var omu sync.Mutex
	for i := range 40 {
		id := fmt.Sprintf("small/%d", i)
		slots, d := 1, 2*time.Millisecond
		if i == 10 {
			id, slots, d = "reindex", 4, 20*time.Millisecond
		}
		batch = append(batch, coordinator.Task{ID: id, Pool: "batch", Slots: slots, Run: func(context.Context) error {
			omu.Lock()
			order = append(order, id)
			omu.Unlock()
			time.Sleep(d) // stands for the work
			return nil
		}})
	}
	if err := s.Submit(batch...); err != nil {
		return err
	}

	// Progress every 250ms; a pause of the service in the middle.
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	waited := make(chan error, 1)
	go func() { waited <- s.Wait(context.Background()) }()
	pausedOnce := false
	for {
		select {
		case err := <-waited:
			return report(tr, start, order, err)
		case <-tick.C:
			fmt.Printf("%6s%s\n", time.Since(start).Round(10*time.Millisecond), tr.progress())
			if !pausedOnce && time.Since(start) > 750*time.Millisecond {
				pausedOnce = true
				if err := s.Pause("api"); err != nil {
					return err
				}
				tr.mu.Lock()
				tr.paused = time.Now()
				tr.mu.Unlock()
				fmt.Printf("paused api: counts %+v\n", s.CountsByPool()["api"])
				time.Sleep(pause) // the outage the pause is for
				tr.mu.Lock()
				tr.paused = time.Time{}
				tr.mu.Unlock()
				if err := s.Resume("api"); err != nil {
					return err
				}
				fmt.Println("resumed api")
			}
		}
	}
}

// report prints what happened and checks what flow control promises.
func report(tr *tracker, start time.Time, order []string, err error) error {
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	fmt.Printf("%6s%s\n", elapsed.Round(10*time.Millisecond), " all done")
	var errs []error
	for _, t := range tenants() {
		fmt.Printf("  %-8s finished after %3d calls in all; at most %d at once\n", t, tr.finish[t], tr.most[t])
		if tr.most[t] > 2 {
			errs = append(errs, fmt.Errorf("%s ran %d calls at once; the limit is 2", t, tr.most[t]))
		}
		if t != "noisy" && tr.finish[t] > 100 {
			errs = append(errs, fmt.Errorf("%s finished after %d calls: the tenants did not take turns", t, tr.finish[t]))
		}
	}
	// The starts over the run against the bucket: at most rate·T + burst
	// (the calls' own clock runs a little behind the scheduler's, so one
	// call of slack).
	span := tr.starts[len(tr.starts)-1].Sub(tr.starts[0])
	bound := int(rate*span.Seconds()) + burst + 1
	fmt.Printf("  %d calls in %s: %.0f a second (limit %d, burst %d); %d started while paused\n",
		len(tr.starts), span.Round(time.Millisecond), float64(len(tr.starts))/span.Seconds(), rate, burst, tr.inPause)
	if len(tr.starts) > bound {
		errs = append(errs, fmt.Errorf("%d calls in %v; the limit allows %d", len(tr.starts), span, bound))
	}
	if tr.inPause > 0 {
		errs = append(errs, fmt.Errorf("%d calls started while the pool was paused", tr.inPause))
	}
	at := slices.Index(order, "reindex")
	fmt.Printf("  reindex (4 slots) started after %d of the 39 small batch tasks\n", at)
	if at < 0 || at > 10+4 {
		errs = append(errs, fmt.Errorf("reindex started after %d small tasks; want at most the 10 ahead of it and the 4 running", at))
	}
	return errors.Join(errs...)
}
