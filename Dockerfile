# syntax=docker/dockerfile:1
# The operator image: both binaries, statically linked (musl), on distroless/static as UID 65532.
#   /usr/local/bin/etcd-operator          the controller (the entrypoint)
#   /usr/local/bin/etcd-operator-webhook  the admission webhook (the chart sets it as `command`)
#
# Not built in this repository's CI machines (they have no container engine): the end-to-end
# tests run the same cargo-built binaries through the test pod runner, which maps the chart's image
# reference to them at /usr/local/bin. Build with
#   docker build -t ghcr.io/cozystack/etcd-operator:<tag> .

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
 && mkdir -p /out \
 && cp "target/$(cat /rust-target)/release/etcd-operator" \
       "target/$(cat /rust-target)/release/etcd-operator-webhook" /out/

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/etcd-operator /usr/local/bin/etcd-operator
COPY --from=build /out/etcd-operator-webhook /usr/local/bin/etcd-operator-webhook
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/etcd-operator"]
