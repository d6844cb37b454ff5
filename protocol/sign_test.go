package protocol

import (
	"bytes"
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
