package jsonkeys

import "testing"

func TestCount(t *testing.T) {
	for _, c := range []struct {
		body string
		want int
	}{
		{`{"runs":[1],"other":{"runs":2}}`, 1},
		{`{"runs":[1],"RUNS":[2],"Runs":3}`, 3},
		{`{"other":1}`, 0},
		{`[{"runs":1}]`, 0},
		{`{"runs":[1],"runs":`, 2}, // a key counts even when its value is cut off
		{``, 0},
	} {
		if got := Count([]byte(c.body), "runs"); got != c.want {
			t.Errorf("Count(%s) = %d, want %d", c.body, got, c.want)
		}
	}
}

func TestRepeated(t *testing.T) {
	for _, c := range []struct {
		body string
		want bool
	}{
		{`{"a":1,"b":2}`, false},
		{`{"a":1,"a":2}`, true},
		{`{"a":1,"\u0061":2}`, true},
		{`{"a":1,"A":2}`, false}, // encoding/json would merge them; the keys differ
		{`{"a":{"b":1},"c":{"b":2}}`, false},
		{`{"a":{"b":1,"b":2}}`, true},
		{`[{"a":1},{"a":1}]`, false},
		{`[{"a":["a","a"],"b":{"a":"a"}}]`, false},
		{`{"x":[{"y":1,"y":2}]}`, true},
		{`{"a":"b","b":"a"}`, false},
		{`{"a":1,"a"`, true},
		{`nope`, false},
	} {
		if got := Repeated([]byte(c.body)); got != c.want {
			t.Errorf("Repeated(%s) = %v, want %v", c.body, got, c.want)
		}
	}
}
