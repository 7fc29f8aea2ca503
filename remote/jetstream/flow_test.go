package jetstream_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	bjs "github.com/batonhq/baton/remote/jetstream"
)

// Flow control reaches a remote pool: its size counts slots (a task of 3
// slots runs with at most one 1-slot attempt beside it in a pool of 4,
// wherever the handlers run), a key's limit holds across the pool, and a
// paused remote pool starts nothing (its ready tasks stay Ready) until it
// is resumed, losing nothing. An attempt is started, for a remote pool,
// once it is published to the stream.
func TestFlowControlReachesRemotePools(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	pool := newPool(t, nc, "fc")
	var mu sync.Mutex
	slots, mostSlots := 0, 0
	keys, mostKey := map[string]int{}, 0
	gate := make(chan struct{})
	entered := make(chan string, 64)
	serve(t, nc, "fc", map[string]bjs.Handler{
		"work": func(ctx context.Context, data []byte) ([]byte, error) {
			var weight int
			var key string
			fmt.Sscanf(string(data), "%d %s", &weight, &key)
			mu.Lock()
			slots += weight
			keys[key]++
			mostSlots = max(mostSlots, slots)
			if key != "-" {
				mostKey = max(mostKey, keys[key])
			}
			mu.Unlock()
			time.Sleep(time.Duration(1+weight*3) * time.Millisecond) // the work, uneven
			mu.Lock()
			slots -= weight
			keys[key]--
			mu.Unlock()
			return nil, nil
		},
		"gate": func(ctx context.Context, data []byte) ([]byte, error) {
			entered <- string(data)
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return nil, nil
		},
	}, bjs.WithConcurrency(8))
	s := newScheduler(t, coordinator.WithPool("remote", 4, pool), coordinator.WithKeys(coordinator.KeyPolicy{Limit: 1}))
	work := func(id string, weight int, key string) coordinator.Task {
		data := strconv.Itoa(weight) + " -"
		if key != "" {
			data = strconv.Itoa(weight) + " " + key
		}
		return coordinator.Task{ID: id, Pool: "remote", Slots: weight, Key: key, Payload: bjs.Payload{Kind: "work", Data: []byte(data)}}
	}
	var tasks []coordinator.Task
	for i := range 30 {
		switch {
		case i%10 == 4:
			tasks = append(tasks, work(fmt.Sprint("big", i), 3, ""))
		case i%3 == 0:
			tasks = append(tasks, work(fmt.Sprint("k", i), 1, "tenant"))
		default:
			tasks = append(tasks, work(fmt.Sprint("w", i), 1, ""))
		}
	}
	if err := s.Submit(tasks...); err != nil {
		t.Fatal(err)
	}
	wait(t, s)
	if mostSlots > 4 || mostSlots < 3 {
		t.Errorf("at most %d slots in use at once; want 3 or 4 (a pool of 4 running tasks of 3 slots)", mostSlots)
	}
	if mostKey > 1 {
		t.Errorf("key tenant ran %d attempts at once; its limit is 1", mostKey)
	}

	// Pause: two attempts running (published), five more ready.
	if err := s.Submit(coordinator.Task{ID: "g0", Pool: "remote", Payload: bjs.Payload{Kind: "gate", Data: []byte("g0")}},
		coordinator.Task{ID: "g1", Pool: "remote", Payload: bjs.Payload{Kind: "gate", Data: []byte("g1")}}); err != nil {
		t.Fatal(err)
	}
	<-entered
	<-entered
	if err := s.Pause("remote"); err != nil {
		t.Fatal(err)
	}
	var more []coordinator.Task
	for i := range 5 {
		more = append(more, work(fmt.Sprint("late", i), 1, ""))
	}
	if err := s.Submit(more...); err != nil {
		t.Fatal(err)
	}
	close(gate)
	if err := s.WaitTasks(context.Background(), "g0", "g1"); err != nil {
		t.Fatal(err)
	}
	if c := s.CountsByPool()["remote"]; !c.Paused || c.Ready != 5 || c.Running != 0 {
		t.Fatalf("paused remote pool after its running attempts ended: %+v; want paused, 5 ready, none running", c)
	}
	if err := s.Resume("remote"); err != nil {
		t.Fatal(err)
	}
	wait(t, s)
	if c := s.Counts(); c.Succeeded != 37 {
		t.Errorf("%+v; want all 37 succeeded", c)
	}
}
