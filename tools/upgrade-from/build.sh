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
# The build compiles that commit's controller and webhook for the musl target in this
# repository's Cargo target directory (CARGO_TARGET_DIR, as `make test-image` does): the older
# workspace crates have package IDs of their own (another source path), so they never replace
# today's, and the dependencies whose version, features and profile are unchanged are compiled
# once for both images (on a cold machine that halves the musl work). Only the binaries the
# build leaves at the target directory's top are shared, so cargo and the copy of those
# binaries run under the lock tools/image/build.sh takes too. The image is then assembled by
# that commit's own tools/image/build.sh from the copied binaries (in a directory of its own):
# only the chart and the image are kept. docs/testing.md has the times.
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
stage=$dir/stage
rust_target=x86_64-unknown-linux-musl
target_dir=${CARGO_TARGET_DIR:-$repo/target}
case $target_dir in /*) ;; *) target_dir=$repo/$target_dir ;; esac
rm -rf "$src" "$stage" "$dir/chart" "$dir/oci"
mkdir -p "$src" "$stage/$rust_target/debug" "$target_dir"
git -C "$repo" archive --format=tar "$commit" | tar -x -C "$src"
bins=(etcd-operator etcd-operator-webhook)
log "building ${bins[*]} of ${commit:0:12} for $rust_target in $target_dir ..."
(
	# The lock tools/image/build.sh holds from its cargo build to its copy of the binaries.
	exec 8>"$target_dir/.image-bins.lock"
	flock 8
	# No debug info: the test image strips it anyway. That is also the profile today's
	# dependencies are built with ([profile.dev.package."*"] debug = false), which is what lets
	# the two builds share them. Not linted: make's clippy-driver wrapper is for today's code.
	cd "$src"
	env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS CARGO_TARGET_DIR="$target_dir" CARGO_INCREMENTAL=0 \
		CARGO_PROFILE_DEV_DEBUG=0 cargo build --locked --target "$rust_target" \
		-p controller --bin etcd-operator -p webhook --bin etcd-operator-webhook
	for bin in "${bins[@]}"; do
		cp "$target_dir/$rust_target/debug/$bin" "$stage/$rust_target/debug/$bin"
	done
) >&2
log "assembling its image with its own tools/image/build.sh, from those binaries ..."
# CARGO=true: that script's own cargo build is skipped; it finds the binaries in the stage.
(cd "$src" && CARGO=true CARGO_TARGET_DIR=$stage bash tools/image/build.sh --test) >&2
mv "$stage/image/test/oci" "$dir/oci"
mv "$src/charts/etcd-operator" "$dir/chart"
rm -rf "$src" "$stage"
echo "$commit" >"$dir/COMMIT"
touch "$dir/.done"
log "built in $((SECONDS - start))s"
echo "$dir"
