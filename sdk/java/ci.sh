#!/bin/sh
# Everything the Java SDK's CI runs: the unit and loopback tests, the end-to-end run against
# the real axe serve, and `axe conformance executor` against examples/echo (with a token, so
# the signature cases run too). Exits non-zero when any of them fails.
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT INT TERM
(cd "$repo" && go build -o "$bin/axe" ./cmd/axe)
echo "== sdk/java: tests" >&2
"$here/test.sh"
echo "== sdk/java: end to end against axe serve" >&2
AXE_BIN="$bin/axe" "$here/e2e.sh"
echo "== sdk/java: axe conformance executor" >&2
"$bin/axe" conformance executor --token "java-conformance-token-0123" --exec "$here/examples/echo"
