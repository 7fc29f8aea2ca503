package timerwheel

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func TestAddAlreadyDue(t *testing.T) {
	w := New[int](t0, time.Millisecond)
	if _, ok := w.Add(t0, 1); ok {
		t.Fatalf("Add(start) = ok; want already due")
	}
	if _, ok := w.Add(at(-time.Hour), 1); ok {
		t.Fatalf("Add(before start) = ok; want already due")
	}
	w.Advance(at(5*time.Millisecond), nil, 0)
	if _, ok := w.Add(at(5*time.Millisecond), 1); ok {
		t.Fatalf("Add(now) = ok; want already due")
	}
	if _, ok := w.Add(at(5*time.Millisecond+1), 1); !ok {
		t.Fatalf("Add(now+1ns) = already due; want ok")
	}
}

func TestExactDueWithinTick(t *testing.T) {
	w := New[string](t0, time.Millisecond)
	w.Add(at(1500*time.Microsecond), "a")
	due, ok := w.NextDue()
	if !ok || !due.Equal(at(1500*time.Microsecond)) {
		t.Fatalf("NextDue() = %v, %v; want %v", due, ok, at(1500*time.Microsecond))
	}
	if got := w.Advance(at(1499*time.Microsecond), nil, 0); len(got) != 0 {
		t.Fatalf("Advance(1.499ms) = %v; want nothing (not due yet)", got)
	}
	if got := w.Advance(at(1500*time.Microsecond), nil, 0); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("Advance(1.5ms) = %v; want [a]", got)
	}
	w.verify()
}

func TestBoundaries(t *testing.T) {
	// Due times on tick edges, level edges and far beyond: each fires at
	// exactly its due time, not one nanosecond early.
	dues := []time.Duration{
		time.Millisecond, 63 * time.Millisecond, 64 * time.Millisecond, 65 * time.Millisecond,
		4095 * time.Millisecond, 4096 * time.Millisecond, 4097 * time.Millisecond,
		time.Hour, 24 * time.Hour, 400 * 24 * time.Hour, 100 * 365 * 24 * time.Hour,
	}
	for _, d := range dues {
		w := New[time.Duration](t0, time.Millisecond)
		w.Add(at(d), d)
		w.verify()
		if got := w.Advance(at(d-1), nil, 0); len(got) != 0 {
			t.Fatalf("due %v: Advance(due-1ns) = %v; want nothing", d, got)
		}
		w.verify()
		if due, _ := w.NextDue(); !due.Equal(at(d)) {
			t.Fatalf("due %v: NextDue() after cascades = %v; want %v", d, due.Sub(t0), d)
		}
		if got := w.Advance(at(d), nil, 0); !slices.Equal(got, []time.Duration{d}) {
			t.Fatalf("due %v: Advance(due) = %v; want it", d, got)
		}
		if w.Len() != 0 {
			t.Fatalf("due %v: Len() = %d after firing; want 0", d, w.Len())
		}
	}
}

func TestCancelAfterCascade(t *testing.T) {
	w := New[int](t0, time.Millisecond)
	h, _ := w.Add(at(10*time.Second), 1)
	w.Add(at(10*time.Second+time.Millisecond), 2)
	w.Advance(at(9999*time.Millisecond), nil, 0) // cascades both to level 0
	w.verify()
	if !w.Cancel(h) {
		t.Fatalf("Cancel(after cascade) = false; want true")
	}
	if w.Cancel(h) {
		t.Fatalf("second Cancel = true; want false")
	}
	w.verify()
	if got := w.Advance(at(time.Minute), nil, 0); !slices.Equal(got, []int{2}) {
		t.Fatalf("Advance = %v; want [2]", got)
	}
	if w.Cancel(h) {
		t.Fatalf("Cancel of a reused slot's old handle = true; want false")
	}
	if w.Cancel(Handle{}) {
		t.Fatalf("Cancel(zero Handle) = true; want false")
	}
}

func TestAdvanceMax(t *testing.T) {
	w := New[int](t0, time.Millisecond)
	for i := range 10 {
		w.Add(at(time.Duration(i+1)*time.Millisecond), i)
	}
	got := w.Advance(at(time.Second), nil, 4)
	if !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Fatalf("Advance(max 4) = %v; want [0 1 2 3]", got)
	}
	if due, ok := w.NextDue(); !ok || due.After(at(time.Second)) {
		t.Fatalf("NextDue() = %v, %v; want a time not after now", due, ok)
	}
	got = w.Advance(at(time.Second), got[:0], 0)
	if !slices.Equal(got, []int{4, 5, 6, 7, 8, 9}) {
		t.Fatalf("Advance(rest) = %v; want [4 .. 9]", got)
	}
	w.verify()
}

func TestNegativeResolutionPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatalf("New(-1) did not panic")
		}
	}()
	New[int](t0, -1)
}

