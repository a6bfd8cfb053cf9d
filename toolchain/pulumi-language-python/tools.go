//go:build tools

// Package tools names the main package that toolchain/build compiles.
package tools

import _ "github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3"
