package protocol

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Signed calls to executors (docs/protocol.md, Authentication). The scheduler proves itself
// to an executor without handing it any credential: every call it makes to /axe/run,
// /axe/runs and /axe/kill carries an HMAC-SHA256 signature under the executor's dispatch key,
// DispatchKey of the token the executor itself presents to the scheduler. Only the executor
// (which holds the token) and the scheduler (which was shown it at registration) know the
// key; the key is a one-way function of the token, so knowing it grants nothing on the API,
// and the executor receives nothing but signatures.

// AuthSigned is the value of Register.Auth of an executor that verifies the scheduler's
// signatures (the SDK and axe agent from the version that sends it, when they have a token).
const AuthSigned = "signed"

// SignatureScheme starts the Authorization header of a signed call:
// "AXE-HMAC-SHA256 t=<unix ms>,sig=<hex>".
const SignatureScheme = "AXE-HMAC-SHA256"

// SignatureSkew is how far the time of a signed call may be from the executor's clock, either
// way. A captured call replays for at most this long, within which the executor still
// remembers its ticket.
const SignatureSkew = 5 * time.Minute

// ErrBadSignature is what every error of VerifyCall is (errors.Is).
var ErrBadSignature = errors.New("missing or invalid scheduler signature")

// DispatchKey is the key the scheduler signs its calls to an executor with: the raw 32-byte
// digest (not hex) of HMAC-SHA256 whose key is the UTF-8 bytes of the token the executor
// presents to the scheduler and whose message is "axe dispatch key v1".
func DispatchKey(token string) []byte {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("axe dispatch key v1"))
	return m.Sum(nil)
}

// signature is the HMAC of one call: its time, the executor address it is meant for (so a
// call captured on one executor is refused by another that holds the same key), its path,
// its X-Axe-Epoch header ("" without one) and its body.
func signature(key []byte, at int64, address, path, epoch string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("axe-dispatch-v1\n" + strconv.FormatInt(at, 10) + "\n" + address + "\n" + path + "\n" + epoch + "\n"))
	m.Write(body)
	return m.Sum(nil)
}

// signatureV2 is the HMAC of one call to an executor of the incarnation it names: as
// signature, with the incarnation (its X-Axe-Incarnation header) signed as well, so that a
// call captured before the executor restarted is refused by the new process.
func signatureV2(key []byte, at int64, address, path, epoch, incarnation string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("axe-dispatch-v2\n" + strconv.FormatInt(at, 10) + "\n" + address + "\n" + path + "\n" + epoch + "\n" +
		incarnation + "\n"))
	m.Write(body)
	return m.Sum(nil)
}

// SignCallV2 returns the Authorization header of a call made at to path on the executor
// registered at address with incarnation (which the call also carries as
// HeaderIncarnation).
func SignCallV2(key []byte, at time.Time, address, path, epoch, incarnation string, body []byte) string {
	ms := at.UnixMilli()
	return SignatureScheme + " t=" + strconv.FormatInt(ms, 10) + ",sig=" +
		hex.EncodeToString(signatureV2(key, ms, address, path, epoch, incarnation, body))
}

// ErrOtherIncarnation is what VerifyCallV2 returns (besides ErrBadSignature) for a call
// whose signature is valid for another incarnation of the executor: one captured before it
// restarted, or sent by a scheduler that has not yet seen it register again. The executor
// did nothing with the call.
var ErrOtherIncarnation = errors.New("signed for another incarnation of this executor")

// VerifyCallV2 checks a call to the executor at address whose current incarnation is own:
// h is its Authorization header and got its HeaderIncarnation. The call verifies only when
// got is own and the signature is SignCallV2's for it; a missing or other incarnation is
// refused (errors.Is ErrBadSignature, and ErrOtherIncarnation when the call is validly signed
// for the incarnation it names).
func VerifyCallV2(key, h []byte, address, path, epoch, own, got string, body []byte, now time.Time) error {
	at, sig, ok := parseSignature(h)
	switch {
	case !ok || got == "":
		return ErrBadSignature
	case !fresh(at, now):
		return errors.Join(ErrBadSignature, errors.New("the call was signed more than "+SignatureSkew.String()+
			" away from this executor's clock: check both clocks"))
	case got != own:
		if hmac.Equal(sig, signatureV2(key, at, address, path, epoch, got, body)) {
			return fmt.Errorf("%w: %w", ErrBadSignature, ErrOtherIncarnation)
		}
		return ErrBadSignature
	case !hmac.Equal(sig, signatureV2(key, at, address, path, epoch, own, body)):
		return ErrBadSignature
	}
	return nil
}

// IsOtherIncarnation reports whether an executor's error body says a call was signed for
// another incarnation of it (VerifyCallV2's ErrOtherIncarnation): the call was refused
// before anything of it was read, so whatever it carried was not delivered.
func IsOtherIncarnation(body []byte) bool {
	return bytes.Contains(body, []byte(ErrOtherIncarnation.Error()))
}

// SignCall returns the Authorization header of a call made at to path on the executor
// registered at address.
func SignCall(key []byte, at time.Time, address, path, epoch string, body []byte) string {
	ms := at.UnixMilli()
	return SignatureScheme + " t=" + strconv.FormatInt(ms, 10) + ",sig=" + hex.EncodeToString(signature(key, ms, address, path, epoch, body))
}

// parseSignature splits an Authorization header of the signed scheme.
func parseSignature(h []byte) (at int64, sig []byte, ok bool) {
	rest, found := bytes.CutPrefix(h, []byte(SignatureScheme+" t="))
	if !found {
		return 0, nil, false
	}
	ts, hexSig, found := bytes.Cut(rest, []byte(",sig="))
	if !found || len(ts) == 0 || len(ts) > 19 || len(hexSig) != 2*sha256.Size {
		return 0, nil, false
	}
	at, err := strconv.ParseInt(string(ts), 10, 64)
	// Only the form SignCall writes: a canonical time and lower-case hex, so one call has
	// exactly one valid header.
	if err != nil || at < 0 || strconv.FormatInt(at, 10) != string(ts) || bytes.ContainsFunc(hexSig, isUpper) {
		return 0, nil, false
	}
	sig = make([]byte, sha256.Size)
	if _, err := hex.Decode(sig, hexSig); err != nil {
		return 0, nil, false
	}
	return at, sig, true
}

func isUpper(r rune) bool { return 'A' <= r && r <= 'Z' }

// fresh reports whether a call signed at (Unix ms) is within SignatureSkew of now.
func fresh(at int64, now time.Time) bool {
	d := now.UnixMilli() - at
	return d <= SignatureSkew.Milliseconds() && d >= -SignatureSkew.Milliseconds()
}

// PlausibleCall reports whether an Authorization header is a well-formed signature of a
// time within SignatureSkew of now: what can be judged before the body is read.
func PlausibleCall(h []byte, now time.Time) bool {
	at, _, ok := parseSignature(h)
	return ok && fresh(at, now)
}

// VerifyCall checks the Authorization header h of a call to path on the executor at
// address, under key, at now. The error says what is wrong (errors.Is ErrBadSignature).
func VerifyCall(key, h []byte, address, path, epoch string, body []byte, now time.Time) error {
	at, sig, ok := parseSignature(h)
	switch {
	case !ok:
		return ErrBadSignature
	case !fresh(at, now):
		return errors.Join(ErrBadSignature, errors.New("the call was signed more than "+SignatureSkew.String()+
			" away from this executor's clock: check both clocks"))
	case !hmac.Equal(sig, signature(key, at, address, path, epoch, body)):
		return ErrBadSignature
	}
	return nil
}
