// Wrapper module for the docker provider: `toolchain/build --lock` adds the
// requirement (github.com/pulumi/pulumi-docker/provider/v5 at DSS_GOMOD_DOCKER_PROVIDER)
// and go.sum. At build time toolchain/build points two replace directives at
// writable copies under the cache: the provider module (it go:embeds
// schema-embed.json, which is generated, not shipped) and the upstream terraform
// provider (the provider's go.mod replaces it with ../upstream, a git submodule
// that a module zip does not carry), with shim/shim.go from here added to it.
module deepspeed-swarm/toolchain/pulumi-resource-docker

go 1.26

// Repeated from provider/v5's go.mod: Pulumi's fork of the terraform plugin SDK.
replace github.com/hashicorp/terraform-plugin-sdk/v2 => github.com/pulumi/terraform-plugin-sdk/v2 v2.0.0-20260318212141-5525259d096b
