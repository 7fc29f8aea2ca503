package pgstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/batonhq/baton/coordinator"
)

// What a request row of baton.inbox holds in its body: JSON, so that a
// person can read it (body is bytea: convert_from(body, 'UTF8')).

// wireTask is a coordinator.Task described by data alone: what a durable
// scheduler can store.
type wireTask struct {
	ID          string        `json:"id"`
	Func        string        `json:"func,omitempty"`
	Pool        string        `json:"pool,omitempty"`
	Deps        []string      `json:"deps,omitempty"`
	Priority    int           `json:"prio,omitempty"`
	MaxAttempts int           `json:"max_attempts,omitempty"`
	BaseDelay   time.Duration `json:"base_delay,omitempty"`
	MaxDelay    time.Duration `json:"max_delay,omitempty"`
	Jitter      float64       `json:"jitter,omitempty"`
	Delay       time.Duration `json:"delay,omitempty"`
	Timeout     time.Duration `json:"timeout,omitempty"`
	Every       time.Duration `json:"every,omitempty"`
	Cron        string        `json:"cron,omitempty"`
	Times       int           `json:"times,omitempty"`
	Missed      int           `json:"missed,omitempty"`
	When        int           `json:"when,omitempty"`
	Key         string        `json:"key,omitempty"`
	Slots       int           `json:"slots,omitempty"`
	Payload     []byte        `json:"payload,omitempty"`
	HasPayload  bool          `json:"has_payload,omitempty"`
}

// submitBody is a submit request's body.
type submitBody struct {
	Tasks []wireTask `json:"tasks"`
}

// cancelBody is a cancel request's body.
type cancelBody struct {
	ID string `json:"id"`
}

// toWire describes t by data, or says why it cannot be (a
// *coordinator.TaskError wrapping coordinator.ErrNotDurable, as a durable
// scheduler's Submit would).
func toWire(t coordinator.Task) (wireTask, error) {
	bad := func(detail string) error {
		return &coordinator.TaskError{ID: t.ID, Err: coordinator.ErrNotDurable, Detail: detail + " (a task submitted through the database is described by data alone)"}
	}
	switch {
	case t.Run != nil:
		return wireTask{}, bad("a Run closure cannot be stored: register it with coordinator.WithFunc on every instance and name it in Func")
	case t.Retry.RetryIf != nil:
		return wireTask{}, bad("Retry.RetryIf is a function")
	case t.Schedule != nil:
		return wireTask{}, bad("a Schedule is a Go value: use Cron or Every")
	}
	for _, f := range []struct{ name, s string }{{"its ID", t.ID}, {"Func", t.Func}, {"Pool", t.Pool}, {"Cron", t.Cron}, {"Key", t.Key}} {
		if !isDBText(f.s) {
			return wireTask{}, &coordinator.TaskError{ID: t.ID, Err: coordinator.ErrInvalidTask, Detail: f.name + " is not UTF-8 text without NUL bytes (the database keeps text)"}
		}
	}
	if len(t.ID) > maxIDText {
		return wireTask{}, &coordinator.TaskError{ID: t.ID, Err: coordinator.ErrInvalidTask, Detail: fmt.Sprintf("an ID of %d bytes: at most %d through the database (its indexes)", len(t.ID), maxIDText)}
	}
	for _, d := range t.Deps {
		if !isDBText(d) {
			return wireTask{}, &coordinator.TaskError{ID: t.ID, Err: coordinator.ErrInvalidTask, Detail: fmt.Sprintf("dependency %q is not UTF-8 text without NUL bytes (the database keeps text)", d)}
		}
	}
	w := wireTask{ID: t.ID, Func: t.Func, Pool: t.Pool, Deps: t.Deps, Priority: t.Priority,
		MaxAttempts: t.Retry.MaxAttempts, BaseDelay: t.Retry.BaseDelay, MaxDelay: t.Retry.MaxDelay, Jitter: t.Retry.Jitter,
		Delay: t.Delay, Timeout: t.Timeout, Every: t.Every, Cron: t.Cron, Times: t.Times, Missed: int(t.Missed), When: int(t.When),
		Key: t.Key, Slots: t.Slots}
	switch p := t.Payload.(type) {
	case nil:
	case []byte:
		w.Payload, w.HasPayload = p, true
	default:
		return wireTask{}, bad(fmt.Sprintf("a Payload of type %T: the Payload is a []byte", t.Payload))
	}
	return w, nil
}

