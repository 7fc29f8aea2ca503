package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	bjs "github.com/batonhq/baton/remote/jetstream"
)

// A handler logs through coordinator.Logger as a local task does: Serve
// sends its newest lines (WithHandlerLogs) back with the outcome, and the
// attempt's history on the coordinator keeps them with the worker's name
// and the count of lines left out, for a failure as for a success; every
// line also reaches the worker's own logger.
func TestHandlerLogLinesReachTheHistory(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	pool := newPool(t, nc, "logs", bjs.WithLease(2*time.Second))
	workerLines := make(chan string, 64)
	serve(t, nc, "logs", map[string]bjs.Handler{
		"chatty": func(ctx context.Context, data []byte) ([]byte, error) {
			for i := range 5 {
				coordinator.Logger(ctx).Info(fmt.Sprint("step ", i), "of", string(data))
			}
			if string(data) == "bad" {
				return nil, errors.New("planned")
			}
			return nil, nil
		},
	}, bjs.WithWorkerName("far-1"), bjs.WithHandlerLogs(3, 1<<10), bjs.WithWorkerLogger(slogTo(workerLines)))
	s := newScheduler(t, coordinator.WithPool("remote", 2, pool), coordinator.WithLogger(slog.New(slog.DiscardHandler)))
	if err := s.Submit(
		coordinator.Task{ID: "good", Pool: "remote", Payload: bjs.Payload{Kind: "chatty", Data: []byte("good")}},
		coordinator.Task{ID: "bad", Pool: "remote", Payload: bjs.Payload{Kind: "chatty", Data: []byte("bad")}},
	); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	_ = s.Wait(ctx)
	for _, id := range []string{"good", "bad"} {
		h, ok := s.History(id)
		if !ok || len(h.Attempts) != 1 {
			t.Fatalf("History(%s) = %+v, %v; want one attempt", id, h, ok)
		}
		a := h.Attempts[0]
		var msgs []string
		for _, l := range a.Logs {
			msgs = append(msgs, l.Message+" "+l.Attrs)
		}
		want := fmt.Sprintf("step 2 of=%[1]s,step 3 of=%[1]s,step 4 of=%[1]s", id)
		if strings.Join(msgs, ",") != want || a.LogsDropped != 2 || a.Worker != "far-1" {
			t.Errorf("%s: lines %q, %d dropped, worker %q; want %q, 2 dropped, far-1", id, msgs, a.LogsDropped, a.Worker, want)
		}
	}
	n := 0
	for len(workerLines) > 0 {
		if strings.HasPrefix(<-workerLines, "step ") {
			n++
		}
	}
	if n != 10 {
		t.Errorf("the worker's logger had %d step lines; want all 10", n)
	}
}
