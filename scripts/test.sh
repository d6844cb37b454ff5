#!/usr/bin/env bash
# Runs axe's whole test suite, with -race, against embedded SQLite and a real MySQL/MariaDB.
#
# MySQL: AXE_TEST_MYSQL_DSN (a go-sql-driver DSN without a database, default
# root:@tcp(127.0.0.1:3306)/) is used when it answers. When nothing answers and we are root,
# MariaDB is installed from Debian's packages (if missing) and started. Each test creates its
# own database (axe_t_<random>) and drops it, so parallel packages and reruns never collide.
#
# With no arguments it runs everything in two lanes: the process-level suites (failover and
# Galera: real daemons, mostly waiting on timeouts) beside the rest, then the benchmarks'
# smoke run and every fuzz target. `--long` runs the long forms: the failover suite at full
# size, a 10-minute soak, every release platform's build and a minute of each fuzz target.
# Extra arguments go to `go test` (e.g. ./scripts/test.sh -run TestDaemon ./admin/).
set -euo pipefail
cd "$(dirname "$0")/.."

long=0
if [ "${1:-}" = --long ]; then
  long=1
  shift
  export AXE_FAILOVER_SIZE="${AXE_FAILOVER_SIZE:-large}" AXE_SOAK_DURATION="${AXE_SOAK_DURATION:-10m}"
fi

export AXE_TEST_MYSQL_DSN="${AXE_TEST_MYSQL_DSN:-root:@tcp(127.0.0.1:3306)/}"
export AXE_REQUIRE_MYSQL=1

say() { printf '== %s\n' "$*" >&2; }

mysql_up() { go run ./scripts/dbwait -dsn "$AXE_TEST_MYSQL_DSN" -timeout "${1:-0s}" 2>/dev/null; }

if mysql_up; then
  say "MySQL answers at $AXE_TEST_MYSQL_DSN"
else
  say "no MySQL answers at $AXE_TEST_MYSQL_DSN; starting MariaDB"
  if [ "$(id -u)" != 0 ]; then
    echo "not root: start MySQL/MariaDB yourself and set AXE_TEST_MYSQL_DSN" >&2
    exit 1
  fi
  if [ ! -x /usr/sbin/mariadbd ]; then
    say "installing mariadb-server from Debian's packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q mariadb-server mariadb-client
  fi
  if [ ! -d /var/lib/mysql/mysql ]; then
    mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
  fi
  mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null || true
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql
  # Wait for the socket, then let root in over TCP with an empty password (Debian's default
  # root@localhost accepts only the unix socket).
  for _ in $(seq 1 60); do
    mariadb -uroot -e 'SELECT 1' >/dev/null 2>&1 && break
    sleep 1
  done
  mariadb -uroot -e "ALTER USER root@localhost IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD('')" || true
  if ! mysql_up 60s; then
    echo "MariaDB did not come up" >&2
    exit 1
  fi
  say "MariaDB started"
fi

