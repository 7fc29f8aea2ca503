package coordinator

import "testing"

// Result, Upstream and Map's reducer are answered only for a task that
// still runs with the asking context (runsWith): from its hand-out until
// its end is applied. A goroutine the function left behind asks with a
// context that no longer names it, and once retention gave the record to
// another task, never for that task.
func TestRunsWithTheAttemptsContextOnly(t *testing.T) {
	r := newRig(1)
	r.s.retain = true
	r.submit(t, Task{ID: "a", Run: noop})
	r.step()
	a, _ := r.s.findLive("a")
	ls, seq := r.laneOf(t, "a")
	c := ls.l.Ctx(seq)
	if !r.s.runsWith(a, c) {
		t.Fatal("runsWith(a, its handed-out attempt's context) = false; want true")
	}
	if r.s.runsWith(a, nil) {
		t.Error("runsWith(a, another context) = true; want false")
	}
	r.drain(0) // a runs and ends
	r.step()
	if r.s.runsWith(a, c) {
		t.Errorf("runsWith(a) after its end = true (status %v); want false", r.s.status(a))
	}
	r.submit(t, Task{ID: "b", Run: noop}) // a is forgotten: b may take its record
	r.step()
	if b, _ := r.s.findLive("b"); r.s.runsWith(b, c) {
		t.Errorf("runsWith(b, a's old context) = true; want false")
	}
	if r.s.runsWith(int32(len(r.s.hot)+5), c) {
		t.Error("runsWith(an index past every record) = true; want false")
	}
}
