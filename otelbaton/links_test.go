package otelbaton

import (
	"fmt"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func spanContext(i int) trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{byte(i + 1)}})
}

// The memory keeps the last n tasks recorded; a task recorded again is
// kept by its newer record.
func TestLinkMemoryForgetsTheOldest(t *testing.T) {
	lm := newLinkMemory(3)
	for i := range 3 {
		lm.put(fmt.Sprint("t", i), spanContext(i))
	}
	lm.put("t0", spanContext(9)) // t0 again, in the oldest slot (its own first record): now the newest
	lm.put("t3", spanContext(3)) // evicts t1
	if sc, ok := lm.get("t0"); !ok || !sc.Equal(spanContext(9)) {
		t.Errorf("t0 = %v, %v; want its newer record", sc, ok)
	}
	lm.put("t4", spanContext(4)) // evicts t2
	lm.put("t5", spanContext(5)) // evicts t0
	// Records, oldest first: t0(2nd), t3, t4, t5 - three fit: t3, t4, t5.
	for id, want := range map[string]bool{"t0": false, "t1": false, "t2": false, "t3": true, "t4": true, "t5": true} {
		if _, ok := lm.get(id); ok != want {
			t.Errorf("%s remembered = %v; want %v", id, ok, want)
		}
	}
	if lm.len() != 3 {
		t.Errorf("len = %d; want 3", lm.len())
	}
}
