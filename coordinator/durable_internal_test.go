package coordinator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/record"
	"github.com/batonhq/baton/worker"
)

// A state record's error kind restores the sentinel it was written from:
// errors.Is holds across a restart.
func TestStateErrorsKeepTheirIdentity(t *testing.T) {
	for _, tc := range []struct {
		kind uint8
		is   error
	}{
		{record.ErrKindCancelled, ErrCancelled},
		{record.ErrKindClosed, ErrClosed},
		{record.ErrKindInterrupted, ErrInterrupted},
		{record.ErrKindTimeout, worker.ErrTimeout},
		{record.ErrKindTimeout, context.DeadlineExceeded},
		{record.ErrKindJoin, ErrChildFailed},
	} {
		st := record.State{ErrKind: tc.kind, Timeout: time.Second}
		if err := stateErr(&st); !errors.Is(err, tc.is) {
			t.Errorf("error kind %d restored as %v; want it to match %v", tc.kind, err, tc.is)
		}
	}
	if err := stateErr(&record.State{ErrKind: record.ErrKindOther, ErrMsg: "boom"}); err == nil || err.Error() != "boom" {
		t.Errorf("an error of another kind restored as %v; want its text", err)
	}
}
