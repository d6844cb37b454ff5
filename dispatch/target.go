package dispatch

import (
	"errors"
	"fmt"
)

// ErrBadRequestTarget is the Outcome error of a call whose URL holds a byte a request line
// cannot carry. Such a byte would be written into the request line as it is: a space ends
// the target early and a CR or LF ends the line, so the rest would read as a header or a
// second request.
var ErrBadRequestTarget = errors.New("the URL holds a byte a request line cannot carry")

// CheckURLBytes reports the first byte of rawURL that may not appear unescaped in an HTTP
// request (RFC 9112 §3.2, RFC 3986 §2): a space, a control character (0x00-0x1F, 0x7F) or a
// byte outside ASCII. Such a byte must be percent-encoded (%20, %0D, %C3%A9), and a host
// name beyond ASCII written in its punycode form. The error wraps ErrBadRequestTarget and
// names the byte and its offset, never echoing the URL raw.
func CheckURLBytes(rawURL string) error {
	for i := 0; i < len(rawURL); i++ {
		if b := rawURL[i]; b <= ' ' || b >= 0x7f {
			return fmt.Errorf("%w: byte %d is %s; percent-encode it (%%%02X)", ErrBadRequestTarget, i, describeByte(b), b)
		}
	}
	return nil
}

// describeByte names b for an error message: "a space", "0x0d (a control character)".
func describeByte(b byte) string {
	switch {
	case b == ' ':
		return "a space"
	case b < ' ' || b == 0x7f:
		return fmt.Sprintf("0x%02x (a control character)", b)
	default:
		return fmt.Sprintf("0x%02x (not ASCII)", b)
	}
}
