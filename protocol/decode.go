package protocol

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Sizes of message fields both sides enforce. The SDK clips what it sends to them, so a
// result it reports is never refused for its size.
const (
	// MaxNameBytes bounds an app, a task, a handler and a ticket.
	MaxNameBytes = 256
	// MaxAddressBytes bounds an executor's host:port.
	MaxAddressBytes = 255
	// MaxHandlers is the most handlers one registration may list.
	MaxHandlers = 1000
	// MaxOutputBytes bounds a result's output (the SDK's OutputLimit may not exceed it).
	MaxOutputBytes = 1 << 20
	// MaxErrorBytes bounds a result's error text; the SDK keeps its first MaxErrorBytes.
	MaxErrorBytes = 64 << 10
)

// ShardCount is how many shards a scale-out cluster splits its tasks into: a run or a kill
// that names its shard names one of 0 to ShardCount-1. It is model.ShardCount, spelt again
// here because this package imports nothing of axe; TestShardCountIsTheModels holds the two
// equal.
const ShardCount = 256

// Request body limits of the scheduler's executor endpoints. JSON may spell a byte of a
// string as six (\u0000), so a result of the largest output and error fits in
// MaxResultBodyBytes however it is escaped.
const (
	// MaxRegisterBodyBytes bounds POST PathRegister.
	MaxRegisterBodyBytes = 512 << 10
	// MaxHeartbeatBodyBytes bounds POST PathHeartbeat.
	MaxHeartbeatBodyBytes = 4 << 10
	// MaxResultBodyBytes bounds POST PathCallback and POST PathCallbackBatch.
	MaxResultBodyBytes = 8 << 20
	// MaxKillBodyBytes bounds POST PathKill on an executor.
	MaxKillBodyBytes = 4 << 10
)

// ErrMalformed is what every error of Decode and of the Check methods is (errors.Is); the
// error's text starts with the field it is about.
var ErrMalformed = errors.New("malformed message")

// FieldError is a malformed message: Field is the JSON field at fault ("" when the body is
// not JSON at all).
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// Is makes every FieldError an ErrMalformed.
func (e *FieldError) Is(target error) bool { return target == ErrMalformed }

// Decode decodes one JSON body strictly, the decoder of every body of the operators' API
// (the executor protocol reads with DecodeMessage, which skips unknown members and is
// otherwise the same): body must be exactly one JSON object (or what v
// takes), every field of it known to v and matched exactly (no other case), no key twice
// in any object, every string valid UTF-8 (a lone UTF-16 surrogate escape included), and
// nothing after it. The error is a *FieldError naming the offending field ("callback.url",
// "depends_on[2]"); it never quotes the body's bytes.
//
// It is github.com/go-json-experiment/json (the proposed encoding/json/v2), whose defaults
// refuse repeated keys and invalid UTF-8 as they are read, in the same pass that decodes:
// encoding/json merges repeats silently (the last wins) and passes invalid bytes of a raw
// field through to the store, which refuses them.
func Decode(body []byte, v any) error {
	dec := jsontext.NewDecoder(bytes.NewBuffer(body))
	if err := jsonv2.UnmarshalDecode(dec, v, strictOptions); err != nil {
		return jsonError(err)
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return &FieldError{Msg: "invalid JSON: trailing data after the value"}
	}
	return nil
}

// DecodeMessage decodes one body of the executor protocol tolerantly (docs/protocol.md,
// Tolerant reading): as Decode, except that an object member v does not know is skipped, so
// a field a newer peer adds never breaks an older receiver. Everything else Decode refuses
// is still refused: not exactly one JSON value, trailing data, a repeated key in any object
// (the skipped ones included), invalid UTF-8 or a lone surrogate escape anywhere, a known
// field of the wrong JSON type. Presence and sizes are the Check methods' (and DecodeRun's).
// The operators' REST API keeps Decode, where a misspelt field must be caught.
func DecodeMessage(body []byte, v any) error {
	dec := jsontext.NewDecoder(bytes.NewBuffer(body))
	if err := jsonv2.UnmarshalDecode(dec, v, tolerantOptions); err != nil {
		return jsonError(err)
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return &FieldError{Msg: "invalid JSON: trailing data after the value"}
	}
	return nil
}

