#!/bin/sh
# The TypeScript SDK's tests: install the pinned dev dependencies (npm ci), compile (tsc), run
# the unit and loopback tests and the end-to-end test against an axe built from this checkout
# (node --test), then the conformance suite against the echo example.
#   sdk/typescript/test.sh            (AXE_BIN=/path/to/axe to use a built binary)
set -eu
cd "$(dirname "$0")"
here=$(pwd)
root=$(cd ../.. && pwd)

npm ci --no-audit --no-fund
node_modules/.bin/tsc -p tsconfig.json

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
axe=${AXE_BIN:-}
if [ -z "$axe" ]; then
	axe="$tmp/axe"
	(cd "$root" && go build -o "$axe" ./cmd/axe)
fi

AXE_BIN="$axe" node --test dist/test/*.test.js
"$axe" conformance executor --exec "$here/examples/echo" --token "conformance-token-0123456789abcdef"
