// Package jsonkeys finds repeated keys in JSON the way encoding/json reads it, independently
// of the strict decoder (protocol.Decode) whose fuzz targets it serves as an oracle: Count
// counts the keys encoding/json would decode into one struct field, Repeated finds a key an
// object holds twice.
package jsonkeys

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Count returns how many keys of body's top-level object encoding/json would take for the
// field named name (it matches keys without regard to case); 0 when body is not an object.
func Count(body []byte, name string) int {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return 0
	}
	n := 0
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return n
		}
		if k, ok := key.(string); ok && strings.EqualFold(k, name) {
			n++
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return n
		}
	}
	return n
}

// Repeated reports whether some object in body, at any depth, holds the same key twice
// (compared as decoded, so "a" and "\u0061" are the same key). A body that is not JSON is
// read as far as it goes.
func Repeated(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	// One set of keys per open object; nil for an open array.
	var open []map[string]bool
	expectKey := false // the next string token of the innermost object is a key
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				open = append(open, map[string]bool{})
				expectKey = true
				continue
			case '[':
				open = append(open, nil)
			case '}', ']':
				open = open[:len(open)-1]
			}
		case string:
			if expectKey {
				keys := open[len(open)-1]
				if keys[t] {
					return true
				}
				keys[t] = true
				expectKey = false
				continue
			}
		}
		// After a value: inside an object the next string is a key again.
		expectKey = len(open) > 0 && open[len(open)-1] != nil
	}
}
