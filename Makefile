# etcd-operator — developer entry points. `make test` is what CI runs (through .ci/run).
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
CARGO ?= cargo
# clippy is the compiler of the workspace's own crates in every cargo command here (cargo runs
# clippy-driver instead of rustc for workspace members only, the way `cargo clippy` does): one
# compilation lints and builds them, so `make test` needs no separate `cargo clippy` pass, whose
# check of every dependency was the largest single step of a cold build. `-D warnings` as with
# `cargo clippy -- -D warnings`; cargo tracks both variables, so a crate built without them is
# compiled (and linted) again.
export RUSTC_WORKSPACE_WRAPPER := clippy-driver
export CLIPPY_ARGS := -D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__

# The Kubernetes/etcd/helm/cert-manager binaries built from Go modules (tools/testbins); the tests read this.
TESTBINS_DIR := $(shell bash tools/testbins/build.sh --print-dir)
export ETCD_OPERATOR_TESTBINS := $(TESTBINS_DIR)
# promtool (tools/promtool), which checks and unit-tests the chart's alert rules (the chart suite).
PROMTOOL_DIR := $(shell bash tools/promtool/build.sh --print-dir)
export ETCD_OPERATOR_PROMTOOL := $(PROMTOOL_DIR)/promtool
# The real node's images (tools/node-images: pause, etcd 3.6 and 3.5 built like etcd's own).
export ETCD_OPERATOR_NODE_IMAGES := $(shell bash tools/node-images/build.sh --print-dir)
# The real node's own binaries (tools/nodebins: CoreDNS without a forwarder, kube-proxy).
export ETCD_OPERATOR_NODEBINS := $(shell bash tools/nodebins/build.sh --print-dir)
# The operator of an earlier commit (tools/upgrade-from: its chart and test image), for the chart
# upgrade suite.
export ETCD_OPERATOR_UPGRADE_FROM := $(shell bash tools/upgrade-from/build.sh --print-dir)

.PHONY: help deps build test fmt-check clippy deny unit testbins promtool image test-image api e2e suites build-tests crds bench bench-node demo node-images nodebins test-node upgrade-from

help:
	@echo "make demo      helm install of the operator (controller + webhook Pods, cert-manager certs) and a 3-member EtcdCluster on real etcd members; until Ctrl-C (needs root; NODE=real: on three real nodes)"
	@echo "make test      fmt check, clippy -D warnings, unit tests, then the API-layer and end-to-end suites side by side (needs root)"
	@echo "make api       the API-layer suites on a real apiserver, one after another"
	@echo "make e2e       the pod runner and the operator end to end on real etcd members (needs root)"
	@echo "make build     every binary and test executable of the workspace, linted by clippy (-D warnings); runs nothing"
	@echo "make build-tests  build everything make test runs, run nothing (.ci/run does it beside the testbins)"
	@echo "make testbins  build (once, cached) kube-apiserver & co, etcd 3.6/3.5, helm, cert-manager from the Go module proxy"
	@echo "make deny      cargo deny check advisories bans (deny.toml), offline, against the RustSec snapshot in tools/deny/advisory-db"
	@echo "make promtool  build (once, cached) Prometheus' promtool from the Go module proxy (the chart's alert rule tests)"
	@echo "make image     the operator image without a daemon: static (musl) release binaries, an OCI image layout and archive in target/image/release (root)"
	@echo "make test-image  the image the end-to-end suites run (dev profile), in target/image/test; cached (root)"
	@echo "make test-node the real-node lane: kubelet + containerd + runc + CoreDNS run etcd members from the distroless image, one alone and a 3-member EtcdCluster (root)"
	@echo "make bench     measure (not test): webhook latency/RSS; controller apply→Ready, step overhead, idle writes, RSS (root); rollout steps; snapshot agent throughput and peak RSS vs etcdctl; archive lag and RSS"
	@echo "make bench-node  on three real nodes: apply → 3 Ready and 3 → 5 for ours and (ETCD_OPERATOR_REFERENCE_BIN) the reference operator (root)"
	@echo "make crds      regenerate the CRDs in charts/etcd-operator/files/crds from api/"

## deps: system packages a fresh machine lacks (protoc, iproute2), installed with apt when missing.
deps:
	@bash tools/install-deps.sh

## test: everything CI checks, fastest first. The API-layer suites run in the same lanes as the
## end-to-end ones (`suites`), after them: each is short and fills a lane's tail.
test: deps fmt-check clippy deny unit promtool suites

fmt-check:
	$(CARGO) fmt --all -- --check

