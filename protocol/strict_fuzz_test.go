package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/axe-sched/axe/internal/test/jsonkeys"
)

// strictShape has a field of each kind the API's bodies hold.
type strictShape struct {
	Name  string          `json:"name"`
	N     *int64          `json:"n"`
	F     float64         `json:"f"`
	B     bool            `json:"b"`
	List  []string        `json:"list"`
	Inner *strictInner    `json:"inner"`
	Raw   json.RawMessage `json:"raw,omitempty"`
}

type strictInner struct {
	X string `json:"x"`
	Y []int  `json:"y"`
}

// FuzzDecode holds the one decoder of every body to its rules, with encoding/json and
// jsonkeys as oracles: it never panics and refuses with ErrMalformed; it refuses every body
// that is not UTF-8 and every one where some object repeats a key, at any depth; what it
// accepts encoding/json decodes strictly to the same value, and it re-encodes and decodes
// again unchanged.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"name":"a","n":3,"f":1.5,"b":true,"list":["x","y"],"inner":{"x":"z","y":[1,2]},"raw":{"k":[1,{"a":null}]}}`,
		`{"name":"a","name":"b"}`, `{"inner":{"x":"1","x":"2"}}`, `{"raw":{"a":1,"a":2}}`, `{"raw":[{"a":1},{"a":1}]}`,
		`{"name":"\ud800"}`, `{"raw":"\udc00\ud800"}`, `{"raw":"\ud83d\ude00"}`, "{\"name\":\"\xff\"}", "{\"raw\":\"\xed\xa0\x80\"}",
		`{"Name":"a"}`, `{"n":1.5}`, `{"n":"1"}`, `{"list":[1]}`, `{"x":1}`, `{} {}`, `{}x`, `[]`, `null`, ``, `{"raw":}`,
		`{"name":"a","raw":null}`, `{"a\u0000":1}`, `{"name":"a","\u006eame":"b"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var got strictShape
		err := Decode(body, &got)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			if fe := (*FieldError)(nil); errors.As(err, &fe) && strings.ContainsAny(fe.Msg, "`'\"") {
				t.Fatalf("error %q quotes the body", err)
			}
			return
		}
		if !utf8.Valid(body) {
			t.Fatalf("accepted a body that is not UTF-8: %q", body)
		}
		if jsonkeys.Repeated(body) {
			t.Fatalf("accepted a body that repeats a key: %s", body)
		}
		var want strictShape
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&want); err != nil {
			t.Fatalf("accepted %s, which encoding/json refuses: %v", body, err)
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			t.Fatalf("accepted %s, which has trailing data for encoding/json", body)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s decodes to %+v, encoding/json to %+v", body, got, want)
		}
		var again bytes.Buffer
		enc := json.NewEncoder(&again)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(got); err != nil {
			t.Fatalf("cannot re-encode %+v: %v", got, err)
		}
		var back strictShape
		if err := Decode(again.Bytes(), &back); err != nil {
			t.Fatalf("re-encoded %s: %v", again.Bytes(), err)
		}
		// encoding/json compacts a raw value it encodes.
		back.Raw, got.Raw = compact(t, back.Raw), compact(t, got.Raw)
		if !reflect.DeepEqual(back, got) {
			t.Fatalf("re-encoded %s: %+v, want %+v", again.Bytes(), back, got)
		}
	})
}

func compact(t *testing.T, raw json.RawMessage) json.RawMessage {
	if raw == nil {
		return nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("raw %s: %v", raw, err)
	}
	return b.Bytes()
}
