#!/usr/bin/env bash
# Builds the operator as it was at an earlier commit, for the chart upgrade test
# (tests/tests/e2e_install.rs, `an_upgrade_from_the_previous_chart_restarts_no_member`): its chart
# and its test image (the dev-profile operator image, as `make test-image` built it then), from
# this repository's own history, into a cache outside the repository:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/etcd-operator/upgrade-from/<commit>-<hash>/chart/    the chart
#   ${XDG_CACHE_HOME:-$HOME/.cache}/etcd-operator/upgrade-from/<commit>-<hash>/oci/      the image
#
# The commit is in `COMMIT` beside this script (the last commit before the install path's
# changes: the chart that named another project's image); <hash> covers COMMIT and this script.
# The build compiles that commit's workspace in a Cargo target directory of its own (the crates
# of an earlier commit have the same artifact names as today's: sharing CI's target directory
# would make every build after it compile the workspace again), removed once the image is
# written: only the chart and the image are kept. Cold: one debug build of the controller and
# the webhook for the musl target (docs/testing.md has the time).
#
# Usage:
#   bash tools/upgrade-from/build.sh              build when missing; the last stdout line is the directory
#   bash tools/upgrade-from/build.sh --print-dir  print the directory, build nothing
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
commit=$(tr -d '[:space:]' <"$here/COMMIT")

log() { echo "upgrade-from: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}

hash=$(cat "$here/COMMIT" "$here/build.sh" | sha256sum | cut -c1-12)
dir=${XDG_CACHE_HOME:-$HOME/.cache}/etcd-operator/upgrade-from/${commit:0:12}-$hash

if [[ ${1:-} == --print-dir ]]; then
	echo "$dir"
	exit 0
fi

mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9
if [[ -f $dir/.done ]]; then
	log "cached in $dir"
	echo "$dir"
	exit 0
fi

# A shallow clone lacks the commit: fetch it from where this clone came from.
if ! git -C "$repo" cat-file -e "$commit^{commit}" 2>/dev/null; then
	log "commit $commit is not in this clone; fetching it from origin"
	git -C "$repo" fetch --quiet origin "$commit" >&2 ||
		die "commit $commit is not in this clone and origin did not give it: run 'git fetch --unshallow' (the upgrade test builds the operator of that commit)"
fi

start=$SECONDS
src=$dir/src
target=$dir/target
rm -rf "$src" "$dir/chart" "$dir/oci"
mkdir -p "$src"
git -C "$repo" archive --format=tar "$commit" | tar -x -C "$src"
log "building the test image of ${commit:0:12} (its own target dir, removed afterwards) ..."
# No debug info: the test image strips it anyway, and the build is faster without it.
(cd "$src" && CARGO_TARGET_DIR=$target CARGO_INCREMENTAL=0 CARGO_PROFILE_DEV_DEBUG=0 \
	bash tools/image/build.sh --test) >&2
mv "$target/image/test/oci" "$dir/oci"
mv "$src/charts/etcd-operator" "$dir/chart"
rm -rf "$src" "$target"
echo "$commit" >"$dir/COMMIT"
touch "$dir/.done"
log "built in $((SECONDS - start))s"
echo "$dir"
