package jetstream_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"

	"github.com/batonhq/baton/coordinator"
)

// fileStore is a coordinator.Store for the tests that kill a coordinator
// process (so that this module needs no store module of its own): one
// file, rewritten whole into a temporary file, synced and renamed over
// the old one at every commit, atomic and durable, and slow, which a
// test's few tasks do not mind. It is not locked: the tests never open it
// from two processes at once.
type fileStore struct {
	path string
	data map[string][]byte // owned by the scheduler's calls
}

func newFileStore(path string) *fileStore { return &fileStore{path: path} }

func (f *fileStore) Load(fn func(key, value []byte) error) error {
	f.data = map[string][]byte{}
	b, err := os.ReadFile(f.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return err
	}
	if err := json.Unmarshal(b, &f.data); err != nil {
		return errors.Join(coordinator.ErrStoreCorrupt, err)
	}
	keys := make([]string, 0, len(f.data))
	for k := range f.data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if err := fn([]byte(k), f.data[k]); err != nil {
			return err
		}
	}
	return nil
}

func (f *fileStore) Commit(c *coordinator.Changes) error {
	for _, kv := range c.Puts {
		f.data[string(kv.Key)] = slices.Clone(kv.Value)
	}
	for _, k := range c.Deletes {
		delete(f.data, string(k))
	}
	b, err := json.Marshal(f.data)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(f.path), ".store-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename, there is nothing left to remove
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), f.path)
}

func (f *fileStore) Close() error { return nil }
