# Sourced by every project command: one place that says where the toolchain, the
# Python env and the state live. Nothing here downloads anything.
# shellcheck shell=bash
DSS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export DSS_ROOT
export DSS_CACHE="${DSS_CACHE:-$HOME/.cache/deepspeed-swarm}"
# The Pulumi toolchain is built per pinned version set into its own folder, so a
# version bump never mixes binaries (see toolchain/versions.env).
# shellcheck source=../toolchain/versions.env
. "$DSS_ROOT/toolchain/versions.env"
export DSS_TOOLCHAIN="$DSS_CACHE/toolchain/$DSS_TOOLCHAIN_KEY"
export PULUMI_HOME="$DSS_CACHE/pulumi-home"
export PATH="$DSS_TOOLCHAIN/bin:$DSS_ROOT/.venv/bin:$PATH"
# Never phone home: no update check, no plugin download, no telemetry.
export PULUMI_SKIP_UPDATE_CHECK=true
export PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK=true
export PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true
export PULUMI_SKIP_CHECKPOINTS=
export PULUMI_DIY_BACKEND_NO_LEGACY_WARNING=true
# Dev/test stacks keep state in the project (file backend). Teams override this
# with an s3:// URL or Pulumi Cloud; see README "State".
export PULUMI_BACKEND_URL="${PULUMI_BACKEND_URL:-file://$DSS_ROOT/.pulumi-state}"