## clippy: every target of every workspace crate built by clippy-driver with -D warnings: what
## `cargo clippy --workspace --all-targets -- -D warnings` checks, and every executable `unit` and
## the suites run (the libraries' and binaries' unit tests, the integration tests, the binaries the
## suites start). Every cargo command of the test path selects the whole workspace with its
## dev-dependencies (`CARGO_WS`): cargo resolves features per package selection, and each other
## selection compiled the large dependencies (kube, tokio, the AWS SDK, ...) once more with other
## features, most of a cold build.
CARGO_WS := --workspace --locked
clippy: deps
	$(CARGO) build $(CARGO_WS) --all-targets

## build: the same (every binary and test executable, linted); what a single suite run by hand needs
## first (`cargo test --workspace --test <suite>` then compiles nothing).
build: clippy

## deny: cargo-deny (installed once into a cache outside the repo, tools/deny/build.sh) checks the
## lock file against the RustSec advisories committed in tools/deny/advisory-db and deny.toml's
## bans, without network (tools/deny/check.sh; docs/testing.md says how to refresh the snapshot).
deny: deps
	bash tools/deny/check.sh

## unit: pure tests, no external processes: planners, builders, validators, the CRD corpus. The
## libraries' and binaries' unit tests and every crate's integration tests but the suites of
## `tests/` (its pure ones are UNIT_TESTS), then the doc examples; the workspace selection of
## `clippy`, so nothing is compiled again.
UNIT_TESTS := $(basename $(notdir $(filter-out tests/tests/%,$(wildcard */tests/*.rs)))) rollback_schema
unit: deps
	$(CARGO) test $(CARGO_WS) --lib --bins $(addprefix --test ,$(sort $(UNIT_TESTS)))
	$(CARGO) test $(CARGO_WS) --doc

## testbins: the Go-built binaries, in a cache outside the repo (idempotent; prints timings).
testbins: deps
	bash tools/testbins/build.sh >/dev/null

## node-images: the real node's container images (tools/node-images/build.sh): the pause image and
## etcd images built like etcd's own (distroless), as OCI archives in a cache outside the repo.
node-images: testbins
	bash tools/image/deps.sh
	bash tools/node-images/build.sh >/dev/null

## test-node: the real-node lane alone: kubelet, containerd and runc run the suites' Pods
## (tests/tests/real_node.rs). `make test` runs it among the suites.
test-node: clippy testbins node-images nodebins
	$(CARGO) test $(CARGO_WS) --test real_node

## nodebins: the real node's CoreDNS and kube-proxy, in their own cache outside the repo
## (idempotent; see tools/nodebins/build.sh).
nodebins: deps
	bash tools/nodebins/build.sh >/dev/null

## upgrade-from: the chart and test image of the commit in tools/upgrade-from/COMMIT, in a cache
## outside the repo (idempotent; see tools/upgrade-from/build.sh): the chart upgrade suite installs
## it, then upgrades to this chart.
upgrade-from: deps
	bash tools/upgrade-from/build.sh >/dev/null

## promtool: Prometheus' promtool, in its own cache outside the repo (idempotent; see
## tools/promtool/build.sh). The chart suite runs `promtool check rules` and `promtool test rules`.
promtool: deps
	bash tools/promtool/build.sh >/dev/null

## image: the operator image as users get it (release profile, x86_64-unknown-linux-musl, static),
## assembled without a container engine by tools/image/build.sh (umoci): an OCI image layout in
## $(CARGO_TARGET_DIR or target)/image/release/oci and the same as etcd-operator.tar. The file
## layout, user, entrypoint and environment are the Dockerfile's. Reproducible; see
## docs/installation.md.
image: deps
	bash tools/image/build.sh >/dev/null

## test-image: the same image from the dev profile (debug info stripped), in .../image/test: the
## pod runner runs the chart's controller and webhook Pods and the snapshot/restore/verify Jobs
## from it (tests/src/podrunner/unpack.rs). Unchanged binaries: no rewrite (seconds).
test-image: deps
	bash tools/image/build.sh --test >/dev/null

## api: CRDs on a real kube-apiserver (current and 1.29): every validation rule, defaults,
## printer columns, scale and status subresources; the test control plane itself; the Helm chart
## (rendering in every mode, lint, apply, install/upgrade, RBAC on the real authorizer); real
## cert-manager (controller, cainjector) issuing, injecting and re-issuing on it.
API_SUITES := api_crds control_plane webhook_api status_writes chart cert_manager
api: clippy testbins promtool
	$(CARGO) test $(CARGO_WS) $(addprefix --test ,$(API_SUITES))

## e2e: the pod runner (Pods as real local processes), then the operator binary driving real etcd
## members: bootstrap, scale, pause/resume, member loss, operator crashes in every scale-up window,
## every condition reason the environment can produce, the PDB against evictions; every key checked;
## the takeover of a reference-operator cluster; the chart installed with helm (controller and
## webhook as Pods, cert-manager certificates and renewal, upgrade, uninstall, CEL-only on 1.29).
## The suites run side by side, $(SUITE_JOBS) at a time, $(SUITE_TEST_THREADS) tests at once within a
## binary (tools/run-suites.sh): each binary has its own control plane and pod-runner slot. Listed
## longest first (as measured with 3 lanes, see docs/testing.md) so the lanes even out.
SUITE_JOBS ?= 3
SUITE_TEST_THREADS ?= 3
export SUITE_JOBS SUITE_TEST_THREADS
E2E_SUITES := real_node e2e_recovery_snapshot e2e_recovery_pitr e2e_faults e2e_faults_env e2e_replace e2e_schedule e2e_recovery e2e_auth e2e_defrag e2e_lifecycle e2e_recovery_inline e2e_cluster e2e_safety e2e_protect \
	e2e_restore e2e_cloud_identity e2e_tls_rotation e2e_tls e2e_install e2e_chart_upgrade e2e_migrate_aenix e2e_upgrade e2e_takeover e2e_rollback kubectl_plugin \
	e2e_selfheal snapshot_agent e2e_volume e2e_snapshot e2e_verify pod_runner kubectl_streaming e2e_decode \
	e2e_metrics secure_metrics image
e2e: clippy testbins test-image node-images nodebins upgrade-from
	bash tools/run-suites.sh $(E2E_SUITES)

## suites: the end-to-end and then the API-layer suites in one set of lanes (what `make test` runs).
suites: clippy testbins promtool test-image node-images nodebins upgrade-from
	bash tools/run-suites.sh $(E2E_SUITES) $(API_SUITES)

## build-tests: every binary `make test` runs (and clippy's check), built and not run. .ci/run runs
## it while the Go testbins build, so a cold machine compiles both at once.
build-tests: clippy
	bash tools/image/build.sh --test >/dev/null

## crds: write the CRDs generated from the Rust types into the chart (commit the result).
crds:
	$(CARGO) run --quiet --locked -p api --bin crdgen

## bench: measurements, not pass/fail tests; numbers go to docs/performance.md.
bench: testbins
	$(CARGO) bench --locked -p webhook --bench admission
	$(CARGO) build --locked -p controller --bins
	$(CARGO) run --locked -p tests --example bench_controller
	$(CARGO) run --locked -p tests --example bench_scale
	BENCH_SCALE_RUNNING=0 BENCH_SCALE_PAUSED=5000 $(CARGO) run --locked -p tests --example bench_scale
	$(CARGO) run --locked -p tests --example bench_rollout
	$(CARGO) build --release --locked -p controller --bin etcd-operator
	SNAPSHOT_BENCH_RELEASE=1 $(CARGO) run --release --locked -p tests --example bench_snapshot
	SNAPSHOT_BENCH_RELEASE=1 SNAPSHOT_BENCH_TLS=1 $(CARGO) run --release --locked -p tests --example bench_snapshot
	ARCHIVE_BENCH_RELEASE=1 $(CARGO) run --release --locked -p tests --example bench_archive

## bench-node: on three real nodes, apply → 3 Ready and a scale 3 → 5 for this operator and, when
## ETCD_OPERATOR_REFERENCE_BIN names its binary, the reference operator (docs/performance.md).
bench-node: testbins test-image node-images nodebins
	$(CARGO) build --locked -p controller --bins
	$(CARGO) run --locked -p tests --example bench_node

## demo: the embedded environment (control plane, pod runner, cert-manager), the operator installed
## with helm as users do (controller and webhook as the chart's Pods), a 3-member EtcdCluster
## default/demo; prints the kubeconfig and commands to try, runs until Ctrl-C (root).
## `make demo NODE=real`: the same on three real nodes (kubelet, containerd, runc; see
## docs/demo.md), the members spread one per node.
NODE ?=
demo: testbins test-image $(if $(filter real,$(NODE)),node-images nodebins)
	$(CARGO) build --locked -p controller -p webhook -p kubectl-etcd --bins
	DEMO_NODE=$(NODE) $(CARGO) run --locked -p tests --bin demo
