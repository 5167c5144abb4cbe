# syntax=docker/dockerfile:1
# The operator image: its binaries, statically linked (musl), as UID 65532 on an image holding
# only what distroless/static-debian12:nonroot ships that they use (tools/image/rootfs.sh writes
# the tree):
#   /usr/local/bin/etcd-operator          the controller and snapshot agent (the entrypoint)
#   /usr/local/bin/etcd-operator-webhook  the admission webhook (the chart sets it as `command`)
#   /usr/local/bin/kubectl-etcd           the `kubectl etcd` plugin (docs/kubectl-plugin.md)
#   /etc/passwd, /etc/group (nonroot 65532), /etc/ssl/certs/ca-certificates.crt, /home/nonroot, /tmp
#
# The same image is built without a daemon by `make image` (tools/image/build.sh: the same
# rootfs.sh, packed by umoci); the end-to-end tests run that one (`make test-image`), and
# tests/tests/image.rs checks this file's USER, WORKDIR, ENV and ENTRYPOINT against it. Build with
#   docker build -t ghcr.io/cozystack/etcd-operator-rs:<tag> .

ARG RUST_VERSION=1.95
FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS build
# protoc: etcd-client's gRPC bindings; cmake, clang, musl-tools: aws-lc-rs (rustls' crypto
# provider) builds its C and assembly for the musl target.
RUN apt-get update \
 && apt-get install -y --no-install-recommends protobuf-compiler cmake clang musl-tools \
 && rm -rf /var/lib/apt/lists/*
ARG TARGETARCH
RUN case "${TARGETARCH:-amd64}" in \
      amd64) echo x86_64-unknown-linux-musl > /rust-target ;; \
      arm64) echo aarch64-unknown-linux-musl > /rust-target ;; \
      *) echo "unsupported architecture ${TARGETARCH}" >&2; exit 1 ;; \
    esac \
 && rustup target add "$(cat /rust-target)"
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --locked --release --target "$(cat /rust-target)" \
      -p controller --bin etcd-operator \
      -p webhook --bin etcd-operator-webhook \
      -p kubectl-etcd --bin kubectl-etcd \
 && mkdir -p /out \
 && cp "target/$(cat /rust-target)/release/etcd-operator" \
       "target/$(cat /rust-target)/release/etcd-operator-webhook" \
       "target/$(cat /rust-target)/release/kubectl-etcd" /out/
# The image's tree, owners and modes as tools/image/build.sh packs it (rootfs.sh sets mtimes to
# the epoch; COPY keeps the tree, owners and modes).
COPY tools/image/rootfs.sh /rootfs.sh
RUN bash /rootfs.sh /rootfs /out /etc/ssl/certs/ca-certificates.crt

FROM scratch
COPY --from=build /rootfs/ /
USER 65532:65532
WORKDIR /home/nonroot
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
ENTRYPOINT ["/usr/local/bin/etcd-operator"]
