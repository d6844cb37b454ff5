package model

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestRenderKey(t *testing.T) {
	for _, c := range []struct {
		tmpl, params, want, err string
	}{
		{"db", ``, "db", ""},
		{"tenant:{params.tenant_id}", `{"tenant_id":"acme-1"}`, "tenant:acme-1", ""},
		{"tenant:{params.tenant_id}", `{"tenant_id":42}`, "tenant:42", ""},
		{"t:{params.a.b.c}:{params.x}", `{"a":{"b":{"c":"deep"}},"x":true}`, "t:deep:true", ""},
		{"{params.region}.{params.id}", `{"region":"eu","id":7}`, "eu.7", ""},
		{"tenant:{params.tenant_id}", `{}`, "", "params.tenant_id is missing"},
		{"tenant:{params.tenant_id}", ``, "", "params.tenant_id is missing"},
		{"tenant:{params.tenant_id}", `{"tenant_id":null}`, "", "is null"},
		{"tenant:{params.tenant_id}", `{"tenant_id":{"a":1}}`, "", "not a string, number or boolean"},
		{"tenant:{params.tenant_id}", `{"tenant_id":[1]}`, "", "not a string, number or boolean"},
		{"tenant:{params.tenant_id}", `{"tenant_id":""}`, "", "is empty"},
		{"tenant:{params.tenant_id}", `{"tenant_id":"a b"}`, "", "characters a key cannot hold"},
		{"tenant:{params.tenant_id}", `{"tenant_id":"a/b"}`, "", "characters a key cannot hold"},
		{"tenant:{params.a.b}", `{"a":"x"}`, "", "is not an object"},
		{"tenant:{params.t}", `[1,2]`, "", "not a JSON object"},
		{"{params.t}", `{"t":"-x"}`, "", "does not start with a letter or digit"},
		{"k:{params.t}", `{"t":"` + strings.Repeat("x", 130) + `"}`, "", "more than 128"},
	} {
		got, err := RenderKey(c.tmpl, json.RawMessage(c.params))
		if c.err == "" {
			if err != nil || got != c.want {
				t.Errorf("RenderKey(%q, %s) = %q, %v; want %q", c.tmpl, c.params, got, err, c.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, ErrKeyTemplate) {
			t.Errorf("RenderKey(%q, %s) = %q, %v; want an error saying %q", c.tmpl, c.params, got, err, c.err)
		}
	}
}

func TestParseKeyTemplateRefuses(t *testing.T) {
	for tmpl, want := range map[string]string{
		"tenant:{params.tenant_id": "has no '}'",
		"tenant:{tenant_id}":       "must be {params.PATH}",
		"tenant:{params.}":         "empty path segment",
		"tenant:{params.a..b}":     "empty path segment",
		"tenant:{params.a b}":      "path segment",
		"tenant {params.a}":        "is not a letter",
		":{params.a}":              "must start with",
		"":                         "is empty",
		strings.Repeat("k", 129):   "at most 128",
	} {
		if _, err := ParseKeyTemplate(tmpl); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseKeyTemplate(%q) = %v, want an error saying %q", tmpl, err, want)
		}
	}
}

// FuzzRenderKey: whatever the template and params, a key rendered is a key (1-128 of its
// characters, starting with a letter or digit), and an error wraps ErrKeyTemplate.
func FuzzRenderKey(f *testing.F) {
	f.Add("tenant:{params.tenant_id}", `{"tenant_id":"a"}`)
	f.Add("{params.a.b}", `{"a":{"b":1}}`)
	f.Fuzz(func(t *testing.T, tmpl, params string) {
		k, err := RenderKey(tmpl, json.RawMessage(params))
		if err != nil {
			if IsKeyTemplate(tmpl) && !errors.Is(err, ErrKeyTemplate) {
				t.Fatalf("error %v does not wrap ErrKeyTemplate", err)
			}
			return
		}
		if !IsKeyTemplate(tmpl) {
			return // a static key names itself; Normalize checks it
		}
		if len(k) == 0 || len(k) > KeyLen || !isAlnum(k[0]) {
			t.Fatalf("RenderKey(%q, %q) = %q: not a key", tmpl, params, k)
		}
		for i := 0; i < len(k); i++ {
			if !keyChar(k[i]) {
				t.Fatalf("RenderKey(%q, %q) = %q: byte %d is not a key's", tmpl, params, k, i)
			}
		}
	})
}
