#!/bin/sh
# Starts axe agent as the echo executor of docs/conformance.md, configured from the
# environment `axe conformance executor --exec` sets (AXE_SCHEDULERS, AXE_LISTEN, AXE_TOKEN,
# AXE_APP): it writes the agent's config, one handler "echo" running echo.sh beside this
# script, to the agent's standard input.
#
#   axe conformance executor --token T --exec 'executor/agent/examples/echo/run.sh [path/to/axe]'
#
# The first argument is the axe binary (default: axe on PATH). The values are written into
# JSON as they are: keep them free of quotes and backslashes.
set -eu
axe=${1:-axe}
here=$(cd "$(dirname "$0")" && pwd)
schedulers=$(printf '%s' "${AXE_SCHEDULERS:?AXE_SCHEDULERS: required}" | sed 's/,/", "/g')
app=${AXE_APP:-echo} listen=${AXE_LISTEN:-127.0.0.1:9100} token=${AXE_TOKEN:-}
# The agent passes its environment on to the commands it runs: not the token.
unset AXE_SCHEDULERS AXE_APP AXE_LISTEN AXE_TOKEN
exec "$axe" agent -c /dev/stdin <<JSON
{
  "app": "$app",
  "listen": "$listen",
  "schedulers": ["$schedulers"],
  "token": "$token",
  "kill_grace_ms": 2000,
  "handlers": {"echo": {"command": ["/bin/sh", "$here/echo.sh"]}}
}
JSON
