package boltstore_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batonhq/baton/boltstore"
	"github.com/batonhq/baton/coordinator"
	bolt "go.etcd.io/bbolt"
)

// sizes are the lengths at which bbolt's reading of a file changes: it
// looks for its second meta page from 1 KiB on if a KiB follows it
// (2,049 bytes), reads the first page whole (4,096) and maps two pages
// (8,192). A file of 2,049 to 8,191 bytes used to fail with bbolt's
// "file size too small", which wraps no sentinel.
var sizes = []int{1, 1023, 2048, 2049, 4095, 4096, 4097, 8191, 8192, 8193, 3*4096 + 1, 64 << 10}

// foreignBolt returns the bytes of a real bbolt file of another
// application (a bucket "users" with a key).
func foreignBolt(t *testing.T) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "other.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("users"))
		if err != nil {
			return err
		}
		return b.Put([]byte("alice"), []byte("admin"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A file that is not a Baton store is refused with an error wrapping
// coordinator.ErrStoreCorrupt that says what is wrong, whatever its size:
// random bytes, and another application's bbolt file whole or cut short.
// New leaves the file as it was. (A file of 2,049 to 8,191 bytes used to
// fail with bbolt's "file size too small", wrapping nothing.)
func TestNotAStoreIsCorruptAtEverySize(t *testing.T) {
	rng := rand.New(rand.NewChaCha8([32]byte{'b', 'a', 't', 'o', 'n'}))
	foreign := foreignBolt(t)
	if len(foreign) <= 8192 {
		t.Fatalf("another application's bbolt file has %d bytes; the test wants one larger than two pages", len(foreign))
	}
	type file struct {
		name string
		b    []byte
		want []string // what the error says, one of
	}
	var files []file
	for _, n := range sizes {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		files = append(files, file{fmt.Sprintf("random %d bytes", n), b, []string{"not a Baton store: no valid bbolt meta page"}})
		if n < len(foreign) {
			files = append(files, file{fmt.Sprintf("another application's bbolt file cut to %d bytes", n), foreign[:n],
				[]string{"not a Baton store: no valid bbolt meta page", "truncated"}})
		}
	}
	files = append(files, file{fmt.Sprintf("another application's bbolt file (%d bytes)", len(foreign)), foreign,
		[]string{`holds a bucket "users": not a Baton store`}})
	for _, f := range files {
		t.Run(f.name, func(t *testing.T) {
			path := dbPath(t)
			if err := os.WriteFile(path, f.b, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := coordinator.New(coordinator.WithStore(boltstore.New(path)), coordinator.WithFunc("f", noop))
			if err == nil {
				shutdown(t, s)
				t.Fatal("New = nil error; want one wrapping ErrStoreCorrupt")
			}
			if !errors.Is(err, coordinator.ErrStoreCorrupt) {
				t.Errorf("New = %v; want ErrStoreCorrupt", err)
			}
			if !slicesContain(err.Error(), f.want) {
				t.Errorf("New = %v; want it to say one of %q", err, f.want)
			}
			if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, f.b) {
				t.Errorf("the refused file changed: %d bytes (err %v), was %d", len(got), err, len(f.b))
			}
		})
	}
}

func slicesContain(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// An empty (0-byte) file is a new store, as documented: New opens it, and
// what was submitted is there after a restart.
func TestEmptyFileIsANewStore(t *testing.T) {
	path := dbPath(t)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s := open(t, path, coordinator.WithFunc("f", noop))
	if err := s.Submit(coordinator.Task{ID: "t", Func: "f", Delay: 1 << 40}); err != nil {
		t.Fatalf("Submit = %v", err)
	}
	shutdown(t, s)
	s = open(t, path, coordinator.WithFunc("f", noop))
	defer shutdown(t, s)
	if _, ok := s.Info("t"); !ok {
		t.Error("Info(t): unknown after a restart; want the task submitted to the empty file")
	}
}

// A directory given as the path is a mistake in the configuration, not a
// corrupt store: New fails with an error wrapping ErrInvalidOption (not
// ErrStoreCorrupt) that says the path is a directory, and creates nothing
// in it. (It used to say "invalid database", wrapping ErrStoreCorrupt.)
func TestDirectoryPathIsAnInvalidOption(t *testing.T) {
	dir := t.TempDir()
	s, err := coordinator.New(coordinator.WithStore(boltstore.New(dir)), coordinator.WithFunc("f", noop))
	if err == nil {
		shutdown(t, s)
		t.Fatal("New on a directory = nil error")
	}
	if !errors.Is(err, coordinator.ErrInvalidOption) || errors.Is(err, coordinator.ErrStoreCorrupt) || !strings.Contains(err.Error(), "a directory") {
		t.Errorf("New on a directory = %v; want ErrInvalidOption, not ErrStoreCorrupt, saying it is a directory", err)
	}
	if es, err := os.ReadDir(dir); err != nil || len(es) != 0 {
		t.Errorf("the directory holds %d entries (err %v) after New; want none", len(es), err)
	}
}

// A Baton store whose first meta page is damaged still opens: bbolt
// falls back to the second, and the check that refuses files without a
// valid meta page looks for it where bbolt does. (The second may be the
// commit before the last: t is committed before u, so either has it.)
func TestFirstMetaPageDamagedOpensFromSecond(t *testing.T) {
	path := dbPath(t)
	s := open(t, path, coordinator.WithFunc("f", noop))
	for _, id := range []string{"t", "u"} {
		if err := s.Submit(coordinator.Task{ID: id, Func: "f", Delay: 1 << 40}); err != nil {
			t.Fatalf("Submit(%s) = %v", id, err)
		}
	}
	shutdown(t, s)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	clear(b[:os.Getpagesize()])
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s = open(t, path, coordinator.WithFunc("f", noop))
	defer shutdown(t, s)
	if _, ok := s.Info("t"); !ok {
		t.Error("Info(t): unknown; want the task, read through the second meta page")
	}
}
