package model

// Keyed limits (docs/design.md, "Keyed limits"): a task's concurrency_key and rate_key may be
// a template over its run's params, so that one definition limits each customer separately.
//
// Grammar. A template is literal text with placeholders:
//
//	template    = { literal | placeholder }
//	placeholder = "{params." segment { "." segment } "}"
//	segment     = 1*( letter | digit | "_" | "-" )      ; an object member, never an index
//	literal     = letters, digits, ".", "_", ":", "-"
//
// A placeholder is replaced by the value at that path of the run's params (a nested path
// walks objects). The value must be a string, a number (its JSON text) or a boolean whose
// text is a key's characters (letters, digits, '.', '_', ':', '-'); a missing member, null,
// an object, an array, an empty string or a string of other characters is an error, never
// an empty or shortened key, so that a run never counts in a key it was not meant for and
// never runs unlimited for want of one. The key rendered must be a name as a static key is:
// 1-128 such characters starting with a letter or digit.
//
// A limit whose name ends in "*" (kind key only) is a pattern: "tenant:*" gives every key
// that starts with "tenant:" and has no limit of its own a limit of that max each (the
// longest matching pattern wins).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrKeyTemplate is wrapped by the errors of a key template that cannot be parsed or
// rendered.
var ErrKeyTemplate = errors.New("key template")

// KeyLen bounds a key, rendered or static, and a template's text.
const KeyLen = 128

// KeyTemplate is a parsed template: its literal text and placeholders in order.
type KeyTemplate struct {
	parts []keyPart
}

type keyPart struct {
	lit  string   // a literal, when path is nil
	path []string // params.<path...>
}

// IsKeyTemplate reports whether s has a placeholder (a '{'): a key without one is static and
// names itself.
func IsKeyTemplate(s string) bool { return strings.IndexByte(s, '{') >= 0 }

func keyChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-'
}

func segChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

// ParseKeyTemplate parses s. The error wraps ErrKeyTemplate and says what is wrong where.
func ParseKeyTemplate(s string) (KeyTemplate, error) {
	var t KeyTemplate
	if s == "" {
		return t, fmt.Errorf("%w: is empty", ErrKeyTemplate)
	}
	if len(s) > KeyLen {
		return t, fmt.Errorf("%w: must be at most %d bytes, got %d", ErrKeyTemplate, KeyLen, len(s))
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '{':
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return t, fmt.Errorf("%w: '{' at byte %d has no '}'", ErrKeyTemplate, i)
			}
			body := s[i+1 : i+end]
			rest, ok := strings.CutPrefix(body, "params.")
			if !ok {
				return t, fmt.Errorf("%w: placeholder {%s} must be {params.PATH}", ErrKeyTemplate, body)
			}
			segs := strings.Split(rest, ".")
			for _, sg := range segs {
				if sg == "" {
					return t, fmt.Errorf("%w: placeholder {%s} has an empty path segment", ErrKeyTemplate, body)
				}
				for j := 0; j < len(sg); j++ {
					if !segChar(sg[j]) {
						return t, fmt.Errorf("%w: placeholder {%s}: a path segment is letters, digits, '_' or '-'", ErrKeyTemplate, body)
					}
				}
			}
			t.parts = append(t.parts, keyPart{path: segs})
			i += end + 1
		case keyChar(c):
			j := i
			for j < len(s) && keyChar(s[j]) {
				j++
			}
			t.parts = append(t.parts, keyPart{lit: s[i:j]})
			i = j
		default:
			return t, fmt.Errorf("%w: byte %d (%q) is not a letter, digit, '.', '_', ':', '-' or a {params.PATH} placeholder", ErrKeyTemplate, i, c)
		}
	}
	if p := t.parts[0]; p.path == nil && !isAlnum(p.lit[0]) {
		return t, fmt.Errorf("%w: must start with a letter, a digit or a placeholder", ErrKeyTemplate)
	}
	return t, nil
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// Render returns the key of a run with params. The error wraps ErrKeyTemplate and names the
// placeholder and why it has no key (missing, null, not a scalar, characters a key cannot
// hold), or the key rendered if it is too long.
func (t KeyTemplate) Render(params json.RawMessage) (string, error) {
	var b strings.Builder
	var root map[string]json.RawMessage
	parsed := false
	for _, p := range t.parts {
		if p.path == nil {
			b.WriteString(p.lit)
			continue
		}
		if !parsed {
			parsed = true
			if len(bytes.TrimSpace(params)) > 0 {
				if err := json.Unmarshal(params, &root); err != nil {
					return "", fmt.Errorf("%w: params are not a JSON object", ErrKeyTemplate)
				}
			}
		}
		v, err := lookup(root, p.path)
		if err != nil {
			return "", err
		}
		b.WriteString(v)
	}
	key := b.String()
	if len(key) > KeyLen {
		return "", fmt.Errorf("%w: the key rendered is %d bytes, more than %d", ErrKeyTemplate, len(key), KeyLen)
	}
	if !isAlnum(key[0]) {
		return "", fmt.Errorf("%w: the key rendered %q does not start with a letter or digit", ErrKeyTemplate, key)
	}
	return key, nil
}

