#!/bin/sh
# make-fixture.sh COMMIT VERSION NAME [TAG]: writes the upgrade fixture NAME (NAME.sqlite,
# NAME.mysql.sql, NAME.want.json in this folder) with the code of COMMIT, whose schema holds
# version VERSION as its newest step. The generator and the snapshot code of the checkout
# this script is run from are copied into a bare export of COMMIT, with the fixtureExtras
# file of build tag TAG (none: today's), so every fixture holds the same rows, plus the
# columns its schema has. Needs AXE_TEST_MYSQL_DSN, e.g. root:@tcp(127.0.0.1:3306)/.
set -eu
commit=$1 version=$2 name=$3 tag=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
persist=$(cd "$here/../.." && pwd)
repo=$(cd "$persist/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git -C "$repo" archive "$commit" | tar -x -C "$work"
cp "$persist/upgrade_test.go" "$persist/upgrade_gen_test.go" "$persist"/upgrade_fill*_test.go "$work/persist/"
rm -f "$work/persist/upgrade_fixtures_test.go" "$work/persist/upgrade_kill_test.go" "$work/persist/upgrade_runparams_test.go"
cd "$work"
AXE_REQUIRE_MYSQL=1 AXE_WRITE_UPGRADE_FIXTURE=$version AXE_UPGRADE_FIXTURE_NAME=$name \
  go test -count=1 ${tag:+-tags "$tag"} -run '^TestWriteUpgradeFixture$' ./persist/
cp "persist/testdata/upgrade/$name.sqlite" "persist/testdata/upgrade/$name.mysql.sql" \
  "persist/testdata/upgrade/$name.want.json" "$here/"
