// Package boltstore is a coordinator.Store on an embedded go.etcd.io/bbolt
// file: a durable Baton scheduler that needs nothing but a file.
//
//	st := boltstore.New("/var/lib/myapp/baton.db")
//	s, err := coordinator.New(
//		coordinator.WithStore(st),
//		coordinator.WithFunc("resize", resize),
//	)
//	if err != nil { ... } // locked by another process, not a store, newer format, a directory: see Load
//	defer s.Shutdown(ctx)
//
// Every commit of the scheduler is one bbolt write transaction, which
// fsyncs the file before it returns. bbolt takes an exclusive lock on the
// file (flock), so one process at a time may use it: New waits for the lock
// at most the time WithLockTimeout gives (DefaultLockTimeout) and then
// fails with coordinator.ErrStoreLocked.
//
// A damaged page of records is refused at Load (coordinator.ErrStoreCorrupt);
// a damaged meta page is not detected: bbolt keeps two and falls back to
// the older, as after a crash in mid-commit, so the file is then as of the
// commit before the last.
package boltstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"time"

	"github.com/batonhq/baton/coordinator"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// DefaultLockTimeout is how long Load waits for a file locked by another
// process unless WithLockTimeout says otherwise.
const DefaultLockTimeout = time.Second

// bucket holds every record of the scheduler.
var bucket = []byte("baton")

// fillPercent: most keys are appended in ascending order (task sequence
// numbers), so pages split near full; state records are rewritten in place.
const fillPercent = 0.9

// initialMmap is the address space bbolt maps at first: every growth of the
// mapping past it copies every page a write transaction holds (a remap).
const initialMmap = 64 << 20

// Store is a coordinator.Store on one bbolt file. Create it with New and
// hand it to coordinator.WithStore, which opens it (Load), commits to it
// and closes it; it is not meant to be called directly. It is safe for
// concurrent use, as bbolt is, though the scheduler never calls it
// concurrently.
type Store struct {
	path    string        // immutable
	timeout time.Duration // immutable: how long Load waits for the file lock
	mode    os.FileMode   // immutable
	db      *bolt.DB      // set by Load; nil before and after Close
}

var _ coordinator.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*Store)

// WithLockTimeout sets how long Load waits for the file lock held by
// another process before failing with coordinator.ErrStoreLocked (default
// DefaultLockTimeout). A d of 0 or less means the default: never wait
// forever.
func WithLockTimeout(d time.Duration) Option {
	return func(s *Store) {
		if d > 0 {
			s.timeout = d
		}
	}
}

// WithFileMode sets the permissions of a file Load creates (default 0600).
func WithFileMode(m os.FileMode) Option { return func(s *Store) { s.mode = m } }