// reference is the sorted-slice model the wheel must agree with.
type reference struct {
	now     int64
	pending map[int]int64 // value -> due offset
}

func (r *reference) advance(to int64) []int {
	if to < r.now {
		to = r.now
	}
	r.now = to
	var out []int
	for v, due := range r.pending {
		if due <= to {
			out = append(out, v)
			delete(r.pending, v)
		}
	}
	slices.Sort(out)
	return out
}

// checkAgainstReference runs a program of operations decoded from ops on the
// wheel and the reference and fails on the first disagreement.
func checkAgainstReference(t *testing.T, ops []byte, res time.Duration) {
	t.Helper()
	w := New[int](t0, res)
	ref := &reference{pending: map[int]int64{}}
	handles := map[int]Handle{}
	next := 0
	scale := []int64{1, int64(res / 3), int64(res), int64(res) * 63, int64(res) * 4097, int64(time.Hour)}
	for len(ops) >= 3 {
		op, a, b := ops[0]%4, int64(ops[1]), int64(ops[2])
		ops = ops[3:]
		switch op {
		case 0, 1: // add
			d := ref.now + a*scale[b%int64(len(scale))]
			_, wok := ref.pending[next]
			h, ok := w.Add(t0.Add(time.Duration(d)), next)
			if want := d > ref.now; ok != want || wok {
				t.Fatalf("Add(due %d, now %d) = %v; want %v", d, ref.now, ok, want)
			}
			if ok {
				ref.pending[next] = d
				handles[next] = h
			}
			next++
		case 2: // cancel
			if next == 0 {
				continue
			}
			v := int(a*256+b) % next
			_, want := ref.pending[v]
			if got := w.Cancel(handles[v]); got != want {
				t.Fatalf("Cancel(%d) = %v; want %v", v, got, want)
			}
			delete(ref.pending, v)
		case 3: // advance
			to := ref.now + a*scale[b%int64(len(scale))]
			got := w.Advance(t0.Add(time.Duration(to)), nil, 0)
			slices.Sort(got)
			want := ref.advance(to)
			if !slices.Equal(got, want) {
				t.Fatalf("Advance(%d) = %v; want %v", to, got, want)
			}
		}
		w.verify()
		if w.Len() != len(ref.pending) {
			t.Fatalf("Len() = %d; want %d", w.Len(), len(ref.pending))
		}
		due, ok := w.NextDue()
		if ok != (len(ref.pending) > 0) {
			t.Fatalf("NextDue() ok = %v with %d pending", ok, len(ref.pending))
		}
		if ok {
			min := int64(-1)
			for _, d := range ref.pending {
				if min < 0 || d < min {
					min = d
				}
			}
			if got := int64(due.Sub(t0)); got > min || got <= ref.now {
				t.Fatalf("NextDue() = %d; want in (now %d, earliest %d]", got, ref.now, min)
			}
		}
	}
}

func TestAgainstReference(t *testing.T) {
	seed := rand.Uint64() // a new one each run
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 2))
	for range 300 {
		ops := make([]byte, 3*200)
		for i := range ops {
			ops[i] = byte(r.IntN(256))
		}
		checkAgainstReference(t, ops, time.Millisecond)
	}
}

// FuzzWheel: the first byte picks the resolution, the rest is a program
// of adds, cancels and advances checked against the reference.
func FuzzWheel(f *testing.F) {
	f.Add([]byte{0, 0, 5, 2, 3, 4, 2, 2, 0, 0, 3, 255, 5})
	f.Add([]byte{3, 1, 1, 1, 1, 2, 3, 3, 1, 4, 2, 0, 1, 3, 9, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		res, ops := time.Duration(data[0]%8+1)*time.Millisecond, data[1:]
		if len(ops) > 3*100 {
			ops = ops[:3*100] // verify walks every bucket after each step: keep programs short
		}
		checkAgainstReference(t, ops, res)
	})
}

// Entries due at the same time fire in the order they were added, whether
// the tick is scanned or ordered in the heap, and across cascades.
func TestEqualDueFireInAddOrder(t *testing.T) {
	w := New[int](t0, time.Millisecond)
	due := at(10*time.Second + 500*time.Microsecond)
	for i := range 5 {
		w.Add(due, i) // far ahead: cascades on the way down
	}
	w.Advance(at(10*time.Second+100*time.Microsecond), nil, 0) // first visit of the tick
	w.Add(due, 5)
	w.Add(at(10*time.Second+200*time.Microsecond), 99)
	if got := w.Advance(at(10*time.Second+200*time.Microsecond), nil, 0); !slices.Equal(got, []int{99}) {
		t.Fatalf("Advance(10.0002s) = %v; want [99]", got)
	}
	w.verify()
	if got := w.Advance(due, nil, 0); !slices.Equal(got, []int{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("Advance(due) = %v; want [0 1 2 3 4 5], the order of Add", got)
	}
}
