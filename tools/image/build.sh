#!/usr/bin/env bash
# Builds the operator image without a container engine: its three binaries (the controller, the
# webhook and the kubectl-etcd plugin) statically linked for
# x86_64-unknown-linux-musl, the file tree of tools/image/rootfs.sh (the Dockerfile's layout), then
# an OCI image layout written by umoci (Debian's package; no daemon, no registry):
#
#   $CARGO_TARGET_DIR/image/<kind>/oci/                an OCI image layout (index.json, blobs)
#   $CARGO_TARGET_DIR/image/<kind>/etcd-operator.tar   the same layout as one archive
#   $CARGO_TARGET_DIR/image/<kind>/digest              the manifest digest (sha256:…)
#
# <kind> is `release` (`make image`: the release profile, what ships; tagged with the chart's
# appVersion) or `test` (`--test`, `make test-image`: the dev profile with its debug info
# stripped, tagged `test`; the pod runner runs the e2e suites' operator Pods and Jobs from it).
# CARGO_TARGET_DIR defaults to ./target.
#
# Reproducible: every file's mtime, the layer's history entry and the config's `created` are the
# epoch, so the same binaries (and the same CA bundle) give the same digest. Cached: when the
# binaries and the inputs are unchanged, the layout is not rewritten (a warm run costs cargo's
# no-op build and hashing the binaries).
#
# Usage:
#   bash tools/image/build.sh [--test]              build; the last stdout line is the directory
#   bash tools/image/build.sh [--test] --print-dir  print the directory, build nothing
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
target=${IMAGE_RUST_TARGET:-x86_64-unknown-linux-musl}
CARGO=${CARGO:-cargo}

kind=release
print_dir=false
for arg in "$@"; do
	case $arg in
	--test) kind=test ;;
	--print-dir) print_dir=true ;;
	*)
		echo "usage: build.sh [--test] [--print-dir]" >&2
		exit 2
		;;
	esac
done

log() { echo "image: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}

target_dir=${CARGO_TARGET_DIR:-$repo/target}
case $target_dir in /*) ;; *) target_dir=$repo/$target_dir ;; esac
out=$target_dir/image/$kind
if $print_dir; then
	echo "$out"
	exit 0
fi

if [[ $kind == release ]]; then
	profile=release
	profile_dir=release
	tag=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$repo/charts/etcd-operator/Chart.yaml")
	[[ -n $tag ]] || die "no appVersion in charts/etcd-operator/Chart.yaml"
else
	profile=dev
	profile_dir=debug
	tag=test
fi

[[ $(id -u) -eq 0 ]] || die "run as root (the image's /home/nonroot belongs to 65532; umoci writes owners as they are on disk); or build with docker, see docs/installation.md"
bash "$here/deps.sh"

start=$SECONDS
# The binaries cargo leaves at the target directory's top are replaced by any later build of the
# same names: tools/upgrade-from/build.sh builds an older commit's for the same target here. The
# lock is held from this build until the binaries are copied out of it.
mkdir -p "$target_dir"
exec 8>"$target_dir/.image-bins.lock"
flock 8
log "cargo build --profile $profile --target $target (controller, webhook, kubectl-etcd) ..."
(cd "$repo" && "$CARGO" build --locked --profile "$profile" --target "$target" \
	-p controller --bin etcd-operator -p webhook --bin etcd-operator-webhook \
	-p kubectl-etcd --bin kubectl-etcd) >&2
bins=$target_dir/$target/$profile_dir
built=$((SECONDS - start))

mkdir -p "$out"
exec 9>"$out/.lock"
flock 9

ca=/etc/ssl/certs/ca-certificates.crt
key=$(
	{
		cat "$here/build.sh" "$here/rootfs.sh" "$ca"
		umoci --version
		echo "$kind $tag $target"
		sha256sum "$bins/etcd-operator" "$bins/etcd-operator-webhook" "$bins/kubectl-etcd" | cut -d' ' -f1
	} | sha256sum | cut -c1-32
)
if [[ -f $out/key && $(<"$out/key") == "$key" && -f $out/oci/index.json && -f $out/digest ]]; then
	log "unchanged: $(<"$out/digest") in $out (cargo ${built}s, total $((SECONDS - start))s)"
	echo "$out"
	exit 0
fi

work=$out/.work
rm -rf "$work" "$out/key"
mkdir -p "$work/bin"
for bin in etcd-operator etcd-operator-webhook kubectl-etcd; do
	cp "$bins/$bin" "$work/bin/$bin"
	# The test image: the dev profile's DWARF is most of the binary and nothing in a container
	# reads it (symbols stay, so backtraces keep their function names).
	[[ $kind == test ]] && strip --strip-debug "$work/bin/$bin"
done
exec 8>&-

epoch=1970-01-01T00:00:00Z
umoci init --layout "$work/oci"
umoci new --image "$work/oci:$tag"
umoci unpack --image "$work/oci:$tag" "$work/bundle" >/dev/null
SOURCE_DATE_EPOCH=0 bash "$here/rootfs.sh" "$work/bundle/rootfs" "$work/bin" "$ca"
umoci repack --image "$work/oci:$tag" --history.created "$epoch" \
	--history.created_by "tools/image/rootfs.sh (see the Dockerfile)" "$work/bundle"
# The Dockerfile's USER, WORKDIR, ENV and ENTRYPOINT (distroless/static:nonroot's user, working
# directory and environment).
umoci config --image "$work/oci:$tag" --no-history --created "$epoch" \
	--os linux --architecture amd64 \
	--config.user 65532:65532 --config.workingdir /home/nonroot \
	--config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	--config.env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
	--config.entrypoint /usr/local/bin/etcd-operator
umoci gc --layout "$work/oci"
chmod -R a+rX "$work/oci"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=gnu \
	-C "$work/oci" -cf "$work/etcd-operator.tar" .

digest=$(sed -n 's/.*"digest":"\(sha256:[0-9a-f]*\)".*/\1/p' "$work/oci/index.json")
[[ $digest == sha256:* ]] || die "no manifest digest in $work/oci/index.json"
compressed=$(find "$work/oci/blobs" -type f -printf '%s\n' | awk '{s+=$1} END {print s}')
unpacked=$(du -sb --apparent-size "$work/bundle/rootfs" | cut -f1)

rm -rf "$out/oci" "$out/etcd-operator.tar"
mv "$work/oci" "$out/oci"
mv "$work/etcd-operator.tar" "$out/etcd-operator.tar"
echo "$digest" >"$out/digest"
printf 'tag %s\ndigest %s\ncompressed %s\nunpacked %s\n' "$tag" "$digest" "$compressed" "$unpacked" >"$out/summary"
echo "$key" >"$out/key"
rm -rf "$work"
log "built $tag $digest: $((compressed / 1024)) KiB compressed, $((unpacked / 1024)) KiB unpacked, in $out (cargo ${built}s, total $((SECONDS - start))s)"
echo "$out"
