//go:build tools

// Package testbins only pins the commands that tools/testbins/build.sh builds,
// so that go mod tidy records their dependencies in go.sum.
package testbins

import (
	_ "github.com/minio/minio"
)
