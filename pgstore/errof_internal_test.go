package pgstore

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/internal/record"
)

// errOf reads back what errorColumns wrote: a sentinel alone, or wrapped in
// a function's text of its own (errors.Is finds it, Error says the text),
// as a restored scheduler's Info gives them.
func TestErrOfReadsErrorColumnsBack(t *testing.T) {
	for _, c := range []struct {
		kind     uint8
		msg      string
		sentinel error
	}{
		{record.ErrKindCancelled, "", coordinator.ErrCancelled},
		{record.ErrKindClosed, "", coordinator.ErrClosed},
		{record.ErrKindInterrupted, "", coordinator.ErrInterrupted},
		{record.ErrKindCancelledText, fmt.Sprintf("upstream said: %v", coordinator.ErrCancelled), coordinator.ErrCancelled},
		{record.ErrKindClosedText, "closing: " + coordinator.ErrClosed.Error(), coordinator.ErrClosed},
		{record.ErrKindInterruptedText, "lost: " + coordinator.ErrInterrupted.Error(), coordinator.ErrInterrupted},
		{record.ErrKindOther, "plain failure", nil},
	} {
		kind, text := errorColumns(c.kind, c.msg, time.Second)
		err := errOf(kind, text)
		want := c.msg
		if want == "" {
			want = c.sentinel.Error()
		}
		if err.Error() != want || (c.sentinel != nil && !errors.Is(err, c.sentinel)) {
			t.Errorf("kind %d, %q: errOf(%q, %q) = %v; want %q wrapping %v", c.kind, c.msg, kind, text, err, want, c.sentinel)
		}
	}
}
