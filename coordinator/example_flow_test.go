package coordinator_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/batonhq/baton/coordinator"
)

// A paused pool starts nothing; its ready tasks wait, and Resume starts
// them in the order they would have started.
func ExampleScheduler_Pause() {
	s, err := coordinator.New(coordinator.WithWorkers(2))
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())

	if err := s.Pause(""); err != nil { // "" is the default pool
		panic(err)
	}
	if err := s.Submit(coordinator.Task{ID: "report", Run: func(context.Context) error { return nil }}); err != nil {
		panic(err)
	}
	c := s.Counts()
	fmt.Println("paused:", s.Paused(""), "ready:", c.Ready, "succeeded:", c.Succeeded)
	if err := s.Resume(""); err != nil {
		panic(err)
	}
	if err := s.Wait(context.Background()); err != nil {
		panic(err)
	}
	c = s.Counts()
	fmt.Println("paused:", s.Paused(""), "ready:", c.Ready, "succeeded:", c.Succeeded)
	// Output:
	// paused: true ready: 1 succeeded: 0
	// paused: false ready: 0 succeeded: 1
}

// A rate limit of 2 starts a second with a burst of 1: the tasks start
// half a second apart, on the scheduler's clock (here a mock one, moved to
// each time the scheduler waits for, which WithTimerArmed reports).
func ExampleWithRateLimit() {
	mock := clock.NewMock()
	armed := make(chan time.Time, 64)
	s, err := coordinator.New(coordinator.WithClock(mock), coordinator.WithWorkers(4),
		coordinator.WithRateLimit("", 2, 1),
		coordinator.WithTimerArmed(func(due time.Time) { armed <- due }))
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())

	start := mock.Now()
	started := make(chan string)
	var tasks []coordinator.Task
	for i := range 4 {
		id := fmt.Sprint("call", i)
		tasks = append(tasks, coordinator.Task{ID: id, Run: func(context.Context) error {
			started <- id
			return nil
		}})
	}
	if err := s.Submit(tasks...); err != nil {
		panic(err)
	}
	for i := range 4 {
		fmt.Println(<-started, "started at", mock.Now().Sub(start))
		for i < 3 { // move the clock to the next token
			if due := <-armed; due.After(mock.Now()) {
				mock.Set(due)
				break
			}
		}
	}
	if err := s.Wait(context.Background()); err != nil {
		panic(err)
	}
	// Output:
	// call0 started at 0s
	// call1 started at 500ms
	// call2 started at 1s
	// call3 started at 1.5s
}

// Keys take turns: a tenant with many ready tasks does not hold back one
// with few. One worker shows the order exactly.
func ExampleWithKeys() {
	s, err := coordinator.New(coordinator.WithWorkers(1),
		coordinator.WithKeys(coordinator.KeyPolicy{Limit: 1})) // one attempt of a tenant at a time, all pools
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())

	var mu sync.Mutex
	var order []string
	task := func(id, key string) coordinator.Task {
		return coordinator.Task{ID: id, Key: key, Run: func(context.Context) error {
			mu.Lock()
			order = append(order, id)
			mu.Unlock()
			return nil
		}}
	}
	if err := s.Pause(""); err != nil { // so that both tenants' tasks are ready before any starts
		panic(err)
	}
	err = s.Submit(task("big1", "big"), task("big2", "big"), task("big3", "big"), task("big4", "big"),
		task("small1", "small"), task("small2", "small"))
	if err != nil {
		panic(err)
	}
	if err := s.Resume(""); err != nil {
		panic(err)
	}
	if err := s.Wait(context.Background()); err != nil {
		panic(err)
	}
	fmt.Println(order)
	// Output:
	// [big1 small1 big2 small2 big3 big4]
}

// A task of several slots takes that many of its pool's workers: here
// "reindex" needs all 3, so it waits for the attempts running, and the
// tasks submitted after it wait for it.
func ExampleTask_slots() {
	s, err := coordinator.New(coordinator.WithWorkers(3))
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())

	var mu sync.Mutex
	running, most := 0, 0
	var order []string
	task := func(id string, slots int) coordinator.Task {
		return coordinator.Task{ID: id, Slots: slots, Run: func(context.Context) error {
			mu.Lock()
			running += max(slots, 1)
			most = max(most, running)
			order = append(order, id)
			mu.Unlock()
			time.Sleep(time.Millisecond) // the work
			mu.Lock()
			running -= max(slots, 1)
			mu.Unlock()
			return nil
		}}
	}
	if err := s.Submit(task("a", 1), task("b", 1), task("reindex", 3), task("c", 1)); err != nil {
		panic(err)
	}
	if err := s.Wait(context.Background()); err != nil {
		panic(err)
	}
	fmt.Println(order, "slots in use at most:", most)
	if err := s.Submit(coordinator.Task{ID: "huge", Slots: 4, Run: func(context.Context) error { return nil }}); err != nil {
		fmt.Println(err)
	}
	// Output:
	// [a b reindex c] slots in use at most: 3
	// coordinator: task "huge": invalid task: Slots 4: its pool "" has 3 workers
}