// New returns a Store on the bbolt file at path, created by Load if
// missing. New touches nothing: the file is opened and locked by Load,
// that is by coordinator.New.
func New(path string, opts ...Option) *Store {
	s := &Store{path: path, timeout: DefaultLockTimeout, mode: 0o600}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Path returns the file's path.
func (s *Store) Path() string { return s.path }

// Load opens and locks the file and calls fn with every record in key
// order. Its errors wrap coordinator.ErrStoreLocked when another process
// holds the file past the lock timeout (or this Store value is open
// already); coordinator.ErrStoreCorrupt when the file is not a Baton
// store: not a bbolt file (no valid meta page, whatever its size),
// shorter than its pages, with a damaged page, or holding another
// application's buckets; coordinator.ErrStoreVersion when bbolt's own
// format is another version; and coordinator.ErrInvalidOption when the
// path names a directory or anything else that is not a regular file (a
// mistake in the path, not a damaged store). A missing or empty (0-byte)
// file is a new store. It blocks for the file's reading (every page of
// it). On an error the file is closed again.
func (s *Store) Load(fn func(key, value []byte) error) (err error) {
	if s.db != nil {
		return fmt.Errorf("%w: %s: this Store is already open (a Store serves one scheduler)", coordinator.ErrStoreLocked, s.path)
	}
	if err := checkFile(s.path); err != nil {
		return err
	}
	var ro, db *bolt.DB
	defer func() {
		// bbolt panics on some damaged pages: that is a corrupt file too.
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %s: bbolt: %v", coordinator.ErrStoreCorrupt, s.path, p)
		}
		if ro != nil {
			ro.Close()
		}
		if err != nil && db != nil {
			db.Close()
		}
	}()
	// Read every record on this goroutine, from a read-only open, before
	// the file is opened for writing: a writable open rebuilds bbolt's
	// free list by walking every page on a goroutine of its own, where a
	// damaged page panics out of any recover's reach (the process dies).
	// Read here first, a damaged page panics into the recover above.
	// A damaged page can also make bbolt read at an address outside the
	// mapping: a fault, which the runtime turns into a panic only when
	// asked (SetPanicOnFault, for this goroutine, for the read).
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	found := false
	if fi, statErr := os.Stat(s.path); statErr == nil && fi.Size() > 0 {
		if ro, err = s.open(true); err != nil {
			return err
		}
		if err := ro.View(func(tx *bolt.Tx) error {
			if err := tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
				if !bytes.Equal(name, bucket) {
					return fmt.Errorf("%w: %s: holds a bucket %q: not a Baton store", coordinator.ErrStoreCorrupt, s.path, name)
				}
				return nil
			}); err != nil {
				return err
			}
			b := tx.Bucket(bucket)
			if found = b != nil; !found {
				return nil
			}
			return b.ForEach(func(k, v []byte) error {
				if v == nil {
					return fmt.Errorf("%w: %s: a nested bucket %q: not a Baton store", coordinator.ErrStoreCorrupt, s.path, k)
				}
				return fn(k, v)
			})
		}); err != nil {
			return err
		}
		err = ro.Close()
		ro = nil
		if err != nil {
			return fmt.Errorf("boltstore: %s: %w", s.path, err)
		}
	}
	if db, err = s.open(false); err != nil {
		return err
	}
	if !found {
		if err := db.Update(func(tx *bolt.Tx) error {
			_, err := tx.CreateBucketIfNotExists(bucket)
			return err
		}); err != nil {
			return fmt.Errorf("boltstore: %s: %w", s.path, err)
		}
	}
	s.db = db
	return nil
}

// open opens the file, read-only or for writing, and says what a failure
// means in the coordinator's terms.
func (s *Store) open(readOnly bool) (*bolt.DB, error) {
	db, err := bolt.Open(s.path, s.mode, &bolt.Options{
		Timeout:         s.timeout,
		ReadOnly:        readOnly,
		FreelistType:    bolt.FreelistMapType,
		NoFreelistSync:  true,
		InitialMmapSize: initialMmap,
	})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("%w: %s: still locked after %v", coordinator.ErrStoreLocked, s.path, s.timeout)
	case errors.Is(err, berrors.ErrVersionMismatch):
		return nil, fmt.Errorf("%w: %s: bbolt: %v", coordinator.ErrStoreVersion, s.path, err)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum), errors.Is(err, berrors.ErrInvalidMapping):
		return nil, fmt.Errorf("%w: %s: bbolt: %v", coordinator.ErrStoreCorrupt, s.path, err)
	case err != nil:
		return nil, fmt.Errorf("boltstore: %s: %w", s.path, err)
	}
	return db, nil
}

// Commit writes c in one bbolt write transaction, fsync'd before it
// returns. It blocks for the disk.
func (s *Store) Commit(c *coordinator.Changes) error {
	if s.db == nil {
		return fmt.Errorf("boltstore: %s: Commit before Load or after Close", s.path)
	}
	// bbolt keeps a transaction's writes to a page in a sorted slice until
	// the commit: puts in key order append, puts out of order insert (a
	// batch of 100,000 tasks out of order costs a minute, in order 0.2 s).
	slices.SortFunc(c.Puts, func(a, b coordinator.KV) int { return bytes.Compare(a.Key, b.Key) })
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		b.FillPercent = fillPercent
		for _, kv := range c.Puts {
			if err := b.Put(kv.Key, kv.Value); err != nil {
				return fmt.Errorf("boltstore: put %q: %w", kv.Key, err)
			}
		}
		for _, k := range c.Deletes {
			if err := b.Delete(k); err != nil {
				return fmt.Errorf("boltstore: delete %q: %w", k, err)
			}
		}
		return nil
	})
}

// Close closes the file and releases its lock. Closing a Store not loaded,
// or twice, does nothing.
func (s *Store) Close() error {
	if s.db == nil {
		return nil
	}
	err := s.db.Close()
	s.db = nil
	return err
}

