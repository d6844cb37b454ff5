#!/usr/bin/env bash
# Runs axe's whole test suite, with -race, against embedded SQLite and a real MySQL/MariaDB.
#
# MySQL: AXE_TEST_MYSQL_DSN (a go-sql-driver DSN without a database, default
# root:@tcp(127.0.0.1:3306)/) is used when it answers. When nothing answers and we are root,
# MariaDB is installed from Debian's packages (if missing) and started. Each test creates its
# own database (axe_t_<random>) and drops it, so parallel packages and reruns never collide;
# those that want axe's schema copy it from one template, axe_t_template_<schema digest>,
# migrated once by the first test that needs it and kept for the next run.
#
# With no arguments it runs everything in three lanes: the failover suite (real daemons,
# mostly waiting on leases and timeouts, AXE_FAILOVER_PARALLEL scenarios at a time), the other
# packages (AXE_LANE2_P packages and AXE_LANE2_PARALLEL tests at a time), and, at a lower
# priority, go vet, the other platforms' type checks, the benchmarks' smoke run, every fuzz
# target and the executor SDKs. On a box other work keeps busy (AXE_BUSY_PCT, below) the
# lanes are narrower and run one after another: the second, then the first, then the
# third. `--long` runs the long forms: the failover suite at full size, a 10-minute soak, a
# build of every release platform (not only a type check) and a minute of each fuzz target.
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
# promtool from Debian's prometheus package; the Galera tests (internal/test/galeratest, persist's
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

# How busy other work keeps the cores, in percent, over 3 s before anything of ours runs
# (0 where /proc/stat cannot be read). On a busy box the lanes run narrower (below): the
# tests wait on databases, daemons and browsers that then get too little CPU when a hog and
# eight tests at a time share two cores, and narrower lanes keep their waits inside bounds.
cpu_busy() {
  [ -r /proc/stat ] || { echo 0; return; }
  local x a b c d e f g h t1 i1
  read -r x a b c d e f g h x </proc/stat
  t1=$((a + b + c + d + e + f + g + h)) i1=$((d + e))
  sleep 3
  read -r x a b c d e f g h x </proc/stat
  a=$((a + b + c + d + e + f + g + h - t1)) d=$((d + e - i1))
  [ "$a" -gt 0 ] || { echo 0; return; }
  echo $((100 * (a - d) / a))
}
busy=$(cpu_busy)
narrow=0
if [ "$busy" -ge "${AXE_BUSY_PCT:-35}" ]; then
  narrow=1
  : "${AXE_LANE2_P:=1}" "${AXE_LANE2_PARALLEL:=2}" "${AXE_FAILOVER_PARALLEL:=1}"
  # The failover scenarios' daemons get leases twice as long (3 s leases lapsed again and
  # again on a node starved of CPU for seconds at a time; internal/test/failover). Three
  # times made more scenarios fail beside stress-ng --cpu 2, not fewer.
  : "${AXE_FAILOVER_LEASE_SCALE:=2}"
  export AXE_FAILOVER_LEASE_SCALE
  # Every wait's bound three times as long (internal/test/testwait): beside a hog a database
  # commit or a daemon's start takes several times what it takes beside the suite alone.
  : "${AXE_TEST_WAIT_SCALE:=3}"
  export AXE_TEST_WAIT_SCALE
  # One failover scenario at a time is about 25 minutes on a quiet box, and a package's tests
  # two at a time beside a hog can take longer than 30.
  : "${AXE_TEST_TIMEOUT:=80m}"
  say "other work keeps the cores ${busy}% busy: narrow lanes (AXE_LANE2_P=$AXE_LANE2_P," \
    "AXE_LANE2_PARALLEL=$AXE_LANE2_PARALLEL, AXE_FAILOVER_PARALLEL=$AXE_FAILOVER_PARALLEL," \
    "AXE_FAILOVER_LEASE_SCALE=$AXE_FAILOVER_LEASE_SCALE, AXE_TEST_WAIT_SCALE=$AXE_TEST_WAIT_SCALE)"
fi

