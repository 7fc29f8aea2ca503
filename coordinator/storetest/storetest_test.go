package storetest_test

import (
	"errors"
	"testing"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/coordinator/storetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Memory passes the conformance suite it ships beside.
func TestMemoryConforms(t *testing.T) {
	disks := map[string]*storetest.Memory{}
	storetest.Run(t, func(t *testing.T, dir string) coordinator.Store {
		if disks[dir] == nil {
			disks[dir] = storetest.NewMemory()
		}
		return disks[dir].Open()
	})
}

// Crash copies what was committed, and nothing after; FailCommits fails
// the commits that follow and changes nothing.
func TestMemoryCrashAndFailedCommits(t *testing.T) {
	mem := storetest.NewMemory()
	st := mem.Open()
	if err := st.Load(func(k, v []byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	put := func(k, v string) error {
		return st.Commit(&coordinator.Changes{Puts: []coordinator.KV{{Key: []byte(k), Value: []byte(v)}}})
	}
	if err := put("a", "1"); err != nil {
		t.Fatal(err)
	}
	crashed := mem.Crash()
	if err := put("b", "2"); err != nil {
		t.Fatal(err)
	}
	full := errors.New("disk full")
	mem.FailCommits(full)
	if err := put("c", "3"); !errors.Is(err, full) {
		t.Errorf("Commit after FailCommits = %v; want %v", err, full)
	}
	if mem.Len() != 2 || mem.Commits() != 2 {
		t.Errorf("after a failed commit: %d records, %d commits; want 2 and 2", mem.Len(), mem.Commits())
	}
	if crashed.Len() != 1 {
		t.Errorf("the crashed copy holds %d records; want the 1 committed before Crash", crashed.Len())
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}
