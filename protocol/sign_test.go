package protocol

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"
)

// A signed call verifies for exactly what was signed: the key, the executor address, the
// path, the epoch and the body, within SignatureSkew of its time either way.
func TestSignedCallVerifiesOnlyWhatWasSigned(t *testing.T) {
	key := DispatchKey("exec-token")
	at := time.UnixMilli(1_700_000_000_000)
	body := []byte(`{"ticket":"t-1"}`)
	h := []byte(SignCall(key, at, "10.0.0.7:9100", PathRun, "5", body))
	if !bytes.HasPrefix(h, []byte(SignatureScheme+" t=1700000000000,sig=")) {
		t.Fatalf("header %q", h)
	}
	if err := VerifyCall(key, h, "10.0.0.7:9100", PathRun, "5", body, at); err != nil {
		t.Fatalf("VerifyCall of the signed call: %v", err)
	}
	for name, err := range map[string]error{
		"other key":     VerifyCall(DispatchKey("other"), h, "10.0.0.7:9100", PathRun, "5", body, at),
		"other address": VerifyCall(key, h, "10.0.0.8:9100", PathRun, "5", body, at),
		"other path":    VerifyCall(key, h, "10.0.0.7:9100", PathKill, "5", body, at),
		"other epoch":   VerifyCall(key, h, "10.0.0.7:9100", PathRun, "", body, at),
		"other body":    VerifyCall(key, h, "10.0.0.7:9100", PathRun, "5", []byte(`{"ticket":"t-2"}`), at),
		"too late":      VerifyCall(key, h, "10.0.0.7:9100", PathRun, "5", body, at.Add(SignatureSkew+time.Millisecond)),
		"too early":     VerifyCall(key, h, "10.0.0.7:9100", PathRun, "5", body, at.Add(-SignatureSkew-time.Millisecond)),
		"bearer":        VerifyCall(key, []byte("Bearer exec-token"), "10.0.0.7:9100", PathRun, "5", body, at),
		"empty":         VerifyCall(key, nil, "10.0.0.7:9100", PathRun, "5", body, at),
	} {
		if !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadSignature", name, err)
		}
	}
	for _, d := range []time.Duration{SignatureSkew, -SignatureSkew} {
		if err := VerifyCall(key, h, "10.0.0.7:9100", PathRun, "5", body, at.Add(d)); err != nil {
			t.Errorf("at the edge of the skew (%s): %v", d, err)
		}
	}
	if err := VerifyCall(key, h, "10.0.0.7:9100", PathRun, "5", body, at.Add(time.Hour)); !strings.Contains(err.Error(), "clock") {
		t.Errorf("a stale call's error %q does not point at the clocks", err)
	}
	if bytes.Equal(DispatchKey("a"), DispatchKey("b")) || len(DispatchKey("a")) != 32 {
		t.Errorf("DispatchKey does not tell tokens apart")
	}
}

// FuzzVerifyCall holds the signature check to its contract on any header: it never panics,
// refuses with ErrBadSignature, and accepts only the header SignCall writes for that call.
func FuzzVerifyCall(f *testing.F) {
	key := DispatchKey("k")
	at := time.UnixMilli(1_700_000_000_000)
	good := SignCall(key, at, "h:1", PathRun, "", []byte("{}"))
	for _, s := range []string{good, "", "Bearer k", SignatureScheme + " t=,sig=", SignatureScheme + " t=-1,sig=" + strings.Repeat("0", 64),
		SignatureScheme + " t=1700000000000,sig=" + strings.Repeat("g", 64), good + "0", strings.ToLower(good)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		err := VerifyCall(key, []byte(h), "h:1", PathRun, "", []byte("{}"), at)
		if err != nil && !errors.Is(err, ErrBadSignature) {
			t.Fatalf("VerifyCall(%q) = %v, not ErrBadSignature", h, err)
		}
		if err == nil && h != good {
			t.Fatalf("VerifyCall accepted %q, which SignCall did not write", h)
		}
		if err == nil && !PlausibleCall([]byte(h), at) {
			t.Fatalf("a verified header %q is not plausible", h)
		}
	})
}

// FuzzVerifyCallV2 holds the version 2 check to its contract on any header and any
// X-Axe-Incarnation: it never panics, refuses with ErrBadSignature, and accepts only the
// header SignCallV2 writes for the executor's own incarnation, named in the header.
func FuzzVerifyCallV2(f *testing.F) {
	key := DispatchKey("k")
	at := time.UnixMilli(1_700_000_000_000)
	own, old := "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	good := SignCallV2(key, at, "h:1", PathRun, "", own, []byte("{}"))
	f.Add(good, own)
	f.Add(SignCallV2(key, at, "h:1", PathRun, "", old, []byte("{}")), old)
	f.Add(SignCall(key, at, "h:1", PathRun, "", []byte("{}")), own)
	f.Add(good, "")
	f.Add("", own)
	f.Fuzz(func(t *testing.T, h, inc string) {
		err := VerifyCallV2(key, []byte(h), "h:1", PathRun, "", own, inc, []byte("{}"), at)
		if err != nil && !errors.Is(err, ErrBadSignature) {
			t.Fatalf("VerifyCallV2(%q, %q) = %v, not ErrBadSignature", h, inc, err)
		}
		if err == nil && (h != good || inc != own) {
			t.Fatalf("VerifyCallV2 accepted %q for incarnation %q, which SignCallV2 did not write for %q", h, inc, own)
		}
		if errors.Is(err, ErrOtherIncarnation) && (inc == own || h != SignCallV2(key, at, "h:1", PathRun, "", inc, []byte("{}"))) {
			t.Fatalf("VerifyCallV2(%q, %q) says another incarnation of a call not signed for it", h, inc)
		}
	})
}

