#!/bin/sh
# The echo handler of docs/conformance.md as a command for axe agent. The agent passes the
# run's params as AXE_PARAMS (compact JSON, or "null" when the run has none):
#   {"sleep_ms": N}   sleep N ms (the agent ends the command at the deadline or on a kill)
#   {"fail": "text"}  print text and exit 1 (the run fails; its output holds the text)
#   otherwise         print the params ({} when none) and succeed
# The params are read with sed, which is enough for the flat objects the suite sends.
params=${AXE_PARAMS:-null}
[ "$params" = null ] && params='{}'
sleep_ms=$(printf '%s\n' "$params" | sed -n 's/.*"sleep_ms"[[:space:]]*:[[:space:]]*\([0-9][0-9]*\).*/\1/p')
fail=$(printf '%s\n' "$params" | sed -n 's/.*"fail"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p')
if [ -n "$sleep_ms" ]; then
	sleep "$((sleep_ms / 1000)).$(printf '%03d' $((sleep_ms % 1000)))"
fi
if [ -n "$fail" ]; then
	printf '%s\n' "$fail"
	exit 1
fi
printf '%s' "$params"
