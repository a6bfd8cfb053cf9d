// Wrapper module for the python language host: `toolchain/build --lock` adds the
// requirements (the host module at DSS_GOMOD_LANGUAGE_PYTHON, pkg/v3 and sdk/v3 at
// the release) and go.sum. The host's own go.mod replaces pkg and sdk with local
// paths, which only apply in the pulumi repo; here they come from the release.
module deepspeed-swarm/toolchain/pulumi-language-python

go 1.26

replace github.com/atotto/clipboard => github.com/tgummerer/clipboard v0.0.0-20241001131231-d02d263e614e
