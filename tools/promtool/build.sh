#!/usr/bin/env bash
# Builds promtool (Prometheus' cmd/promtool), which checks and unit-tests the chart's alert rules
# (tests/tests/chart/monitoring.rs), from the wrapper module beside this script, through the Go
# module proxy, into a cache outside the repository:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/etcd-operator/promtool/<hash>/promtool
#
# <hash> covers go.mod, go.sum, tools.go and this script: a version bump builds into a fresh
# directory. Separate from tools/testbins/ on purpose: its cache key covers every file under
# tools/testbins/, and a change there rebuilds every Go binary of the tests.
#
# Built with `-tags remove_all_sd`: Prometheus' service-discovery plugins (cloud SDKs) are left
# out, as upstream's build tags allow; `promtool check rules` and `promtool test rules` do not use
# them.
#
# Usage:
#   bash tools/promtool/build.sh              build when missing; the last stdout line is the directory
#   bash tools/promtool/build.sh --print-dir  print the directory, build nothing
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

export GOTOOLCHAIN=local
export GO111MODULE=on
export CGO_ENABLED=0
GO=${GO:-go}
GO_PARALLEL=${TESTBINS_GO_PARALLEL:-2}

log() { echo "promtool: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}

inputs_hash() {
	(
		cd "$here"
		for f in build.sh go.mod go.sum tools.go; do
			printf '%s\n' "$f"
			cat "$f"
		done
	) | sha256sum | cut -c1-16
}

dir=${XDG_CACHE_HOME:-$HOME/.cache}/etcd-operator/promtool/$(inputs_hash)

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
mod=github.com/prometheus/prometheus
module_version=$(cd "$here" && "$GO" list -m -mod=readonly -f '{{.Version}}' "$mod")
module_dir=$(cd "$here" && "$GO" mod download -json "$mod@$module_version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
# The module's versions are v0.3XX.Y for Prometheus v3.XX.Y; its VERSION file says which.
version=$(tr -d '[:space:]' <"$module_dir/VERSION")
[[ -n $version ]] || die "no VERSION in $module_dir"
log "building promtool $version ($mod $module_version) ..."
# The version variables upstream's promu sets.
pkg=github.com/prometheus/common/version
flags="-s -w -X $pkg.Version=$version -X $pkg.Branch=HEAD -X $pkg.BuildUser=etcd-operator -X $pkg.BuildDate=unknown"
rm -f "$dir/promtool"
(cd "$here" && "$GO" build -mod=readonly -p "$GO_PARALLEL" -trimpath -tags remove_all_sd \
	-ldflags "$flags" -o "$dir/promtool" "$mod/cmd/promtool") >&2
got=$("$dir/promtool" --version 2>&1 | sed -n 1p)
[[ $got == "promtool, version $version "* ]] || die "promtool --version printed '$got', want $version"
echo "$version" >"$dir/VERSION"
touch "$dir/.done"
log "built in $((SECONDS - start))s"
echo "$dir"
