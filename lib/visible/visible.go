// Package visible shows untrusted text on a terminal as what it is: control characters,
// bytes that are not UTF-8 and the characters that reorder a line are written as escapes
// (\x1b, \xff, \u202e), so text read from a crontab, a database or a server's answer cannot
// move the cursor, erase a line, recolour the screen or hide part of itself. It is a leaf
// library: it imports nothing of axe.
package visible

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Line returns s for one line of output: every control character, a newline and a tab
// included, is escaped.
func Line(s string) string { return escape(s, false) }

// Text returns s for output that may span lines: as Line, but newlines are kept.
func Text(s string) string { return escape(s, true) }

func escape(s string, keepNewline bool) string {
	if clean(s, keepNewline) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' && keepNewline:
			b.WriteByte('\n')
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case hidden(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// clean reports whether s needs no escape, the common case, without allocating.
func clean(s string, keepNewline bool) bool {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n <= 1) || (r < 0x20 && !(r == '\n' && keepNewline)) || r == 0x7f || hidden(r) {
			return false
		}
		i += n
	}
	return true
}

// hidden reports the characters beyond ASCII that act on the terminal or on the order of
// the line rather than show: C1 controls, bidirectional overrides and isolates, and the
// line and paragraph separators.
func hidden(r rune) bool {
	switch {
	case r >= 0x80 && r <= 0x9f:
		return true
	case r == 0x200e || r == 0x200f || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069):
		return true
	case r == 0x2028 || r == 0x2029:
		return true
	}
	return false
}
