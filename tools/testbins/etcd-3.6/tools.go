//go:build tools

// Package testbins only pins the commands that tools/testbins/build.sh builds,
// so that go mod tidy records their dependencies in go.sum.
package testbins

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/etcdutl/v3"
	_ "go.etcd.io/etcd/server/v3"
)
