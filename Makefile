# etcd-operator — developer entry points. `make test` is what CI runs (through .ci/run).
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
CARGO ?= cargo

.PHONY: help test fmt-check clippy unit crds crds-check

help:
	@echo "make test    fmt check, clippy -D warnings, every test suite"
	@echo "make crds    regenerate the CRDs in charts/etcd-operator/files/crds from api/"

## test: everything CI checks, fastest first.
test: fmt-check clippy unit

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

## unit: pure tests (no external processes): planners, builders, validators, the CRD corpus.
unit:
	$(CARGO) test --workspace --locked

## crds: write the CRDs generated from the Rust types into the chart (commit the result).
crds:
	$(CARGO) run --quiet --locked -p api --bin crdgen
