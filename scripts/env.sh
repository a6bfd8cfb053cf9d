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
# How the toolchain gets here (toolchain/README.md, "Install routes"):
#   source (default)  toolchain/build compiles it from a source bundle
#   official          toolchain/install-official (connected machines)
#   path              a toolchain already on PATH at the pinned versions, used as
#                     it is, with the operator's own PULUMI_HOME
export DSS_TOOLCHAIN_ROUTE="${DSS_TOOLCHAIN_ROUTE:-source}"
# The source bundle: the sibling shared/toolchain-src of the checkout, unless set.
if [ -z "${DSS_TOOLCHAIN_SRC:-}" ] && [ -d "$DSS_ROOT/../shared/toolchain-src" ]; then
  DSS_TOOLCHAIN_SRC="$(cd "$DSS_ROOT/../shared/toolchain-src" && pwd)"
fi
export DSS_TOOLCHAIN_SRC="${DSS_TOOLCHAIN_SRC:-}"
if [ "$DSS_TOOLCHAIN_ROUTE" = path ]; then
  export PATH="$DSS_ROOT/.venv/bin:$PATH"
else
  # Per toolchain key, as the binaries: the plugins registered there keep their upstream
  # version (docker 5.1.0) whatever the project's patch level, so a shared PULUMI_HOME
  # would hand one key's provider to a checkout of another.
  export PULUMI_HOME="$DSS_TOOLCHAIN/pulumi-home"
  export PATH="$DSS_TOOLCHAIN/bin:$DSS_ROOT/.venv/bin:$PATH"
fi
# The project's packages (infra, policy, ops, harness, bench) importable from any folder:
# the policy pack runs from policy/ (`pulumi preview --policy-pack policy` starts
# `python -m pulumi.policy` there) and imports `policy.rules` and `infra`;
# scripts/recover runs `python -m ops.recover` from the caller's folder.
case ":${PYTHONPATH:-}:" in
  *":$DSS_ROOT:"*) ;;
  *) export PYTHONPATH="$DSS_ROOT${PYTHONPATH:+:$PYTHONPATH}" ;;
esac
# Never phone home: no update check, no plugin download, no telemetry.
export PULUMI_SKIP_UPDATE_CHECK=true
export PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK=true
export PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true
export PULUMI_SKIP_CHECKPOINTS=
export PULUMI_DIY_BACKEND_NO_LEGACY_WARNING=true
# Dev/test stacks keep state in the project (file backend). Teams override this
# with an s3:// URL or Pulumi Cloud; see docs/state.md.
export PULUMI_BACKEND_URL="${PULUMI_BACKEND_URL:-file://$DSS_ROOT/.pulumi-state}"
# The file backend needs its folder (a fresh clone has none).
case "$PULUMI_BACKEND_URL" in file://"$DSS_ROOT"/.pulumi-state) mkdir -p "$DSS_ROOT/.pulumi-state" ;; esac
