// Package storetest checks a coordinator.Store implementation against what
// a durable scheduler relies on: records come back in key order after a
// reopen, a commit's puts and deletes all apply, a commit's buffers are not
// kept, and a second opener is refused with coordinator.ErrStoreLocked
// rather than made to wait forever. A backend's tests call Run.
package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/batonhq/baton/coordinator"
)

// Open returns a new Store value on the data kept at dir: every call with
// the same dir must see the same data (a file, a database, a table); Run
// gives each test its own dir (from t.TempDir).
type Open func(t *testing.T, dir string) coordinator.Store

// Run runs the conformance suite on the stores open returns, as subtests
// of t. It does not call t.Parallel.
func Run(t *testing.T, open Open) {
	t.Run("empty", func(t *testing.T) {
		st := open(t, t.TempDir())
		if got := load(t, st); len(got) != 0 {
			t.Errorf("a new store holds %d records", len(got))
		}
		closeStore(t, st)
	})
	t.Run("commit and reopen", func(t *testing.T) {
		dir := t.TempDir()
		st := open(t, dir)
		load(t, st)
		commit(t, st, []string{"t2=b", "m=v", "t1=a", "t3=c"}, nil)
		commit(t, st, []string{"t2=B"}, []string{"t3", "t9"}) // overwrite, delete, delete a missing key
		closeStore(t, st)
		st = open(t, dir)
		want := []string{"m=v", "t1=a", "t2=B"}
		if got := load(t, st); !slices.Equal(got, want) {
			t.Errorf("after reopen: %v; want %v (in key order)", got, want)
		}
		closeStore(t, st)
	})
	t.Run("buffers are not kept", func(t *testing.T) {
		dir := t.TempDir()
		st := open(t, dir)
		load(t, st)
		key, val := []byte("k"), []byte("v1")
		if err := st.Commit(&coordinator.Changes{Puts: []coordinator.KV{{Key: key, Value: val}}}); err != nil {
			t.Fatal(err)
		}
		key[0], val[1] = 'x', '9'
		closeStore(t, st)
		st = open(t, dir)
		if got := load(t, st); !slices.Equal(got, []string{"k=v1"}) {
			t.Errorf("after the caller reused its buffers: %v; want [k=v1]", got)
		}
		closeStore(t, st)
	})
	t.Run("load error", func(t *testing.T) {
		dir := t.TempDir()
		st := open(t, dir)
		load(t, st)
		commit(t, st, []string{"a=1", "b=2"}, nil)
		closeStore(t, st)
		st = open(t, dir)
		stop := errors.New("stop")
		if err := st.Load(func(k, v []byte) error { return stop }); !errors.Is(err, stop) {
			t.Errorf("Load with a failing fn = %v; want its error", err)
		}
		closeStore(t, st) // Close after a failed Load is allowed
	})
	t.Run("locked", func(t *testing.T) {
		dir := t.TempDir()
		st := open(t, dir)
		load(t, st)
		other := open(t, dir)
		if err := other.Load(func(k, v []byte) error { return nil }); !errors.Is(err, coordinator.ErrStoreLocked) {
			t.Errorf("a second Load while the first store is open = %v; want ErrStoreLocked", err)
		}
		closeStore(t, other)
		closeStore(t, st)
		st = open(t, dir) // released by Close
		load(t, st)
		closeStore(t, st)
	})
}

func load(t *testing.T, st coordinator.Store) []string {
	t.Helper()
	var out []string
	var last []byte
	if err := st.Load(func(k, v []byte) error {
		if last != nil && bytes.Compare(last, k) >= 0 {
			return fmt.Errorf("key %q after %q: not in ascending order", k, last)
		}
		last = bytes.Clone(k)
		out = append(out, string(k)+"="+string(v))
		return nil
	}); err != nil {
		t.Fatalf("Load = %v", err)
	}
	return out
}

func commit(t *testing.T, st coordinator.Store, puts, deletes []string) {
	t.Helper()
	c := &coordinator.Changes{}
	for _, p := range puts {
		k, v, _ := bytes.Cut([]byte(p), []byte("="))
		c.Puts = append(c.Puts, coordinator.KV{Key: k, Value: v})
	}
	for _, d := range deletes {
		c.Deletes = append(c.Deletes, []byte(d))
	}
	if err := st.Commit(c); err != nil {
		t.Fatalf("Commit = %v", err)
	}
}

func closeStore(t *testing.T, st coordinator.Store) {
	t.Helper()
	if err := st.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
}
