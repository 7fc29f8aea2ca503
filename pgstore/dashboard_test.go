package pgstore_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/dashboard"
)

// TestDashboardOnTheLeader: the dashboard runs on the leader's scheduler
// as on any other, and shows the tasks the leader restored from the
// database after a takeover.
func TestDashboardOnTheLeader(t *testing.T) {
	ctx := testCtx(t)
	name := uniqueName("dash")
	a := startService(t, name)
	<-a.Leading()
	if err := a.Submit(ctx, coordinator.Task{ID: "shown-1", Func: "echo", Payload: []byte("x")}, coordinator.Task{ID: "shown-2", Func: "fail"}); err != nil {
		t.Fatal(err)
	}
	a.WaitTasks(ctx, "shown-1", "shown-2")
	b := startService(t, name)
	handOver(ctx, t, a, b)
	d := dashboard.New(b.Scheduler())
	defer d.Close()
	for _, path := range []string{"/task.json?id=shown-1", "/task.json?id=shown-2", "/tasks.json?status=failed"} {
		// The tasks table is read from the dashboard's copy of the
		// scheduler, which a new dashboard fills in the background (the
		// page says it is loading, then lags by an update interval): the
		// test looks every few milliseconds, up to its guard. A task's
		// page asks the scheduler.
		tick := time.NewTicker(20 * time.Millisecond)
		for {
			rec := httptest.NewRecorder()
			d.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			if rec.Code != http.StatusOK {
				t.Errorf("GET %s = %d: %s", path, rec.Code, rec.Body)
				break
			}
			if strings.Contains(rec.Body.String(), "shown-") {
				break
			}
			select {
			case <-tick.C:
				continue
			case <-ctx.Done():
				t.Errorf("GET %s does not show the task: %s", path, rec.Body)
			}
			break
		}
		tick.Stop()
	}
	if !strings.Contains(func() string {
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/task.json?id=shown-2", nil))
		return rec.Body.String()
	}(), "failed") {
		t.Error("the dashboard does not show shown-2 failed")
	}
}
