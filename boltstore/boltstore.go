// Package boltstore is a coordinator.Store on an embedded go.etcd.io/bbolt
// file: a durable Baton scheduler that needs nothing but a file.
//
//	st := boltstore.New("/var/lib/myapp/baton.db")
//	s, err := coordinator.New(
//		coordinator.WithStore(st),
//		coordinator.WithFunc("resize", resize),
//	)
//	if err != nil { ... } // locked by another process, corrupt, newer format: see coordinator.New
//	defer s.Shutdown(ctx)
//
// Every commit of the scheduler is one bbolt write transaction, which
// fsyncs the file before it returns. bbolt takes an exclusive lock on the
// file (flock), so one process at a time may use it: New waits for the lock
// at most the time WithLockTimeout gives (DefaultLockTimeout) and then
// fails with coordinator.ErrStoreLocked.
package boltstore

import (
	"bytes"
	"errors"
	"fmt"
	"os"
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
// holds the file past the lock timeout, coordinator.ErrStoreCorrupt when
// the file is not a readable bbolt file, and coordinator.ErrStoreVersion
// when bbolt's own format is another version. It blocks for the file's
// reading. On an error the file is closed again.
func (s *Store) Load(fn func(key, value []byte) error) (err error) {
	if s.db != nil {
		return fmt.Errorf("boltstore: %s: Load called twice", s.path)
	}
	db, err := bolt.Open(s.path, s.mode, &bolt.Options{
		Timeout:         s.timeout,
		FreelistType:    bolt.FreelistMapType,
		NoFreelistSync:  true,
		InitialMmapSize: initialMmap,
	})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return fmt.Errorf("%w: %s: still locked after %v", coordinator.ErrStoreLocked, s.path, s.timeout)
	case errors.Is(err, berrors.ErrVersionMismatch):
		return fmt.Errorf("%w: %s: bbolt: %v", coordinator.ErrStoreVersion, s.path, err)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum), errors.Is(err, berrors.ErrInvalidMapping):
		return fmt.Errorf("%w: %s: bbolt: %v", coordinator.ErrStoreCorrupt, s.path, err)
	case err != nil:
		return fmt.Errorf("boltstore: %s: %w", s.path, err)
	}
	defer func() {
		// bbolt panics on some damaged pages: that is a corrupt file too.
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %s: bbolt: %v", coordinator.ErrStoreCorrupt, s.path, p)
		}
		if err != nil {
			db.Close()
		}
	}()
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucket)
		return err
	}); err != nil {
		return fmt.Errorf("boltstore: %s: %w", s.path, err)
	}
	if err := db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).ForEach(fn)
	}); err != nil {
		return err
	}
	s.db = db
	return nil
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
