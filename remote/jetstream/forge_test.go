package jetstream_test

import (
	"context"
	"testing"

	"github.com/batonhq/baton/coordinator"
	bjs "github.com/batonhq/baton/remote/jetstream"
	njs "github.com/nats-io/nats.go/jetstream"
)

// A worker cannot settle an attempt it was not given (issue #28 item 7):
// outcomes forged ahead for every early round and attempt of a task not
// yet submitted (attempt keys are guessable) carry no token of the Pool's
// (WithSecret), and are dropped; when the task comes, its attempt runs on
// a worker and ends with that worker's result. Before, the first Do found
// the forged outcome waiting and returned it: the task succeeded without
// running.
func TestForgedOutcomeOfAFutureAttemptIsNotApplied(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	logs := make(chan string, 256)
	pool := newPool(t, nc, "forge", bjs.WithLogger(slogTo(logs)), bjs.WithInstance("inst"),
		bjs.WithSecret([]byte("a secret the workers do not know")))
	serve(t, nc, "forge", map[string]bjs.Handler{"echo": echo}, bjs.WithWorkerName("w1"))
	js, _ := njs.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	forged := 0
	for round := range 3 {
		for attempt := range 3 {
			key := bjs.AttemptKey("inst", "future", round, attempt)
			if _, err := js.Publish(ctx, bjs.OutcomeSubject("forge", "inst", key), bjs.EncodeOutcome(key, "ok", "forger", 1, "")); err != nil {
				t.Fatal(err)
			}
			forged++
		}
	}
	for range forged {
		waitLog(t, logs, "jetstream: dropping a bad outcome")
	}
	s := newScheduler(t, coordinator.WithPool("remote", 2, pool))
	if err := s.Submit(task("future", "echo")); err != nil {
		t.Fatal(err)
	}
	wait(t, s)
	if r := result(t, s, "future"); r.Worker != "w1" || string(r.Data) != "future" {
		t.Errorf("Result = %+v; want w1's echo: the attempt ran (forged outcomes: %d)", r, forged)
	}
	if st := pool.Stats(); st.Outcomes != 1 {
		t.Errorf("Stats() = %+v; want 1 outcome, the worker's", st)
	}
}