// lookup returns the scalar at path of root as a key's text.
func lookup(root map[string]json.RawMessage, path []string) (string, error) {
	name := "params." + strings.Join(path, ".")
	cur := root
	for i, seg := range path {
		raw, ok := cur[seg]
		if !ok {
			return "", fmt.Errorf("%w: %s is missing", ErrKeyTemplate, name)
		}
		raw = bytes.TrimSpace(raw)
		if i < len(path)-1 {
			if len(raw) == 0 || raw[0] != '{' {
				return "", fmt.Errorf("%w: %s is missing (%s is not an object)", ErrKeyTemplate, name, "params."+strings.Join(path[:i+1], "."))
			}
			cur = nil
			if err := json.Unmarshal(raw, &cur); err != nil {
				return "", fmt.Errorf("%w: %s: %v", ErrKeyTemplate, name, err)
			}
			continue
		}
		var text string
		switch {
		case len(raw) == 0 || string(raw) == "null":
			return "", fmt.Errorf("%w: %s is null", ErrKeyTemplate, name)
		case raw[0] == '{' || raw[0] == '[':
			return "", fmt.Errorf("%w: %s is an object or array, not a string, number or boolean", ErrKeyTemplate, name)
		case raw[0] == '"':
			if err := json.Unmarshal(raw, &text); err != nil {
				return "", fmt.Errorf("%w: %s: %v", ErrKeyTemplate, name, err)
			}
		default: // a number or a boolean: its JSON text
			text = string(raw)
		}
		if text == "" {
			return "", fmt.Errorf("%w: %s is empty", ErrKeyTemplate, name)
		}
		for j := 0; j < len(text); j++ {
			if !keyChar(text[j]) {
				return "", fmt.Errorf("%w: %s (%.40q) has characters a key cannot hold (letters, digits, '.', '_', ':', '-')", ErrKeyTemplate, name, text)
			}
		}
		return text, nil
	}
	return "", fmt.Errorf("%w: %s is missing", ErrKeyTemplate, name)
}

// RenderKey returns the key s names for a run with params: s itself when it has no
// placeholder, else the template rendered (ParseKeyTemplate, KeyTemplate.Render).
func RenderKey(s string, params json.RawMessage) (string, error) {
	if !IsKeyTemplate(s) {
		return s, nil
	}
	t, err := ParseKeyTemplate(s)
	if err != nil {
		return "", err
	}
	return t.Render(params)
}

// KeyPattern returns the prefix of a pattern limit's name ("tenant:*" → "tenant:") and
// whether name is one (it ends in '*').
func KeyPattern(name string) (string, bool) {
	return strings.CutSuffix(name, "*")
}
