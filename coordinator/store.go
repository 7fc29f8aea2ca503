package coordinator

import (
	"context"
	"errors"
	"fmt"
)

// Store keeps the records of a durable scheduler (WithStore) so that a
// scheduler created on it after a crash or a Shutdown carries on where the
// last one stopped. The scheduler owns the record format and its version;
// a Store is an ordered key-value file with atomic, durable commits.
// Package github.com/batonhq/baton/boltstore (a module of its own)
// implements it on go.etcd.io/bbolt; package storetest is the conformance
// suite every implementation should pass.
//
// The interface is unstable: it may change until a second backend exists.
//
// The scheduler calls Load once, from New, then Commit from its
// coordinator goroutine only (never concurrently), then Close once. A
// Store must hold its data for one scheduler alone: Load fails, wrapping
// ErrStoreLocked, while another process (or another Store value) holds it.
type Store interface {
	// Load opens the store and calls fn with every record, in ascending
	// key order (bytes.Compare). fn must not keep key or value after it
	// returns. An error of fn ends Load and is returned as is. Errors of
	// the store itself wrap ErrStoreLocked (held elsewhere, after the
	// store's configured wait) or ErrStoreCorrupt (unreadable).
	Load(fn func(key, value []byte) error) error
	// Commit applies c atomically and durably: when it returns nil, every
	// write and delete of c survives a crash of the process and of the
	// machine; when it returns an error, none of them may be seen by a
	// later Load, or all of them. Deleting a missing key is not an error.
	Commit(c *Changes) error
	// Close releases the store. It is called once, after the last Commit.
	Close() error
}

// Changes is one group commit: what a coordinator iteration decided.
// Owned by the scheduler; a Store reads it during Commit only and must not
// keep its slices.
type Changes struct {
	Puts    []KV     // records to write, in no particular order (a Store may reorder them); keys are distinct
	Deletes [][]byte // keys to remove; none of them is among Puts
}

// KV is one record of a Store. The slices belong to the caller.
type KV struct {
	Key, Value []byte
}

// Errors of a durable scheduler. A Store's Load wraps ErrStoreLocked or
// ErrStoreCorrupt; New returns them, never an empty scheduler in place of
// a store it could not read.
var (
	// ErrStoreLocked: another process holds the store (one process at a
	// time may use a store file).
	ErrStoreLocked = errors.New("coordinator: store is locked by another process")
	// ErrStoreCorrupt: the store or one of its records cannot be read.
	ErrStoreCorrupt = errors.New("coordinator: store is corrupt")
	// ErrStoreVersion: the store was written by a newer version of Baton,
	// in a record format this version does not know.
	ErrStoreVersion = errors.New("coordinator: store written by a newer format version")
	// ErrStoreFailed: a commit failed. The scheduler stops as if the
	// process had died (a Shutdown whose cancellations are not written:
	// its running attempts have their contexts end, context.Cause
	// ErrClosed, and it waits for them), so that a scheduler created on
	// the store later resumes from the last commit. Submit, Cancel and WaitTasks calls waiting for that commit
	// return it, wrapped (Cancel returns false), and subscribers hear of
	// nothing decided from then on. Later, Submit returns ErrClosed
	// wrapping it too, and Wait and Shutdown return it instead of nil.
	ErrStoreFailed = errors.New("coordinator: store commit failed")
	// ErrNotDurable (wrapped in a *TaskError): Submit on a durable
	// scheduler refused a task that could not be rebuilt after a restart:
	// a Run closure without Func, a custom pool's Payload that is not
	// []byte, a Retry.RetryIf or a Schedule (both functions). (A Func
	// task's Payload must be []byte on any scheduler: ErrInvalidTask.)
	ErrNotDurable = errors.New("coordinator: task cannot be made durable")
	// ErrInterrupted is the error of an attempt that was running when the
	// process died: a durable scheduler counts it as a failed attempt and
	// retries it under the task's RetryPolicy. An attempt of a pool whose
	// Worker is a worker.Resumer (its attempts run elsewhere and outlive
	// the process) is not interrupted: it is handed to the Worker again
	// as the same attempt.
	ErrInterrupted = errors.New("coordinator: attempt interrupted by a crash")
)

// WithStore makes the scheduler durable: every task it accepts and every
// transition it decides is written to st in group commits, never one per
// task: what a coordinator iteration decided is committed before it hands
// out the work that released, the rest (the starts it then saw) at its
// end, before Submit returns and before the events are published; New restores what st holds. New takes st over: it closes
// it when New fails and at Shutdown.
//
// Durable tasks are described by data alone: a function registered with
// WithFunc named by Task.Func, or a custom worker pool (WithPool), with a
// []byte Payload (or none); and results are []byte. See the README's
// "Durable schedulers" for what is promised after a crash.
func WithStore(st Store) Option {
	return func(c *config) error {
		if st == nil {
			return fmt.Errorf("%w: WithStore(nil)", ErrInvalidOption)
		}
		c.durable().store = st
		return nil
	}
}

// WithFunc registers f under name, for tasks that name it in Task.Func:
// their attempts call f with the task's Payload (a []byte, or nil). A
// durable scheduler (WithStore) restores such tasks after a restart by
// name, so every name its store holds must be registered again at New. f
// must honour ctx as Task.Run does. Any scheduler may use named functions.
func WithFunc(name string, f func(ctx context.Context, payload []byte) error) Option {
	return func(c *config) error {
		switch {
		case name == "":
			return fmt.Errorf("%w: WithFunc: empty name", ErrInvalidOption)
		case f == nil:
			return fmt.Errorf("%w: WithFunc(%q, nil)", ErrInvalidOption, name)
		}
		d := c.durable()
		if _, dup := d.funcs[name]; dup {
			return fmt.Errorf("%w: WithFunc(%q) given twice", ErrInvalidOption, name)
		}
		if d.funcs == nil {
			d.funcs = map[string]func(context.Context, []byte) error{}
		}
		d.funcs[name] = f
		return nil
	}
}

// WithCarefulRestart says whether a durable scheduler starts carefully,
// after a restart, the tasks that the process before it may have started
// (those New finds ready to run, and those it finds running, whose
// interrupted attempts it counts): the first start of each waits until
// that start is committed before its function is called, so that a
// function that kills its process at once (a log.Fatal on a bad payload)
// is counted, and ends Failed with ErrInterrupted after at most
// MaxAttempts + 1 crashes instead of crashing every process that restores
// it. The default is true. The price is paid after a restart only, by
// those tasks, once each: about one commit (an fsync) per worker per task
// until each has started (docs/durable.md has the figures); false drains
// a large backlog after a crash at full speed, and leaves such a task
// uncounted.
func WithCarefulRestart(careful bool) Option {
	return func(c *config) error {
		c.durable().rash = !careful
		return nil
	}
}

// durableConfig is what WithStore and WithFunc set, and which pools
// resume the attempts a crash left running (set by New from their
// workers).
type durableConfig struct {
	store   Store
	funcs   map[string]func(context.Context, []byte) error
	resumes []bool // by pool index: its Worker is a worker.Resumer that said yes
	runs    []bool // by pool index: its Worker is worker.Func (a task needs a function)
	rash    bool   // WithCarefulRestart(false): restored tasks start without waiting for their starts' commits
}

func (c *config) durable() *durableConfig {
	if c.dur == nil {
		c.dur = &durableConfig{}
	}
	return c.dur
}
