#!/usr/bin/env bash
# What `make image` needs beyond the project's usual toolchain, installed when missing (and
# printed): Rust's musl target (rustup), Debian's musl-tools (musl-gcc: aws-lc-sys and ring compile
# their C for the musl target with it), umoci (writes the OCI image layout, no daemon) and
# ca-certificates (the CA bundle the image ships). Apt needs root; so does the image build itself
# (the image's /home/nonroot belongs to 65532).
set -euo pipefail

log() { echo "image deps: $*" >&2; }

target=${IMAGE_RUST_TARGET:-x86_64-unknown-linux-musl}
if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
	command -v rustup >/dev/null || {
		log "rustup not found: install the Rust target $target with your toolchain manager"
		exit 1
	}
	log "rustup target add $target"
	rustup target add "$target" >&2
fi

need=()
command -v musl-gcc >/dev/null 2>&1 || need+=(musl-tools)
command -v umoci >/dev/null 2>&1 || need+=(umoci)
[[ -s /etc/ssl/certs/ca-certificates.crt ]] || need+=(ca-certificates)
[[ ${#need[@]} -eq 0 ]] && exit 0

if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
	log "missing: ${need[*]} — install them with your package manager (Debian: apt-get install ${need[*]}), then run make again"
	exit 1
fi
log "installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
