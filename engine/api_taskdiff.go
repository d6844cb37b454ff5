package engine

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"

	"github.com/axe-sched/axe/model"
)

// What an edit changed, for its `update` action record: each field of the definition whose
// value changed, by its JSON name, with its value before and after, as a JSON object that
// ends the record's detail:
//
//	definition replaced; changed: {"cron":["*/5 * * * *","0 * * * *"],"timeout_sec":[30,60]}
//
// A field absent on one side (an omitted zero value) reads null there. Params are compared
// key by key ("params.day"); a key that is sensitive before or after the edit shows "***"
// on both sides, so the record says it changed and never what it holds. A value longer than
// diffValueMax bytes of JSON is replaced by a string saying how long it was, and past
// diffFieldsMax changed fields the rest are counted under "…".

// DiffMarker starts the changed fields in an update record's detail.
const DiffMarker = "changed: "

const (
	diffValueMax  = 256
	diffFieldsMax = 40
	diffMask      = "***"
)

// diffSkip are the fields an edit does not change through the definition (ids, times, the
// pause, which has its own records).
var diffSkip = map[string]bool{"id": true, "name": true, "created_at": true, "updated_at": true, "paused": true}

// defDiff returns DiffMarker and the changed fields of old → nu, or "no field changed".
func defDiff(old, nu *model.TaskDef) string {
	before, after := fieldsOf(old), fieldsOf(nu)
	changes := map[string][2]json.RawMessage{}
	keys := make([]string, 0, len(before)+len(after))
	for k := range before {
		keys = append(keys, k)
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		if diffSkip[k] || k == "params" {
			continue
		}
		if b, a := before[k], after[k]; !bytes.Equal(b, a) {
			changes[k] = [2]json.RawMessage{diffValue(b), diffValue(a)}
		}
	}
	paramsDiff(old, nu, changes)
	if len(changes) == 0 {
		return "no field changed"
	}
	if len(changes) > diffFieldsMax {
		names := make([]string, 0, len(changes))
		for k := range changes {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names[diffFieldsMax:] {
			delete(changes, k)
		}
		more, _ := json.Marshal(strconv.Itoa(len(names)-diffFieldsMax) + " more fields")
		changes["…"] = [2]json.RawMessage{more, nil}
	}
	out, err := json.Marshal(changes)
	if err != nil {
		return "no field changed"
	}
	return DiffMarker + string(out)
}

// fieldsOf is a definition's JSON fields, each value compacted.
func fieldsOf(d *model.TaskDef) map[string]json.RawMessage {
	raw, err := json.Marshal(d)
	if err != nil {
		return nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	for k, v := range m {
		m[k] = compact(v)
	}
	return m
}

func compact(v json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if len(v) == 0 || json.Compact(&b, v) != nil {
		return v
	}
	return b.Bytes()
}

// diffValue is v as the record shows it: null when absent, a note of its length when long.
func diffValue(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return nil
	}
	if len(v) > diffValueMax {
		note, _ := json.Marshal("(" + strconv.Itoa(len(v)) + " bytes of JSON)")
		return note
	}
	return v
}

// paramsDiff adds the params' changes to changes: key by key when both sides are objects
// (a sensitive key masked), else params whole (masked when either side has a sensitive key).
func paramsDiff(old, nu *model.TaskDef, changes map[string][2]json.RawMessage) {
	b, a := compact(old.Params), compact(nu.Params)
	if bytes.Equal(b, a) {
		return
	}
	sensitive := map[string]bool{}
	for _, k := range append(slices.Clone(old.SensitiveParams), nu.SensitiveParams...) {
		sensitive[k] = true
	}
	mask, _ := json.Marshal(diffMask)
	var bo, ao map[string]json.RawMessage
	if (len(b) == 0 || json.Unmarshal(b, &bo) == nil) && (len(a) == 0 || json.Unmarshal(a, &ao) == nil) && (bo != nil || ao != nil) {
		seen := map[string]bool{}
		for _, m := range []map[string]json.RawMessage{bo, ao} {
			for k := range m {
				if seen[k] {
					continue
				}
				seen[k] = true
				x, y := compact(bo[k]), compact(ao[k])
				if bytes.Equal(x, y) {
					continue
				}
				if sensitive[k] {
					x, y = maskIf(x, mask), maskIf(y, mask)
				}
				changes["params."+k] = [2]json.RawMessage{diffValue(x), diffValue(y)}
			}
		}
		return
	}
	if len(sensitive) > 0 {
		b, a = maskIf(b, mask), maskIf(a, mask)
	}
	changes["params"] = [2]json.RawMessage{diffValue(b), diffValue(a)}
}

// maskIf is mask for a value that is there, nothing for one that is not.
func maskIf(v, mask json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return nil
	}
	return mask
}
