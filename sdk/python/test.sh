#!/bin/sh
# Tests of the Python executor SDK (standard library only: python3 -m unittest).
# The end-to-end and conformance tests run the real axe (axe serve, axe conformance
# executor): AXE_BIN names a binary, else one is built from
# this repository into a temporary directory (needs go).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if [ -z "${AXE_BIN:-}" ] && command -v go >/dev/null 2>&1; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	(cd "$here/../.." && go build -o "$tmp/axe" ./cmd/axe)
	AXE_BIN="$tmp/axe"
	export AXE_BIN
fi
cd "$here"
PYTHONPATH="$here/src${PYTHONPATH:+:$PYTHONPATH}" exec python3 -m unittest discover -s tests -t tests "$@"
