package storetest

import (
	"bytes"
	"fmt"
	"slices"
	"sync"

	"github.com/batonhq/baton/coordinator"
)

// Memory is a store's data kept in memory: a durable scheduler for tests,
// with no disk to set up and one to crash at will. Open returns a Store on
// it; Crash takes what has been committed so far as a new Memory, which is
// what a process killed at that moment would leave on its disk, while the
// scheduler that wrote it may go on (or be shut down: a Shutdown writes
// nothing of what it stops, so a copy taken before it is as good).
// FailCommits makes the commits from then on fail, as a full disk does.
//
// All methods are safe for concurrent use. The zero value is not usable:
// call NewMemory.
type Memory struct {
	mu      sync.Mutex
	data    map[string][]byte // guarded by mu: the committed records
	holder  *memStore         // guarded by mu: the Store that has loaded it and not closed it
	fail    error             // guarded by mu: what every Commit returns from now on (nil: none)
	commits int               // guarded by mu: commits applied
}

// NewMemory returns an empty Memory.
func NewMemory() *Memory { return &Memory{data: map[string][]byte{}} }

// Open returns a Store on m. Like a file, m is held by one Store at a
// time: a second Store's Load fails with coordinator.ErrStoreLocked until
// the first is closed.
func (m *Memory) Open() coordinator.Store { return &memStore{m: m} }

// Crash returns a new Memory holding what m has committed so far: the
// disk a process killed now would leave behind. m is unchanged.
func (m *Memory) Crash() *Memory {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := NewMemory()
	for k, v := range m.data {
		c.data[k] = bytes.Clone(v)
	}
	return c
}

// FailCommits makes every later Commit on m fail with err (nil: succeed
// again). A failed commit changes nothing.
func (m *Memory) FailCommits(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fail = err
}

// Commits returns how many commits m has applied.
func (m *Memory) Commits() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.commits
}

// Len returns how many records m holds.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.data)
}

// memStore is a Store on a Memory.
type memStore struct {
	m      *Memory
	loaded bool // owned by the scheduler's calls: this Store holds m
}

func (s *memStore) Load(fn func(key, value []byte) error) error {
	m := s.m
	m.mu.Lock()
	if m.holder != nil && m.holder != s {
		m.mu.Unlock()
		return fmt.Errorf("%w: storetest.Memory is held by another Store", coordinator.ErrStoreLocked)
	}
	m.holder, s.loaded = s, true
	keys := make([]string, 0, len(m.data))
	for k := range m.data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	vals := make([][]byte, len(keys))
	for i, k := range keys {
		vals[i] = bytes.Clone(m.data[k])
	}
	m.mu.Unlock()
	for i, k := range keys {
		if err := fn([]byte(k), vals[i]); err != nil {
			return err
		}
	}
	return nil
}

func (s *memStore) Commit(c *coordinator.Changes) error {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if !s.loaded || m.holder != s {
		return fmt.Errorf("storetest: Commit on a Memory store that is not loaded")
	}
	if m.fail != nil {
		return m.fail
	}
	for _, kv := range c.Puts {
		m.data[string(kv.Key)] = bytes.Clone(kv.Value)
	}
	for _, k := range c.Deletes {
		delete(m.data, string(k))
	}
	m.commits++
	return nil
}

func (s *memStore) Close() error {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.holder == s {
		m.holder = nil
	}
	s.loaded = false
	return nil
}