func (w wireTask) task() coordinator.Task {
	t := coordinator.Task{ID: w.ID, Func: w.Func, Pool: w.Pool, Deps: w.Deps, Priority: w.Priority,
		Retry: coordinator.RetryPolicy{MaxAttempts: w.MaxAttempts, BaseDelay: w.BaseDelay, MaxDelay: w.MaxDelay, Jitter: w.Jitter},
		Delay: w.Delay, Timeout: w.Timeout, Every: w.Every, Cron: w.Cron, Times: w.Times,
		Missed: coordinator.Missed(w.Missed), When: coordinator.Trigger(w.When), Key: w.Key, Slots: w.Slots}
	if w.HasPayload {
		t.Payload = w.Payload
		if w.Payload == nil {
			t.Payload = []byte{}
		}
	}
	return t
}

// decodeSubmit reads a submit request's body: its tasks, every one with
// an ID (the row's ids column must name them, in order).
func decodeSubmit(body []byte, ids []string) ([]coordinator.Task, error) {
	var b submitBody
	if err := json.Unmarshal(body, &b); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorruptRequest, err)
	}
	if len(b.Tasks) != len(ids) {
		return nil, fmt.Errorf("%w: %d tasks in the body, %d IDs in the row", ErrCorruptRequest, len(b.Tasks), len(ids))
	}
	tasks := make([]coordinator.Task, len(b.Tasks))
	for i, w := range b.Tasks {
		if w.ID != ids[i] {
			return nil, fmt.Errorf("%w: task %d is %q in the body, %q in the row", ErrCorruptRequest, i, w.ID, ids[i])
		}
		tasks[i] = w.task()
	}
	return tasks, nil
}

// Codes of a refused request (baton.inbox.code), and the errors Outcome
// makes of them again.
const (
	codeInvalid   = "invalid_task"
	codeDuplicate = "duplicate_id"
	codeUnknown   = "unknown_dependency"
	codePool      = "unknown_pool"
	codeCycle     = "cycle"
	codeDurable   = "not_durable"
	codeCorrupt   = "corrupt_request"
	codeOther     = "refused"
)

var codeErrors = map[string]error{
	codeInvalid:   coordinator.ErrInvalidTask,
	codeDuplicate: coordinator.ErrDuplicateID,
	codeUnknown:   coordinator.ErrUnknownDependency,
	codePool:      coordinator.ErrUnknownPool,
	codeDurable:   coordinator.ErrNotDurable,
}

// refusal is a refused request's detail column.
type refusal struct {
	Task    string   `json:"task,omitempty"`
	Detail  string   `json:"detail,omitempty"`
	Err     string   `json:"err,omitempty"` // the error of a *TaskError of code refused (a pool Validator's)
	InCycle []string `json:"in_cycle,omitempty"`
	Behind  []string `json:"behind,omitempty"`
}

// describeRefusal turns Submit's error into a code, a text and a detail.
func describeRefusal(err error) (code string, detail refusal) {
	var ce *coordinator.CycleError
	if errors.As(err, &ce) {
		return codeCycle, refusal{InCycle: ce.InCycle, Behind: ce.Behind}
	}
	if errors.Is(err, ErrCorruptRequest) {
		return codeCorrupt, refusal{Detail: err.Error()}
	}
	var te *coordinator.TaskError
	if errors.As(err, &te) {
		for code, sentinel := range codeErrors {
			if errors.Is(te.Err, sentinel) {
				return code, refusal{Task: te.ID, Detail: te.Detail}
			}
		}
		return codeOther, refusal{Task: te.ID, Detail: te.Detail, Err: te.Err.Error()}
	}
	return codeOther, refusal{Err: err.Error()}
}

// refusalError makes the error Submit gave again from a refused row.
func refusalError(code string, d refusal, text string) error {
	switch code {
	case codeCycle:
		return &coordinator.CycleError{InCycle: d.InCycle, Behind: d.Behind}
	case codeCorrupt:
		return fmt.Errorf("%w: %s", ErrCorruptRequest, d.Detail)
	case codeOther:
		if d.Task != "" {
			return &coordinator.TaskError{ID: d.Task, Err: errors.New(d.Err), Detail: d.Detail}
		}
		return errors.New(d.Err)
	}
	if sentinel, ok := codeErrors[code]; ok {
		return &coordinator.TaskError{ID: d.Task, Err: sentinel, Detail: d.Detail}
	}
	return fmt.Errorf("%w: refused with code %q: %s", ErrCorruptRequest, code, text)
}
