//go:build tools

// Package tools names the main package that toolchain/build compiles, so that
// `go mod tidy` keeps its dependencies.
package tools

import _ "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"
