// Wrapper module for the pulumi CLI: `toolchain/build --lock` adds the requirement
// (github.com/pulumi/pulumi/pkg/v3 at DSS_GOMOD_PULUMI_PKG) and go.sum.
module deepspeed-swarm/toolchain/pulumi

go 1.26

// Repeated from pkg/v3's own go.mod (replace directives of a dependency are ignored).
replace github.com/atotto/clipboard => github.com/tgummerer/clipboard v0.0.0-20241001131231-d02d263e614e
