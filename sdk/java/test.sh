#!/bin/sh
# Runs the Java SDK's tests with the JDK alone (javac + java, no JUnit): the last line of the
# output is "N passed, N failed"; the exit status is non-zero on a failure. Arguments select
# tests by substring (e.g. ./test.sh ExecutorTest.testKill).
set -eu
cd "$(dirname "$0")"
./build.sh
rm -rf build/test
javac --release 17 -Xlint:all,-try -Werror -cp build/classes -d build/test $(find src/test/java -name '*.java')
exec java -Djava.util.logging.SimpleFormatter.format='%1$tT.%1$tL %4$s %5$s%6$s%n' -cp build/classes:build/test io.github.axesched.executor.TestRunner "$@"
