package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/pgstore"
)

// A task's error, log lines and even its ID may hold any bytes, and
// PostgreSQL's text and jsonb take UTF-8 without NUL: such a task must not
// stop the leader (a commit that fails stops its scheduler, and the next
// leader would meet the same task). baton.tasks shows those bytes as
// U+FFFD; the scheduler keeps them exactly. Through the database, where
// text is all there is, such an ID is refused with a clear error.
func TestOddBytesDoNotStopTheLeader(t *testing.T) {
	ctx := testCtx(t)
	name := uniqueName("odd")
	odd := pgstore.WithScheduler(coordinator.WithFunc("odd", func(ctx context.Context, p []byte) error {
		coordinator.Logger(ctx).Info("line\x00with \xff", "k", "v\x00\xfe")
		return errors.New(string(p))
	}))
	a := startService(t, name, pgstore.WithInstance("a"), odd)
	<-a.Leading()
	s := a.Scheduler()
	if s == nil {
		t.Fatal("a does not lead")
	}
	const weird = "id\x00\xff"
	if err := s.Submit(coordinator.Task{ID: "nul", Func: "odd", Payload: []byte("nul\x00byte")},
		coordinator.Task{ID: "utf8", Func: "odd", Payload: []byte("bad \xff\xfe")},
		coordinator.Task{ID: weird, Func: "odd", Payload: []byte("x"), Deps: []string{"nul"}, When: coordinator.AllDone}); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitTasks(ctx, "nul", "utf8", weird); err == nil {
		t.Fatal("the odd tasks succeeded; want them failed")
	}
	if err := s.Submit(coordinator.Task{ID: "after", Func: "echo"}); err != nil {
		t.Fatalf("Submit after the odd tasks = %v; want the leader still up", err)
	}
	if err := a.WaitTasks(ctx, "after"); err != nil {
		t.Fatalf("WaitTasks(after) = %v; want the leader still committing", err)
	}
	if got := a.Scheduler(); got != s {
		t.Fatal("a's scheduler stopped")
	}
	for id, text := range map[string]string{"nul": "nul\uFFFDbyte", "utf8": "bad \uFFFD"} {
		ti, _, err := a.Info(ctx, id)
		if err != nil || ti.Err == nil || ti.Err.Error() != text {
			t.Errorf("Info(%s) through the database: err %v, %v; want %q", id, ti.Err, err, text)
		}
		h, _, err := a.History(ctx, id)
		if err != nil || len(h.Attempts) != 1 || len(h.Attempts[0].Logs) != 1 || h.Attempts[0].Logs[0].Message != "line\uFFFDwith \uFFFD" {
			t.Errorf("History(%s) through the database = %+v, %v; want its line with U+FFFD", id, h, err)
		}
		if own, _ := s.Info(id); own.Err == nil || strings.Contains(own.Err.Error(), "\uFFFD") {
			t.Errorf("the scheduler's own Info(%s).Err = %v; want the bytes as they were", id, own.Err)
		}
	}
	var n int
	if err := newPool(t).QueryRow(ctx, `SELECT count(*) FROM baton.tasks WHERE store = $1 AND id = $2`, name, "id\uFFFD\uFFFD").Scan(&n); err != nil || n != 1 {
		t.Errorf("the odd ID's row: %d, %v; want it shown with U+FFFD", n, err)
	}

	// An error of any size is cut in the columns (a row's jsonb is
	// bounded, and every history record of the task holds its attempts'
	// errors), whole in the scheduler.
	huge := strings.Repeat("é", 200<<10)
	if err := s.Submit(coordinator.Task{ID: "huge", Func: "odd", Payload: []byte(huge)}); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitTasks(ctx, "huge"); err == nil {
		t.Fatal("huge succeeded; want it failed")
	}
	if ti, _, err := a.Info(ctx, "huge"); err != nil || ti.Err == nil || len(ti.Err.Error()) > 70<<10 ||
		!strings.HasPrefix(ti.Err.Error(), "éé") || !strings.HasSuffix(ti.Err.Error(), fmt.Sprintf("(cut: %d bytes in all)", len(huge))) {
		t.Errorf("Info(huge) through the database: %d bytes of error, %v; want it cut to 64 KiB, saying how long it was", len(fmt.Sprint(ti.Err)), err)
	}
	if own, _ := s.Info("huge"); own.Err == nil || own.Err.Error() != huge {
		t.Error("the scheduler's own Info(huge).Err is not the whole error")
	}

	// An ID longer than an index entry holds, submitted on the scheduler:
	// shown cut; the leader goes on.
	long := strings.Repeat("L", 6000)
	if err := s.Submit(coordinator.Task{ID: long, Func: "echo"}, coordinator.Task{ID: "after-long", Func: "echo", Deps: []string{long}}); err != nil {
		t.Fatal(err)
	}
	if err := a.WaitTasks(ctx, "after-long"); err != nil {
		t.Fatalf("WaitTasks(after-long) = %v; want the leader still committing", err)
	}

	for _, task := range []coordinator.Task{
		{ID: strings.Repeat("L", 2000), Func: "echo"},
		{ID: "a\x00b", Func: "echo"},
		{ID: "a\xffb", Func: "echo"},
		{ID: "ok", Func: "echo", Deps: []string{"d\x00"}},
		{ID: "ok", Func: "echo", Key: "k\xff"},
	} {
		if err := a.Submit(ctx, task); !errors.Is(err, coordinator.ErrInvalidTask) {
			t.Errorf("Submit through the database of %+q = %v; want ErrInvalidTask", task.ID, err)
		}
	}
	if _, err := a.Cancel(ctx, "a\x00b"); !errors.Is(err, coordinator.ErrInvalidTask) {
		t.Errorf("Cancel through the database of an ID with NUL = %v; want ErrInvalidTask", err)
	}
}