# The tests run with the race detector on all of axe's code and its dependencies except
# modernc.org/sqlite/lib, the SQLite engine translated from C, whose internals axe never
# touches: instrumented, every SQLite statement ran about four times slower (the SQLite half
# of persist's conformance suite took 21.7 s against 5.4 s), and the embedded store is in
# most of the suite's tests. Races in axe's code, including its use of the store, are still
# found. (Leaving modernc.org/libc uninstrumented too hides the synchronisation of the rest
# from the detector, which then reports races that are not there.)
race=(-race "-gcflags=modernc.org/sqlite/lib=-race=false")

if [ $# -gt 0 ]; then
  say "go vet"
  go vet ./...
  say "go test -race $*"
  go test "${race[@]}" -count=1 -timeout "${AXE_TEST_TIMEOUT:-30m}" "$@"
  exit 0
fi

# The scheduler binary builds for every platform it is released on (the benchmark harness,
# which is Linux-only, lives in cmd/axe-bench). What breaks on one platform is build-tagged
# code, ours (dispatch/conn_linux.go beside conn_other.go, proc_unix.go beside proc_other.go)
# or a dependency's. scripts/crosscheck type-checks ./cmd/axe and everything it imports from
# source, without cgo, for each of the six: that catches it at a fraction of a compile (some
# 5 CPU-seconds a platform on a cold cache, where one foreign build takes some 85, mostly
# compiling modernc.org/sqlite and libc). --long builds and links all six instead, which also
# catches what only the compiler and linker see (an assembly function without its body, a
# link error).
cross_platform() {
  local targets="linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64" target t0=$SECONDS
  if [ "$long" = 1 ]; then
    for target in $targets; do
      say "go build ./cmd/axe for $target"
      GOOS="${target%/*}" GOARCH="${target#*/}" go build -o /dev/null ./cmd/axe || return 1
    done
  else
    say "type-check ./cmd/axe for $targets"
    go run ./scripts/crosscheck $targets || return 1
  fi
  phase "cross-platform checks" "$t0"
}

# Every fuzz target runs beyond its seed corpus (which go test runs), so the parsers meet
# inputs nobody wrote down. AXE_FUZZTIME=0 skips this. The budget is a count of executions
# per target (10,000: what 5 s gave on a loaded two-core box, a second or two on a quiet
# one), not a duration: the same work whatever the load, and a duration's end races Go's
# fuzzing coordinator (golang/go#75804: "context deadline exceeded" with no failing input,
# mostly on a loaded box); a duration (AXE_FUZZTIME=5s) is still taken. Each package's
# fuzzing binary is built once for all its targets (go test would build and link it per
# target). One fuzzing worker: the fuzzing shares the cores with the tests.
fuzztime="${AXE_FUZZTIME:-10000x}"
[ "$long" = 1 ] && fuzztime="${AXE_FUZZTIME:-60s}"
fuzz_all() {
  [ "$fuzztime" != 0 ] || return 0
  local bindir rc=0
  bindir=$(mktemp -d)
  fuzz_targets "$bindir" || rc=$?
  rm -rf "$bindir"
  return "$rc"
}
fuzz_targets() {
  local bindir=$1 module cache dir bin target log try
  module=$(go list -m)
  cache="$(go env GOCACHE)/fuzz"
  for dir in $(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do
    bin="$bindir/$(echo "${dir#./}" | tr / _).test"
    say "fuzz $dir: build"
    go test -c -fuzz . -o "$bin" "$dir" || return 1
    for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$dir"/*_test.go); do
      say "fuzz $dir $target for $fuzztime"
      # A failure prints the fuzzer's output. One that recorded no failing input under
      # testdata/fuzz (the fuzzing engine itself gave up, e.g. a worker it judged hung) is
      # tried once more; a recorded failing input always fails the run. The binary runs in
      # its package's folder, with go test's corpus cache, as go test -fuzz runs it.
      log=$(mktemp)
      for try in 1 2; do
        if (cd "$dir" && "$bin" -test.run '^$' -test.fuzz "^${target}\$" -test.fuzztime "$fuzztime" \
          -test.parallel 1 -test.timeout 10m -test.fuzzcachedir "$cache/$module/${dir#./}") >"$log" 2>&1; then
          grep -o 'execs: [0-9]*' "$log" | tail -n 1 >&2 || true
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
  done
}

# The B1 wheel suite has no smoke test of its own: run each of its benchmarks once, small,
# so they keep compiling and running (the other suites' smoke tests are in ./bench/...).
bench_smoke() {
  local t0=$SECONDS
  say "B1 wheel benchmarks, smoke size"
  AXE_BENCH_WHEEL_SIZES=1e3 AXE_BENCH_WHEEL_LATE_SIZES=1e3 \
    go test -run '^$' -bench . -benchtime 1x ./wheel/ ./ratelimit/ >/dev/null || return 1
  phase "benchmark smoke" "$t0"
}

# The executor SDKs in other languages (sdk/<language>): each one's own tests, which end with
# `axe conformance executor` against its echo example, with the axe built below. Python needs
# only python3, Java the JDK, TypeScript node and npm (its test script installs the pinned
# compiler with npm ci).
sdks() {
  local sdk rc=0 t0=$SECONDS t1
  for sdk in python java typescript; do
    t1=$SECONDS
    say "sdk/$sdk"
    case $sdk in
      java) AXE_BIN="$axe_bin" sdk/java/ci.sh || rc=1 ;;
      *) AXE_BIN="$axe_bin" "sdk/$sdk/test.sh" || rc=1 ;;
    esac
    phase "sdk/$sdk" "$t1"
  done
  phase "executor SDKs" "$t0"
  return "$rc"
}

# Lane 3: the checks that are not go test's tests: go vet, the other platforms, the
# benchmarks' smoke run, the fuzzing and the SDKs, each whether or not the ones before it
# passed.
checks() {
  local rc=0 t0=$SECONDS
  say "go vet"
  go vet ./... || rc=1
  phase "go vet" "$t0"
  cross_platform || rc=1
  bench_smoke || rc=1
  t0=$SECONDS
  fuzz_all || rc=1
  phase "fuzzing" "$t0"
  sdks || rc=1
  return "$rc"
}

# One axe binary, built before the lanes (it compiles what their daemons and the SDKs' run
# on, once): the failover suite runs it (AXE_FAILOVER_BIN) and so do the SDKs.
bin_dir=$(mktemp -d)
axe_bin="$bin_dir/axe"
t0=$SECONDS
say "go build ./cmd/axe"
go build -o "$axe_bin" ./cmd/axe
phase "the axe build" "$t0"

# Every package the tests import, compiled with the race detector before any test runs: on a
# fresh machine's empty build cache the lanes otherwise compiled it beside their first tests,
# both cores stayed busy for the first 20 minutes of a box the check above had found quiet,
# and tests bound by short leases failed there (internal/daemon's rate-sharing tests, a node
# id taken from a live node whose heartbeat fell behind). On an empty cache this takes about
# 3 minutes of both cores; on a warm one, under a second. The test packages themselves still
# compile in their lanes.
t0=$SECONDS
say "go build -race: every package the tests import"
# shellcheck disable=SC2046 # one import path a word
go build "${race[@]}" $(go list -test -deps -f '{{if and (not .Standard) (ne .Name "main") .GoFiles}}{{.ImportPath}}{{end}}' ./... |
  grep -v -e ' ' -e '\.test$' | sort -u)
phase "the tests' imports" "$t0"

# Lane 1: the failover suite, whose scenarios run real daemons against MariaDB and spend most
# of their time waiting on leases, timeouts and outages, beside lane 2.
# (set -e holds in the subshell too: each exit status is caught, not fatal.)
# Lane 2 keeps the cores busy beside it: the failover scenarios that start CPU hogs of their
# own to load the box start none here (AXE_FAILOVER_CPU_HOGS, internal/test/failover). The
# failover suite runs AXE_FAILOVER_PARALLEL scenarios at a time (default 2), the longest
# first: about 1,150 s of scenarios, the longest 260-330 s, so about 600 s. Three at a time
# (with lane 2 three packages at a time) overloaded a quiet two-core box: the run was slower
# and engine, daemon and persist tests timed out.
slow_pkgs="./internal/test/failover/"
lane1_log=$(mktemp)
lane1() {
  t0=$SECONDS
  say "lane 1: go test -race $slow_pkgs (log: $lane1_log)"
  ( rc=0; AXE_FAILOVER_BIN="$axe_bin" AXE_FAILOVER_CPU_HOGS=${AXE_FAILOVER_CPU_HOGS:-0} AXE_FAILOVER_PARALLEL=${AXE_FAILOVER_PARALLEL:-2} \
      go test "${race[@]}" -count=1 -timeout "${AXE_TEST_TIMEOUT:-30m}" $slow_pkgs >"$lane1_log" 2>&1 || rc=$?
    echo "$rc" >"$lane1_log.rc"
    echo $((SECONDS - t0)) >"$lane1_log.took" ) &
  lane1=$!
  lanes="$lanes $lane1"
}
lanes=""
trap 'kill $lanes 2>/dev/null || true; rm -rf "$bin_dir"' EXIT
# On a busy box lane 1 runs after lane 2 instead: beside a hog, lane 2's tests and the
# failover daemons on one MariaDB made its commits take seconds, and the daemons' leases
# lapsed (internal/test/failover, TestShardsRollingRestart).
if [ "$narrow" = 0 ]; then
  lane1
fi

# Lane 3 runs beside lanes 1 and 2, at a lower priority (nice 10), so that it takes the CPU
# their tests leave while they wait (most of lane 2's second half) rather than the CPU they
# need. On a box other work keeps busy it runs after lane 2 instead, at the usual priority.
lane3_log=$(mktemp)
lane3_rc=0
if [ "$narrow" = 0 ]; then
  say "lane 3: go vet, other platforms, benchmark smoke, fuzzing, SDKs (log: $lane3_log)"
  ( renice -n 10 -p "$BASHPID" >/dev/null 2>&1 || true
    rc=0
    checks >"$lane3_log" 2>&1 || rc=$?
    echo "$rc" >"$lane3_log.rc" ) &
  lane3=$!
  lanes="$lanes $lane3"
fi

# Lane 2: every other package, the longest first, AXE_LANE2_P at a time (default 2, one a
# core), each running AXE_LANE2_PARALLEL of its parallel tests at a time (default 4). Their
# tests mostly wait (on the database, timers, daemons and browsers they start): run one at a
# time, engine's took 460-680 s and persist's 460-670 s; four at a time, 130 and 155 s.
first="./admin/ ./persist/ ./engine/ ./internal/daemon/ ./bench/e2e/ ./bench/workflows/ ./internal/test/galeratest/ ./bench/ ./ha/ ./cmd/axe/ ./conformance/ ./executor/ ./ratelimit/"
rest=$(go list ./... | sed 's|^github.com/axe-sched/axe|.|; s|$|/|; s|^\./$|./|' |
  grep -vxF -e ./internal/test/failover/ $(printf -- '-e %s ' $first))
lane2_rc=0
t0=$SECONDS
say "lane 2: go test -race (every other package)"
go test "${race[@]}" -count=1 -timeout "${AXE_TEST_TIMEOUT:-30m}" -p "${AXE_LANE2_P:-2}" -parallel "${AXE_LANE2_PARALLEL:-4}" $first $rest || lane2_rc=$?
phase "lane 2 tests" "$t0"

if [ "$narrow" = 1 ]; then
  lane1
  say "waiting for lane 1"
  wait $lane1 || true
fi
if [ -n "${lane3:-}" ]; then
  say "waiting for lane 3"
  wait "$lane3" || true
  lane3_rc=$(cat "$lane3_log.rc" 2>/dev/null || echo 1)
  cat "$lane3_log"
else
  checks || lane3_rc=$?
fi
rm -f "$lane3_log"*

if [ "$narrow" = 0 ]; then
  say "waiting for lane 1"
  wait $lane1 || true
fi
trap - EXIT
rm -rf "$bin_dir"
lane1_rc=$(cat "$lane1_log.rc" 2>/dev/null || echo 1)
cat "$lane1_log"
say "lane 1 tests took $(cat "$lane1_log.took" 2>/dev/null || echo ?)s"
rm -f "$lane1_log"*
phase "the whole suite"
if [ "$lane1_rc" != 0 ] || [ "$lane2_rc" != 0 ] || [ "$lane3_rc" != 0 ]; then
  say "FAILED: lane 1 (failover suite) exit $lane1_rc, lane 2 (every other package) exit $lane2_rc, lane 3 (vet, platforms, benchmark smoke, fuzzing, SDKs) exit $lane3_rc"
  exit 1
fi
say "all passed"