// Size returns the file's size in bytes (for measuring growth).
func (s *Store) Size() (int64, error) {
	fi, err := os.Stat(s.path)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// checkFile refuses, before bbolt opens it, a path bbolt would misread:
//
//   - A directory, or anything else that is not a regular file, is a
//     mistake in the path (coordinator.ErrInvalidOption). bbolt would call
//     a directory "invalid database", and opening a named pipe blocks.
//   - A non-empty file without a valid bbolt meta page, looked for where
//     bbolt looks (the first page, or the second at any page size bbolt
//     tries), is not a Baton store (coordinator.ErrStoreCorrupt), whatever
//     its size: bbolt would report "invalid database" or, for 2,049 to
//     8,191 bytes (4 KiB pages), "file size too small", which wraps
//     nothing.
//   - A file shorter than its own meta page says is truncated (a disk full,
//     a copy cut short; coordinator.ErrStoreCorrupt): bbolt maps the pages
//     the meta names without checking that the file holds them, and
//     reading past the end of a mapped file is a SIGBUS, which no recover
//     catches (bbolt reads them on a goroutine of its own).
//
// A missing or empty file is a new store, which bbolt creates; a file
// that cannot be read is left to bbolt, which says why.
func checkFile(path string) error {
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return nil // missing (bbolt creates it) or unreadable (bbolt says why)
	case fi.IsDir():
		return fmt.Errorf("%w: boltstore.New(%q): a directory, not a store file (name a file, which Load creates if missing)", coordinator.ErrInvalidOption, path)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%w: boltstore.New(%q): not a regular file (%v)", coordinator.ErrInvalidOption, path, fi.Mode().Type())
	case fi.Size() == 0:
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	size := fi.Size()
	var buf [metaEnd]byte
	read := func(off int64) (meta, bool, error) {
		clear(buf[:])
		if _, err := f.ReadAt(buf[:], off); err != nil && err != io.EOF {
			return meta{}, false, err
		}
		m, ok := readMeta(buf[:])
		return m, ok, nil
	}
	best, ok, err := read(0)
	if err != nil {
		return nil
	}
	if ok {
		// The second meta page follows the first: the later of the two
		// is the one bbolt uses.
		if m, valid, err := read(int64(best.pageSize)); err == nil && valid && m.txid > best.txid {
			best = m
		}
	} else {
		// bbolt falls back to the second meta page, which it looks for at
		// every page size from 1 KiB to 16 MiB that leaves a KiB after it
		// (db.go, getPageSizeFromSecondMeta).
		for ps := int64(1024); ps <= 1024<<14 && ps < size-1024; ps <<= 1 {
			if best, ok, err = read(ps); err != nil {
				return nil
			}
			if ok {
				break
			}
		}
	}
	if !ok {
		return fmt.Errorf("%w: %s: not a Baton store: no valid bbolt meta page in its %d bytes (another kind of file, or both meta pages damaged)", coordinator.ErrStoreCorrupt, path, size)
	}
	if need := int64(best.pgid) * int64(best.pageSize); best.pgid > 1<<40 || size < need {
		return fmt.Errorf("%w: %s: truncated: %d bytes, its pages need %d", coordinator.ErrStoreCorrupt, path, size, need)
	}
	return nil
}

// The layout of a bbolt meta page (go.etcd.io/bbolt/internal/common, format
// version 2): a 16-byte page header, then the meta fields in native byte
// order, the last one a FNV-64a checksum of those before it.
const (
	metaStart    = 16
	metaChecksum = metaStart + 56
	metaEnd      = metaChecksum + 8
	boltMagic    = 0xED0CDAED
	boltVersion  = 2
)

type meta struct {
	pageSize   uint32
	pgid, txid uint64 // the high-water mark of pages; the transaction
}

func readMeta(b []byte) (meta, bool) {
	e := binary.NativeEndian
	m := b[metaStart:metaEnd]
	if e.Uint32(m[0:]) != boltMagic || e.Uint32(m[4:]) != boltVersion {
		return meta{}, false
	}
	h := fnv.New64a()
	h.Write(b[metaStart:metaChecksum])
	if h.Sum64() != e.Uint64(b[metaChecksum:]) {
		return meta{}, false
	}
	ps := e.Uint32(m[8:])
	if ps < 512 || ps > 1<<20 {
		return meta{}, false
	}
	return meta{pageSize: ps, pgid: e.Uint64(m[40:]), txid: e.Uint64(m[48:])}, true
}
