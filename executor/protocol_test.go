package executor

import (
	"reflect"
	"strings"
	"testing"

	"github.com/axe-sched/axe/protocol"
)

// TestRunRequestIsProtocolRun: the executor decodes runs into its own narrower struct; every
// field it keeps must carry the JSON name and type protocol.Run gives it, or the executor
// would silently read a field the scheduler no longer sends.
func TestRunRequestIsProtocolRun(t *testing.T) {
	wire := map[string]reflect.StructField{}
	rt := reflect.TypeOf(protocol.Run{})
	for i := 0; i < rt.NumField(); i++ {
		f := rt.Field(i)
		wire[jsonName(f)] = f
	}
	own := reflect.TypeOf(runRequest{})
	if own.NumField() == 0 {
		t.Fatal("runRequest has no fields")
	}
	// The executor refuses a field it does not know, so it must know every field the
	// scheduler sends.
	for name, w := range wire {
		if _, ok := own.FieldByName(w.Name); !ok {
			t.Errorf("protocol.Run.%s (%q) is missing from runRequest: every run would be refused", w.Name, name)
		}
	}
	for i := 0; i < own.NumField(); i++ {
		f := own.Field(i)
		w, ok := wire[jsonName(f)]
		switch {
		case !ok:
			t.Errorf("runRequest.%s reads %q, which protocol.Run does not have", f.Name, jsonName(f))
		case w.Type != f.Type:
			t.Errorf("runRequest.%s is %s, protocol.Run.%s is %s", f.Name, f.Type, w.Name, w.Type)
		}
	}
}

func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name
}
