#!/usr/bin/env bash
# Builds what the real node runs beside the kubelet (tests/src/node/), from the Go wrapper modules
# beside this script, through the Go module proxy, into a cache outside the repository:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/etcd-operator/nodebins/<hash>/
#     coredns      CoreDNS with only the bind, kubernetes, errors, log, health and ready plugins
#                  (coredns/main.go): no forwarder is compiled in, so it answers cluster.local
#                  and asks nothing upstream
#     kube-proxy   kube-proxy of the control plane's Kubernetes version (kube-proxy/, generated
#                  by tools/testbins/gen-k8s-gomod.sh)
#
# <hash> covers every go.mod, go.sum and .go file under tools/nodebins and this script. Separate
# from tools/testbins/ on purpose: its cache key covers every file there, and a change there
# rebuilds every Go binary of the tests. Each binary is built only when missing.
#
# Usage:
#   bash tools/nodebins/build.sh              build; the last stdout line is the directory
#   bash tools/nodebins/build.sh --print-dir  print the directory, build nothing
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

export GOTOOLCHAIN=local
export GO111MODULE=on
export CGO_ENABLED=0
GO=${GO:-go}
GO_PARALLEL=${TESTBINS_GO_PARALLEL:-2}

log() { echo "nodebins: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}

inputs_hash() {
	(
		cd "$here"
		find . \( -name go.mod -o -name go.sum -o -name '*.go' -o -name build.sh \) -type f -print |
			LC_ALL=C sort |
			while IFS= read -r f; do
				printf '%s\n' "$f"
				cat "$f"
			done
	) | sha256sum | cut -c1-16
}

dir=${XDG_CACHE_HOME:-$HOME/.cache}/etcd-operator/nodebins/$(inputs_hash)

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

mod_version() { (cd "$here/$1" && "$GO" list -m -mod=readonly -f '{{.Version}}' "$2"); }

if [[ ! -f $dir/.coredns.done ]]; then
	start=$SECONDS
	version=$(mod_version coredns github.com/coredns/coredns)
	log "building coredns $version ..."
	rm -f "$dir/coredns"
	(cd "$here/coredns" && "$GO" build -mod=readonly -p "$GO_PARALLEL" -trimpath \
		-ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$version" -o "$dir/coredns" .) >&2
	got=$("$dir/coredns" -version 2>&1 | sed -n 1p)
	[[ $got == "CoreDNS-${version#v}" ]] || die "coredns -version printed '$got', want CoreDNS-${version#v}"
	plugins=$("$dir/coredns" -plugins)
	[[ $plugins != *forward* ]] || die "coredns was built with the forward plugin: $plugins"
	touch "$dir/.coredns.done"
	log "coredns built in $((SECONDS - start))s"
fi

if [[ ! -f $dir/.kube-proxy.done ]]; then
	start=$SECONDS
	version=$(mod_version kube-proxy k8s.io/kubernetes)
	minor=$(echo "$version" | cut -d. -f2)
	flags="-s -w"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		flags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
	done
	log "building kube-proxy $version ..."
	rm -f "$dir/kube-proxy"
	(cd "$here/kube-proxy" && "$GO" build -mod=readonly -p "$GO_PARALLEL" -trimpath -ldflags "$flags" \
		-o "$dir/kube-proxy" k8s.io/kubernetes/cmd/kube-proxy) >&2
	got=$("$dir/kube-proxy" --version)
	[[ $got == "Kubernetes $version" ]] || die "kube-proxy --version printed '$got', want 'Kubernetes $version'"
	touch "$dir/.kube-proxy.done"
	log "kube-proxy built in $((SECONDS - start))s"
fi

echo "$dir"
