package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
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

// Decode decodes one protocol message strictly: body must be exactly one JSON object, every
// field of it known to v, and nothing after it. The error names the offending field.
func Decode(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &FieldError{Msg: "invalid JSON: trailing data after the object"}
	}
	return nil
}

// jsonError words an encoding/json error as a FieldError naming the field it is about.
func jsonError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field == "" {
			return &FieldError{Msg: "invalid JSON: the body must be a JSON object, got " + te.Value}
		}
		return &FieldError{Field: te.Field, Msg: fmt.Sprintf("must be %s, got %s", te.Type.String(), te.Value)}
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if name, ok := strings.CutPrefix(msg, "unknown field "); ok {
		return &FieldError{Field: strings.Trim(name, `"`), Msg: "unknown field"}
	}
	if errors.Is(err, io.EOF) {
		return &FieldError{Msg: "invalid JSON: empty body"}
	}
	return &FieldError{Msg: "invalid JSON: " + msg}
}

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
	return nil
}

// Check checks a result: the ticket, the status, and the sizes and signs of the rest.
func (r *Result) Check() error {
	if err := checkName("ticket", r.Ticket); err != nil {
		return err
	}
	if r.Status != StatusSuccess && r.Status != StatusFailed {
		return malformed("status", "must be success or failed, got %q", clipText(r.Status, 64))
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
	return nil
}

// DecodeResultBatch decodes the body of PathCallbackBatch. The envelope is decoded strictly
// (one object, only "results", nothing after it); each result is judged alone, so one
// malformed result refuses only itself. A nil error with a non-nil errs[i] means result i
// is refused for errs[i].
//
// A batch is decoded in one pass, and each result then checked: a body every result of which
// decodes (what an executor sends) costs one scan and one copy of it. Only when that pass
// fails is the body decoded again, result by result (decodeResultBatchEach), to tell which
// results are malformed; both ways judge every result alike (FuzzDecodeResultBatch). Where
// the body repeats its "results" key, encoding/json merges the repeats into the results it
// already decoded, so the two may differ there; the SDK never sends that.
func DecodeResultBatch(body []byte) (results []Result, errs []error, err error) {
	var whole struct {
		Results []Result `json:"results"`
	}
	// Room for every result up front: encoding/json appends into the slice it finds, so the
	// results are not copied again each time it would have grown. A count that is off (a
	// "ticket" inside a string) only sizes the slice.
	whole.Results = make([]Result, 0, min(bytes.Count(body, ticketKey), MaxResultsPerCall))
	if Decode(body, &whole) != nil {
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
	if err := Decode(body, &raw); err != nil {
		return nil, nil, err
	}
	if err := checkResultCount(len(raw.Results)); err != nil {
		return nil, nil, err
	}
	results = make([]Result, len(raw.Results))
	errs = make([]error, len(raw.Results))
	for i, r := range raw.Results {
		if err := Decode(r, &results[i]); err != nil {
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
func ClipError(s string) string { return clipText(s, MaxErrorBytes) }

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
