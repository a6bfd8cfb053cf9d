//go:build tools

// Package tools names the main package that toolchain/build compiles.
package tools

import _ "github.com/pulumi/pulumi-command/provider/cmd/pulumi-resource-command"
