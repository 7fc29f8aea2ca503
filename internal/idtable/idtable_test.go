package idtable

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The table against a Go map, through random inserts, finds and deletes,
// with a table small enough that runs wrap around its end.
func TestTableAgainstMap(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, seed))
		var tab Table
		keys := map[int32]string{}
		ref := map[string]int32{}
		next := int32(0)
		key := func(i int32) string { return keys[i] }
		for op := range 20_000 {
			s := fmt.Sprint("k", r.IntN(3000))
			h := tab.Hash(s)
			switch r.IntN(3) {
			case 0:
				keys[next] = s
				got, inserted := tab.Insert(s, h, next, key)
				want, present := ref[s]
				if inserted == present || (present && got != want) {
					t.Fatalf("seed %d op %d: Insert(%q) = %d, %v; map has %d, %v", seed, op, s, got, inserted, want, present)
				}
				if inserted {
					ref[s] = next
				}
				next++
			case 1:
				got, found := tab.Find(s, h, key)
				want, present := ref[s]
				if found != present || (found && got != want) {
					t.Fatalf("seed %d op %d: Find(%q) = %d, %v; map has %d, %v", seed, op, s, got, found, want, present)
				}
			default:
				want, present := ref[s]
				if got := tab.Delete(h, want); got != present {
					t.Fatalf("seed %d op %d: Delete(%q) = %v; map has it: %v", seed, op, s, got, present)
				}
				delete(ref, s)
			}
			if tab.Len() != len(ref) {
				t.Fatalf("seed %d op %d: Len = %d; map has %d", seed, op, tab.Len(), len(ref))
			}
		}
		for s, want := range ref {
			if got, ok := tab.Find(s, tab.Hash(s), key); !ok || got != want {
				t.Fatalf("seed %d: Find(%q) = %d, %v at the end; want %d", seed, s, got, ok, want)
			}
		}
	}
}

func BenchmarkInsertFind(b *testing.B) {
	const n = 1 << 20
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprint(i)
	}
	key := func(i int32) string { return ids[i] }
	b.ReportAllocs()
	for b.Loop() {
		var tab Table
		tab.Reserve(n)
		for i, s := range ids {
			tab.Insert(s, tab.Hash(s), int32(i), key)
		}
		for _, s := range ids {
			tab.Find(s, tab.Hash(s), key)
		}
	}
}

func BenchmarkGoMapInsertFind(b *testing.B) {
	const n = 1 << 20
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprint(i)
	}
	b.ReportAllocs()
	for b.Loop() {
		m := make(map[string]int32, n)
		for i, s := range ids {
			if _, dup := m[s]; !dup {
				m[s] = int32(i)
			}
		}
		for _, s := range ids {
			_ = m[s]
		}
	}
}
