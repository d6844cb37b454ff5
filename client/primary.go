package client

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/axe-sched/axe/wire"
)

// followPrimary returns the addresses a call tries after servers[i] answered 503 with body. A
// backup names the primary ({"error": "this node is a backup", "primary": URL}, docs/ha.md, "The
// backup"); the client tries that address next, whether or not it was given, unless it already
// tried it. This is not a redirect: the client keeps its token, which an HTTP redirect to another
// host would drop. Any other 503 (a node starting, or a backup that knows no primary) leaves the
// list as it is.
func followPrimary(servers []string, i int, body []byte) []string {
	var b wire.BackupAnswer
	if json.Unmarshal(body, &b) != nil || b.Primary == "" {
		return servers
	}
	primary := strings.TrimRight(b.Primary, "/")
	if !strings.Contains(primary, "://") {
		primary = "http://" + primary
	}
	if slices.Contains(servers[:i+1], primary) {
		return servers
	}
	rest := slices.DeleteFunc(slices.Clone(servers[i+1:]), func(s string) bool { return s == primary })
	return append(append(slices.Clone(servers[:i+1]), primary), rest...)
}
