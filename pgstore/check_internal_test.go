package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/batonhq/baton/coordinator"
)

// TestCheckBatchAgreesWithSubmit: on random batches (cycles, chains
// behind them, self-dependencies, repeated and empty IDs), what SubmitTx
// refuses without the database is what an in-memory scheduler's Submit
// refuses, with the same error (sentinel, task, cycle lists); what it
// lets through, Submit accepts or refuses for what only it checks (an
// unknown dependency here: the batch's outside dependencies are
// SubmitTx's query's, and returned).
func TestCheckBatchAgreesWithSubmit(t *testing.T) {
	// Seeds that failed once (an empty ID named after a repeated one; a
	// cycle named before an unknown dependency), then a new one.
	for _, seed := range []uint64{16168780697839422452, 3710712998521955322, 4752504865258770009, rand.Uint64()} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { checkBatchAgrees(t, seed) })
	}
}

func checkBatchAgrees(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 3))
	for round := range 800 {
		n := 1 + rng.IntN(8)
		tasks := make([]coordinator.Task, n)
		for i := range tasks {
			id := fmt.Sprintf("t%d", rng.IntN(n+2))
			if rng.IntN(40) == 0 {
				id = ""
			}
			var deps []string
			for range rng.IntN(3) {
				deps = append(deps, fmt.Sprintf("t%d", rng.IntN(n+2)))
			}
			slices.Sort(deps)
			deps = slices.Compact(deps)
			tasks[i] = coordinator.Task{ID: id, Func: "f", Deps: deps}
		}
		s, err := coordinator.New(coordinator.WithFunc("f", func(context.Context, []byte) error { return nil }))
		if err != nil {
			t.Fatal(err)
		}
		// Submit with the outside dependencies present, as if stored:
		// their absence is the database's to say.
		_, outside, checkErr := checkBatch(tasks)
		var pre []coordinator.Task
		if checkErr == nil {
			for _, d := range outside {
				pre = append(pre, coordinator.Task{ID: d, Func: "f", Delay: 1 << 40})
			}
			checkErr = findCycle(tasks)
		}
		if len(pre) > 0 {
			if err := s.Submit(pre...); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		subErr := s.Submit(tasks...)
		s.Shutdown(context.Background())
		if checkErr == nil {
			if subErr != nil {
				t.Fatalf("round %d: %v: checkBatch passed it, Submit = %v", round, tasks, subErr)
			}
			continue
		}
		if subErr == nil {
			t.Fatalf("round %d: %v: checkBatch = %v, Submit accepted it", round, tasks, checkErr)
		}
		var c1, c2 *coordinator.CycleError
		if errors.As(checkErr, &c1) {
			if !errors.As(subErr, &c2) || !slices.Equal(c1.InCycle, c2.InCycle) || !slices.Equal(c1.Behind, c2.Behind) {
				t.Fatalf("round %d: %v: checkBatch = %v, Submit = %v", round, tasks, checkErr, subErr)
			}
			continue
		}
		var t1, t2 *coordinator.TaskError
		if !errors.As(checkErr, &t1) || !errors.As(subErr, &t2) || !errors.Is(subErr, t1.Err) {
			t.Fatalf("round %d: %v: checkBatch = %v, Submit = %v", round, tasks, checkErr, subErr)
		}
	}
}