// tolerantOptions are DecodeMessage's: unknown members skipped (still read, so their keys
// and strings are held to the same rules), names matched exactly.
var tolerantOptions = jsonv2.RejectUnknownMembers(false)

// strictOptions are Decode's options beyond the strict defaults of jsontext (no repeated
// key, valid UTF-8 only).
var strictOptions = jsonv2.RejectUnknownMembers(true)

// jsonError words an error of Decode as a FieldError naming the field it is about.
func jsonError(err error) error {
	var (
		se *jsonv2.SemanticError
		sy *jsontext.SyntacticError
	)
	switch {
	case errors.Is(err, io.EOF), errors.As(err, &sy) && sy.ByteOffset == 0 && errors.Is(sy.Err, io.ErrUnexpectedEOF):
		return &FieldError{Msg: "invalid JSON: empty body"}
	case errors.As(err, &sy):
		field := FieldOf(string(sy.JSONPointer))
		switch why := sy.Err.Error(); {
		case errors.Is(sy.Err, jsontext.ErrDuplicateName):
			return &FieldError{Field: field, Msg: "repeated key: each key may appear once in an object"}
		case why == "invalid UTF-8":
			return &FieldError{Field: field, Msg: "invalid UTF-8 in a string"}
		case strings.HasPrefix(why, "invalid surrogate pair"):
			return &FieldError{Field: field, Msg: "a lone UTF-16 surrogate (\\ud800-\\udfff) in a string is not a character"}
		case errors.Is(sy.Err, io.ErrUnexpectedEOF):
			return &FieldError{Msg: fmt.Sprintf("invalid JSON: the body ends at byte %d, inside a value", sy.ByteOffset)}
		default:
			return &FieldError{Field: field, Msg: fmt.Sprintf("invalid JSON at byte %d: %s", sy.ByteOffset, unquote(why))}
		}
	case errors.As(err, &se):
		field := FieldOf(string(se.JSONPointer))
		switch {
		case errors.Is(se.Err, jsonv2.ErrUnknownName):
			return &FieldError{Field: field, Msg: "unknown field"}
		case field == "" && se.GoType != nil && kindOf(se.GoType) == "an object":
			return &FieldError{Msg: "invalid JSON: the body must be a JSON object, got " + jsonKind(se.JSONKind)}
		case field == "" && se.GoType != nil:
			return &FieldError{Msg: "invalid JSON: the body must be a JSON " + kindOf(se.GoType) + ", got " + jsonKind(se.JSONKind)}
		case se.GoType != nil:
			return &FieldError{Field: field, Msg: "must be " + kindOf(se.GoType) + ", got " + jsonKind(se.JSONKind)}
		}
		return &FieldError{Field: field, Msg: "invalid value"}
	}
	return &FieldError{Msg: "invalid JSON"}
}

// FieldOf turns a JSON Pointer (RFC 6901) into the field name errors use: "/callback/url"
// is "callback.url", "/depends_on/2" is "depends_on[2]", "/0/name" is "[0].name".
func FieldOf(pointer string) string {
	if pointer == "" {
		return ""
	}
	var b strings.Builder
	for _, tok := range strings.Split(strings.TrimPrefix(pointer, "/"), "/") {
		if tok != "" && strings.Trim(tok, "0123456789") == "" {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(strings.NewReplacer("~1", "/", "~0", "~").Replace(tok))
	}
	return b.String()
}

// kindOf says what JSON a Go type takes, in encoding/json's words (clients match them):
// "string", "int64", "[]string"; "an object" for a struct or a map.
func kindOf(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Struct || t.Kind() == reflect.Map {
		return "an object"
	}
	return t.String()
}

// jsonKind names the kind of a JSON value as jsontext reports it, in encoding/json's words.
func jsonKind(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 'f', 't':
		return "bool"
	case '"':
		return "string"
	case '0':
		return "number"
	case '{':
		return "object"
	case '[':
		return "array"
	}
	return "another value"
}

// unquote drops what a jsontext message quotes of the input (a character, a fragment), so
// that no error repeats a body's bytes: a token file's error must never show a token.
func unquote(msg string) string {
	return quotedInput.ReplaceAllString(msg, "")
}

