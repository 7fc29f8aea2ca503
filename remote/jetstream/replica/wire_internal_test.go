package replica

import (
	"reflect"
	"testing"
	"time"

	"github.com/batonhq/baton/coordinator"
)

// fill sets every field of the struct v points to, recursively, to a
// value that is not its zero value, leaving functions and interfaces
// (which a test sets by hand) alone.
func fill(v reflect.Value) {
	for i := range v.NumField() {
		f := v.Field(i)
		if !f.CanSet() {
			continue
		}
		switch f.Kind() {
		case reflect.String:
			f.SetString("x" + v.Type().Field(i).Name)
		case reflect.Int, reflect.Int64:
			if f.Type() == reflect.TypeFor[time.Duration]() {
				f.SetInt(int64(time.Second))
			} else {
				f.SetInt(2)
			}
		case reflect.Uint8:
			f.SetUint(2)
		case reflect.Float64:
			f.SetFloat(0.5)
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Slice:
			if f.Type().Elem().Kind() == reflect.String {
				f.Set(reflect.ValueOf([]string{"d"}))
			}
		case reflect.Struct:
			fill(f)
		}
	}
}

// Every field of a Task described by data, and of a TaskInfo and an
// Event, travels on the wire: a field added to the coordinator's types
// and forgotten here (as Task.Key and Task.Slots were) fails this test.
func TestWireCarriesEveryField(t *testing.T) {
	var task coordinator.Task
	fill(reflect.ValueOf(&task).Elem())
	task.Cron, task.Payload = "@every 1s", []byte("p")
	w, err := toWire(task)
	if err != nil {
		t.Fatal(err)
	}
	if got := w.task(); !reflect.DeepEqual(got, task) {
		t.Errorf("Task through the wire:\n got %+v\nwant %+v", got, task)
	}

	var ti coordinator.TaskInfo
	fill(reflect.ValueOf(&ti).Elem())
	ti.Err, ti.Result = coordinator.ErrCancelled, []byte("r")
	if got := infoToWire(ti).info(); !reflect.DeepEqual(got, ti) {
		t.Errorf("TaskInfo through the wire:\n got %+v\nwant %+v", got, ti)
	}

	var ev coordinator.Event
	fill(reflect.ValueOf(&ev).Elem())
	ev.Err, ev.At = coordinator.ErrClosed, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if got := eventToWire(ev, 1).event(); !reflect.DeepEqual(got, ev) {
		t.Errorf("Event through the wire:\n got %+v\nwant %+v", got, ev)
	}
}
