// Package jsonkeys counts the keys of a JSON object that encoding/json would decode into one
// struct field. The fuzz targets of the protocol decoders use it to tell bodies that repeat
// a key, where decoding in one pass and item by item may legitimately differ.
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
