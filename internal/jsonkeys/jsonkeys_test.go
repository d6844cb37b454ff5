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
