// Wrapper module for the command provider: `toolchain/build --lock` adds the
// requirement (github.com/pulumi/pulumi-command/provider at DSS_GOMOD_COMMAND_PROVIDER)
// and go.sum. The provider module has no replace directives.
module deepspeed-swarm/toolchain/pulumi-resource-command

go 1.26
