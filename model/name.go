package model

// NameMax is the longest name ValidName takes.
const NameMax = 128

// ValidName reports whether s is a valid name of a task, group, app, upstream, workflow or
// workflow step: 1 to 128 characters of letters, digits, '.', '_', ':' or '-', starting
// with a letter or digit (the pattern ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$, which the
// engine's FuzzValidName holds it to). One rule for all of them. A loop rather than a
// regexp: every create checks two names, and the regexp was 2% of the daemon's CPU under
// single creates (BENCHMARKS.md, B6).
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > NameMax {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == ':' || c == '-'):
		default:
			return false
		}
	}
	return true
}
