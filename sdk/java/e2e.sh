#!/bin/sh
# End to end against the real axe: builds axe from this checkout, starts `axe serve` on the
# embedded SQLite store with a token file, starts examples/echo with an app-bound executor
# token, creates a manual task with an executor callback, runs it now and checks the run is
# recorded success with the echo's output; then SIGTERMs the echo and checks it exits 0.
# Usage: sdk/java/e2e.sh  (needs go, java, curl; AXE_BIN=path to use an axe already built)
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
work="$(mktemp -d)"
pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT INT TERM
fail() {
	echo "e2e: FAIL: $*" >&2
	echo "--- axe log" >&2; tail -30 "$work/axe.log" >&2 || true
	echo "--- echo log" >&2; tail -30 "$work/echo.log" >&2 || true
	exit 1
}
# A free loopback port (bound and released by the kernel's choice).
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Polls a shell condition for up to $2 seconds.
waitfor() {
	i=0
	while ! sh -c "$1" >/dev/null 2>&1; do
		i=$((i + 1))
		[ "$i" -le $(($2 * 10)) ] || return 1
		sleep 0.1
	done
}

axe="${AXE_BIN:-}"
if [ -z "$axe" ]; then
	axe="$work/axe"
	(cd "$repo" && go build -o "$axe" ./cmd/axe)
fi
"$here/build.sh"

ops="ops-token-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
exe="exe-token-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
cat >"$work/tokens.json" <<JSON
[{"name": "ops", "scope": "write", "token": "$ops"},
 {"name": "echo-exec", "scope": "executor", "token": "$exe", "apps": ["echo"]}]
JSON
apiport=$(port)
export API="http://127.0.0.1:$apiport" OPS="$ops"
"$axe" serve --addr "127.0.0.1:$apiport" --db "sqlite:$work/axe.db" --token-file "$work/tokens.json" \
	--heartbeat-interval 1s >"$work/axe.log" 2>&1 &
pids="$pids $!"
waitfor 'curl -fs -H "Authorization: Bearer $OPS" "$API/api/v1/tasks" ' 60 || fail "axe serve did not answer"

echoport=$(port)
AXE_SCHEDULERS="$API" AXE_LISTEN="127.0.0.1:$echoport" AXE_TOKEN="$exe" AXE_APP=echo \
	"$here/examples/echo" >"$work/echo.log" 2>&1 &
echopid=$!
pids="$pids $echopid"
waitfor "grep -q 'serving at' '$work/echo.log'" 60 || fail "the echo executor did not start"

api() { curl -sS -H "Authorization: Bearer $ops" -H 'Content-Type: application/json' "$@"; }
out=$(api -X POST "$API/api/v1/tasks" -d '{"name":"java-echo","trigger":"manual",
	"callback":{"type":"executor","app":"echo","handler":"echo"}}') || fail "create task: $out"
case "$out" in *'"error"'*) fail "create task: $out" ;; esac
out=$(api -X POST "$API/api/v1/tasks/java-echo/run" -d '{"params":{"greeting":"hello from axe","n":3}}')
case "$out" in *'"ticket"'*) ;; *) fail "run now: $out" ;; esac
export TASKS="$API/api/v1/tasks/java-echo/runs"
waitfor 'curl -fs -H "Authorization: Bearer $OPS" "$TASKS" | grep -q "\"success\""' 60 ||
	fail "no successful run recorded: $(api "$TASKS")"
runs=$(api "$TASKS")
[ -n "${E2E_VERBOSE:-}" ] && echo "$runs"
echo "$runs" | grep -qF '"output":"{\"greeting\":\"hello from axe\",\"n\":3}"' ||
	fail "the run's output is not the echo of its params: $runs"

kill -TERM "$echopid"
status=0
wait "$echopid" || status=$?
[ "$status" -eq 0 ] || fail "the echo executor exited $status on SIGTERM, want 0"
# A scheduler of protocol version 1 has no deregister endpoint (404); one of version 2 answers 200.
if grep -q "deregistered in" "$work/echo.log"; then
	dereg="deregistered"
elif grep -q "deregister answered 404" "$work/echo.log"; then
	dereg="tried to deregister (this scheduler predates deregister: 404)"
else
	fail "the echo executor did not deregister"
fi
grep -q "drained runs and results" "$work/echo.log" || fail "the echo executor did not drain"
if grep -q "speaks protocol version 1" "$work/echo.log"; then
	proto="protocol version 1 (calls signed without the incarnation)"
else
	proto="protocol version 2 (calls signed for this incarnation)"
fi
echo "e2e: PASS ($proto): the run recorded success with the echo's output; the executor drained, $dereg and exited 0"
