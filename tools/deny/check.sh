#!/usr/bin/env bash
# `make deny`: cargo-deny's advisories and bans checks (deny.toml) on the workspace, offline,
# against the RustSec advisory snapshot committed in tools/deny/advisory-db (CI reaches crates.io
# but no git host, so cargo-deny cannot clone the database itself; docs/testing.md says how the
# snapshot is refreshed and what it cannot see).
#
# cargo-deny opens a database only as a git checkout it fetched: <db-path>/<name>-<hash of the
# url>/crates/..., dated by .git/FETCH_HEAD's modification time. This script lays the snapshot out
# that way in a temporary directory, FETCH_HEAD dated at the snapshot's commit, so cargo-deny's
# staleness limit (maximum-db-staleness) measures the snapshot's real age.
#
# Usage: bash tools/deny/check.sh [cargo-deny check arguments]   (default: advisories bans)
# Errors are printed with the dependency path that brings the crate in; warnings (two versions of a
# crate) only counted, unless DENY_LOG_LEVEL=warn.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
snapshot=$here/advisory-db
CARGO=${CARGO:-cargo}
# The directory cargo-deny 0.20 derives from db-urls' one url (deny.toml): its last path segment
# and an xxHash64 of the url. A wrong name fails the check ("failed to get 'FETCH_HEAD' metadata").
DB_DIR=advisory-db-3157b0e258782691

log() { echo "deny: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}

deny=$(bash "$here/build.sh" | tail -1)/bin/cargo-deny
commit=$(sed -n 's/^commit=//p' "$snapshot/SNAPSHOT")
date=$(sed -n 's/^date=//p' "$snapshot/SNAPSHOT")
[[ -n $commit && -n $date ]] || die "$snapshot/SNAPSHOT names no commit and date"

# A crate added to Cargo.lock after the refresh, that the whole database has advisories for, would
# be checked against none of them.
unseen=$(comm -12 \
	<(sed -n 's/^name = "\(.*\)"$/\1/p' "$repo/Cargo.lock" | LC_ALL=C sort -u) \
	"$snapshot/names.txt" |
	while IFS= read -r name; do [[ -d $snapshot/crates/$name ]] || echo "$name"; done)
if [[ -n $unseen ]]; then
	die "Cargo.lock names crates the RustSec database has advisories for that the snapshot did not keep:" \
		"$(echo "$unseen" | tr '\n' ' ')- refresh it: bash tools/deny/refresh-advisories.sh <advisory-db checkout> (docs/testing.md)"
fi

root=$(mktemp -d "${TMPDIR:-/tmp}/etcd-operator-advisory-dbs.XXXXXX")
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/$DB_DIR/.git"
cp -r "$snapshot/crates" "$root/$DB_DIR/crates"
touch -d "$date" "$root/$DB_DIR/.git/FETCH_HEAD"
age_days=$((($(date +%s) - $(date -d "$date" +%s)) / 86400))
log "RustSec advisories as of $date (advisory-db $commit, $age_days days old): later advisories are not seen"

# cargo-deny reads the whole graph (every platform's crates) with cargo metadata --offline.
(cd "$repo" && "$CARGO" fetch --locked --quiet)
cd "$repo"
(($#)) || set -- advisories bans
ETCD_OPERATOR_ADVISORY_DBS=$root "$deny" --log-level "${DENY_LOG_LEVEL:-error}" --offline --locked \
	check --show-stats "$@"
