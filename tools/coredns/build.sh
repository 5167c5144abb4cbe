#!/usr/bin/env bash
# Builds CoreDNS, the real node's cluster DNS (tests/src/node/dns.rs), from the wrapper module
# beside this script, through the Go module proxy, into a cache outside the repository:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/etcd-operator/coredns/<hash>/coredns
#
# main.go links only the plugins the tests use (bind, kubernetes, errors, log, health, ready); no
# forwarder is compiled in, so the server answers cluster.local and nothing else. <hash> covers
# go.mod, go.sum, main.go and this script. Separate from tools/testbins/ on purpose: a change
# there rebuilds every Go binary of the tests.
#
# Usage:
#   bash tools/coredns/build.sh              build when missing; the last stdout line is the directory
#   bash tools/coredns/build.sh --print-dir  print the directory, build nothing
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

export GOTOOLCHAIN=local
export GO111MODULE=on
export CGO_ENABLED=0
GO=${GO:-go}
GO_PARALLEL=${TESTBINS_GO_PARALLEL:-2}

log() { echo "coredns: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}

inputs_hash() {
	(
		cd "$here"
		for f in build.sh go.mod go.sum main.go; do
			printf '%s\n' "$f"
			cat "$f"
		done
	) | sha256sum | cut -c1-16
}

dir=${XDG_CACHE_HOME:-$HOME/.cache}/etcd-operator/coredns/$(inputs_hash)

if [[ ${1:-} == --print-dir ]]; then
	echo "$dir"
	exit 0
fi

command -v "$GO" >/dev/null || die "go not found (looked for '$GO')"
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
mod=github.com/coredns/coredns
version=$(cd "$here" && "$GO" list -m -mod=readonly -f '{{.Version}}' "$mod")
log "building coredns $version ..."
# The commit variable upstream's Makefile sets; the module proxy does not record it.
flags="-s -w -X $mod/coremain.GitCommit=$version"
rm -f "$dir/coredns"
(cd "$here" && "$GO" build -mod=readonly -p "$GO_PARALLEL" -trimpath -ldflags "$flags" -o "$dir/coredns" .) >&2
got=$("$dir/coredns" -version 2>&1 | head -1)
[[ $got == "CoreDNS-${version#v}" ]] || die "coredns -version printed '$got', want CoreDNS-${version#v}"
plugins=$("$dir/coredns" -plugins)
[[ $plugins != *forward* ]] || die "coredns was built with the forward plugin: $plugins"
echo "$version" >"$dir/VERSION"
touch "$dir/.done"
log "built in $((SECONDS - start))s"
echo "$dir"
