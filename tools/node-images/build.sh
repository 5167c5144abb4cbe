#!/usr/bin/env bash
# The container images the real-node lane imports into containerd (no registry, nothing pulled),
# built with umoci as OCI image archives into a cache outside the repository:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/etcd-operator/node-images/<key>/
#     pause.tar      registry.k8s.io/pause:3.10, kubernetes' build/pause/linux/pause.c (from the
#                    k8s.io/kubernetes module the testbins build) compiled static: /pause only,
#                    USER 65535, ENTRYPOINT ["/pause"]
#     etcd-3.6.tar   quay.io/coreos/etcd:v<3.6 testbins version>
#     etcd-3.5.tar   quay.io/coreos/etcd:v<3.5 testbins version>
#
# The etcd images are built the way etcd's own Dockerfile builds them: a distroless-like static
# root (`/etc/passwd` and `/etc/group` with nonroot 65532, `/tmp`, `/home/nonroot`, Debian's CA
# bundle in `/etc/ssl/certs`, `nsswitch.conf`, `os-release`) with only
# `etcd`, `etcdctl` and `etcdutl` in /usr/local/bin (the testbins builds), `WORKDIR
# /var/lib/etcd`, `CMD ["/usr/local/bin/etcd"]`: no shell, no tar, nothing else. Each archive
# has its index.json at the root and names its image (org.opencontainers.image.ref.name), so
# `ctr -n k8s.io images import <tar>` tags it as above.
#
# <key> covers this script and the testbins directory ($ETCD_OPERATOR_TESTBINS, else the one
# tools/testbins/build.sh --print-dir names) (whose name hashes every input of the
# binaries), so a new etcd or Kubernetes build makes new images. Needs root (files owned by 65532),
# umoci, gcc, and the testbins built.
#
# Usage: bash tools/node-images/build.sh [--print-dir]; the last line on stdout is the directory.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
log() { echo "node-images: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}

testbins=${ETCD_OPERATOR_TESTBINS:-$(bash "$repo/tools/testbins/build.sh" --print-dir)}
key=$( (cat "$0"; echo "$testbins") | sha256sum | cut -c1-16)
out=${XDG_CACHE_HOME:-$HOME/.cache}/etcd-operator/node-images/$key
if [[ ${1:-} == --print-dir ]]; then
	echo "$out"
	exit 0
fi
if [[ -f $out/.done ]]; then
	echo "$out"
	exit 0
fi

[[ -s /etc/ssl/certs/ca-certificates.crt ]] || die "no /etc/ssl/certs/ca-certificates.crt: bash tools/install-deps.sh installs Debian's ca-certificates"
[[ $(id -u) -eq 0 ]] || die "run as root (the images' files belong to 65532 and 65535; umoci writes owners as they are on disk)"
command -v umoci >/dev/null || die "umoci not found: bash tools/image/deps.sh installs it"
command -v gcc >/dev/null || die "gcc not found"
for part in k8s etcd-3.6 etcd-3.5; do
	[[ -f $testbins/$part/VERSION ]] || die "$testbins/$part is not built: run bash tools/testbins/build.sh first"
done
k8s_version=$(<"$testbins/k8s/VERSION")

export GOTOOLCHAIN=local GOFLAGS=-mod=mod
pause_c=$(cd "$repo/tools/testbins/k8s" && go mod download -json "k8s.io/kubernetes@$k8s_version" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')/build/pause/linux/pause.c
[[ -f $pause_c ]] || die "no $pause_c in the Go module cache"

mkdir -p "$(dirname "$out")"
work=$(mktemp -d "$(dirname "$out")/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
start=$SECONDS

# The same flags as kubernetes' build/pause/Makefile.
gcc -Os -Wall -Werror -static -DVERSION="v3.10-$k8s_version" -o "$work/pause" "$pause_c"
strip "$work/pause"

# image <ref> <archive name> <populate function> <umoci config args...>
image() {
	local ref=$1 name=$2 populate=$3
	shift 3
	local layout=$work/layout-$name bundle=$work/bundle-$name
	umoci init --layout "$layout"
	umoci new --image "$layout:build"
	umoci unpack --image "$layout:build" "$bundle" >/dev/null
	"$populate" "$bundle/rootfs"
	umoci repack --image "$layout:build" --history.created 1970-01-01T00:00:00Z "$bundle"
	umoci config --image "$layout:build" --tag "$ref" --no-history --created 1970-01-01T00:00:00Z \
		--author etcd-operator-tests --os linux --architecture amd64 \
		--config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
	umoci rm --image "$layout:build"
	umoci gc --layout "$layout"
	tar -C "$layout" -cf "$work/$name.tar" .
	log "built $name.tar ($ref)"
}

pause_root() {
	install -m 0755 "$work/pause" "$1/pause"
}

etcd_root() { # <rootfs> <etcd build dir>: gcr.io/distroless/static's layout plus etcd's Dockerfile
	local r=$1 bin=$2
	mkdir -p "$r/usr/local/bin" "$r/var/lib/etcd" "$r/var/etcd" "$r/etc" "$r/tmp" "$r/home/nonroot" "$r/root"
	chmod 1777 "$r/tmp"
	chmod 0700 "$r/root" "$r/home/nonroot"
	chown 65532:65532 "$r/home/nonroot"
	for b in etcd etcdctl etcdutl; do install -m 0755 "$bin/$b" "$r/usr/local/bin/$b"; done
	printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
		'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$r/etc/passwd"
	printf '%s\n' 'root:x:0:' 'nobody:x:65534:' 'tty:x:5:' 'staff:x:50:' 'nonroot:x:65532:' >"$r/etc/group"
	# distroless/static-debian12 carries Debian's CA bundle, nsswitch.conf and os-release too.
	mkdir -p "$r/etc/ssl/certs"
	install -m 0644 /etc/ssl/certs/ca-certificates.crt "$r/etc/ssl/certs/ca-certificates.crt"
	printf '%s\n' 'passwd: files' 'group: files' 'shadow: files' 'hosts: files dns' >"$r/etc/nsswitch.conf"
	printf '%s\n' 'PRETTY_NAME="Distroless"' 'NAME="Debian GNU/Linux"' 'ID="debian"' 'VERSION_ID="12"' \
		'HOME_URL="https://github.com/GoogleContainerTools/distroless"' >"$r/etc/os-release"
	chmod 0644 "$r/etc/passwd" "$r/etc/group" "$r/etc/nsswitch.conf" "$r/etc/os-release"
}
etcd_36() { etcd_root "$1" "$testbins/etcd-3.6"; }
etcd_35() { etcd_root "$1" "$testbins/etcd-3.5"; }

image registry.k8s.io/pause:3.10 pause pause_root \
	--config.user 65535:65535 --config.entrypoint /pause --config.workingdir /
image "quay.io/coreos/etcd:$(<"$testbins/etcd-3.6/VERSION")" etcd-3.6 etcd_36 \
	--config.workingdir /var/lib/etcd --config.cmd /usr/local/bin/etcd \
	--config.exposedports 2379/tcp --config.exposedports 2380/tcp
image "quay.io/coreos/etcd:$(<"$testbins/etcd-3.5/VERSION")" etcd-3.5 etcd_35 \
	--config.workingdir /var/lib/etcd --config.cmd /usr/local/bin/etcd \
	--config.exposedports 2379/tcp --config.exposedports 2380/tcp

mkdir -p "$out"
mv "$work"/*.tar "$out/"
touch "$out/.done"
log "images in $out ($((SECONDS - start)) s)"
echo "$out"