// A call signed for an incarnation verifies only for that incarnation, carried in its
// header; a call for another incarnation of the executor, and one without the header, are
// refused, the first saying why.
func TestSignedCallV2IsBoundToTheIncarnation(t *testing.T) {
	key := DispatchKey("exec-token")
	at := time.UnixMilli(1_700_000_000_000)
	body := []byte(`{"ticket":"t-1"}`)
	old, cur := "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	h := []byte(SignCallV2(key, at, "10.0.0.7:9100", PathRun, "5", cur, body))
	if err := VerifyCallV2(key, h, "10.0.0.7:9100", PathRun, "5", cur, cur, body, at); err != nil {
		t.Fatalf("the signed call: %v", err)
	}
	replay := []byte(SignCallV2(key, at, "10.0.0.7:9100", PathRun, "5", old, body))
	err := VerifyCallV2(key, replay, "10.0.0.7:9100", PathRun, "5", cur, old, body, at)
	if !errors.Is(err, ErrBadSignature) || !errors.Is(err, ErrOtherIncarnation) || !IsOtherIncarnation([]byte(err.Error())) {
		t.Errorf("a call for the previous incarnation: %v, want ErrBadSignature and ErrOtherIncarnation", err)
	}
	for name, err := range map[string]error{
		"header says the current one": VerifyCallV2(key, replay, "10.0.0.7:9100", PathRun, "5", cur, cur, body, at),
		"no header":                   VerifyCallV2(key, h, "10.0.0.7:9100", PathRun, "5", cur, "", body, at),
		"v1 signature":                VerifyCallV2(key, []byte(SignCall(key, at, "10.0.0.7:9100", PathRun, "5", body)), "10.0.0.7:9100", PathRun, "5", cur, cur, body, at),
		"other body":                  VerifyCallV2(key, h, "10.0.0.7:9100", PathRun, "5", cur, cur, []byte(`{}`), at),
		"other epoch":                 VerifyCallV2(key, h, "10.0.0.7:9100", PathRun, "", cur, cur, body, at),
		"too late":                    VerifyCallV2(key, h, "10.0.0.7:9100", PathRun, "5", cur, cur, body, at.Add(SignatureSkew+time.Millisecond)),
	} {
		if !errors.Is(err, ErrBadSignature) || errors.Is(err, ErrOtherIncarnation) {
			t.Errorf("%s: %v, want ErrBadSignature alone", name, err)
		}
	}
	if err := VerifyCall(key, h, "10.0.0.7:9100", PathRun, "5", body, at); err == nil {
		t.Errorf("a v2 signature verified as v1")
	}
}

// The key derivation and both signatures, spelt out with the standard library alone as
// docs/protocol.md states them, and pinned to known answers that docs/protocol.md quotes for
// executors written in other languages.
func TestSignatureKnownAnswers(t *testing.T) {
	mac := func(key []byte, msg string) []byte {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(msg))
		return m.Sum(nil)
	}
	key := mac([]byte("exec-token"), "axe dispatch key v1")
	if !bytes.Equal(key, DispatchKey("exec-token")) {
		t.Fatalf("DispatchKey is not HMAC-SHA256(token, label) as raw bytes")
	}
	at := time.UnixMilli(1_700_000_000_000)
	body := `{"ticket":"t-1"}`
	v1 := hex.EncodeToString(mac(key, "axe-dispatch-v1\n1700000000000\n10.0.0.7:9100\n/axe/run\n5\n"+body))
	v2 := hex.EncodeToString(mac(key, "axe-dispatch-v2\n1700000000000\n10.0.0.7:9100\n/axe/run\n5\n0123456789abcdef0123456789abcdef\n"+body))
	if got := SignCall(key, at, "10.0.0.7:9100", PathRun, "5", []byte(body)); got != SignatureScheme+" t=1700000000000,sig="+v1 {
		t.Errorf("v1: %s, want sig=%s", got, v1)
	}
	if got := SignCallV2(key, at, "10.0.0.7:9100", PathRun, "5", "0123456789abcdef0123456789abcdef", []byte(body)); got != SignatureScheme+" t=1700000000000,sig="+v2 {
		t.Errorf("v2: %s, want sig=%s", got, v2)
	}
	for name, want := range map[string]string{"key": knownKey, "v1": knownV1, "v2": knownV2} {
		got := map[string]string{"key": hex.EncodeToString(key), "v1": v1, "v2": v2}[name]
		if got != want {
			t.Errorf("%s = %s, want the documented %s", name, got, want)
		}
	}
}

// The known answers docs/protocol.md quotes (TestDocsQuoteTheKnownAnswers checks it does).
const (
	knownKey = "a2042d7328aaf0811706284b29fbe1392857da6edefce919969a61c301220742"
	knownV1  = "f7492a3a2d38ece67530fd171e430196285a8e863ccfdeaeb1ab192940e1487e"
	knownV2  = "f425c2c9908c3a889a8710a4fe2decf21b0c481cc671622ee9cc15970bb6df9d"
)

// The incarnations NewIncarnation makes are valid and differ.
func TestNewIncarnation(t *testing.T) {
	a, b := NewIncarnation(), NewIncarnation()
	if !ValidIncarnation(a) || len(a) != 32 || a == b {
		t.Errorf("NewIncarnation: %q, %q", a, b)
	}
	for _, s := range []string{"", "short", strings.Repeat("a", 65), "0123456789abcdef 0123", "0123456789abcdéf"} {
		if ValidIncarnation(s) {
			t.Errorf("ValidIncarnation(%q) = true", s)
		}
	}
}
