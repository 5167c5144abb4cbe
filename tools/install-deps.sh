#!/usr/bin/env bash
# System packages the build and the tests need and a fresh Debian machine lacks: `protoc` (for
# etcd-client's generated gRPC code), `ip` (the pod runner's network namespaces), `jq` (the
# runbook's leader recipe pipes etcdctl's JSON into it, in the tests and the demo), and the real
# node's container runtime: containerd (with `ctr`), runc and the CNI plugins (bridge,
# host-local, loopback, portmap in /usr/lib/cni), Debian's own builds, and Debian's CA bundle. Installs them with apt
# when missing; prints what it does. Used by `make demo`/`make test` and `.ci/run`.
set -euo pipefail

need=()
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v jq >/dev/null 2>&1 || need+=(jq)
command -v containerd >/dev/null 2>&1 && command -v ctr >/dev/null 2>&1 || need+=(containerd)
command -v runc >/dev/null 2>&1 || need+=(runc)
[ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] || need+=(containernetworking-plugins)
# Debian's CA bundle, which the real node's etcd images carry as distroless/static does.
[ -s /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "missing: ${need[*]} — install them with your package manager (Debian: apt-get install ${need[*]}), then run make again" >&2
  exit 1
fi
echo "[deps] installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq "${need[@]}" >/dev/null
