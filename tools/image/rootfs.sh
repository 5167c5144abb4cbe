#!/usr/bin/env bash
# The operator image's file tree, written into DEST: what distroless/static-debian12:nonroot ships
# that the operator uses, the two binaries and the kubectl plugin. Both ways of building the image use it: the
# Dockerfile (in its build stage, then `COPY --from=build /rootfs/ /` onto scratch) and
# tools/image/build.sh (then umoci packs it), so both produce the same layout:
#
#   /etc/passwd, /etc/group                  root 0, nobody 65534, nonroot 65532 (distroless' own)
#   /etc/ssl/certs/ca-certificates.crt       Debian's ca-certificates bundle (SSL_CERT_FILE)
#   /home/nonroot                            0700, 65532:65532 (the working directory)
#   /root 0700, /tmp 1777
#   /usr/local/bin/etcd-operator             the controller and agent (the entrypoint), 0755
#   /usr/local/bin/etcd-operator-webhook     the admission webhook (the chart's `command`), 0755
#   /usr/local/bin/kubectl-etcd              the `kubectl etcd` plugin (docs/kubectl-plugin.md), 0755
#
# No shell, no libc, no tzdata: the binaries are static, and the schedules' time zones come from
# chrono-tz's embedded database. Every file's mtime is SOURCE_DATE_EPOCH (default 0), so the same
# binaries give the same layer digest.
#
# Usage: rootfs.sh DEST BIN_DIR [CA_BUNDLE]   (run as root: it sets the owners)
set -euo pipefail

dest=${1:?usage: rootfs.sh DEST BIN_DIR [CA_BUNDLE]}
bins=${2:?usage: rootfs.sh DEST BIN_DIR [CA_BUNDLE]}
ca=${3:-/etc/ssl/certs/ca-certificates.crt}
epoch=${SOURCE_DATE_EPOCH:-0}

die() {
	echo "rootfs.sh: $*" >&2
	exit 1
}
[[ $(id -u) -eq 0 ]] || die "run as root: /home/nonroot must belong to 65532:65532"
[[ -s $ca ]] || die "no CA bundle at $ca (Debian: apt-get install ca-certificates)"
for bin in etcd-operator etcd-operator-webhook kubectl-etcd; do
	[[ -x $bins/$bin ]] || die "no executable $bins/$bin"
done
[[ ! -e $dest || -z $(ls -A "$dest") ]] || die "$dest is not empty; give a new or empty directory"

umask 022
mkdir -p "$dest"/etc/ssl/certs "$dest"/home/nonroot "$dest"/root "$dest"/tmp "$dest"/usr/local/bin
cat >"$dest/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
PASSWD
cat >"$dest/etc/group" <<'GROUP'
root:x:0:
nobody:x:65534:
tty:x:5:
staff:x:50:
nonroot:x:65532:
GROUP
install -m 0644 "$ca" "$dest/etc/ssl/certs/ca-certificates.crt"
for bin in etcd-operator etcd-operator-webhook kubectl-etcd; do
	install -m 0755 "$bins/$bin" "$dest/usr/local/bin/$bin"
done
chmod 0700 "$dest/root" "$dest/home/nonroot"
chmod 1777 "$dest/tmp"
chown -R 0:0 "$dest"
chown 65532:65532 "$dest/home/nonroot"
find "$dest" -exec touch -h -d "@$epoch" {} +
