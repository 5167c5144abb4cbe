#!/usr/bin/env bash
# Installs cargo-deny (the dependency check `make deny` runs: RustSec advisories and bans, see
# deny.toml and docs/testing.md) from crates.io, with its own Cargo.lock (--locked), into a cache
# outside the repository:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/etcd-operator/deny/<hash>/bin/cargo-deny
#
# <hash> covers this script, which pins the version: a bump installs into a fresh directory. The
# build uses a target directory of its own under $TMPDIR, removed afterwards, so the workspace's
# target directory never holds cargo-deny's crates.
#
# Usage:
#   bash tools/deny/build.sh              install when missing; the last stdout line is the directory
#   bash tools/deny/build.sh --print-dir  print the directory, install nothing
set -euo pipefail

VERSION=0.20.2

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CARGO=${CARGO:-cargo}

log() { echo "cargo-deny: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}

inputs_hash() {
	(cd "$here" && printf '%s\n' build.sh && cat build.sh) | sha256sum | cut -c1-16
}

dir=${XDG_CACHE_HOME:-$HOME/.cache}/etcd-operator/deny/$(inputs_hash)

if [[ ${1:-} == --print-dir ]]; then
	echo "$dir"
	exit 0
fi

command -v "$CARGO" >/dev/null || die "cargo not found (looked for '$CARGO')"
mkdir -p "$dir"
if command -v flock >/dev/null; then
	exec 9>"$dir/.lock"
	flock 9
fi
if [[ -f $dir/.done ]]; then
	log "cached in $dir"
	echo "$dir"
	exit 0
fi

start=$SECONDS
target=$(mktemp -d "${TMPDIR:-/tmp}/cargo-deny-build.XXXXXX")
trap 'rm -rf "$target"' EXIT
# .ci/run stops the background builds with SIGTERM: exit through the EXIT trap.
trap 'exit 143' TERM INT
log "installing cargo-deny $VERSION ..."
# Not the workspace's settings: a release build of a tool, once.
CARGO_TARGET_DIR=$target CARGO_INCREMENTAL=0 \
	"$CARGO" install --locked --quiet cargo-deny --version "=$VERSION" --root "$dir" >&2
got=$("$dir/bin/cargo-deny" --version 2>&1 | head -1)
[[ $got == "cargo-deny $VERSION" ]] || die "cargo-deny --version printed '$got', want $VERSION"
touch "$dir/.done"
log "installed in $((SECONDS - start))s"
echo "$dir"