var quotedInput = regexp.MustCompile("\\s*(`[^`]*`|'(\\\\.|[^'])*'|\"(\\\\.|[^\"])*\")")

func malformed(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// checkName checks a required name field of at most MaxNameBytes.
func checkName(field, v string) error {
	switch {
	case v == "":
		return malformed(field, "is required")
	case len(v) > MaxNameBytes:
		return malformed(field, "longer than %d bytes", MaxNameBytes)
	}
	return nil
}

// checkAddress checks a required host:port.
func checkAddress(v string) error {
	switch {
	case v == "":
		return malformed("address", "is required")
	case len(v) > MaxAddressBytes:
		return malformed("address", "longer than %d bytes", MaxAddressBytes)
	}
	return nil
}

// Check checks the fields of a registration that are not the scheduler's policy: presence
// and sizes.
func (r *Register) Check() error {
	if err := checkName("app", r.App); err != nil {
		return err
	}
	if err := checkAddress(r.Address); err != nil {
		return err
	}
	if r.Auth != "" && r.Auth != AuthSigned {
		return malformed("auth", "must be %q or absent, got %q", AuthSigned, r.Auth)
	}
	if err := r.checkVersion(); err != nil {
		return err
	}
	if len(r.Handlers) == 0 {
		return malformed("handlers", "at least one handler is required")
	}
	if len(r.Handlers) > MaxHandlers {
		return malformed("handlers", "at most %d, got %d", MaxHandlers, len(r.Handlers))
	}
	for _, h := range r.Handlers {
		if err := checkName("handlers", h); err != nil {
			return err
		}
	}
	return nil
}

// checkVersion checks the version and incarnation of a registration: any version from 1 up
// is taken (the scheduler answers with its own, and speaks the lower of the two), and one of
// 2 or more states its incarnation.
func (r *Register) checkVersion() error {
	if r.Version < 0 {
		return malformed("version", "must be 1 or more, got %d", r.Version)
	}
	if err := checkIncarnation(r.Incarnation); err != nil {
		return err
	}
	if r.Version >= 2 && r.Incarnation == "" {
		return malformed("incarnation", "is required with version %d", r.Version)
	}
	return nil
}

// Check checks a heartbeat.
func (h *Heartbeat) Check() error {
	if err := checkName("app", h.App); err != nil {
		return err
	}
	if err := checkAddress(h.Address); err != nil {
		return err
	}
	if h.Running < 0 {
		return malformed("running", "must not be negative, got %d", h.Running)
	}
	return checkIncarnation(h.Incarnation)
}

// Check checks a deregistration.
func (d *Deregister) Check() error {
	if err := checkName("app", d.App); err != nil {
		return err
	}
	if err := checkAddress(d.Address); err != nil {
		return err
	}
	return checkIncarnation(d.Incarnation)
}

// Incarnation ids: 16 to 64 characters of [A-Za-z0-9_-].
const (
	MinIncarnationBytes = 16
	MaxIncarnationBytes = 64
)

// ValidIncarnation reports whether s is a well-formed incarnation id.
func ValidIncarnation(s string) bool {
	if len(s) < MinIncarnationBytes || len(s) > MaxIncarnationBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// checkIncarnation checks an optional incarnation field.
func checkIncarnation(v string) error {
	if v != "" && !ValidIncarnation(v) {
		return malformed("incarnation", "must be %d to %d characters of A-Z, a-z, 0-9, '-' and '_'",
			MinIncarnationBytes, MaxIncarnationBytes)
	}
	return nil
}

// NewIncarnation makes an incarnation id: 32 hex characters from the system's CSPRNG. An
// executor makes one per process start.
func NewIncarnation() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (it panics if it cannot read)
	return hex.EncodeToString(b[:])
}

// Check checks a result: the ticket, the status, and the sizes and signs of the rest.
func (r *Result) Check() error {
	if err := checkName("ticket", r.Ticket); err != nil {
		return err
	}
	if r.Status != StatusSuccess && r.Status != StatusFailed {
		return malformed("status", "must be success or failed, got %q", ClipText(r.Status, 64))
	}
	for _, f := range []struct {
		name, v string
	}{{"task", r.Task}, {"app", r.App}} {
		if len(f.v) > MaxNameBytes {
			return malformed(f.name, "longer than %d bytes", MaxNameBytes)
		}
	}
	switch {
	case len(r.Address) > MaxAddressBytes:
		return malformed("address", "longer than %d bytes", MaxAddressBytes)
	case len(r.Output) > MaxOutputBytes:
		return malformed("output", "longer than %d bytes", MaxOutputBytes)
	case len(r.Error) > MaxErrorBytes:
		return malformed("error", "longer than %d bytes", MaxErrorBytes)
	case r.StartedAt < 0:
		return malformed("started_at", "must not be negative")
	case r.EndedAt < 0:
		return malformed("ended_at", "must not be negative")
	case r.DurationMS < 0:
		return malformed("duration_ms", "must not be negative")
	}
	return nil
}

// Check checks a kill.
func (k *Kill) Check() error {
	if err := checkName("ticket", k.Ticket); err != nil {
		return err
	}
	if k.Epoch < 0 {
		return malformed("epoch", "must not be negative")
	}
	if k.Shard != nil && (*k.Shard < 0 || *k.Shard >= ShardCount) {
		return malformed("shard", "must be between 0 and %d, got %d", ShardCount-1, *k.Shard)
	}
	return nil
}

// DecodeResultBatch decodes the body of PathCallbackBatch. The envelope is decoded as
// DecodeMessage does (one object, "results" and members it skips, nothing after it); each result is judged alone, so one
// malformed result refuses only itself. A nil error with a non-nil errs[i] means result i
// is refused for errs[i].
//
// A batch is decoded in one pass, and each result then checked: a body every result of which
// decodes (what an executor sends) costs one scan and one copy of it. Only when that pass
// fails is the body decoded again, result by result (decodeResultBatchEach), to tell which
// results are malformed; both ways judge every result alike (FuzzDecodeResultBatch). A body
// that is not strict JSON as a whole (a repeated key or invalid UTF-8 anywhere in it, a
// syntax error) is refused whole: only a result of the wrong shape refuses itself alone.
func DecodeResultBatch(body []byte) (results []Result, errs []error, err error) {
	var whole struct {
		Results []Result `json:"results"`
	}
	// Room for every result up front: encoding/json appends into the slice it finds, so the
	// results are not copied again each time it would have grown. A count that is off (a
	// "ticket" inside a string) only sizes the slice.
	whole.Results = make([]Result, 0, min(bytes.Count(body, ticketKey), MaxResultsPerCall))
	if DecodeMessage(body, &whole) != nil {
		return decodeResultBatchEach(body)
	}
	if err := checkResultCount(len(whole.Results)); err != nil {
		return nil, nil, err
	}
	errs = make([]error, len(whole.Results))
	for i := range whole.Results {
		errs[i] = whole.Results[i].Check()
	}
	return whole.Results, errs, nil
}

// ticketKey is the key every result carries once.
var ticketKey = []byte(`"ticket"`)

// decodeResultBatchEach is DecodeResultBatch decoding the envelope strictly and then each
// result alone.
func decodeResultBatchEach(body []byte) (results []Result, errs []error, err error) {
	var raw struct {
		Results []json.RawMessage `json:"results"`
	}
	if err := DecodeMessage(body, &raw); err != nil {
		return nil, nil, err
	}
	if err := checkResultCount(len(raw.Results)); err != nil {
		return nil, nil, err
	}
	results = make([]Result, len(raw.Results))
	errs = make([]error, len(raw.Results))
	for i, r := range raw.Results {
		if err := DecodeMessage(r, &results[i]); err != nil {
			errs[i] = err
			continue
		}
		errs[i] = results[i].Check()
	}
	return results, errs, nil
}

// checkResultCount refuses a batch of no results or of more than MaxResultsPerCall.
func checkResultCount(n int) error {
	switch {
	case n == 0:
		return malformed("results", "is required (one or more results)")
	case n > MaxResultsPerCall:
		return malformed("results", "at most %d per call, got %d", MaxResultsPerCall, n)
	}
	return nil
}

// ClipError returns s cut to MaxErrorBytes at a character boundary.
func ClipError(s string) string { return ClipText(s, MaxErrorBytes) }

// ClipText returns s cut to at most n bytes at a character boundary: what an error message
// quotes of a value.
func ClipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