# The console's browser tests drive Debian's chromium; the metrics and alert-rule tests run
# promtool from Debian's prometheus package; the Galera tests (internal/galeratest, persist's
# TestGalera) start a three-node cluster on loopback with mariadbd, galera-4 and rsync. Install
# them when missing (as root), and then require them, so the tests fail rather than skip.
galera_lib=/usr/lib/galera/libgalera_smm.so
need_pkgs=()
command -v chromium >/dev/null 2>&1 || need_pkgs+=(chromium)
command -v promtool >/dev/null 2>&1 || need_pkgs+=(prometheus)
[ -e "$galera_lib" ] || need_pkgs+=(galera-4)
command -v rsync >/dev/null 2>&1 || need_pkgs+=(rsync)
if [ ${#need_pkgs[@]} -gt 0 ] && [ "$(id -u)" = 0 ]; then
  say "installing ${need_pkgs[*]} from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${need_pkgs[@]}"
fi
if command -v chromium >/dev/null 2>&1; then export AXE_REQUIRE_BROWSER=1; fi
if command -v promtool >/dev/null 2>&1; then export AXE_REQUIRE_PROMTOOL=1; fi
if [ -e "$galera_lib" ] && [ -x /usr/sbin/mariadbd ] && command -v rsync >/dev/null 2>&1; then
  export AXE_REQUIRE_GALERA=1
fi
export AXE_ARTIFACTS="${AXE_ARTIFACTS:-$PWD/artifacts}"

started=$SECONDS
phase() { say "$1 took $((SECONDS - ${2:-$started}))s"; }

say "go vet"
go vet ./...

if [ $# -gt 0 ]; then
  say "go test -race $*"
  go test -race -count=1 -timeout 30m "$@"
  exit 0
fi

# The scheduler binary builds for every platform it is released on (the benchmark harness,
# which is Linux-only, lives in cmd/axe-bench). Compiling, not linking, is what can break:
# one foreign build per operating system and per architecture catches that; --long builds
# all six.
targets="linux/arm64 darwin/arm64 windows/amd64"
[ "$long" = 1 ] && targets="linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64"
t0=$SECONDS
for target in $targets; do
  say "go build ./cmd/axe for $target"
  GOOS="${target%/*}" GOARCH="${target#*/}" go build -o /dev/null ./cmd/axe
done
phase "cross builds" "$t0"

# Every fuzz target runs a few seconds beyond its seed corpus (which go test runs), so the
# parsers meet inputs nobody wrote down. AXE_FUZZTIME=0 skips this. One fuzzing worker: the
# fuzzing shares the cores with lane 2's tests.
fuzztime="${AXE_FUZZTIME:-5s}"
[ "$long" = 1 ] && fuzztime="${AXE_FUZZTIME:-60s}"
fuzz_all() {
  [ "$fuzztime" != 0 ] || return 0
  local file dir target log try
  while read -r file; do
    dir="./$(dirname "${file#./}")"
    for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$file"); do
      say "fuzz $dir $target for $fuzztime"
      # A failure prints the fuzzer's output. One that recorded no failing input under
      # testdata/fuzz (the fuzzing engine itself gave up, e.g. a worker it judged hung) is
      # tried once more; a recorded failing input always fails the run.
      log=$(mktemp)
      for try in 1 2; do
        if go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -parallel 1 "$dir" >"$log" 2>&1; then
          break
        fi
        tail -n 30 "$log" >&2
        if [ "$try" = 2 ] || [ -n "$(git status --porcelain -- "$dir/testdata/fuzz/$target" 2>/dev/null)" ]; then
          rm -f "$log"
          return 1
        fi
        say "fuzz $dir $target failed without a failing input; once more"
      done
      rm -f "$log"
    done
  done < <(grep -rl --include='*_test.go' '^func Fuzz' . | sort)
}

# Lane 1: the suites that run real daemons against MariaDB and spend most of their time
# waiting on leases, timeouts and outages, one package at a time, then the fuzz targets;
# all beside lane 2.
slow_pkgs="./internal/failover/ ./internal/galeratest/"
lane1_log=$(mktemp)
t0=$SECONDS
say "lane 1: go test -race $slow_pkgs, then fuzzing (log: $lane1_log)"
# (set -e holds in the subshell too: each exit status is caught, not fatal.)
( rc=0; go test -race -count=1 -timeout 30m -p 1 $slow_pkgs >"$lane1_log" 2>&1 || rc=$?
  echo "$rc" >"$lane1_log.rc"
  echo $((SECONDS - t0)) >"$lane1_log.took"
  t1=$SECONDS rc=0
  fuzz_all >"$lane1_log.fuzz" 2>&1 || rc=$?
  echo "$rc" >"$lane1_log.fuzzrc"
  echo $((SECONDS - t1)) >"$lane1_log.fuzztook" ) &
lane1=$!
trap 'kill $lane1 2>/dev/null || true' EXIT

# Lane 2: every other package, the longest first so the two cores stay busy to the end.
first="./admin/ ./persist/ ./engine/ ./cmd/axe/ ./executor/ ./dispatch/"
rest=$(go list ./... | sed 's|^github.com/axe-sched/axe|.|; s|$|/|; s|^\./$|./|' |
  grep -vxF -e ./internal/failover/ -e ./internal/galeratest/ -e ./admin/ -e ./persist/ \
    -e ./engine/ -e ./cmd/axe/ -e ./executor/ -e ./dispatch/)
lane2_rc=0
say "lane 2: go test -race (every other package)"
go test -race -count=1 -timeout 30m $first $rest || lane2_rc=$?
phase "lane 2 tests" "$t0"

# The B1 wheel suite has no smoke test of its own: run each of its benchmarks once, small,
# so they keep compiling and running (the other suites' smoke tests are in ./bench/...).
if [ "$lane2_rc" = 0 ]; then
  t1=$SECONDS
  say "B1 wheel benchmarks, smoke size"
  AXE_BENCH_WHEEL_SIZES=1e3 AXE_BENCH_WHEEL_LATE_SIZES=1e3 \
    go test -run '^$' -bench . -benchtime 1x ./wheel/ ./ratelimit/ >/dev/null || lane2_rc=$?
  phase "benchmark smoke" "$t1"
fi

# The executor SDKs in other languages (sdk/<language>): each one's own tests, which end with
# `axe conformance executor` against its echo example, with one axe built here. Python needs
# only python3, Java the JDK, TypeScript node and npm (its test script installs the pinned
# compiler with npm ci).
sdk_rc=0
t1=$SECONDS
sdk_bin=$(mktemp -d)
if go build -o "$sdk_bin/axe" ./cmd/axe; then
  for sdk in python java typescript; do
    t2=$SECONDS
    say "sdk/$sdk"
    case $sdk in
      java) AXE_BIN="$sdk_bin/axe" sdk/java/ci.sh || sdk_rc=1 ;;
      *) AXE_BIN="$sdk_bin/axe" "sdk/$sdk/test.sh" || sdk_rc=1 ;;
    esac
    phase "sdk/$sdk" "$t2"
  done
else
  sdk_rc=1
fi
rm -rf "$sdk_bin"
phase "executor SDKs" "$t1"

say "waiting for lane 1"
wait $lane1 || true
trap - EXIT
lane1_rc=$(cat "$lane1_log.rc" 2>/dev/null || echo 1)
fuzz_rc=$(cat "$lane1_log.fuzzrc" 2>/dev/null || echo 1)
cat "$lane1_log" "$lane1_log.fuzz"
say "lane 1 tests took $(cat "$lane1_log.took" 2>/dev/null || echo ?)s, fuzzing $(cat "$lane1_log.fuzztook" 2>/dev/null || echo ?)s"
rm -f "$lane1_log"*
phase "the whole suite"
if [ "$lane1_rc" != 0 ] || [ "$lane2_rc" != 0 ] || [ "$fuzz_rc" != 0 ] || [ "$sdk_rc" != 0 ]; then
  say "FAILED: lane 1 exit $lane1_rc, lane 2 exit $lane2_rc, fuzzing exit $fuzz_rc, SDKs exit $sdk_rc"
  exit 1
fi
say "all passed"
