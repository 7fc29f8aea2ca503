package coordinator_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonhq/baton/coordinator"
)

type ran struct {
	attempt, run int
	ok           bool
}

var historySeed = flag.Int64("history.seed", 0, "TestHistoryKeepsTheNewestAttempts: the first of its 60 seeds (0: a new one, logged)")

// Random graphs, tiny rings: each task's History is the newest of the
// attempts it ran (at most perTask), and Attempts + Dropped counts them.
// Each run draws new seeds (logged; -history.seed repeats them).
func TestHistoryKeepsTheNewestAttempts(t *testing.T) {
	base := *historySeed
	if base == 0 {
		base = rand.Int63n(1<<62) + 1
	}
	t.Logf("seeds from %d (-history.seed=%d repeats them)", base, base)
	for i := range int64(60) {
		seed := base + i
		for _, b := range [][2]int{{1, 2}, {2, 3}, {3, 5}, {2, 40}, {5, 1000}} {
			t.Run(fmt.Sprint(seed, b), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { historyModel(t, seed, b[0], b[1]) })
			})
		}
	}
}

func historyModel(t *testing.T, seed int64, perTask, total int) {
	rng := rand.New(rand.NewSource(seed))
	s := newScheduler(t, coordinator.WithWorkers(1+rng.Intn(2)), coordinator.WithHistory(perTask, total))
	var mu sync.Mutex
	log := map[string][]ran{}
	runs := map[string]int{}
	gates := map[string]chan struct{}{}
	var tasks []coordinator.Task
	n := 5 + rng.Intn(60)
	for i := range n {
		id := fmt.Sprint("t", i)
		tk := coordinator.Task{ID: id}
		fails := 0
		switch rng.Intn(6) {
		case 0:
			fails = 1 + rng.Intn(3)
			tk.Retry = coordinator.RetryPolicy{MaxAttempts: 4}
		case 1:
			tk.Every, tk.Times = time.Minute, 2+rng.Intn(4)
		case 2:
			g := make(chan struct{})
			gates[id] = g
		}
		if i > 0 && rng.Intn(2) == 0 {
			tk.Deps = []string{fmt.Sprint("t", rng.Intn(i))}
			tk.When = coordinator.AllDone
		}
		calls := 0
		g := gates[id]
		sleep := time.Duration(rng.Intn(3)) * time.Second
		tk.Run = func(ctx context.Context) error {
			if g != nil {
				<-g
			}
			if sleep > 0 {
				time.Sleep(sleep)
			}
			calls++
			mu.Lock()
			defer mu.Unlock()
			if calls <= fails {
				log[id] = append(log[id], ran{calls, 1, false})
				return errors.New("planned")
			}
			runs[id]++
			a := 1
			if fails > 0 {
				a = calls
			}
			log[id] = append(log[id], ran{a, runs[id], true})
			return nil
		}
		tasks = append(tasks, tk)
	}
	f := s.Feed()
	defer f.Close()
	var es []coordinator.EndedAttempt
	readSome := func() {
		p, err := f.Next(context.Background(), 3)
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, p.Ended...)
	}
	readSome()
	if err := s.Submit(tasks...); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	readSome()
	for _, g := range gates {
		close(g)
	}
	for range 5 {
		time.Sleep(30 * time.Second)
		readSome()
	}
	s.Wait(context.Background())
	synctest.Wait()
	for {
		p, err := f.Next(context.Background(), 3)
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, p.Ended...)
		if !p.More {
			break
		}
	}
	for _, e := range es {
		if e.Tasks > 1 && (e.ID != "" || e.Attempt != 1 || e.Run != 1 || e.Outcome != coordinator.OutcomeSucceeded) {
			t.Fatalf("entry %+v", e)
		}
		if e.ID == "" {
			continue
		}
		found := false
		for _, w := range log[e.ID] {
			if w.attempt == e.Attempt && w.run == e.Run && w.ok == (e.Outcome == coordinator.OutcomeSucceeded) {
				found = true
			}
		}
		if !found {
			t.Fatalf("entry %+v: %s ran no such attempt (%+v)", e, e.ID, log[e.ID])
		}
	}
	for _, tk := range tasks {
		h, _ := s.History(tk.ID)
		mu.Lock()
		want := log[tk.ID]
		mu.Unlock()
		if len(h.Attempts)+h.Dropped != len(want) || len(h.Attempts) > perTask {
			t.Fatalf("History(%s) = %d attempts + %d dropped; it ran %d (perTask %d)", tk.ID, len(h.Attempts), h.Dropped, len(want), perTask)
		}
		tail := want[len(want)-len(h.Attempts):]
		for i, a := range h.Attempts {
			w := tail[i]
			if a.Attempt != w.attempt || a.Run != w.run || (a.Outcome == coordinator.OutcomeSucceeded) != w.ok {
				t.Fatalf("History(%s)[%d] = attempt %d run %d %v; want %+v (all: %+v)", tk.ID, i, a.Attempt, a.Run, a.Outcome, w, want)
			}
		}
	}
}
