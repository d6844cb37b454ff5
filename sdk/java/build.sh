#!/bin/sh
# Compiles the SDK (and the examples) with javac alone into build/, once per change of a source:
#   build/classes, build/axe-executor.jar, build/examples. Prints nothing when up to date.
set -eu
cd "$(dirname "$0")"
mkdir -p build
exec 9>build/.lock
flock 9
stamp=build/.stamp
if [ -f "$stamp" ] && [ -z "$(find src/main/java examples -name '*.java' -newer "$stamp" | head -1)" ]; then
	exit 0
fi
rm -rf build/classes build/examples
javac --release 17 -Xlint:all -Werror -d build/classes $(find src/main/java -name '*.java')
jar --create --file build/axe-executor.jar -C build/classes .
javac --release 17 -Xlint:all -Werror -cp build/classes -d build/examples $(find examples -name '*.java')
touch "$stamp"
