package visible

import "testing"

func TestEscapes(t *testing.T) {
	for _, c := range []struct{ in, line, text string }{
		{"echo hi", "echo hi", "echo hi"},
		{"café ⏎ ok", "café ⏎ ok", "café ⏎ ok"},
		{"a\x1b[2K\rb", `a\x1b[2K\rb`, `a\x1b[2K\rb`},
		{"a\nb\tc", `a\nb\tc`, "a\nb\\tc"},
		{"nul\x00 del\x7f", `nul\x00 del\x7f`, `nul\x00 del\x7f`},
		{"bad\xff\xc3", `bad\xff\xc3`, `bad\xff\xc3`},
		{"c1\u009b31m", `c1\u009b31m`, `c1\u009b31m`},
		{"x\u202eevil", `x\u202eevil`, `x\u202eevil`},
	} {
		if got := Line(c.in); got != c.line {
			t.Errorf("Line(%q) = %q, want %q", c.in, got, c.line)
		}
		if got := Text(c.in); got != c.text {
			t.Errorf("Text(%q) = %q, want %q", c.in, got, c.text)
		}
	}
}
