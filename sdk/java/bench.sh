#!/bin/sh
# Runs per second of the no-op echo through one executor, and the executor's CPU per run:
#   ./bench.sh [N [CALLERS [echo command...]]]   (default: 20000 runs, 8 callers, examples/echo)
# Compare with the Go SDK's echo: ./bench.sh 20000 8 /path/to/built/executor/examples/echo
set -eu
cd "$(dirname "$0")"
./build.sh
rm -rf build/test
javac --release 17 -Xlint:all,-try -Werror -cp build/classes -d build/test $(find src/test/java -name '*.java')
n="${1:-20000}"
c="${2:-8}"
[ $# -ge 2 ] && shift 2 || shift $#
[ $# -gt 0 ] || set -- "$(pwd)/examples/echo"
exec java -cp build/classes:build/test io.github.axesched.executor.Bench "$n" "$c" "$@"
