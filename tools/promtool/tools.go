//go:build tools

// Package tools pins promtool's module: build.sh builds
// github.com/prometheus/prometheus/cmd/promtool from the version go.mod requires.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
